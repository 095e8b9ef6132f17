#define _GNU_SOURCE
#include "fingerly_integrity.h"
#include "loader_functions.h"
#include "object_path.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

int fingerly_compare_code_with_file(const void *address, unsigned char *memory, unsigned char *disk, size_t count,
                                    char *path, size_t path_capacity) {
    Dl_info info;
    if (!address || !fingerly_loader.address(address, &info) || !info.dli_fname || !info.dli_fbase) return -1;
    const char *file = info.dli_fname;
    // For the main program dladdr names argv[0], which may be a relative path or another file
    // of the same name: the kernel's /proc/self/exe is the file really mapped.
    Dl_info program;
    const void *program_headers = (const void *)getauxval(AT_PHDR);
    if (!file[0] || (program_headers && fingerly_loader.address(program_headers, &program) && program.dli_fbase == info.dli_fbase)) {
        file = "/proc/self/exe";
    }
    copy_object_path(address, path, path_capacity);
    if (path_capacity && !path[0]) fingerly_copy_text(path, path_capacity, file);
    int fd = open(file, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    int result = -1;
    ElfW(Ehdr) header;
    if (pread(fd, &header, sizeof header, 0) != (ssize_t)sizeof header || memcmp(header.e_ident, ELFMAG, SELFMAG) != 0) goto done;
    // Which load base: the object's (shared libraries and PIE) or zero (fixed-address programs).
    ElfW(Addr) base = header.e_type == ET_EXEC ? 0 : (ElfW(Addr))info.dli_fbase;
    ElfW(Addr) vaddr = (ElfW(Addr))address - base;
    for (int index = 0; index < header.e_phnum; index++) {
        ElfW(Phdr) segment;
        off_t at = (off_t)header.e_phoff + (off_t)index * header.e_phentsize;
        if (pread(fd, &segment, sizeof segment, at) != (ssize_t)sizeof segment) goto done;
        if (segment.p_type != PT_LOAD || vaddr < segment.p_vaddr || vaddr + count > segment.p_vaddr + segment.p_filesz) continue;
        off_t offset = (off_t)(segment.p_offset + (vaddr - segment.p_vaddr));
        if (pread(fd, disk, count, offset) != (ssize_t)count) goto done;
        memcpy(memory, address, count);
        result = memcmp(memory, disk, count) == 0 ? 1 : 0;
        break;
    }
done:
    close(fd);
    return result;
}
