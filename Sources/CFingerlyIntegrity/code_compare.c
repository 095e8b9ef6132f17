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
    struct fingerly_object object, program;
    if (!address || !fingerly_object_at(address, &object) || !object.name) return -1;
    const char *file = object.name;
    // For the main program the name is argv[0], which may be a relative path or another file of
    // the same name: the kernel's /proc/self/exe is the file really mapped.
    const void *program_headers = (const void *)getauxval(AT_PHDR);
    if (!file[0] || (program_headers && fingerly_object_at(program_headers, &program) &&
                     program.identity == object.identity)) {
        file = "/proc/self/exe";
    }
    if (path_capacity) fingerly_copy_text(path, path_capacity, object.name[0] ? object.name : file);
    int fd = open(file, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    int result = -1;
    ElfW(Ehdr) header;
    if (pread(fd, &header, sizeof header, 0) != (ssize_t)sizeof header || memcmp(header.e_ident, ELFMAG, SELFMAG) != 0) goto done;
    // The load bias is zero for a fixed-address program.
    ElfW(Addr) vaddr = (ElfW(Addr))address - (ElfW(Addr))object.bias;
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
