#define _GNU_SOURCE
#include "fingerly_shims.h"
#include "text_buffer.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <string.h>
#include <net/if.h>
#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <sys/auxv.h>
#include <sys/ioctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

int fingerly_traceme_selftest(void) {
    pid_t child = fork();
    if (child < 0) return -1;
    if (child == 0) {
        // Only async-signal-safe calls between fork and _exit.
        long result = ptrace(PTRACE_TRACEME, 0, NULL, NULL);
        _exit(result == 0 ? 0 : (errno & 0x7f));
    }
    int status = 0;
    while (waitpid(child, &status, 0) < 0) {
        if (errno != EINTR) return -1;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static long raw_syscall4(long number, long a, long b, long c, long d) {
#if defined(__x86_64__)
    long result;
    register long r10 __asm__("r10") = d;
    __asm__ volatile("syscall" : "=a"(result) : "a"(number), "D"(a), "S"(b), "d"(c), "r"(r10) : "rcx", "r11", "memory");
    return result;
#elif defined(__aarch64__)
    register long x8 __asm__("x8") = number;
    register long x0 __asm__("x0") = a;
    register long x1 __asm__("x1") = b;
    register long x2 __asm__("x2") = c;
    register long x3 __asm__("x3") = d;
    __asm__ volatile("svc #0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3) : "memory");
    return x0;
#else
    errno = 0;
    long result = syscall(number, a, b, c, d);
    return result < 0 ? -errno : result;
#endif
}

/// Three-argument calls pass a zero fourth register, which the kernel ignores.
static long raw_syscall3(long number, long a, long b, long c) {
    return raw_syscall4(number, a, b, c, 0);
}

ssize_t fingerly_raw_read_file(const char *path, char *buffer, size_t capacity) {
    long fd;
    do {
        // O_NONBLOCK: a FIFO where a file is expected must not hang the probe on open.
        fd = raw_syscall4(SYS_openat, AT_FDCWD, (long)path, O_RDONLY | O_CLOEXEC | O_NONBLOCK, 0);
    } while (fd == -EINTR);
    if (fd < 0) return fd;
    size_t total = 0;
    while (total < capacity) {
        long count = raw_syscall3(SYS_read, fd, (long)(buffer + total), (long)(capacity - total));
        if (count == -EINTR) continue;
        if (count < 0) {
            raw_syscall3(SYS_close, fd, 0, 0);
            return count;
        }
        if (count == 0) break;
        total += (size_t)count;
    }
    raw_syscall3(SYS_close, fd, 0, 0);
    return (ssize_t)total;
}

const void *fingerly_loader_breakpoint_address(void) {
    return (const void *)_r_debug.r_brk;
}

const void *fingerly_shim_entry(void) {
    return (const void *)&fingerly_raw_read_file;
}


static int list_object(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    struct text_out *listing = data;
    const ElfW(Dyn) *dynamic = NULL;
    for (int index = 0; index < info->dlpi_phnum; index++) {
        if (info->dlpi_phdr[index].p_type == PT_DYNAMIC) {
            dynamic = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[index].p_vaddr);
        }
    }
    const char *strings = NULL;
    const char *soname = "";
    if (dynamic) {
        for (const ElfW(Dyn) *entry = dynamic; entry->d_tag != DT_NULL; entry++) {
            // glibc relocates DT_STRTAB to an absolute address; the vDSO leaves it relative.
            if (entry->d_tag == DT_STRTAB) {
                strings = (const char *)entry->d_un.d_ptr;
                if ((ElfW(Addr))strings < info->dlpi_addr) strings += info->dlpi_addr;
            }
        }
        for (const ElfW(Dyn) *entry = dynamic; strings && entry->d_tag != DT_NULL; entry++) {
            if (entry->d_tag == DT_SONAME) soname = strings + entry->d_un.d_val;
        }
    }
    put(listing, "O\t");
    put(listing, info->dlpi_name && info->dlpi_name[0] ? info->dlpi_name : "[main]");
    put(listing, "\t");
    put(listing, soname);
    put(listing, "\n");
    for (const ElfW(Dyn) *entry = dynamic; dynamic && strings && entry->d_tag != DT_NULL; entry++) {
        if (entry->d_tag == DT_NEEDED) {
            put(listing, "N\t");
            put(listing, strings + entry->d_un.d_val);
            put(listing, "\n");
        }
    }
    return 0;
}

size_t fingerly_loaded_objects(char *buffer, size_t capacity) {
    if (capacity == 0) return 0;
    struct text_out listing = {buffer, capacity, 0};
    buffer[0] = 0;
    dl_iterate_phdr(list_object, &listing);
    return listing.length;
}

static void copy_path(const void *address, char *out, size_t capacity) {
    Dl_info info;
    if (capacity == 0) return;
    out[0] = 0;
    if (address && dladdr(address, &info) && info.dli_fname) {
        strncpy(out, info.dli_fname, capacity - 1);
        out[capacity - 1] = 0;
    }
}

int fingerly_symbol_origin(const char *symbol, const char *library, const void **global_address,
                           char *global_path, size_t global_capacity, char *library_path, size_t library_capacity) {
    void *handle = dlopen(library, RTLD_LAZY | RTLD_NOLOAD);
    if (!handle) return -1;
    void *inside = dlsym(handle, symbol);
    void *global = dlsym(RTLD_DEFAULT, symbol);
    dlclose(handle);
    if (!inside) return -1;
    *global_address = global;
    if (global == inside) return 1;
    // dladdr walks symbol tables: only pay for it when there is someone to name.
    copy_path(global, global_path, global_capacity);
    copy_path(inside, library_path, library_capacity);
    return 0;
}

int fingerly_compare_code_with_file(const void *address, unsigned char *memory, unsigned char *disk, size_t count,
                                    char *path, size_t path_capacity) {
    Dl_info info;
    if (!address || !dladdr(address, &info) || !info.dli_fname || !info.dli_fbase) return -1;
    const char *file = info.dli_fname;
    // For the main program dladdr names argv[0], which may be a relative path or another file
    // of the same name: the kernel's /proc/self/exe is the file really mapped.
    Dl_info program;
    const void *program_headers = (const void *)getauxval(AT_PHDR);
    if (!file[0] || (program_headers && dladdr(program_headers, &program) && program.dli_fbase == info.dli_fbase)) {
        file = "/proc/self/exe";
    }
    copy_path(address, path, path_capacity);
    if (path_capacity && !path[0]) {
        strncpy(path, file, path_capacity - 1);
        path[path_capacity - 1] = 0;
    }
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

int fingerly_permanent_mac(const char *interface, unsigned char *out) {
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct {
        struct ethtool_perm_addr header;
        unsigned char bytes[32];
    } request;
    memset(&request, 0, sizeof request);
    request.header.cmd = ETHTOOL_GPERMADDR;
    request.header.size = sizeof request.bytes;
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    strncpy(ifr.ifr_name, interface, IFNAMSIZ - 1);
    ifr.ifr_data = (void *)&request;
    int result = ioctl(fd, SIOCETHTOOL, &ifr);
    close(fd);
    if (result < 0 || request.header.size != 6) return -1;
    memcpy(out, request.header.data, 6);
    return 0;
}
