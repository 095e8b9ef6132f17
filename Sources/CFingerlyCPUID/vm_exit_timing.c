#include "fingerly_cpuid.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <x86intrin.h>

// CPUID always exits to a hypervisor (VT-x and SVM both intercept it unconditionally); LFENCE never does. Each
// sample is bracketed the same way, so the fence and timestamp overhead cancel in the comparison.
static inline uint64_t fingerly_cpuid_ticks(void) {
    unsigned eax, ebx, ecx, edx;
    _mm_lfence();
    uint64_t start = __rdtsc();
    _mm_lfence();
    __cpuid_count(0, 0, eax, ebx, ecx, edx);
    _mm_lfence();
    uint64_t end = __rdtsc();
    __asm__ volatile("" : : "r"(eax), "r"(ebx), "r"(ecx), "r"(edx));
    return end - start;
}

static inline uint64_t fingerly_fence_ticks(void) {
    _mm_lfence();
    uint64_t start = __rdtsc();
    _mm_lfence();
    _mm_lfence(); _mm_lfence(); _mm_lfence(); _mm_lfence();
    _mm_lfence(); _mm_lfence(); _mm_lfence(); _mm_lfence();
    _mm_lfence();
    uint64_t end = __rdtsc();
    return end - start;
}

bool fingerly_time_vm_exits(uint32_t samples, uint64_t *exiting, uint64_t *baseline) {
    for (uint32_t index = 0; index < samples; index++) {
        // Interleaved, so a frequency change or a preemption falls on both series alike.
        exiting[index] = fingerly_cpuid_ticks();
        baseline[index] = fingerly_fence_ticks();
    }
    return true;
}
#else
bool fingerly_time_vm_exits(uint32_t samples, uint64_t *exiting, uint64_t *baseline) {
    (void)samples; (void)exiting; (void)baseline;
    return false;
}
#endif
