// A hooking library that hides itself: it removes LD_PRELOAD from the environment in its
// constructor, and serves a copy of /proc/self/maps without its own lines to anyone who opens
// the file through libc (open, openat, fopen). Built by the integrity scenario tests.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static const char *marker = "libstealth";

__attribute__((constructor)) static void hide_preload(void) {
    unsetenv("LD_PRELOAD");
}

static int filtered_maps(void) {
    static int (*real_open)(const char *, int, ...);
    if (!real_open) real_open = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, "open");
    int source = real_open("/proc/self/maps", O_RDONLY);
    int copy = memfd_create("maps", 0);
    if (source < 0 || copy < 0) return source;
    FILE *in = fdopen(source, "r");
    char line[4096];
    while (fgets(line, sizeof line, in)) {
        if (!strstr(line, marker)) write(copy, line, strlen(line));
    }
    fclose(in);
    lseek(copy, 0, SEEK_SET);
    return copy;
}

static int is_maps(const char *path) {
    return path && (strcmp(path, "/proc/self/maps") == 0 || strstr(path, "/maps") != NULL);
}

int open(const char *path, int flags, ...) {
    static int (*real_open)(const char *, int, ...);
    if (!real_open) real_open = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, "open");
    if (is_maps(path)) return filtered_maps();
    va_list arguments;
    va_start(arguments, flags);
    int mode = va_arg(arguments, int);
    va_end(arguments);
    return real_open(path, flags, mode);
}

int openat(int directory, const char *path, int flags, ...) {
    static int (*real_openat)(int, const char *, int, ...);
    if (!real_openat) real_openat = (int (*)(int, const char *, int, ...))dlsym(RTLD_NEXT, "openat");
    if (is_maps(path)) return filtered_maps();
    va_list arguments;
    va_start(arguments, flags);
    int mode = va_arg(arguments, int);
    va_end(arguments);
    return real_openat(directory, path, flags, mode);
}

FILE *fopen(const char *path, const char *mode) {
    static FILE *(*real_fopen)(const char *, const char *);
    if (!real_fopen) real_fopen = (FILE * (*)(const char *, const char *))dlsym(RTLD_NEXT, "fopen");
    if (is_maps(path)) return fdopen(filtered_maps(), mode);
    return real_fopen(path, mode);
}
