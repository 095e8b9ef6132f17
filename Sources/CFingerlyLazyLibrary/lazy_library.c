#include "fingerly_lazy_library.h"

#include <dlfcn.h>
#include <stdio.h>

bool fingerly_lazy_library_open(const char *soname, const struct fingerly_lazy_function *functions, size_t count,
                                char *problem, size_t problem_size) {
    // RTLD_LOCAL: its symbols stay out of the global scope, so nothing the host loads later binds to
    // them by accident. RTLD_NOW: a library missing a dependency's symbol fails here, not mid-call.
    void *library = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (!library) {
        const char *reason = dlerror();
        snprintf(problem, problem_size, "%s could not be loaded: %s", soname, reason ? reason : "no reason given");
        return false;
    }
    for (size_t index = 0; index < count; index++) {
        dlerror();
        void *address = dlsym(library, functions[index].name);
        if (!address) {
            const char *reason = dlerror();
            snprintf(problem, problem_size, "%s lacks a function: %s", soname, reason ? reason : functions[index].name);
            // The handle stays open: a host that opened the library itself keeps its own reference either way.
            return false;
        }
        *functions[index].slot = address;
    }
    return true;
}
