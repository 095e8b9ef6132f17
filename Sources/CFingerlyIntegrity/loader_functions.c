#define _GNU_SOURCE
#include "loader_functions.h"
#include "fingerly_integrity.h"

#include <elf.h>
#include <stdbool.h>
#include <string.h>

// A static initialiser: the loader writes these addresses here when it loads this object, before
// any code that could rewrite a GOT slot runs.
__attribute__((visibility("hidden"))) const struct fingerly_loader_functions fingerly_loader = {
    dlopen, dlsym, dlclose, dl_iterate_phdr,
};

const ElfW(Dyn) *fingerly_object_dynamic(const struct dl_phdr_info *info, const char **strings) {
    *strings = NULL;
    const ElfW(Dyn) *dynamic = NULL;
    for (int index = 0; index < info->dlpi_phnum; index++) {
        if (info->dlpi_phdr[index].p_type == PT_DYNAMIC) {
            dynamic = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[index].p_vaddr);
        }
    }
    for (const ElfW(Dyn) *entry = dynamic; entry && entry->d_tag != DT_NULL; entry++) {
        // glibc relocates DT_STRTAB to an absolute address; the vDSO leaves it relative.
        if (entry->d_tag == DT_STRTAB) {
            *strings = (const char *)entry->d_un.d_ptr;
            if ((ElfW(Addr))*strings < info->dlpi_addr) *strings += info->dlpi_addr;
        }
    }
    return dynamic;
}

const char *fingerly_object_soname(const struct dl_phdr_info *info) {
    const char *strings;
    const ElfW(Dyn) *dynamic = fingerly_object_dynamic(info, &strings);
    for (const ElfW(Dyn) *entry = dynamic; entry && strings && entry->d_tag != DT_NULL; entry++) {
        if (entry->d_tag == DT_SONAME) return strings + entry->d_un.d_val;
    }
    return "";
}

struct name_search {
    const char *library;
    bool found;
};

static int match_name(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    struct name_search *search = data;
    const char *path = info->dlpi_name ? info->dlpi_name : "";
    const char *slash = strrchr(path, '/');
    const char *file = slash ? slash + 1 : path;
    search->found = strcmp(file, search->library) == 0 || strcmp(fingerly_object_soname(info), search->library) == 0;
    return search->found;
}

void *fingerly_open_loaded(const char *library) {
    struct name_search search = {library, false};
    fingerly_loader.iterate(match_name, &search);
    return search.found ? fingerly_loader.open(library, RTLD_LAZY | RTLD_NOLOAD) : NULL;
}

const void *fingerly_lookup_in_library(const char *library, const char *symbol) {
    void *handle = fingerly_open_loaded(library);
    if (!handle) return NULL;
    const void *address = fingerly_loader.symbol(handle, symbol);
    fingerly_loader.close(handle);
    return address;
}

bool fingerly_library_is_loaded(const char *library) {
    void *handle = fingerly_open_loaded(library);
    if (!handle) return false;
    fingerly_loader.close(handle);
    return true;
}
