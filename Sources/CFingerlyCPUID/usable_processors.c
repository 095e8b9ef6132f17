#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "fingerly_cpuid.h"

// The CPUs a cgroup v2 quota ("QUOTA PERIOD" in cpu.max, "max" for none) lets this process use, rounded up;
// 0 when there is none or it cannot be read. One small read: a container limited to one CPU on a large machine must
// not start a thread per CPU it sees.
static long quota_processors(void) {
    int fd = open("/sys/fs/cgroup/cpu.max", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    char text[64];
    ssize_t length = read(fd, text, sizeof text - 1);
    close(fd);
    if (length <= 0) return 0;
    text[length] = '\0';
    long long quota = 0, period = 0;
    if (sscanf(text, "%lld %lld", &quota, &period) != 2 || quota <= 0 || period <= 0) return 0;
    long long processors = quota / period + (quota % period != 0);
    return processors > 4096 ? 4096 : (long)processors;
}

int fingerly_usable_processor_count(void) {
    int count = 0;
    cpu_set_t mask;
    if (sched_getaffinity(0, sizeof mask, &mask) == 0) {
        count = CPU_COUNT(&mask);
    } else {
        // More possible CPUs than a cpu_set_t holds (EINVAL): the ones online.
        long online = sysconf(_SC_NPROCESSORS_ONLN);
        count = online > 0 && online < 1 << 20 ? (int)online : 1;
    }
    long quota = quota_processors();
    if (quota > 0 && quota < count) count = (int)quota;
    return count > 0 ? count : 1;
}
