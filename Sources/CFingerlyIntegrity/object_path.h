#ifndef FINGERLY_OBJECT_PATH_H
#define FINGERLY_OBJECT_PATH_H

#include <dlfcn.h>
#include <stdbool.h>

#include "fingerly_text.h"
#include "loader_functions.h"

/// The file of the object mapped at `address`, cut to fit; empty when none is.
static inline void copy_object_path(const void *address, char *out, size_t capacity) {
    Dl_info info;
    if (capacity == 0) return;
    out[0] = 0;
    if (address && fingerly_loader.address(address, &info) && info.dli_fname) fingerly_copy_text(out, capacity, info.dli_fname);
}

#endif
