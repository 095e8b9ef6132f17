/*
 * fingerly.h: the C API of libfingerly.so.0 (Fingerly for Linux).
 *
 * Results cross as the library's own JSON encoding (the bytes `fingerly-identify --json`
 * prints), so no struct layout beyond fingerly_error is part of the ABI.
 *
 * Every function returns 0 on success or the negated error kind (-FINGERLY_ERROR_…), and
 * fills *err when err is not NULL. Nothing aborts the host process on a bad argument.
 *
 * Threads: the blocking calls may be made from any thread, several at once on one handle.
 * fingerly_close stops new calls on the handle (they fail with FINGERLY_ERROR_CONFIGURATION);
 * calls already running, and asynchronous calls until their callback has returned, finish.
 *
 * Link with: cc prog.c $(pkg-config --cflags --libs fingerly)
 */
#ifndef FINGERLY_H
#define FINGERLY_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* fingerly_error.kind */
#define FINGERLY_ERROR_CONSENT 1       /* consent is not granted: nothing was read or sent */
#define FINGERLY_ERROR_TRANSPORT 2     /* the report was not delivered; status is the HTTP status or 0 */
#define FINGERLY_ERROR_CONFIGURATION 3 /* a bad argument: config JSON, NULL pointer, unknown consent… */
#define FINGERLY_ERROR_INTERNAL 4      /* anything else */

/* tiers arguments: a bit set; 0 runs the tiers of the configuration's schedule */
#define FINGERLY_TIER_FAST 1u
#define FINGERLY_TIER_DEFERRED 2u

typedef struct fingerly fingerly;

typedef struct fingerly_error {
    int kind;          /* 0 or FINGERLY_ERROR_… */
    int status;        /* the HTTP status of a transport error a server answered, else 0 */
    bool retryable;    /* the report was queued and fingerly_flush may deliver it */
    char message[256]; /* for people; always NUL-terminated, UTF-8, possibly truncated */
} fingerly_error;

/*
 * config_json: the options of Fingerly.load, every member optional, unknown members refused:
 *   {"apiKey": "fly_pk_…" | null, "endpoint": "https://…", "consent": "granted"|"pending"|"denied",
 *    "schedule": {"budgetMs": 1200, "concurrency": 4, "defaultSourceTimeoutMs": 250,
 *                 "sourceTimeoutOverrideMs": null, "tiers": ["fast", "deferred"]},
 *    "stateDirectory": "/var/lib/app/fingerly", "ignore": ["network.*"], "root": "/",
 *    "policyPath": "/etc/app/policy.json",
 *    "submission": {"attempts": 3, "deadlineMs": 20000, "attemptTimeoutMs": 10000,
 *                   "caFile": "/etc/app/ca.pem", "pins": [], "localResultOnFailure": false}}
 * NULL or "" is {}. On success *out is a handle for fingerly_close. A stateDirectory that cannot be used
 * (it is made when missing) and, with consent granted, a root that is not a directory are refused, as
 * fingerly-identify refuses them. A configuration error's message starts with the member at fault
 * ("schedule.tiers: unknown tier 'slow'; use fast or deferred"), or with "config:" for the document.
 */
int fingerly_load(const char *config_json, fingerly **out, fingerly_error *err);
/* Releases the handle; NULL or a handle already closed is ignored. */
void fingerly_close(fingerly *handle);

/* Collects, judges and (when submit) submits. *result_json: an IdentifyResult, free with fingerly_free. */
int fingerly_identify(fingerly *handle, const char *tag, unsigned tiers, bool submit,
                      char **result_json, fingerly_error *err);
/* Collects only. *report_json: a SignalReport, free with fingerly_free. tag may be NULL. */
int fingerly_collect(fingerly *handle, const char *tag, unsigned tiers, char **report_json, fingerly_error *err);
/* The runtime integrity verdicts. *result_json: an IntegrityResult; tiers 0 is the fast tier. */
int fingerly_check_integrity(fingerly *handle, unsigned tiers, char **result_json, fingerly_error *err);
/* consent: "granted", "pending" or "denied"; persisted in the state directory when one is set. */
int fingerly_set_consent(fingerly *handle, const char *consent, fingerly_error *err);
/* Sends queued reports. *result_json (may be NULL to ignore it): a FlushResult. */
int fingerly_flush(fingerly *handle, char **result_json, fingerly_error *err);
/* Forgets this installation's identity (secret, device key, queued reports). */
int fingerly_clear_device_identity(fingerly *handle, fingerly_error *err);

/* Frees a string the library returned; NULL is ignored. */
void fingerly_free(char *text);
/* The library's version, a static string ("0.1.0"). */
const char *fingerly_version(void);

/*
 * Called once, on a thread of the library, when an asynchronous call ends. result_json and
 * err are valid only during the call (copy what you keep); result_json is NULL on failure.
 */
typedef void (*fingerly_callback)(int result, const char *result_json, const fingerly_error *err, void *user);
/* fingerly_identify without blocking; returns 0 when the call was started (callback follows). */
int fingerly_identify_async(fingerly *handle, const char *tag, unsigned tiers, bool submit,
                            fingerly_callback callback, void *user, fingerly_error *err);

#ifdef __cplusplus
}
#endif

#endif
