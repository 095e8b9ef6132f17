#ifndef FINGERLY_ALLOCATOR_H
#define FINGERLY_ALLOCATOR_H

#include <stddef.h>

/// Sets glibc's trim and mmap thresholds (mallopt; <malloc.h> is not in Swift's Glibc module).
/// Returns 0 when glibc took both.
int fingerly_allocator_keep_free(size_t trim_threshold, size_t mmap_threshold);

#endif
