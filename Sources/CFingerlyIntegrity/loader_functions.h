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

/// An object's dynamic section (NULL when it has none), and its string table in `strings`.
__attribute__((visibility("hidden"))) const ElfW(Dyn) *fingerly_object_dynamic(const struct dl_phdr_info *info,
                                                                               const char **strings);

/// An object's DT_SONAME, or "" when it has none.
__attribute__((visibility("hidden"))) const char *fingerly_object_soname(const struct dl_phdr_info *info);

/// A handle on `library` (a file name such as "libssl.so.3") when a loaded object carries that
/// name or soname, else NULL. What dlopen(RTLD_NOLOAD) answers, without its search of the library
/// path for a library that is not loaded: a dozen file system calls on every check.
__attribute__((visibility("hidden"))) void *fingerly_open_loaded(const char *library);

#endif
