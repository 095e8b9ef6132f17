/*
 * A host that uses libcurl itself, linked and initialized before libfingerly.so.0 is opened, as a
 * Python host with pycurl does. For Tests/FingerlyTests/LazyHTTPClientLoadingTests.swift.
 *   curl_using_host LIBRARY ENDPOINT KEY STATE_DIR
 * It fetches ENDPOINT/healthz with its own curl, submits a report through the library, fetches
 * again, and prints one line per step: "<step> <outcome>", then "libcurl copies <n>": how many
 * distinct libcurl files its /proc/self/maps holds.
 */
#include <curl/curl.h>
#include <fingerly.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

static size_t discard(char *data, size_t size, size_t count, void *user) {
    (void)data;
    (void)user;
    return size * count;
}

static long fetch_health(const char *endpoint) {
    char url[1024];
    snprintf(url, sizeof url, "%s/healthz", endpoint);
    CURL *handle = curl_easy_init();
    if (!handle) return -1;
    curl_easy_setopt(handle, CURLOPT_URL, url);
    curl_easy_setopt(handle, CURLOPT_WRITEFUNCTION, discard);
    long status = 0;
    if (curl_easy_perform(handle) == CURLE_OK) curl_easy_getinfo(handle, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(handle);
    return status;
}

static int mapped_libcurl_files(void) {
    FILE *maps = fopen("/proc/self/maps", "r");
    if (!maps) return -1;
    char line[8192], last[4096] = "";
    int count = 0;
    while (fgets(line, sizeof line, maps)) {
        line[strcspn(line, "\n")] = 0;
        char *path = strchr(line, '/');
        if (!path || strncmp(strrchr(path, '/') + 1, "libcurl", strlen("libcurl")) != 0) continue;
        // A file's mappings are adjacent in the map: a new name is a new file.
        if (strcmp(last, path) != 0) count++;
        snprintf(last, sizeof last, "%s", path);
    }
    fclose(maps);
    return count;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s LIBRARY ENDPOINT KEY STATE_DIR\n", argv[0]);
        return 64;
    }
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) return 1;
    printf("before %ld\n", fetch_health(argv[2]));

    void *library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!library) {
        fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
        return 1;
    }
    __typeof__(fingerly_load) *load = (__typeof__(fingerly_load) *)dlsym(library, "fingerly_load");
    __typeof__(fingerly_identify) *identify = (__typeof__(fingerly_identify) *)dlsym(library, "fingerly_identify");
    __typeof__(fingerly_free) *release = (__typeof__(fingerly_free) *)dlsym(library, "fingerly_free");
    __typeof__(fingerly_close) *close_handle = (__typeof__(fingerly_close) *)dlsym(library, "fingerly_close");
    if (!load || !identify || !release || !close_handle) {
        fprintf(stderr, "dlsym: %s\n", dlerror());
        return 1;
    }
    char config[4096];
    snprintf(config, sizeof config,
             "{\"apiKey\":\"%s\",\"endpoint\":\"%s\",\"consent\":\"granted\",\"stateDirectory\":\"%s\","
             "\"schedule\":{\"tiers\":[\"fast\"],\"budgetMs\":60000},\"submission\":{\"attempts\":1}}",
             argv[3], argv[2], argv[4]);
    fingerly_error err;
    fingerly *handle = NULL;
    if (load(config, &handle, &err) != 0) {
        fprintf(stderr, "fingerly_load: %s\n", err.message);
        return 1;
    }
    char *result = NULL;
    int rc = identify(handle, "curl-host", FINGERLY_TIER_FAST, true, &result, &err);
    printf("submit %d %s\n", rc, rc == 0 ? "delivered" : err.message);
    release(result);
    close_handle(handle);

    printf("after %ld\n", fetch_health(argv[2]));
    printf("libcurl copies %d\n", mapped_libcurl_files());
    curl_global_cleanup();
    return 0;
}
