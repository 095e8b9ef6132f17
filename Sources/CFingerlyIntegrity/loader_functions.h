#ifndef FINGERLY_LOADER_FUNCTIONS_H
#define FINGERLY_LOADER_FUNCTIONS_H

#include <dlfcn.h>
#include <link.h>

/// The loader's functions as this object's GOT held them when it was loaded. Code loaded later
/// can rewrite those slots (making every RTLD_NOLOAD look-up fail, or hiding objects from the
/// walk) and so blind the checks that use them; calls through these pointers are not affected.
/// A preload present at load time is reported by the preload rules instead.
struct fingerly_loader_functions {
    void *(*open)(const char *, int);
    void *(*symbol)(void *, const char *);
    int (*close)(void *);
    int (*iterate)(int (*)(struct dl_phdr_info *, size_t, void *), void *);
};

extern __attribute__((visibility("hidden"))) const struct fingerly_loader_functions fingerly_loader;

#endif
