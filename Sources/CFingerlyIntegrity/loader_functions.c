#define _GNU_SOURCE
#include "loader_functions.h"
#include "fingerly_integrity.h"

// A static initialiser: the loader writes these addresses here when it loads this object, before
// any code that could rewrite a GOT slot runs.
__attribute__((visibility("hidden"))) const struct fingerly_loader_functions fingerly_loader = {
    dlopen, dlsym, dlclose, dl_iterate_phdr,
};

const void *fingerly_lookup_in_library(const char *library, const char *symbol) {
    void *handle = fingerly_loader.open(library, RTLD_LAZY | RTLD_NOLOAD);
    if (!handle) return NULL;
    const void *address = fingerly_loader.symbol(handle, symbol);
    fingerly_loader.close(handle);
    return address;
}

bool fingerly_library_is_loaded(const char *library) {
    void *handle = fingerly_loader.open(library, RTLD_LAZY | RTLD_NOLOAD);
    if (!handle) return false;
    fingerly_loader.close(handle);
    return true;
}
