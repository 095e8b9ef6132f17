// Loaded at run time, it rewrites the program's GOT slot for getenv to a function of its own:
// libc's code, and every global lookup of getenv, stay as they were.
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
    (void)data;
    if (info->dlpi_name && info->dlpi_name[0]) return 0;
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
        // Left writable: a lazily bound GOT shares the page with slots the loader still writes.
        mprotect((void *)((uintptr_t)slot & ~(page - 1)), page, PROT_READ | PROT_WRITE);
        *slot = (void *)quiet_getenv;
    }
    return 0;
}

__attribute__((constructor)) static void install(void) { dl_iterate_phdr(rewrite, NULL); }
