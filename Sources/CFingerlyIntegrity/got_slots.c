#define _GNU_SOURCE
#include "fingerly_integrity.h"
#include "loader_functions.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>

#include "fingerly_text.h"
#include "object_path.h"

// The relocations that write a symbol's address into memory: PLT slots, GOT entries, and plain
// pointers in data (a table of functions, or this library's own copy of the loader's functions).
#if defined(__x86_64__)
#define FINGERLY_JUMP_SLOT R_X86_64_JUMP_SLOT
#define FINGERLY_GLOB_DAT R_X86_64_GLOB_DAT
#define FINGERLY_ABSOLUTE R_X86_64_64
#elif defined(__aarch64__)
#define FINGERLY_JUMP_SLOT R_AARCH64_JUMP_SLOT
#define FINGERLY_GLOB_DAT R_AARCH64_GLOB_DAT
#define FINGERLY_ABSOLUTE R_AARCH64_ABS64
#endif

/// A loader's relocation table is as large as its object; past this the object is not read.
enum { FINGERLY_RELOCATION_LIMIT = 1 << 20, FINGERLY_WATCHED_LIMIT = 64, FINGERLY_OBJECT_LIMIT = 1024 };

/// The addresses one loaded object's segments span. Telling objects apart by range, not with
/// dladdr: dladdr scans the object's symbol table, a millisecond for a large program.
struct object_range {
    uintptr_t start, end;
};

/// A relocation that names a watched symbol, as a full walk of an object's tables found it. Which
/// relocations name which symbols is fixed from the object's load to its unload, so a later walk
/// reads only these slots; what they hold is read again on every walk.
struct known_slot {
    ElfW(Addr) offset;
    /// Where the symbol's name starts in the caller's newline-separated symbols.
    uint32_t name_offset;
};

struct known_object {
    ElfW(Addr) base;
    uint32_t first_slot, slot_count;
};

enum {
    FINGERLY_KNOWN_SLOT_LIMIT = 4096,
    FINGERLY_CACHE_KEY_LIMIT = 1024,
    FINGERLY_CACHE_COUNT = 2,
};

/// The relocations naming watched symbols in every loaded object, for one library and one list of
/// symbols, as long as the loader's counts of loads and unloads (dlpi_adds, dlpi_subs) stand
/// where they stood when the walk that filled it ran.
struct slot_cache {
    bool valid;
    unsigned long long adds, subs;
    char library[FINGERLY_CACHE_KEY_LIMIT];
    char symbols[FINGERLY_CACHE_KEY_LIMIT];
    struct known_object objects[FINGERLY_OBJECT_LIMIT];
    size_t object_count;
    struct known_slot slots[FINGERLY_KNOWN_SLOT_LIMIT];
    size_t slot_count;
    /// A table outgrew its array: this walk cannot fill the cache.
    bool overflowed;
};

/// How a walk of the relocations uses its cache.
enum cache_use { CACHE_NONE, CACHE_READ, CACHE_FILL };

struct slot_search {
    const char *names[FINGERLY_WATCHED_LIMIT];
    size_t name_lengths[FINGERLY_WATCHED_LIMIT];
    /// The object a global lookup of each name lands in.
    uintptr_t global_object[FINGERLY_WATCHED_LIMIT];
    size_t name_count;
    /// The watched names by their first byte, one bit each: most relocations name none of them,
    /// and this turns them away with one load instead of a comparison per name.
    uint64_t by_first_byte[256];
    uintptr_t library_object;
    struct object_range ranges[FINGERLY_OBJECT_LIMIT];
    size_t range_count;
    /// More objects than ranges: a target past the last one could not be placed, so nothing is judged.
    bool ranges_cut;
    /// Set for the own-object walk: only this object's slots are read, for every symbol, and a
    /// target in one of `accepted` (its dependencies and the start-up objects) is in order.
    uintptr_t only_object;
    const uintptr_t *accepted;
    size_t accepted_count;
    fingerly_redirected_slot *slots;
    size_t capacity;
    long found;
    /// The loader's counts of loads and unloads when the ranges were taken.
    unsigned long long adds, subs;
    bool counted;
    /// Where each watched name starts in the caller's symbols.
    uint32_t name_offsets[FINGERLY_WATCHED_LIMIT];
    struct slot_cache *cache;
    enum cache_use cache_use;
    /// Objects the relocation walk has met so far, the cache's objects in the same order.
    size_t objects_visited;
};

/// Read by offset and size: a loader older than glibc 2.4 passes a shorter structure without them.
static bool counts_of(const struct dl_phdr_info *info, size_t size, unsigned long long *adds,
                      unsigned long long *subs) {
    if (size < offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) return false;
    *adds = info->dlpi_adds;
    *subs = info->dlpi_subs;
    return true;
}

static struct object_range range_of_object(const struct dl_phdr_info *info) {
    struct object_range range = {UINTPTR_MAX, 0};
    for (int index = 0; index < info->dlpi_phnum; index++) {
        const ElfW(Phdr) *segment = &info->dlpi_phdr[index];
        if (segment->p_type != PT_LOAD) continue;
        uintptr_t start = info->dlpi_addr + segment->p_vaddr;
        if (start < range.start) range.start = start;
        if (start + segment->p_memsz > range.end) range.end = start + segment->p_memsz;
    }
    return range;
}

static int collect_range(struct dl_phdr_info *info, size_t size, void *data) {
    struct slot_search *search = data;
    if (search->range_count == 0 && !search->ranges_cut) {
        search->counted = counts_of(info, size, &search->adds, &search->subs);
    }
    if (search->range_count < FINGERLY_OBJECT_LIMIT) {
        search->ranges[search->range_count++] = range_of_object(info);
    } else {
        search->ranges_cut = true;
    }
    return 0;
}

/// The start of the object whose segments hold `address`; 0 for memory no object was loaded from.
static uintptr_t object_of(const struct slot_search *search, const void *address) {
    uintptr_t at = (uintptr_t)address;
    for (size_t index = 0; index < search->range_count; index++) {
        if (at >= search->ranges[index].start && at < search->ranges[index].end) return search->ranges[index].start;
    }
    return 0;
}

static const void *absolute(ElfW(Addr) pointer, ElfW(Addr) base) {
    // glibc relocates these entries in place; the vDSO's stay relative.
    return (const void *)(pointer < base ? pointer + base : pointer);
}

#if defined(FINGERLY_JUMP_SLOT)
/// Reads one slot and records it when it leads where none of the accepted objects is.
static void judge_slot(struct slot_search *search, const struct dl_phdr_info *info, uintptr_t own_object,
                       size_t watched, const char *name, size_t name_length, ElfW(Addr) offset) {
    const void *target = *(const void *const *)(info->dlpi_addr + offset);
    // A weak symbol nobody defines (__gmon_start__) is bound to nothing: no call goes anywhere.
    if (!target) return;
    uintptr_t target_object = object_of(search, target);
    if (target_object && target_object == own_object) return;
    if (search->only_object) {
        bool accepted = false;
        for (size_t known = 0; known < search->accepted_count && !accepted; known++) {
            accepted = target_object && target_object == search->accepted[known];
        }
        if (accepted) return;
    } else if (target_object && (target_object == search->library_object ||
                                 target_object == search->global_object[watched])) {
        return;
    }
    long position = search->found++;
    if ((size_t)position >= search->capacity) return;
    fingerly_redirected_slot *slot = &search->slots[position];
    fingerly_copy_bounded(slot->symbol, sizeof slot->symbol, name, name_length);
    fingerly_copy_text(slot->object, sizeof slot->object, info->dlpi_name ? info->dlpi_name : "");
    slot->target_address = target;
    slot->owner_start = own_object;
    slot->target_start = target_object;
    slot->target[0] = 0;
}

/// The slots an earlier walk found in this object, read again; false when the cache does not
/// describe this object (then the tables are walked).
static bool check_known_slots(struct slot_search *search, const struct dl_phdr_info *info, size_t object_index) {
    const struct slot_cache *cache = search->cache;
    if (object_index >= cache->object_count || cache->objects[object_index].base != info->dlpi_addr) return false;
    uintptr_t own_object = range_of_object(info).start;
    if (object_of(search, (const void *)own_object) != own_object) return true;
    const struct known_object *object = &cache->objects[object_index];
    for (uint32_t index = object->first_slot; index < object->first_slot + object->slot_count; index++) {
        size_t watched = 0;
        uint32_t name_offset = cache->slots[index].name_offset;
        while (watched < search->name_count && search->name_offsets[watched] != name_offset) watched++;
        // The library no longer defines the name: it is nobody's to redirect.
        if (watched == search->name_count) continue;
        judge_slot(search, info, own_object, watched, search->names[watched], search->name_lengths[watched],
                   cache->slots[index].offset);
    }
    return true;
}

static void check_relocations(struct slot_search *search, struct dl_phdr_info *info, uintptr_t own_object,
                              const ElfW(Rela) *relocations, size_t bytes, const ElfW(Sym) *symbols, const char *strings) {
    size_t count = bytes / sizeof *relocations;
    if (!relocations || !symbols || !strings || count > FINGERLY_RELOCATION_LIMIT) return;
    for (size_t index = 0; index < count; index++) {
        ElfW(Xword) type = ELF64_R_TYPE(relocations[index].r_info);
        if (type != FINGERLY_JUMP_SLOT && type != FINGERLY_GLOB_DAT && type != FINGERLY_ABSOLUTE) continue;
        size_t symbol = ELF64_R_SYM(relocations[index].r_info);
        if (symbol == 0) continue;
        const char *name = strings + symbols[symbol].st_name;
        size_t watched = search->name_count;
        if (!search->only_object) {
            // The name first: most relocations name no watched symbol, and finding a target's
            // object costs a scan of every object.
            uint64_t candidates = search->by_first_byte[(unsigned char)name[0]];
            for (; candidates; candidates &= candidates - 1) {
                size_t index = (size_t)__builtin_ctzll(candidates);
                if (strncmp(name, search->names[index], search->name_lengths[index]) == 0 &&
                    name[search->name_lengths[index]] == 0) {
                    watched = index;
                    break;
                }
            }
            if (watched == search->name_count) continue;
        }
        if (search->cache_use == CACHE_FILL) {
            struct slot_cache *cache = search->cache;
            if (cache->slot_count < FINGERLY_KNOWN_SLOT_LIMIT) {
                cache->slots[cache->slot_count++] = (struct known_slot){relocations[index].r_offset,
                                                                         search->name_offsets[watched]};
            } else {
                cache->overflowed = true;
            }
        }
        judge_slot(search, info, own_object, watched, name, strlen(name), relocations[index].r_offset);
    }
}

static void search_object_tables(struct slot_search *search, struct dl_phdr_info *info) {
    const ElfW(Dyn) *dynamic = NULL;
    for (int index = 0; index < info->dlpi_phnum; index++) {
        if (info->dlpi_phdr[index].p_type == PT_DYNAMIC) {
            dynamic = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[index].p_vaddr);
        }
    }
    if (!dynamic) return;
    const ElfW(Rela) *plt = NULL, *data_relocations = NULL;
    size_t plt_bytes = 0, data_bytes = 0, relative_count = 0;
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
        case DT_RELACOUNT: relative_count = entry->d_un.d_val; break;
        case DT_SYMTAB: symbols = absolute(entry->d_un.d_ptr, info->dlpi_addr); break;
        case DT_STRTAB: strings = absolute(entry->d_un.d_ptr, info->dlpi_addr); break;
        default: break;
        }
    }
    uintptr_t own_object = range_of_object(info).start;
    // An object loaded since the ranges were taken points into objects nobody has seen yet.
    if (object_of(search, (const void *)own_object) != own_object) return;
    if (search->only_object && own_object != search->only_object) return;
    if (plt_kind == DT_RELA) check_relocations(search, info, own_object, plt, plt_bytes, symbols, strings);
    // The linker sorts the relative relocations first and counts them: a large program has tens
    // of thousands, none of them naming a symbol.
    if (data_relocations && relative_count <= data_bytes / sizeof *data_relocations) {
        data_relocations += relative_count;
        data_bytes -= relative_count * sizeof *data_relocations;
    }
    check_relocations(search, info, own_object, data_relocations, data_bytes, symbols, strings);
}

static int search_object(struct dl_phdr_info *info, size_t size, void *data) {
    struct slot_search *search = data;
    size_t object_index = search->objects_visited++;
    if (search->cache_use != CACHE_NONE) {
        unsigned long long adds, subs;
        // An object loaded or unloaded since the ranges were taken: nothing is read from the cache
        // or kept in it.
        if (!counts_of(info, size, &adds, &subs) || adds != search->adds || subs != search->subs) {
            if (search->cache_use == CACHE_FILL) search->cache->overflowed = true;
            search->cache_use = CACHE_NONE;
        }
    }
    if (search->cache_use == CACHE_READ) {
        if (check_known_slots(search, info, object_index)) return 0;
        // The list is not the one cached: this walk reads the tables, and the next fills the cache again.
        search->cache->valid = false;
        search->cache_use = CACHE_NONE;
    }
    struct slot_cache *filling = search->cache_use == CACHE_FILL ? search->cache : NULL;
    if (filling) {
        if (object_index >= FINGERLY_OBJECT_LIMIT) {
            filling->overflowed = true;
            search->cache_use = CACHE_NONE;
            filling = NULL;
        } else {
            filling->objects[object_index] = (struct known_object){info->dlpi_addr, (uint32_t)filling->slot_count, 0};
            filling->object_count = object_index + 1;
        }
    }
    search_object_tables(search, info);
    if (filling && search->cache_use == CACHE_FILL) {
        struct known_object *object = &filling->objects[object_index];
        object->slot_count = (uint32_t)filling->slot_count - object->first_slot;
    }
    return 0;
}

#endif

/// Names each slot's target. After the walk: a second walk inside it would take the loader's locks
/// in the order opposite to another thread's dlopen, and the two would wait for each other for ever.
static void name_targets(fingerly_redirected_slot *slots, size_t count) {
    for (size_t index = 0; index < count; index++) {
        copy_object_path(slots[index].target_address, slots[index].target, sizeof slots[index].target);
    }
}

#if defined(FINGERLY_JUMP_SLOT)
/// Two callers' lists, libc's and libssl's: a walk finds its own and reads only the slots it names.
static struct slot_cache slot_caches[FINGERLY_CACHE_COUNT];
static size_t slot_cache_next;
/// Taken before the loader's own lock and released after it, never inside a dl_iterate_phdr callback.
static pthread_mutex_t slot_caches_lock = PTHREAD_MUTEX_INITIALIZER;

/// Under the lock: the cache for this key, to read when the loader's counts still match it,
/// else emptied to be filled by this walk.
static void choose_cache(struct slot_search *search, const char *symbols, const char *library) {
    if (strlen(symbols) >= FINGERLY_CACHE_KEY_LIMIT || strlen(library) >= FINGERLY_CACHE_KEY_LIMIT) return;
    struct slot_cache *cache = NULL;
    for (size_t index = 0; index < FINGERLY_CACHE_COUNT && !cache; index++) {
        struct slot_cache *candidate = &slot_caches[index];
        if (strcmp(candidate->symbols, symbols) == 0 && strcmp(candidate->library, library) == 0) cache = candidate;
    }
    if (cache && cache->valid && cache->adds == search->adds && cache->subs == search->subs) {
        search->cache = cache;
        search->cache_use = CACHE_READ;
        return;
    }
    if (!cache) {
        cache = &slot_caches[slot_cache_next];
        slot_cache_next = (slot_cache_next + 1) % FINGERLY_CACHE_COUNT;
        strcpy(cache->symbols, symbols);
        strcpy(cache->library, library);
    }
    cache->valid = false;
    cache->overflowed = false;
    cache->object_count = 0;
    cache->slot_count = 0;
    search->cache = cache;
    search->cache_use = CACHE_FILL;
}
#endif

long fingerly_redirected_slots(const char *symbols, const char *library, fingerly_redirected_slot *slots,
                               size_t capacity) {
#if defined(FINGERLY_JUMP_SLOT)
    void *handle = fingerly_open_loaded(library);
    if (!handle) return -1;
    // Some 16 KiB: on the calling thread's stack, which a probe thread has plenty of.
    struct slot_search search = {.slots = slots, .capacity = capacity};
    fingerly_loader.iterate(collect_range, &search);
    if (search.ranges_cut) {
        fingerly_loader.close(handle);
        return -3;
    }
    for (const char *name = symbols; *name && search.name_count < FINGERLY_WATCHED_LIMIT;) {
        size_t length = strcspn(name, "\n");
        search.names[search.name_count] = name;
        search.name_lengths[search.name_count] = length;
        search.name_offsets[search.name_count] = (uint32_t)(name - symbols);
        // A symbol the library does not define is nobody's to redirect.
        char copy[FINGERLY_SLOT_SYMBOL_SIZE];
        if (length > 0 && length < sizeof copy) {
            memcpy(copy, name, length);
            copy[length] = 0;
            const void *definition = fingerly_loader.symbol(handle, copy);
            if (definition) {
                if (!search.library_object) search.library_object = object_of(&search, definition);
                search.global_object[search.name_count] = object_of(&search, fingerly_loader.symbol(RTLD_DEFAULT, copy));
                search.by_first_byte[(unsigned char)copy[0]] |= UINT64_C(1) << search.name_count;
                search.name_count++;
            }
        }
        name += length;
        if (*name == '\n') name++;
    }
    fingerly_loader.close(handle);
    if (!search.library_object) return 0;
    // Not waited for: a thread that forked while another held it must not hang on it for ever.
    bool locked = search.counted && pthread_mutex_trylock(&slot_caches_lock) == 0;
    if (locked) choose_cache(&search, symbols, library);
    fingerly_loader.iterate(search_object, &search);
    if (search.cache_use == CACHE_FILL && !search.cache->overflowed) {
        search.cache->adds = search.adds;
        search.cache->subs = search.subs;
        search.cache->valid = true;
    }
    if (locked) pthread_mutex_unlock(&slot_caches_lock);
    name_targets(slots, (size_t)search.found < capacity ? (size_t)search.found : capacity);
    return search.found;
#else
    (void)symbols; (void)library; (void)slots; (void)capacity;
    return -2;
#endif
}

uintptr_t fingerly_own_object_start(void) {
    struct slot_search search = {0};
    fingerly_loader.iterate(collect_range, &search);
    return object_of(&search, (const void *)&fingerly_own_object_start);
}

long fingerly_redirected_own_slots(const uintptr_t *accepted, size_t accepted_count, fingerly_redirected_slot *slots,
                                   size_t capacity) {
#if defined(FINGERLY_JUMP_SLOT)
    struct slot_search search = {.slots = slots, .capacity = capacity, .accepted = accepted, .accepted_count = accepted_count};
    fingerly_loader.iterate(collect_range, &search);
    if (search.ranges_cut) return -3;
    search.only_object = object_of(&search, (const void *)&fingerly_redirected_own_slots);
    if (!search.only_object) return -1;
    fingerly_loader.iterate(search_object, &search);
    size_t written = (size_t)search.found < capacity ? (size_t)search.found : capacity;
    // A symbol that an object of the global scope defines first (a program defining getenv, a
    // library opened RTLD_GLOBAL) binds there: that is the loader's answer, not a rewrite.
    size_t kept = 0;
    for (size_t index = 0; index < written; index++) {
        const void *global = fingerly_loader.symbol(RTLD_DEFAULT, slots[index].symbol);
        if (global && object_of(&search, global) == slots[index].target_start && slots[index].target_start) continue;
        if (kept != index) slots[kept] = slots[index];
        kept++;
    }
    name_targets(slots, kept);
    return (long)kept + (search.found > (long)written ? search.found - (long)written : 0);
#else
    (void)accepted; (void)accepted_count; (void)slots; (void)capacity;
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
