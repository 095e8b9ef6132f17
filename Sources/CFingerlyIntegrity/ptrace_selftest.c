#include "fingerly_integrity.h"

#include <errno.h>
#include <sys/ptrace.h>
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
