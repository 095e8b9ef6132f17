#ifndef FINGERLY_OBJECT_PATH_H
#define FINGERLY_OBJECT_PATH_H

#include <errno.h>
#include <link.h>
#include <stdbool.h>
#include <stdint.h>

#include "fingerly_text.h"
#include "loader_functions.h"

/// A loaded object, as the loader's list names it.
struct fingerly_object {
    /// Load bias: what the object's virtual addresses are offset by.
    uintptr_t bias;
    /// The loader's own string, valid while the object stays loaded; the main program's argv[0],
    /// as dladdr names it.
    const char *name;
    /// Identifies the object in comparisons: its link map's name, unique to each loaded object.
    const void *identity;
};

struct object_search {
    uintptr_t address;
    struct fingerly_object found;
    bool matched;
};

static int find_object(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    struct object_search *search = data;
    for (ElfW(Half) index = 0; index < info->dlpi_phnum; index++) {
        const ElfW(Phdr) *segment = &info->dlpi_phdr[index];
        if (segment->p_type != PT_LOAD) continue;
        uintptr_t start = info->dlpi_addr + segment->p_vaddr;
        if (search->address < start || search->address - start >= segment->p_memsz) continue;
        search->found.bias = info->dlpi_addr;
        search->found.identity = info->dlpi_name;
        search->found.name = info->dlpi_name && info->dlpi_name[0] ? info->dlpi_name : program_invocation_name;
        search->matched = true;
        return 1;
    }
    return 0;
}

/// The object whose segments hold `address`. Found by the segments' ranges, not with dladdr:
/// dladdr also scans the object's symbol table for the nearest symbol, which nothing here uses
/// and which takes a millisecond in a large program.
static inline bool fingerly_object_at(const void *address, struct fingerly_object *object) {
    struct object_search search = {.address = (uintptr_t)address};
    if (address) fingerly_loader.iterate(find_object, &search);
    if (search.matched) *object = search.found;
    return search.matched;
}

/// The file of the object mapped at `address`, cut to fit; empty when none is.
static inline void copy_object_path(const void *address, char *out, size_t capacity) {
    struct fingerly_object object;
    if (capacity == 0) return;
    out[0] = 0;
    if (fingerly_object_at(address, &object) && object.name) fingerly_copy_text(out, capacity, object.name);
}

#endif
