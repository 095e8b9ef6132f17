#include "fingerly_allocator.h"

#include <limits.h>
#include <malloc.h>

int fingerly_allocator_keep_free(size_t trim_threshold, size_t mmap_threshold) {
    if (trim_threshold > INT_MAX || mmap_threshold > INT_MAX) return -1;
    int trimmed = mallopt(M_TRIM_THRESHOLD, (int)trim_threshold);
    int mapped = mallopt(M_MMAP_THRESHOLD, (int)mmap_threshold);
    return trimmed == 1 && mapped == 1 ? 0 : -1;
}
