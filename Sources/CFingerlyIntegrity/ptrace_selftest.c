#define _GNU_SOURCE
#include "fingerly_integrity.h"
#include "raw_syscall.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

// The value of one "Name:" line of /proc/self/status is exactly "0".
static bool status_is_zero(const char *status, const char *name) {
    const char *line = strstr(status, name);
    if (!line) return false;
    line += strlen(name);
    while (*line == ' ' || *line == '\t') line++;
    return line[0] == '0' && (line[1] == '\n' || line[1] == '\0');
}

// Whether /proc/self/status names no tracer and no seccomp filter. Anything unclear (unreadable, no such line)
// counts as no. Under a filter the fork of old: one that traps clone with SIGSYS would meet it blocked below, and a
// blocked SIGSYS kills the process.
static bool untraced_and_unfiltered(void) {
    char status[8192];
    // This thread's: a tracer may hold one thread and not the group's leader, whose line /proc/self shows.
    ssize_t length = fingerly_raw_read_file("/proc/thread-self/status", status, sizeof status - 1);
    if (length <= 0) length = fingerly_raw_read_file("/proc/self/status", status, sizeof status - 1);
    if (length <= 0) return false;
    status[length] = '\0';
    return status_is_zero(status, "\nTracerPid:") && status_is_zero(status, "\nSeccomp:");
}

// The child shares the parent's memory (CLONE_VM): raw system calls only, no errno, on a stack of its own.
static int traceme_child(void *unused) {
    (void)unused;
    long result = raw_syscall4(SYS_ptrace, PTRACE_TRACEME, 0, 0, 0);
    return result == 0 ? 0 : (int)(-result & 0x7f);
}

enum { child_stack_size = 64 * 1024 };

int fingerly_traceme_selftest(void) {
    pid_t child = -1;
    // Untraced, the child runs in this address space (posix_spawn's flags, which valgrind and every sandbox accept):
    // fork copies the page tables, and every page this process writes afterwards faults once to be its own again,
    // most of the deferred tier's system time. Under a tracer a copy, as before: ltrace, whose breakpoints sit in the
    // memory a CLONE_VM child shares, hangs on one.
    char *stack = untraced_and_unfiltered() ? malloc(child_stack_size) : NULL;
    if (stack) {
        // Every signal blocked while the child lives, as posix_spawn does, with the system call itself: glibc's
        // sigfillset leaves out the two it keeps for itself. The host program's handlers, inherited, must never run in
        // a child on this memory; what is pending reaches this thread when the mask is restored.
        uint64_t all = ~(uint64_t)0, previous = 0;
        if (raw_syscall4(SYS_rt_sigprocmask, SIG_SETMASK, (long)&all, (long)&previous, sizeof all) == 0) {
            child = clone(traceme_child, stack + child_stack_size, CLONE_VM | CLONE_VFORK | SIGCHLD, NULL);
            int saved = errno;
            raw_syscall4(SYS_rt_sigprocmask, SIG_SETMASK, (long)&previous, 0, sizeof previous);
            errno = saved;
        }
        // CLONE_VFORK: clone returns once the child has exited or failed to start, off this stack either way.
        free(stack);
    }
    if (child < 0) {
        child = fork();
        if (child == 0) {
            // Only async-signal-safe calls between fork and _exit.
            long result = ptrace(PTRACE_TRACEME, 0, NULL, NULL);
            _exit(result == 0 ? 0 : (errno & 0x7f));
        }
    }
    if (child < 0) return -1;
    int status = 0;
    while (waitpid(child, &status, 0) < 0) {
        if (errno != EINTR) return -1;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}
