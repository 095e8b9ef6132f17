// libssl is opened on the first TLS call, not by the loader at start: only the pin check speaks TLS
// itself (libcurl brings its own), and its relocations cost every start. These definitions stand in
// for the library's, under its names, hidden, so they interpose on nothing of the host's. libssl's own
// libcrypto is the one crypto_loader.c opens: the loader maps a soname once.
#include "fingerly_lazy_library.h"
#include <pthread.h>
#include <stdatomic.h>

// libc's declarations first: under the pragma only the library's, whose definitions here are hidden.
#pragma GCC visibility push(hidden)
#include <openssl/ssl.h>
#pragma GCC visibility pop

#include "fingerly_tls.h"
#include "ssl_loader.h"

#define FINGERLY_SSL_SONAME "libssl.so.3"

// Each function that returns a value once: result type, name, parameters, arguments, and its answer
// when the library cannot be loaded, which every caller already takes as a failed handshake.
#define FINGERLY_SSL_FUNCTIONS(F) \
    F(SSL_CTX *, SSL_CTX_new, (const SSL_METHOD *method), (method), NULL) \
    F(int, SSL_connect, (SSL *ssl), (ssl), -1) \
    F(long, SSL_ctrl, (SSL *ssl, int command, long number, void *pointer), (ssl, command, number, pointer), 0) \
    F(X509 *, SSL_get0_peer_certificate, (const SSL *ssl), (ssl), NULL) \
    F(int, SSL_get_error, (const SSL *ssl, int result), (ssl, result), SSL_ERROR_SSL) \
    F(STACK_OF(X509) *, SSL_get_peer_cert_chain, (const SSL *ssl), (ssl), NULL) \
    F(SSL *, SSL_new, (SSL_CTX *context), (context), NULL) \
    F(int, SSL_set_fd, (SSL *ssl, int fd), (ssl, fd), 0) \
    F(const SSL_METHOD *, TLS_client_method, (void), (), NULL)
// And those that return nothing.
#define FINGERLY_SSL_PROCEDURES(F) \
    F(SSL_CTX_free, (SSL_CTX *context), (context)) \
    F(SSL_free, (SSL *ssl), (ssl)) \
    F(SSL_set_verify, (SSL *ssl, int mode, SSL_verify_cb callback), (ssl, mode, callback))

#define FINGERLY_SSL_SLOT(result, name, parameters, arguments, fallback) result (*name) parameters;
#define FINGERLY_SSL_PROCEDURE_SLOT(name, parameters, arguments) void (*name) parameters;

// Written once, under loadOnce, before `ready` is released.
static struct {
    FINGERLY_SSL_FUNCTIONS(FINGERLY_SSL_SLOT)
    FINGERLY_SSL_PROCEDURES(FINGERLY_SSL_PROCEDURE_SLOT)
} libssl;

static pthread_once_t loadOnce = PTHREAD_ONCE_INIT;
static char loadProblem[512] = FINGERLY_SSL_SONAME " could not be loaded: pthread_once failed";
static atomic_bool ready;

static void load(void) {
    // libcrypto first, so that it starts as crypto_loader.c says (no openssl.cnf, no atexit cleanup),
    // not as libssl's first call would start it. Without it libssl's own opening fails, and says why.
    (void)fingerly_crypto_problem();
#define FINGERLY_SSL_ENTRY(result, name, parameters, arguments, fallback) {#name, (void **)&libssl.name},
#define FINGERLY_SSL_PROCEDURE_ENTRY(name, parameters, arguments) {#name, (void **)&libssl.name},
    struct fingerly_lazy_function const functions[] = {
        FINGERLY_SSL_FUNCTIONS(FINGERLY_SSL_ENTRY)
        FINGERLY_SSL_PROCEDURES(FINGERLY_SSL_PROCEDURE_ENTRY)
    };
    size_t count = sizeof functions / sizeof functions[0];
    if (fingerly_lazy_library_open(FINGERLY_SSL_SONAME, functions, count, loadProblem, sizeof loadProblem)) {
        atomic_store_explicit(&ready, 1, memory_order_release);
    }
}

static _Bool loaded(void) {
    if (atomic_load_explicit(&ready, memory_order_acquire)) return 1;
    if (pthread_once(&loadOnce, load) != 0) return 0;
    return atomic_load_explicit(&ready, memory_order_acquire);
}

const char *fingerly_ssl_problem(void) {
    return loaded() ? NULL : loadProblem;
}

#define FINGERLY_SSL_STUB(result, name, parameters, arguments, fallback) \
    __attribute__((visibility("hidden"))) result name parameters { \
        return loaded() ? libssl.name arguments : fallback; \
    }
#define FINGERLY_SSL_PROCEDURE_STUB(name, parameters, arguments) \
    __attribute__((visibility("hidden"))) void name parameters { \
        if (loaded()) libssl.name arguments; \
    }
FINGERLY_SSL_FUNCTIONS(FINGERLY_SSL_STUB)
FINGERLY_SSL_PROCEDURES(FINGERLY_SSL_PROCEDURE_STUB)
