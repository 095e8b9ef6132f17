#define _GNU_SOURCE
#include "fingerly_integrity.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <string.h>

#include "fingerly_text.h"

#if defined(__x86_64__)
#define FINGERLY_JUMP_SLOT R_X86_64_JUMP_SLOT
#define FINGERLY_GLOB_DAT R_X86_64_GLOB_DAT
#elif defined(__aarch64__)
#define FINGERLY_JUMP_SLOT R_AARCH64_JUMP_SLOT
#define FINGERLY_GLOB_DAT R_AARCH64_GLOB_DAT
#endif

/// A loader's relocation table is as large as its object; past this the object is not read.
enum { FINGERLY_RELOCATION_LIMIT = 1 << 20, FINGERLY_WATCHED_LIMIT = 64 };

struct slot_search {
    const char *names[FINGERLY_WATCHED_LIMIT];
    size_t name_lengths[FINGERLY_WATCHED_LIMIT];
    /// Where a global lookup of each name lands, and the object it lands in.
    const void *global_base[FINGERLY_WATCHED_LIMIT];
    size_t name_count;
    const void *library_base;
    fingerly_redirected_slot *slots;
    size_t capacity;
    long found;
};

static const void *object_base(const void *address) {
    Dl_info info;
    return address && dladdr(address, &info) ? info.dli_fbase : NULL;
}

static const void *absolute(ElfW(Addr) pointer, ElfW(Addr) base) {
    // glibc relocates these entries in place; the vDSO's stay relative.
    return (const void *)(pointer < base ? pointer + base : pointer);
}

#if defined(FINGERLY_JUMP_SLOT)
static void check_relocations(struct slot_search *search, struct dl_phdr_info *info, const void *own_base,
                              const ElfW(Rela) *relocations, size_t bytes, const ElfW(Sym) *symbols, const char *strings) {
    size_t count = bytes / sizeof *relocations;
    if (!relocations || !symbols || !strings || count > FINGERLY_RELOCATION_LIMIT) return;
    for (size_t index = 0; index < count; index++) {
        ElfW(Xword) type = ELF64_R_TYPE(relocations[index].r_info);
        if (type != FINGERLY_JUMP_SLOT && type != FINGERLY_GLOB_DAT) continue;
        size_t symbol = ELF64_R_SYM(relocations[index].r_info);
        if (symbol == 0) continue;
        const char *name = strings + symbols[symbol].st_name;
        size_t watched = 0;
        while (watched < search->name_count &&
               !(strncmp(name, search->names[watched], search->name_lengths[watched]) == 0 &&
                 name[search->name_lengths[watched]] == 0)) {
            watched++;
        }
        if (watched == search->name_count) continue;
        const void *target = *(const void *const *)(info->dlpi_addr + relocations[index].r_offset);
        const void *target_base = object_base(target);
        if (target_base && (target_base == own_base || target_base == search->library_base ||
                            target_base == search->global_base[watched])) {
            continue;
        }
        long position = search->found++;
        if ((size_t)position >= search->capacity) continue;
        fingerly_redirected_slot *slot = &search->slots[position];
        fingerly_copy_text(slot->symbol, sizeof slot->symbol, name);
        fingerly_copy_text(slot->object, sizeof slot->object, info->dlpi_name ? info->dlpi_name : "");
        Dl_info where;
        slot->target[0] = 0;
        if (target && dladdr(target, &where) && where.dli_fname) {
            fingerly_copy_text(slot->target, sizeof slot->target, where.dli_fname);
        }
    }
}

static int search_object(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    struct slot_search *search = data;
    const ElfW(Dyn) *dynamic = NULL;
    for (int index = 0; index < info->dlpi_phnum; index++) {
        if (info->dlpi_phdr[index].p_type == PT_DYNAMIC) {
            dynamic = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[index].p_vaddr);
        }
    }
    if (!dynamic) return 0;
    const ElfW(Rela) *plt = NULL, *data_relocations = NULL;
    size_t plt_bytes = 0, data_bytes = 0;
    ElfW(Sxword) plt_kind = DT_RELA;
    const ElfW(Sym) *symbols = NULL;
    const char *strings = NULL;
    for (const ElfW(Dyn) *entry = dynamic; entry->d_tag != DT_NULL; entry++) {
        switch (entry->d_tag) {
        case DT_JMPREL: plt = absolute(entry->d_un.d_ptr, info->dlpi_addr); break;
        case DT_PLTRELSZ: plt_bytes = entry->d_un.d_val; break;
        case DT_PLTREL: plt_kind = (ElfW(Sxword))entry->d_un.d_val; break;
        case DT_RELA: data_relocations = absolute(entry->d_un.d_ptr, info->dlpi_addr); break;
        case DT_RELASZ: data_bytes = entry->d_un.d_val; break;
        case DT_SYMTAB: symbols = absolute(entry->d_un.d_ptr, info->dlpi_addr); break;
        case DT_STRTAB: strings = absolute(entry->d_un.d_ptr, info->dlpi_addr); break;
        default: break;
        }
    }
    const void *own_base = object_base(dynamic);
    if (plt_kind == DT_RELA) check_relocations(search, info, own_base, plt, plt_bytes, symbols, strings);
    check_relocations(search, info, own_base, data_relocations, data_bytes, symbols, strings);
    return 0;
}
#endif

long fingerly_redirected_slots(const char *symbols, const char *library, fingerly_redirected_slot *slots,
                               size_t capacity) {
#if defined(FINGERLY_JUMP_SLOT)
    void *handle = dlopen(library, RTLD_LAZY | RTLD_NOLOAD);
    if (!handle) return -1;
    struct slot_search search = {.slots = slots, .capacity = capacity};
    for (const char *name = symbols; *name && search.name_count < FINGERLY_WATCHED_LIMIT;) {
        size_t length = strcspn(name, "\n");
        search.names[search.name_count] = name;
        search.name_lengths[search.name_count] = length;
        // A symbol the library does not define is nobody's to redirect.
        char copy[FINGERLY_OBJECT_NAME_SIZE];
        if (length > 0 && length < sizeof copy) {
            memcpy(copy, name, length);
            copy[length] = 0;
            const void *definition = dlsym(handle, copy);
            if (definition) {
                if (!search.library_base) search.library_base = object_base(definition);
                search.global_base[search.name_count] = object_base(dlsym(RTLD_DEFAULT, copy));
                search.name_count++;
            }
        }
        name += length;
        if (*name == '\n') name++;
    }
    dlclose(handle);
    if (!search.library_base) return 0;
    dl_iterate_phdr(search_object, &search);
    return search.found;
#else
    (void)symbols; (void)library; (void)slots; (void)capacity;
    return -2;
#endif
}

size_t fingerly_redirected_slot_symbol(const fingerly_redirected_slot *slot, const char **text) {
    *text = slot->symbol;
    return strnlen(slot->symbol, sizeof slot->symbol);
}

size_t fingerly_redirected_slot_object(const fingerly_redirected_slot *slot, const char **text) {
    *text = slot->object;
    return strnlen(slot->object, sizeof slot->object);
}

size_t fingerly_redirected_slot_target(const fingerly_redirected_slot *slot, const char **text) {
    *text = slot->target;
    return strnlen(slot->target, sizeof slot->target);
}
