#include "fingerly_curl.h"

#include "fingerly_lazy_library.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

// Written once, under loadOnce, before `ready` is released; read only by a wrapper that acquired it,
// so a wrapper called by a thread that never went through fingerly_curl_load fails instead of racing.
static struct {
    CURLcode (*global_init)(long flags);
    CURL *(*easy_init)(void);
    void (*easy_cleanup)(CURL *handle);
    CURLcode (*easy_perform)(CURL *handle);
    const char *(*easy_strerror)(CURLcode code);
    CURLcode (*easy_setopt)(CURL *handle, CURLoption option, ...);
    CURLcode (*easy_getinfo)(CURL *handle, CURLINFO info, ...);
    struct curl_slist *(*slist_append)(struct curl_slist *list, const char *line);
    void (*slist_free_all)(struct curl_slist *list);
} curl;

static pthread_once_t loadOnce = PTHREAD_ONCE_INIT;
static const char *loadProblem;
static char loadProblemText[512];
static atomic_bool ready;

static const char *describe(const char *what, const char *loaderText) {
    snprintf(loadProblemText, sizeof loadProblemText, "%s %s: %s", FINGERLY_CURL_SONAME, what,
             loaderText ? loaderText : "no reason given");
    return loadProblemText;
}

static void load(void) {
    struct fingerly_lazy_function const functions[] = {
        {"curl_global_init", (void **)&curl.global_init},
        {"curl_easy_init", (void **)&curl.easy_init},
        {"curl_easy_cleanup", (void **)&curl.easy_cleanup},
        {"curl_easy_perform", (void **)&curl.easy_perform},
        {"curl_easy_strerror", (void **)&curl.easy_strerror},
        {"curl_easy_setopt", (void **)&curl.easy_setopt},
        {"curl_easy_getinfo", (void **)&curl.easy_getinfo},
        {"curl_slist_append", (void **)&curl.slist_append},
        {"curl_slist_free_all", (void **)&curl.slist_free_all},
    };
    size_t count = sizeof functions / sizeof functions[0];
    if (!fingerly_lazy_library_open(FINGERLY_CURL_SONAME, functions, count, loadProblemText, sizeof loadProblemText)) {
        loadProblem = loadProblemText;
        return;
    }
    CURLcode initialized = curl.global_init(CURL_GLOBAL_DEFAULT);
    if (initialized != CURLE_OK) {
        loadProblem = describe("could not be initialized", curl.easy_strerror(initialized));
        return;
    }
    atomic_store_explicit(&ready, 1, memory_order_release);
}

static inline _Bool isReady(void) {
    return atomic_load_explicit(&ready, memory_order_acquire);
}

const char *fingerly_curl_load(void) {
    if (pthread_once(&loadOnce, load) != 0) return FINGERLY_CURL_SONAME " could not be loaded: pthread_once failed";
    return isReady() ? NULL : loadProblem;
}

CURL *fingerly_curl_easy_init(void) {
    return isReady() ? curl.easy_init() : NULL;
}

void fingerly_curl_easy_cleanup(CURL *handle) {
    if (isReady()) curl.easy_cleanup(handle);
}

CURLcode fingerly_curl_easy_perform(CURL *handle) {
    return isReady() ? curl.easy_perform(handle) : CURLE_FAILED_INIT;
}

const char *fingerly_curl_easy_strerror(CURLcode code) {
    return isReady() ? curl.easy_strerror(code) : NULL;
}

struct curl_slist *fingerly_curl_slist_append(struct curl_slist *list, const char *line) {
    return isReady() ? curl.slist_append(list, line) : NULL;
}

void fingerly_curl_slist_free_all(struct curl_slist *list) {
    if (isReady()) curl.slist_free_all(list);
}

CURLcode fingerly_curl_setopt_long(CURL *handle, CURLoption option, long value) {
    return isReady() ? curl.easy_setopt(handle, option, value) : CURLE_FAILED_INIT;
}

CURLcode fingerly_curl_setopt_offset(CURL *handle, CURLoption option, curl_off_t value) {
    return isReady() ? curl.easy_setopt(handle, option, value) : CURLE_FAILED_INIT;
}

CURLcode fingerly_curl_setopt_string(CURL *handle, CURLoption option, const char *value) {
    return isReady() ? curl.easy_setopt(handle, option, value) : CURLE_FAILED_INIT;
}

CURLcode fingerly_curl_setopt_pointer(CURL *handle, CURLoption option, void *value) {
    return isReady() ? curl.easy_setopt(handle, option, value) : CURLE_FAILED_INIT;
}

CURLcode fingerly_curl_setopt_write_callback(CURL *handle, CURLoption option, curl_write_callback callback) {
    return isReady() ? curl.easy_setopt(handle, option, callback) : CURLE_FAILED_INIT;
}

CURLcode fingerly_curl_getinfo_long(CURL *handle, CURLINFO info, long *value) {
    return isReady() ? curl.easy_getinfo(handle, info, value) : CURLE_FAILED_INIT;
}
