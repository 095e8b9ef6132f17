/*
 * A host process for Tests/FingerlyTests/LazyHTTPClientLoadingTests.swift. It opens libfingerly.so.0
 * with dlopen, as an interpreter opens an extension module, and after each call says which libcurl
 * files its own /proc/self/maps holds: a host that never sends must not carry libcurl.
 *   lazy_http_client_host LIBRARY STATE_DIR [ENDPOINT KEY]
 * Steps, in this order, in one process: "start" (nothing called yet), "dry run" (identify, both
 * tiers, not submitting), "integrity", "local" (identify submitting with no key: the local mode,
 * keeping its visitors in STATE_DIR), and with ENDPOINT and KEY "submit" (a real submission).
 * One JSON line per step:
 *   {"step":…,"rc":…,"kind":…,"retryable":…,"message":…,"libcurl":[paths],"result":…}
 */
#include <fingerly.h>
#include "json_output.h"
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every distinct mapped file whose name starts with "libcurl", as a JSON array. */
static void put_mapped_libcurl(void) {
    FILE *maps = fopen("/proc/self/maps", "r");
    putchar('[');
    if (!maps) {
        printf("\"cannot read /proc/self/maps\"]");
        return;
    }
    char line[8192];
    char seen[16][4096];
    int count = 0;
    while (fgets(line, sizeof line, maps)) {
        line[strcspn(line, "\n")] = 0;
        char *path = strchr(line, '/');
        if (!path) continue;
        const char *name = strrchr(path, '/') + 1;
        if (strncmp(name, "libcurl", strlen("libcurl")) != 0) continue;
        int known = 0;
        for (int index = 0; index < count; index++) known |= strcmp(seen[index], path) == 0;
        if (known || count == 16) continue;
        snprintf(seen[count], sizeof seen[count], "%s", path);
        if (count++ > 0) putchar(',');
        put_json_string(path);
    }
    fclose(maps);
    putchar(']');
}

static void report(const char *step, int rc, const fingerly_error *err, const char *result) {
    printf("{\"step\":");
    put_json_string(step);
    printf(",\"rc\":%d,\"kind\":%d,\"retryable\":%s,\"message\":", rc, err->kind, err->retryable ? "true" : "false");
    put_json_string(err->message);
    printf(",\"libcurl\":");
    put_mapped_libcurl();
    printf(",\"result\":%s}\n", result ? result : "null");
    fflush(stdout);
}

int main(int argc, char **argv) {
    if (argc != 3 && argc != 5) {
        fprintf(stderr, "usage: %s LIBRARY STATE_DIR [ENDPOINT KEY]\n", argv[0]);
        return 64;
    }
    void *library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!library) {
        fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
        return 1;
    }
#define RESOLVE(name)                                                      \
    __typeof__(name) *name##_call = (__typeof__(name) *)dlsym(library, #name); \
    if (!name##_call) {                                                    \
        fprintf(stderr, "dlsym %s: %s\n", #name, dlerror());               \
        return 1;                                                          \
    }
    RESOLVE(fingerly_load)
    RESOLVE(fingerly_identify)
    RESOLVE(fingerly_check_integrity)
    RESOLVE(fingerly_free)
    RESOLVE(fingerly_close)

    fingerly_error err = {0};
    report("start", 0, &err, NULL);

    char config[4096];
    snprintf(config, sizeof config,
             "{\"apiKey\":null,\"consent\":\"granted\",\"stateDirectory\":\"%s\","
             "\"schedule\":{\"tiers\":[\"fast\",\"deferred\"],\"budgetMs\":60000}}", argv[2]);
    fingerly *here = NULL;
    int rc = fingerly_load_call(config, &here, &err);
    if (rc != 0) {
        report("load", rc, &err, NULL);
        return 1;
    }
    char *result = NULL;
    rc = fingerly_identify_call(here, "dry-run", FINGERLY_TIER_FAST | FINGERLY_TIER_DEFERRED, false, &result, &err);
    report("dry run", rc, &err, result);
    fingerly_free_call(result);

    result = NULL;
    rc = fingerly_check_integrity_call(here, FINGERLY_TIER_FAST | FINGERLY_TIER_DEFERRED, &result, &err);
    report("integrity", rc, &err, result);
    fingerly_free_call(result);

    result = NULL;
    rc = fingerly_identify_call(here, "local", FINGERLY_TIER_FAST, true, &result, &err);
    report("local", rc, &err, result);
    fingerly_free_call(result);
    fingerly_close_call(here);

    if (argc == 5) {
        snprintf(config, sizeof config,
                 "{\"apiKey\":\"%s\",\"endpoint\":\"%s\",\"consent\":\"granted\",\"stateDirectory\":\"%s\","
                 "\"schedule\":{\"tiers\":[\"fast\"],\"budgetMs\":60000},\"submission\":{\"attempts\":1}}",
                 argv[4], argv[3], argv[2]);
        fingerly *sending = NULL;
        rc = fingerly_load_call(config, &sending, &err);
        if (rc != 0) {
            report("load", rc, &err, NULL);
            return 1;
        }
        result = NULL;
        rc = fingerly_identify_call(sending, "submit", FINGERLY_TIER_FAST, true, &result, &err);
        report("submit", rc, &err, result);
        fingerly_free_call(result);
        fingerly_close_call(sending);
    }
    return 0;
}
