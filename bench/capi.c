/* The cost of a call through the C API: bench/capi runs it. */
#include <fingerly.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int ascending(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int calls = argc > 1 ? atoi(argv[1]) : 1000;
    if (calls < 1 || calls > 100000) return 64;
    fingerly *handle = NULL;
    fingerly_error err;
    if (fingerly_load("{}", &handle, &err) != 0) { fprintf(stderr, "load: %s\n", err.message); return 1; }
    double *times = calloc((size_t)calls, sizeof *times);
    const char *names[] = {"fingerly_check_integrity (fast tier)", "fingerly_identify (fast tier, submit false)"};
    for (int which = 0; which < 2; which++) {
        for (int i = 0; i < calls; i++) {
            char *json = NULL;
            double start = now_ms();
            int rc = which == 0 ? fingerly_check_integrity(handle, FINGERLY_TIER_FAST, &json, &err)
                                : fingerly_identify(handle, NULL, FINGERLY_TIER_FAST, false, &json, &err);
            times[i] = now_ms() - start;
            fingerly_free(json);
            if (rc != 0) { fprintf(stderr, "%s: %s\n", names[which], err.message); return 1; }
        }
        qsort(times, (size_t)calls, sizeof *times, ascending);
        printf("%s, %d calls: median %.3f ms\n", names[which], calls, times[calls / 2]);
    }
    free(times);
    fingerly_close(handle);
    return 0;
}
