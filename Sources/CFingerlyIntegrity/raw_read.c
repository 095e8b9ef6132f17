#include "fingerly_integrity.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

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

const void *fingerly_shim_entry(void) {
    return (const void *)&fingerly_raw_read_file;
}
