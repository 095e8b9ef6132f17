/*
 * Drives libfingerly.so.0 for Tests/FingerlyTests/CABITests.swift. Each outcome is one JSON line
 * on stdout, {"case":…,"rc":…,"kind":…,"status":…,"retryable":…,"message":…,"result":…}, so the
 * test decodes it instead of matching text.
 *   harness errors                 bad config, NULL pointers, bad tiers, bad UTF-8, denied consent
 *   harness submit ENDPOINT KEY    identify with submission (a 401 for an unknown key)
 *   harness threads N ROOT         N threads calling fingerly_identify at once on one handle
 *   harness async N ROOT           N fingerly_identify_async calls, waited for
 *   harness repeat N ROOT          N calls of the whole API, every result freed (for valgrind)
 */
#include <fingerly.h>
#include "json_output.h"
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t output_lock = PTHREAD_MUTEX_INITIALIZER;

/* result: raw JSON from the library, embedded as is. */
static void report(const char *name, int rc, const fingerly_error *err, const char *result) {
    pthread_mutex_lock(&output_lock);
    printf("{\"case\":");
    put_json_string(name);
    printf(",\"rc\":%d,\"kind\":%d,\"status\":%d,\"retryable\":%s,\"terminated\":%s,\"message\":", rc, err->kind, err->status,
           err->retryable ? "true" : "false", memchr(err->message, 0, sizeof err->message) ? "true" : "false");
    put_json_string(err->message);
    printf(",\"result\":%s}\n", result ? result : "null");
    fflush(stdout);
    pthread_mutex_unlock(&output_lock);
}

static char *config_for_root(const char *root, const char *consent) {
    static char config[4096];
    snprintf(config, sizeof config,
             "{\"root\":\"%s\",\"consent\":\"%s\",\"schedule\":{\"tiers\":[\"fast\"],\"budgetMs\":60000,"
             "\"sourceTimeoutOverrideMs\":30000}}", root, consent);
    return config;
}

static int errors(void) {
    fingerly_error err;
    fingerly *handle = NULL;
    char *result = NULL;
    int rc;

    rc = fingerly_load("{\"schedule\": {\"budgetMs\": 800}, \"colour\": \"blue\"}", &handle, &err);
    report("unknown member", rc, &err, NULL);
    rc = fingerly_load("{\"schedule\": ", &handle, &err);
    report("truncated JSON", rc, &err, NULL);
    rc = fingerly_load("{\"schedule\": {\"budgetMs\": -5}}", &handle, &err);
    report("negative budget", rc, &err, NULL);
    rc = fingerly_load("{\"schedule\": {\"budgetMs\": 1e300}}", &handle, &err);
    report("huge budget", rc, &err, NULL);
    rc = fingerly_load("{\"apiKey\": \"fly_sk_us_production_acme_0123456789abcdefABCD\"}", &handle, &err);
    report("secret key", rc, &err, NULL);
    rc = fingerly_load("{}", NULL, &err);
    report("NULL out", rc, &err, NULL);
    rc = fingerly_identify(NULL, NULL, 0, false, &result, &err);
    report("NULL handle", rc, &err, NULL);

    rc = fingerly_load(NULL, &handle, &err);
    report("NULL config loads defaults", rc, &err, NULL);
    rc = fingerly_identify(handle, NULL, 0, false, NULL, &err);
    report("NULL result pointer", rc, &err, NULL);
    rc = fingerly_identify(handle, NULL, 8, false, &result, &err);
    report("unknown tier bit", rc, &err, NULL);
    rc = fingerly_identify(handle, "\xff\xfe", FINGERLY_TIER_FAST, false, &result, &err);
    report("tag not UTF-8", rc, &err, NULL);
    rc = fingerly_set_consent(handle, "maybe", &err);
    report("unknown consent", rc, &err, NULL);
    rc = fingerly_identify(handle, NULL, FINGERLY_TIER_FAST, false, &result, NULL);
    fingerly_error none = {0};
    report("NULL error record", rc, &none, NULL);
    fingerly_free(result);
    result = NULL;
    rc = fingerly_flush(handle, &result, &err);
    report("flush without a key", rc, &err, NULL);
    fingerly_free(result);
    result = NULL;
    rc = fingerly_flush(handle, NULL, &err);
    report("flush ignoring its result", rc, &err, NULL);
    rc = fingerly_clear_device_identity(handle, &err);
    report("clear device identity", rc, &err, NULL);
    rc = fingerly_clear_device_identity(NULL, &err);
    report("clear with a NULL handle", rc, &err, NULL);
    rc = fingerly_set_consent(handle, "denied", &err);
    report("consent denied", rc, &err, NULL);
    rc = fingerly_identify(handle, "after denial", FINGERLY_TIER_FAST, false, &result, &err);
    report("identify while denied", rc, &err, result);
    rc = fingerly_collect(handle, NULL, 0, &result, &err);
    report("collect while denied", rc, &err, result);
    rc = fingerly_check_integrity(handle, 0, &result, &err);
    report("integrity while denied", rc, &err, result);
    fingerly_close(handle);
    fingerly_close(NULL);
    fingerly_free(NULL);
    report("still running", 0, &none, NULL);
    return 0;
}

static int submit(const char *endpoint, const char *key) {
    char config[2048];
    snprintf(config, sizeof config, "{\"apiKey\":\"%s\",\"endpoint\":\"%s\",\"schedule\":{\"tiers\":[\"fast\"]},"
             "\"submission\":{\"attempts\":1}}", key, endpoint);
    fingerly_error err;
    fingerly *handle = NULL;
    int rc = fingerly_load(config, &handle, &err);
    if (rc != 0) { report("load", rc, &err, NULL); return 1; }
    char *result = NULL;
    rc = fingerly_identify(handle, "c-submit", 0, true, &result, &err);
    report("submit", rc, &err, result);
    fingerly_free(result);
    fingerly_close(handle);
    report("still running", 0, &(fingerly_error){0}, NULL);
    return 0;
}

struct worker {
    fingerly *handle;
    char tag[32];
};

static void *identify_on_thread(void *argument) {
    struct worker *worker = argument;
    fingerly_error err;
    char *result = NULL;
    int rc = fingerly_identify(worker->handle, worker->tag, 0, false, &result, &err);
    report(worker->tag, rc, &err, result);
    fingerly_free(result);
    return NULL;
}

static int threads(int count, const char *root) {
    fingerly_error err;
    fingerly *handle = NULL;
    int rc = fingerly_load(config_for_root(root, "granted"), &handle, &err);
    if (rc != 0) { report("load", rc, &err, NULL); return 1; }
    pthread_t ids[64];
    struct worker workers[64];
    if (count > 64) count = 64;
    for (int i = 0; i < count; i++) {
        workers[i].handle = handle;
        snprintf(workers[i].tag, sizeof workers[i].tag, "thread-%d", i);
        pthread_create(&ids[i], NULL, identify_on_thread, &workers[i]);
    }
    for (int i = 0; i < count; i++) pthread_join(ids[i], NULL);
    fingerly_close(handle);
    return 0;
}

static pthread_mutex_t async_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t async_done = PTHREAD_COND_INITIALIZER;
static int async_pending;

static void on_result(int rc, const char *result_json, const fingerly_error *err, void *user) {
    report((const char *)user, rc, err, result_json);
    pthread_mutex_lock(&async_lock);
    async_pending--;
    pthread_cond_signal(&async_done);
    pthread_mutex_unlock(&async_lock);
}

static int asynchronous(int count, const char *root) {
    fingerly_error err;
    fingerly *handle = NULL;
    int rc = fingerly_load(config_for_root(root, "granted"), &handle, &err);
    if (rc != 0) { report("load", rc, &err, NULL); return 1; }
    static char tags[64][32];
    if (count > 64) count = 64;
    async_pending = count;
    for (int i = 0; i < count; i++) {
        snprintf(tags[i], sizeof tags[i], "async-%d", i);
        rc = fingerly_identify_async(handle, tags[i], 0, false, on_result, tags[i], &err);
        if (rc != 0) { report("start", rc, &err, NULL); return 1; }
    }
    /* Closing now is allowed: each call keeps the instance until its callback returns. */
    fingerly_close(handle);
    pthread_mutex_lock(&async_lock);
    while (async_pending > 0) pthread_cond_wait(&async_done, &async_lock);
    pthread_mutex_unlock(&async_lock);
    return 0;
}

/* Every function of the API, results freed; each iteration is ten calls. */
static int repeat(int calls, const char *root) {
    fingerly_error err;
    int made = 0, failed = 0;
    while (made < calls) {
        fingerly *handle = NULL;
        char *result = NULL;
        failed |= fingerly_load(config_for_root(root, "granted"), &handle, &err) != 0;
        failed |= fingerly_identify(handle, "repeat", 0, false, &result, &err) != 0;
        fingerly_free(result);
        failed |= fingerly_collect(handle, NULL, 0, &result, &err) != 0;
        fingerly_free(result);
        failed |= fingerly_check_integrity(handle, 0, &result, &err) != 0;
        fingerly_free(result);
        failed |= fingerly_load("{\"nope\": 1}", &(fingerly *){NULL}, &err) != -FINGERLY_ERROR_CONFIGURATION;
        failed |= fingerly_set_consent(handle, "denied", &err) != 0;
        failed |= fingerly_identify(handle, NULL, 0, false, &result, &err) != -FINGERLY_ERROR_CONSENT;
        failed |= fingerly_flush(handle, &result, &err) != -FINGERLY_ERROR_CONSENT;
        failed |= fingerly_version() == NULL;
        fingerly_close(handle);
        made += 10;
    }
    fingerly_error none = {0};
    report(failed ? "repeat failed" : "repeat", made, &none, NULL);
    return failed;
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "errors") == 0) return errors();
    if (argc >= 4 && strcmp(argv[1], "submit") == 0) return submit(argv[2], argv[3]);
    if (argc >= 4 && strcmp(argv[1], "threads") == 0) return threads(atoi(argv[2]), argv[3]);
    if (argc >= 4 && strcmp(argv[1], "async") == 0) return asynchronous(atoi(argv[2]), argv[3]);
    if (argc >= 4 && strcmp(argv[1], "repeat") == 0) return repeat(atoi(argv[2]), argv[3]);
    fprintf(stderr, "usage: harness errors | submit ENDPOINT KEY | threads N ROOT | async N ROOT | repeat N ROOT\n");
    return 64;
}
