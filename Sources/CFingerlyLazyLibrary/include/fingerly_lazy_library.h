#ifndef FINGERLY_LAZY_LIBRARY_H
#define FINGERLY_LAZY_LIBRARY_H

#include <stdbool.h>
#include <stddef.h>

// One function a library opened on first use must have, and where its address goes.
struct fingerly_lazy_function {
    const char *name;
    void **slot;
};

// Opens `soname` (RTLD_NOW | RTLD_LOCAL) and fills every slot; on failure writes why into `problem`
// ("SONAME could not be loaded: …" or "SONAME lacks a function: …") and returns false.
bool fingerly_lazy_library_open(const char *soname, const struct fingerly_lazy_function *functions, size_t count,
                                char *problem, size_t problem_size);

#endif
