#define _GNU_SOURCE
#include "fingerly_integrity.h"
#include "raw_syscall.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

// Whether /proc/self/status names no tracer. Anything unclear (unreadable, cut, no such line) counts as traced.
static bool untraced(void) {
    char status[4096];
    ssize_t length = fingerly_raw_read_file("/proc/self/status", status, sizeof status - 1);
    if (length <= 0) return false;
    status[length] = '\0';
    const char *line = strstr(status, "\nTracerPid:");
    if (!line) return false;
    line += strlen("\nTracerPid:");
    while (*line == ' ' || *line == '\t') line++;
    return line[0] == '0' && (line[1] == '\n' || line[1] == '\0');
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
    char *stack = NULL;
    // Untraced, the child runs in this address space (posix_spawn's flags, which valgrind and every sandbox accept):
    // fork copies the page tables, and every page this process writes afterwards faults once to be its own again,
    // most of the deferred tier's system time. Under a tracer a copy, as before: ltrace, whose breakpoints sit in the
    // memory a CLONE_VM child shares, hangs on one.
    if (untraced() && (stack = malloc(child_stack_size)) != NULL) {
        // Every signal blocked while the child lives, as posix_spawn does: the host program's handlers, inherited,
        // must never run in a child on this memory. Pending ones reach this thread when the mask is restored.
        sigset_t all, previous;
        sigfillset(&all);
        if (pthread_sigmask(SIG_SETMASK, &all, &previous) == 0) {
            child = clone(traceme_child, stack + child_stack_size, CLONE_VM | CLONE_VFORK | SIGCHLD, NULL);
            int saved = errno;
            pthread_sigmask(SIG_SETMASK, &previous, NULL);
            errno = saved;
        }
    }
    if (child < 0) {
        child = fork();
        if (child == 0) {
            // Only async-signal-safe calls between fork and _exit.
            long result = ptrace(PTRACE_TRACEME, 0, NULL, NULL);
            _exit(result == 0 ? 0 : (errno & 0x7f));
        }
    }
    if (child < 0) {
        int saved = errno;
        free(stack);
        errno = saved;
        return -1;
    }
    int status = 0;
    while (waitpid(child, &status, 0) < 0) {
        // The stack is not freed: a child not reaped may still run on it.
        if (errno != EINTR) return -1;
    }
    free(stack);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}
