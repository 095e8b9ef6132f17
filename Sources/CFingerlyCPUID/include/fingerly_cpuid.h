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

#endif
