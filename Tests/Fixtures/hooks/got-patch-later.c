// Loaded first and quiet until asked: it rewrites one object's GOT slot for getenv when the host
// calls it, with no load or unload in between, so the loader's lists stay as they were.
#define _GNU_SOURCE
#include <elf.h>
#include <link.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static char *quiet_getenv(const char *name) {
    (void)name;
    return NULL;
}

static int rewrite(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    const char *suffix = data, *name = info->dlpi_name ? info->dlpi_name : "";
    size_t name_length = strlen(name), suffix_length = strlen(suffix);
    // "" names the program, whose loader name is empty.
    if (suffix_length == 0 ? name_length != 0
                           : name_length < suffix_length || strcmp(name + name_length - suffix_length, suffix) != 0) {
        return 0;
    }
    const ElfW(Dyn) *dynamic = NULL;
    for (int index = 0; index < info->dlpi_phnum; index++) {
        if (info->dlpi_phdr[index].p_type == PT_DYNAMIC) {
            dynamic = (const void *)(info->dlpi_addr + info->dlpi_phdr[index].p_vaddr);
        }
    }
    const ElfW(Rela) *relocations = NULL;
    size_t bytes = 0;
    const ElfW(Sym) *symbols = NULL;
    const char *strings = NULL;
    for (const ElfW(Dyn) *entry = dynamic; entry && entry->d_tag != DT_NULL; entry++) {
        if (entry->d_tag == DT_JMPREL) relocations = (const void *)entry->d_un.d_ptr;
        if (entry->d_tag == DT_PLTRELSZ) bytes = entry->d_un.d_val;
        if (entry->d_tag == DT_SYMTAB) symbols = (const void *)entry->d_un.d_ptr;
        if (entry->d_tag == DT_STRTAB) strings = (const void *)entry->d_un.d_ptr;
    }
    for (size_t index = 0; relocations && index < bytes / sizeof *relocations; index++) {
        if (strcmp(strings + symbols[ELF64_R_SYM(relocations[index].r_info)].st_name, "getenv") != 0) continue;
        void **slot = (void **)(info->dlpi_addr + relocations[index].r_offset);
        uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
        mprotect((void *)((uintptr_t)slot & ~(page - 1)), page, PROT_READ | PROT_WRITE);
        *slot = (void *)quiet_getenv;
    }
    return 0;
}

/// Rewrites the getenv slot of the loaded object whose path ends in `object` ("" for the program).
void got_patch_later_redirect(const char *object) { dl_iterate_phdr(rewrite, (void *)object); }
