#define _GNU_SOURCE
#include <sched.h>

#include "fingerly_cpuid.h"

int fingerly_usable_processor_count(void) {
    cpu_set_t mask;
    if (sched_getaffinity(0, sizeof mask, &mask) != 0) return 1;
    int count = CPU_COUNT(&mask);
    return count > 0 ? count : 1;
}
