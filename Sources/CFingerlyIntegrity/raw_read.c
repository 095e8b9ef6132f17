#include "fingerly_integrity.h"

#include <fcntl.h>

#include "raw_syscall.h"

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
