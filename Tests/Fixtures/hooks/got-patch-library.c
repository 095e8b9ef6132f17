// Loaded at run time, it rewrites every pointer to dlopen that libfingerly's relocations wrote
// (its PLT slot and its own copy of the loader's functions) to a dlopen that finds nothing already
// loaded: every RTLD_NOLOAD look-up of the collector then fails.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static void *(*loader_dlopen)(const char *, int);

static void *blind_dlopen(const char *file, int flags) {
    return (flags & RTLD_NOLOAD) ? NULL : loader_dlopen(file, flags);
}

static void rewrite(const struct dl_phdr_info *info, const ElfW(Rela) *relocations, size_t bytes,
                    const ElfW(Sym) *symbols, const char *strings) {
    for (size_t index = 0; relocations && index < bytes / sizeof *relocations; index++) {
        size_t symbol = ELF64_R_SYM(relocations[index].r_info);
        if (symbol == 0 || strcmp(strings + symbols[symbol].st_name, "dlopen") != 0) continue;
        void **slot = (void **)(info->dlpi_addr + relocations[index].r_offset);
        uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
        mprotect((void *)((uintptr_t)slot & ~(page - 1)), page, PROT_READ | PROT_WRITE);
        if (!loader_dlopen) loader_dlopen = *slot;
        *slot = (void *)blind_dlopen;
    }
}

static int visit(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    (void)data;
    if (!info->dlpi_name || !strstr(info->dlpi_name, "libfingerly")) return 0;
    const ElfW(Dyn) *dynamic = NULL;
    for (int index = 0; index < info->dlpi_phnum; index++) {
        if (info->dlpi_phdr[index].p_type == PT_DYNAMIC) {
            dynamic = (const void *)(info->dlpi_addr + info->dlpi_phdr[index].p_vaddr);
        }
    }
    const ElfW(Rela) *plt = NULL, *data_relocations = NULL;
    size_t plt_bytes = 0, data_bytes = 0;
    const ElfW(Sym) *symbols = NULL;
    const char *strings = NULL;
    for (const ElfW(Dyn) *entry = dynamic; entry && entry->d_tag != DT_NULL; entry++) {
        if (entry->d_tag == DT_JMPREL) plt = (const void *)entry->d_un.d_ptr;
        if (entry->d_tag == DT_PLTRELSZ) plt_bytes = entry->d_un.d_val;
        if (entry->d_tag == DT_RELA) data_relocations = (const void *)entry->d_un.d_ptr;
        if (entry->d_tag == DT_RELASZ) data_bytes = entry->d_un.d_val;
        if (entry->d_tag == DT_SYMTAB) symbols = (const void *)entry->d_un.d_ptr;
        if (entry->d_tag == DT_STRTAB) strings = (const void *)entry->d_un.d_ptr;
    }
    rewrite(info, plt, plt_bytes, symbols, strings);
    rewrite(info, data_relocations, data_bytes, symbols, strings);
    return 0;
}

__attribute__((constructor)) static void install(void) { dl_iterate_phdr(visit, NULL); }
