#include "fingerly_cpuid.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

bool fingerly_cpuid(uint32_t leaf, uint32_t subleaf, fingerly_cpuid_registers *out) {
    // __cpuid_count rather than __get_cpuid: the hypervisor range (0x40000000+) lies above
    // the basic maximum leaf, and __get_cpuid would refuse it.
    __cpuid_count(leaf, subleaf, out->eax, out->ebx, out->ecx, out->edx);
    return true;
}
#else
bool fingerly_cpuid(uint32_t leaf, uint32_t subleaf, fingerly_cpuid_registers *out) {
    (void)leaf; (void)subleaf;
    out->eax = out->ebx = out->ecx = out->edx = 0;
    return false;
}
#endif
