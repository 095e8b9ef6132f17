#ifndef FINGERLY_RAW_SYSCALL_H
#define FINGERLY_RAW_SYSCALL_H

#include <errno.h>
#include <sys/syscall.h>
#include <unistd.h>

/// System calls made with the instruction itself, never through libc: a preloaded or GOT hook on
/// a libc wrapper cannot filter or fake what comes back. Returns the result or -errno.
static inline long raw_syscall4(long number, long a, long b, long c, long d) {
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
static inline long raw_syscall3(long number, long a, long b, long c) {
    return raw_syscall4(number, a, b, c, 0);
}

#endif
