#ifndef FINGERLY_CPUID_H
#define FINGERLY_CPUID_H

#include <stdbool.h>
#include <stdint.h>

/// Registers returned by one CPUID leaf.
typedef struct {
    uint32_t eax, ebx, ecx, edx;
} fingerly_cpuid_registers;

/// Runs CPUID for `leaf`/`subleaf`. Returns false on architectures without CPUID.
bool fingerly_cpuid(uint32_t leaf, uint32_t subleaf, fingerly_cpuid_registers *out);

/// Times `samples` runs of CPUID leaf 0, which every x86 hypervisor intercepts, and as many of nine LFENCEs, which
/// none does, in timestamp-counter ticks, alternating. Returns false on architectures without CPUID and RDTSC.
bool fingerly_time_vm_exits(uint32_t samples, uint64_t *exiting, uint64_t *baseline);

/// The CPUs this process may run on: its affinity mask (taskset, a cgroup's cpuset), at most what a cgroup v2 CPU
/// quota allows; at least 1.
/// In C: CPU_COUNT is a macro, and glibc declares sched_getaffinity only under _GNU_SOURCE.
int fingerly_usable_processor_count(void);

#endif
