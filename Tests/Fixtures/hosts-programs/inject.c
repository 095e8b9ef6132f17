/*
 * What a debugger-injected agent does, for HostProgramMatrixTests: loaded into a running process
 * with gdb's `call dlopen(…)`, its constructor overwrites the start of libc's connect() with a
 * jump to a function of its own (an inline hook), then makes the page read-only again.
 * The replacement makes the system call itself, so the process keeps working.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

static int hooked_connect(int descriptor, const struct sockaddr *address, socklen_t length) {
    return (int)syscall(SYS_connect, descriptor, address, length);
}

__attribute__((constructor)) static void patch_connect(void) {
    void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
    unsigned char *target = libc ? dlsym(libc, "connect") : NULL;
    if (!target) {
        fprintf(stderr, "inject: no connect in libc\n");
        return;
    }
    /* jmp [rip+0] followed by the absolute address: reaches the hook wherever it was mapped, and
       leaves every register as the caller set it. */
    unsigned char trampoline[14] = {0xFF, 0x25, 0, 0, 0, 0};
    uint64_t destination = (uint64_t)(uintptr_t)hooked_connect;
    memcpy(trampoline + 6, &destination, sizeof destination);

    uintptr_t page_size = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t first_page = (uintptr_t)target & ~(page_size - 1);
    size_t span = ((uintptr_t)target + sizeof trampoline - first_page + page_size - 1) & ~(page_size - 1);
    /* Writable and still executable: another thread may be running code on the same page. */
    if (mprotect((void *)first_page, span, PROT_READ | PROT_WRITE | PROT_EXEC) != 0) {
        perror("inject: mprotect");
        return;
    }
    memcpy(target, trampoline, sizeof trampoline);
    mprotect((void *)first_page, span, PROT_READ | PROT_EXEC);
    fprintf(stderr, "inject: connect at %p now jumps to %p\n", (void *)target, (void *)hooked_connect);
}
