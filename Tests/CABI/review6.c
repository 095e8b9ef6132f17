/*
 * A hostile C caller of libfingerly.so.0, for Tests/FingerlyTests/Review6CABITests.swift. One JSON
 * line per outcome on stdout:
 *   {"case":…,"rc":…,"kind":…,"length":…,"validUTF8":…,"terminated":…,"message":…}
 * The message is emitted only when it is valid UTF-8 (else ""), so the test can always decode the line.
 *   review6 layout             offsets of fingerly_error as this compiler lays it out
 *   review6 truncation         error messages pushed past 255 bytes with multibyte text at the cut
 *   review6 configs            deep nesting, huge numbers, wrong types, duplicates, NUL escapes
 *   review6 closed             a handle used after fingerly_close, and closed twice
 *   review6 race N ROOT        N threads identifying while another thread closes the handle
 *   review6 fork ROOT          calls in a child of fork() after the parent used the library
 */
#include <fingerly.h>
#include "json_output.h"
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

_Static_assert(sizeof(fingerly_error) == 268, "fingerly_error is 268 bytes on this ABI");

static pthread_mutex_t output_lock = PTHREAD_MUTEX_INITIALIZER;

static int valid_utf8(const unsigned char *text, size_t length) {
    size_t i = 0;
    while (i < length) {
        unsigned char c = text[i];
        size_t extra;
        unsigned int scalar;
        if (c < 0x80) { i++; continue; }
        else if ((c & 0xE0) == 0xC0) { extra = 1; scalar = c & 0x1F; }
        else if ((c & 0xF0) == 0xE0) { extra = 2; scalar = c & 0x0F; }
        else if ((c & 0xF8) == 0xF0) { extra = 3; scalar = c & 0x07; }
        else return 0;
        if (i + extra >= length) return 0;
        for (size_t k = 1; k <= extra; k++) {
            if ((text[i + k] & 0xC0) != 0x80) return 0;
            scalar = (scalar << 6) | (text[i + k] & 0x3F);
        }
        if ((extra == 1 && scalar < 0x80) || (extra == 2 && scalar < 0x800) || (extra == 3 && scalar < 0x10000)) return 0;
        if (scalar > 0x10FFFF || (scalar >= 0xD800 && scalar <= 0xDFFF)) return 0;
        i += extra + 1;
    }
    return 1;
}

static void report(const char *name, int rc, const fingerly_error *err) {
    pthread_mutex_lock(&output_lock);
    const char *end = memchr(err->message, 0, sizeof err->message);
    size_t length = end ? (size_t)(end - err->message) : sizeof err->message;
    int valid = valid_utf8((const unsigned char *)err->message, length);
    printf("{\"case\":");
    put_json_string(name);
    printf(",\"rc\":%d,\"kind\":%d,\"length\":%zu,\"validUTF8\":%s,\"terminated\":%s,\"message\":", rc, err->kind, length,
           valid ? "true" : "false", end ? "true" : "false");
    put_json_string(valid && end ? err->message : "");
    printf("}\n");
    fflush(stdout);
    pthread_mutex_unlock(&output_lock);
}

static int layout(void) {
    printf("{\"kind\":%zu,\"status\":%zu,\"retryable\":%zu,\"message\":%zu,\"size\":%zu,\"alignment\":%zu}\n",
           offsetof(fingerly_error, kind), offsetof(fingerly_error, status), offsetof(fingerly_error, retryable),
           offsetof(fingerly_error, message), sizeof(fingerly_error), _Alignof(fingerly_error));
    return 0;
}

/* Unknown member names of 40 bytes each (the library's per-name bound), made of "€" (3 bytes) after
   `pad` ASCII letters, so the 255-byte cut falls at each offset inside a character. */
static int truncation(void) {
    for (int pad = 0; pad < 12; pad++) {
        char config[2048];
        size_t at = 0;
        at += (size_t)snprintf(config + at, sizeof config - at, "{");
        for (int member = 0; member < 4; member++) {
            at += (size_t)snprintf(config + at, sizeof config - at, "%s\"%.*s", member ? "," : "", pad, "aaaaaaaaaaaaaaaaaaaa");
            for (int euro = 0; euro < 13; euro++) at += (size_t)snprintf(config + at, sizeof config - at, "\xe2\x82\xac");
            at += (size_t)snprintf(config + at, sizeof config - at, "%d\":1", member);
        }
        snprintf(config + at, sizeof config - at, "}");
        fingerly *handle = NULL;
        fingerly_error err;
        memset(&err, 0x41, sizeof err);
        int rc = fingerly_load(config, &handle, &err);
        char name[32];
        snprintf(name, sizeof name, "pad-%d", pad);
        report(name, rc, &err);
        fingerly_close(handle);
    }
    return 0;
}

static void try_load(const char *name, const char *config) {
    fingerly *handle = NULL;
    fingerly_error err;
    int rc = fingerly_load(config, &handle, &err);
    if (rc == 0) {
        /* Loaded: the options must also survive a call. */
        char *result = NULL;
        rc = fingerly_identify(handle, name, FINGERLY_TIER_FAST, false, &result, &err);
        fingerly_free(result);
        fingerly_close(handle);
    }
    report(name, rc, &err);
}

static char *nested(const char *prefix, int depth, const char *suffix) {
    size_t length = strlen(prefix) + (size_t)depth * 2 + strlen(suffix) + 1;
    char *text = malloc(length);
    char *at = text;
    at += sprintf(at, "%s", prefix);
    for (int i = 0; i < depth; i++) *at++ = '[';
    for (int i = 0; i < depth; i++) *at++ = ']';
    sprintf(at, "%s", suffix);
    return text;
}

static void *load_on_small_stack(void *config) {
    try_load("deep nesting on a 256 KiB thread", config);
    return NULL;
}

static int configs(const char *root) {
    char config[4096];
    char *deep = nested("{\"ignore\":", 100000, "}");
    try_load("deep nesting", deep);
    pthread_attr_t attributes;
    pthread_attr_init(&attributes);
    pthread_attr_setstacksize(&attributes, 256 * 1024);
    pthread_t thread;
    pthread_create(&thread, &attributes, load_on_small_stack, deep);
    pthread_join(thread, NULL);
    free(deep);

    static const char *integer_members[] = {"schedule\":{\"budgetMs", "schedule\":{\"concurrency", "schedule\":{\"defaultSourceTimeoutMs",
                                            "schedule\":{\"sourceTimeoutOverrideMs", "submission\":{\"attempts",
                                            "submission\":{\"deadlineMs", "submission\":{\"attemptTimeoutMs"};
    static const char *numbers[] = {"9007199254740992", "-9007199254740992", "0", "1e308", "-0"};
    for (size_t member = 0; member < sizeof integer_members / sizeof *integer_members; member++) {
        for (size_t number = 0; number < sizeof numbers / sizeof *numbers; number++) {
            char name[128];
            snprintf(name, sizeof name, "%s=%s", strstr(integer_members[member], "{\"") + 2, numbers[number]);
            snprintf(config, sizeof config, "{\"root\":\"%s\",\"%s\":%s}}", root, integer_members[member], numbers[number]);
            try_load(name, config);
        }
    }
    try_load("apiKey a number", "{\"apiKey\":5}");
    try_load("tiers a string", "{\"schedule\":{\"tiers\":\"fast\"}}");
    try_load("unknown tier", "{\"schedule\":{\"tiers\":[\"slow\"]}}");
    try_load("ignore an object", "{\"ignore\":{}}");
    try_load("config an array", "[]");
    try_load("config a string", "\"{}\"");
    try_load("trailing garbage", "{} {}");
    snprintf(config, sizeof config, "{\"root\":\"%s\",\"consent\":\"denied\",\"consent\":\"granted\"}", root);
    try_load("duplicate consent", config);
    snprintf(config, sizeof config, "{\"root\":\"%s\\u0000/etc\"}", root);
    try_load("NUL inside root", config);
    try_load("lone surrogate", "{\"apiKey\":\"\\ud800\"}");
    return 0;
}

static int closed(void) {
    fingerly *handle = NULL;
    fingerly_error err;
    int rc = fingerly_load("{\"schedule\":{\"tiers\":[\"fast\"]}}", &handle, &err);
    report("load", rc, &err);
    fingerly_close(handle);
    char *result = NULL;
    rc = fingerly_identify(handle, NULL, 0, false, &result, &err);
    fingerly_free(result);
    report("identify after close", rc, &err);
    rc = fingerly_set_consent(handle, "denied", &err);
    report("set consent after close", rc, &err);
    rc = fingerly_identify_async(handle, NULL, 0, false, NULL, NULL, &err);
    report("async without a callback after close", rc, &err);
    fingerly_close(handle);
    report("closed twice", 0, &(fingerly_error){0});
    return 0;
}

struct racer {
    fingerly *handle;
    int index;
};

static void *identify_racing(void *argument) {
    struct racer *racer = argument;
    for (int call = 0; call < 3; call++) {
        fingerly_error err;
        char *result = NULL;
        int rc = fingerly_identify(racer->handle, "race", FINGERLY_TIER_FAST, false, &result, &err);
        fingerly_free(result);
        /* A call that started before the close succeeds; one after it is refused. Either is fine. */
        if (rc != 0 && rc != -FINGERLY_ERROR_CONFIGURATION) report("race: unexpected result", rc, &err);
    }
    return NULL;
}

static int race(int count, const char *root) {
    char config[4096];
    snprintf(config, sizeof config, "{\"root\":\"%s\",\"schedule\":{\"tiers\":[\"fast\"]}}", root);
    fingerly *handle = NULL;
    fingerly_error err;
    if (fingerly_load(config, &handle, &err) != 0) { report("load", -1, &err); return 1; }
    pthread_t ids[64];
    struct racer racers[64];
    if (count > 64) count = 64;
    for (int i = 0; i < count; i++) {
        racers[i] = (struct racer){handle, i};
        pthread_create(&ids[i], NULL, identify_racing, &racers[i]);
    }
    fingerly_close(handle);
    for (int i = 0; i < count; i++) pthread_join(ids[i], NULL);
    report("race ended", 0, &(fingerly_error){0});
    return 0;
}

/* The child reports through the shared stdout; alarm() only ends a child that would hang. */
static int forked(const char *root) {
    char config[4096];
    snprintf(config, sizeof config, "{\"root\":\"%s\",\"schedule\":{\"tiers\":[\"fast\"]}}", root);
    fingerly *handle = NULL;
    fingerly_error err;
    char *result = NULL;
    int rc = fingerly_load(config, &handle, &err);
    if (rc == 0) rc = fingerly_identify(handle, "parent", 0, false, &result, &err);
    fingerly_free(result);
    report("parent", rc, &err);
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        alarm(60);
        result = NULL;
        rc = fingerly_identify(handle, "child", 0, false, &result, &err);
        fingerly_free(result);
        report("child identify", rc, &err);
        fingerly *fresh = NULL;
        rc = fingerly_load(config, &fresh, &err);
        report("child load", rc, &err);
        fflush(stdout);
        _exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    fingerly_error none = {0};
    report(WIFEXITED(status) && WEXITSTATUS(status) == 0 ? "child exited" : "child killed", 0, &none);
    fingerly_close(handle);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 3 && strcmp(argv[1], "fork") == 0) return forked(argv[2]);
    if (argc >= 2 && strcmp(argv[1], "layout") == 0) return layout();
    if (argc >= 2 && strcmp(argv[1], "truncation") == 0) return truncation();
    if (argc >= 3 && strcmp(argv[1], "configs") == 0) return configs(argv[2]);
    if (argc >= 2 && strcmp(argv[1], "closed") == 0) return closed();
    if (argc >= 4 && strcmp(argv[1], "race") == 0) return race(atoi(argv[2]), argv[3]);
    fprintf(stderr, "usage: review6 layout | truncation | configs ROOT | closed | race N ROOT | fork ROOT\n");
    return 64;
}
