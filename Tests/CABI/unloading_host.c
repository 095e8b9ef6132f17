/*
 * A host process for CABITests.aHostThatUnloadsTheLibraryKeepsRunning: a plugin host that opens
 * libfingerly.so.0 with dlopen, checks its integrity, closes the handle and dlcloses the library,
 * then goes on running past the time the library's threads wait for more work.
 *   unloading_host LIBRARY STATE_DIR SECONDS
 * Exits 0 once SECONDS have passed; a crash in unmapped library code ends it by its signal.
 */
#include <fingerly.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s LIBRARY STATE_DIR SECONDS\n", argv[0]);
        return 64;
    }
    void *library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!library) {
        fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
        return 1;
    }
    __typeof__(fingerly_load) *load = (__typeof__(fingerly_load) *)dlsym(library, "fingerly_load");
    __typeof__(fingerly_check_integrity) *check =
        (__typeof__(fingerly_check_integrity) *)dlsym(library, "fingerly_check_integrity");
    __typeof__(fingerly_free) *release = (__typeof__(fingerly_free) *)dlsym(library, "fingerly_free");
    __typeof__(fingerly_close) *close_handle = (__typeof__(fingerly_close) *)dlsym(library, "fingerly_close");
    if (!load || !check || !release || !close_handle) {
        fprintf(stderr, "dlsym: %s\n", dlerror());
        return 1;
    }
    char config[4096];
    snprintf(config, sizeof config,
             "{\"apiKey\":null,\"consent\":\"granted\",\"stateDirectory\":\"%s\"}", argv[2]);
    fingerly_error err = {0};
    fingerly *here = NULL;
    if (load(config, &here, &err) != 0) {
        fprintf(stderr, "fingerly_load: %s\n", err.message);
        return 1;
    }
    char *result = NULL;
    int rc = check(here, FINGERLY_TIER_FAST, &result, &err);
    release(result);
    close_handle(here);
    if (rc != 0) {
        fprintf(stderr, "fingerly_check_integrity: %s\n", err.message);
        return 1;
    }
    if (dlclose(library) != 0) {
        fprintf(stderr, "dlclose: %s\n", dlerror());
        return 1;
    }
    sleep((unsigned)atoi(argv[3]));
    puts("still running");
    return 0;
}
