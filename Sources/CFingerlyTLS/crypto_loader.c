// libcrypto is opened on the first call into it, not by the loader at start: a dry run hashes with the
// SHA-256 of FingerlyHost and needs nothing else of it, and mapping it cost every start 3.4 MiB and 4,200
// relocations. These definitions stand in for the library's, under its names, hidden, so they interpose on
// nothing of a host that has its own libcrypto (Python's ssl module, Ruby's openssl).
#include "fingerly_lazy_library.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

// libc's declarations first: under the pragma only the library's, whose definitions here are hidden.
#pragma GCC visibility push(hidden)
#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#pragma GCC visibility pop

#include "fingerly_tls.h"

#define FINGERLY_CRYPTO_SONAME "libcrypto.so.3"

// Each function that returns a value: result type, name, parameters, arguments, and its answer when the
// library cannot be loaded, the one libcrypto gives for a failed call, which every caller already handles.
// OPENSSL_free and the sk_X509 and *_app_data macros expand to CRYPTO_free, OPENSSL_sk_* and *_ex_data.
#define FINGERLY_CRYPTO_FUNCTIONS(F) \
    F(long, BIO_ctrl, (BIO *bio, int command, long number, void *pointer), (bio, command, number, pointer), 0) \
    F(int, BIO_free, (BIO *bio), (bio), 0) \
    F(BIO *, BIO_new, (const BIO_METHOD *method), (method), NULL) \
    F(BIO *, BIO_new_mem_buf, (const void *buffer, int length), (buffer, length), NULL) \
    F(const BIO_METHOD *, BIO_s_mem, (void), (), NULL) \
    F(unsigned long, ERR_peek_last_error, (void), (), 0) \
    F(int, EVP_Digest, (const void *data, size_t count, unsigned char *digest, unsigned int *size, \
                        const EVP_MD *type, ENGINE *engine), (data, count, digest, size, type, engine), 0) \
    F(int, EVP_DigestSign, (EVP_MD_CTX *context, unsigned char *signature, size_t *length, \
                            const unsigned char *message, size_t count), \
      (context, signature, length, message, count), 0) \
    F(int, EVP_DigestSignInit, (EVP_MD_CTX *context, EVP_PKEY_CTX **key_context, const EVP_MD *type, \
                                ENGINE *engine, EVP_PKEY *key), (context, key_context, type, engine, key), 0) \
    F(int, EVP_DigestVerify, (EVP_MD_CTX *context, const unsigned char *signature, size_t length, \
                              const unsigned char *message, size_t count), \
      (context, signature, length, message, count), 0) \
    F(int, EVP_DigestVerifyInit, (EVP_MD_CTX *context, EVP_PKEY_CTX **key_context, const EVP_MD *type, \
                                  ENGINE *engine, EVP_PKEY *key), (context, key_context, type, engine, key), 0) \
    F(int, EVP_EncodeBlock, (unsigned char *out, const unsigned char *in, int length), (out, in, length), 0) \
    F(EVP_MD_CTX *, EVP_MD_CTX_new, (void), (), NULL) \
    F(EVP_PKEY_CTX *, EVP_PKEY_CTX_new_id, (int id, ENGINE *engine), (id, engine), NULL) \
    F(int, EVP_PKEY_eq, (const EVP_PKEY *a, const EVP_PKEY *b), (a, b), -2) \
    F(int, EVP_PKEY_get_raw_private_key, (const EVP_PKEY *key, unsigned char *seed, size_t *length), \
      (key, seed, length), 0) \
    F(int, EVP_PKEY_get_raw_public_key, (const EVP_PKEY *key, unsigned char *public_key, size_t *length), \
      (key, public_key, length), 0) \
    F(int, EVP_PKEY_keygen, (EVP_PKEY_CTX *context, EVP_PKEY **key), (context, key), 0) \
    F(int, EVP_PKEY_keygen_init, (EVP_PKEY_CTX *context), (context), 0) \
    F(EVP_PKEY *, EVP_PKEY_new_raw_private_key, (int type, ENGINE *engine, const unsigned char *seed, \
                                                 size_t length), (type, engine, seed, length), NULL) \
    F(EVP_PKEY *, EVP_PKEY_new_raw_public_key, (int type, ENGINE *engine, const unsigned char *public_key, \
                                                size_t length), (type, engine, public_key, length), NULL) \
    F(const EVP_MD *, EVP_sha256, (void), (), NULL) \
    F(const EVP_MD *, EVP_sha512, (void), (), NULL) \
    F(int, OPENSSL_sk_num, (const OPENSSL_STACK *stack), (stack), -1) \
    F(void *, OPENSSL_sk_value, (const OPENSSL_STACK *stack, int index), (stack, index), NULL) \
    F(int, PEM_read_bio, (BIO *bio, char **name, char **header, unsigned char **data, long *length), \
      (bio, name, header, data, length), 0) \
    F(int, X509_NAME_cmp, (const X509_NAME *a, const X509_NAME *b), (a, b), -2) \
    F(int, X509_NAME_get_text_by_NID, (const X509_NAME *name, int nid, char *buffer, int length), \
      (name, nid, buffer, length), -1) \
    F(int, X509_NAME_print_ex, (BIO *out, const X509_NAME *name, int indent, unsigned long flags), \
      (out, name, indent, flags), -1) \
    F(X509_VERIFY_PARAM *, X509_STORE_CTX_get0_param, (const X509_STORE_CTX *context), (context), NULL) \
    F(int, X509_STORE_CTX_get_error, (const X509_STORE_CTX *context), (context), X509_V_ERR_UNSPECIFIED) \
    F(void *, X509_STORE_CTX_get_ex_data, (const X509_STORE_CTX *context, int index), (context, index), NULL) \
    F(int, X509_STORE_CTX_init, (X509_STORE_CTX *context, X509_STORE *store, X509 *target, \
                                 STACK_OF(X509) *untrusted), (context, store, target, untrusted), 0) \
    F(X509_STORE_CTX *, X509_STORE_CTX_new, (void), (), NULL) \
    F(int, X509_STORE_CTX_set_default, (X509_STORE_CTX *context, const char *name), (context, name), 0) \
    F(int, X509_STORE_CTX_set_ex_data, (X509_STORE_CTX *context, int index, void *data), (context, index, data), 0) \
    F(int, X509_STORE_add_cert, (X509_STORE *store, X509 *certificate), (store, certificate), 0) \
    F(X509_STORE *, X509_STORE_new, (void), (), NULL) \
    F(int, X509_VERIFY_PARAM_set1_host, (X509_VERIFY_PARAM *parameters, const char *name, size_t length), \
      (parameters, name, length), 0) \
    F(int, X509_VERIFY_PARAM_set1_ip_asc, (X509_VERIFY_PARAM *parameters, const char *address), \
      (parameters, address), 0) \
    F(int, X509_VERIFY_PARAM_set_flags, (X509_VERIFY_PARAM *parameters, unsigned long flags), \
      (parameters, flags), 0) \
    F(int, X509_digest, (const X509 *certificate, const EVP_MD *type, unsigned char *digest, unsigned int *length), \
      (certificate, type, digest, length), 0) \
    F(EVP_PKEY *, X509_get0_pubkey, (const X509 *certificate), (certificate), NULL) \
    F(X509_PUBKEY *, X509_get_X509_PUBKEY, (const X509 *certificate), (certificate), NULL) \
    F(X509_NAME *, X509_get_issuer_name, (const X509 *certificate), (certificate), NULL) \
    F(X509_NAME *, X509_get_subject_name, (const X509 *certificate), (certificate), NULL) \
    F(int, X509_verify_cert, (X509_STORE_CTX *context), (context), -1) \
    F(const char *, X509_verify_cert_error_string, (long error), (error), loadProblem) \
    F(X509 *, d2i_X509, (X509 **out, const unsigned char **in, long length), (out, in, length), NULL) \
    F(X509_NAME *, d2i_X509_NAME, (X509_NAME **out, const unsigned char **in, long length), (out, in, length), NULL) \
    F(int, i2d_X509_PUBKEY, (const X509_PUBKEY *key, unsigned char **out), (key, out), -1)
// And those that return nothing: without the library there is nothing for them to do.
#define FINGERLY_CRYPTO_PROCEDURES(F) \
    F(CRYPTO_free, (void *pointer, const char *file, int line), (pointer, file, line)) \
    F(ERR_clear_error, (void), ()) \
    F(EVP_MD_CTX_free, (EVP_MD_CTX *context), (context)) \
    F(EVP_PKEY_CTX_free, (EVP_PKEY_CTX *context), (context)) \
    F(EVP_PKEY_free, (EVP_PKEY *key), (key)) \
    F(X509_STORE_CTX_free, (X509_STORE_CTX *context), (context)) \
    F(X509_STORE_CTX_set_verify_cb, (X509_STORE_CTX *context, X509_STORE_CTX_verify_cb callback), \
      (context, callback)) \
    F(X509_STORE_free, (X509_STORE *store), (store)) \
    F(X509_VERIFY_PARAM_set_hostflags, (X509_VERIFY_PARAM *parameters, unsigned int flags), (parameters, flags)) \
    F(X509_NAME_free, (X509_NAME *name), (name)) \
    F(X509_free, (X509 *certificate), (certificate))

#define FINGERLY_CRYPTO_SLOT(result, name, parameters, arguments, fallback) result (*name) parameters;
#define FINGERLY_CRYPTO_PROCEDURE_SLOT(name, parameters, arguments) void (*name) parameters;

// Written once, under loadOnce, before `ready` is released.
static struct {
    FINGERLY_CRYPTO_FUNCTIONS(FINGERLY_CRYPTO_SLOT)
    FINGERLY_CRYPTO_PROCEDURES(FINGERLY_CRYPTO_PROCEDURE_SLOT)
    void (*ERR_error_string_n)(unsigned long code, char *buffer, size_t length);
    int (*OPENSSL_init_crypto)(uint64_t options, const OPENSSL_INIT_SETTINGS *settings);
} libcrypto;

static pthread_once_t loadOnce = PTHREAD_ONCE_INIT;
static char loadProblem[512] = FINGERLY_CRYPTO_SONAME " could not be loaded: pthread_once failed";
static atomic_bool ready;

static void load(void) {
#define FINGERLY_CRYPTO_ENTRY(result, name, parameters, arguments, fallback) {#name, (void **)&libcrypto.name},
#define FINGERLY_CRYPTO_PROCEDURE_ENTRY(name, parameters, arguments) {#name, (void **)&libcrypto.name},
    struct fingerly_lazy_function const functions[] = {
        FINGERLY_CRYPTO_FUNCTIONS(FINGERLY_CRYPTO_ENTRY)
        FINGERLY_CRYPTO_PROCEDURES(FINGERLY_CRYPTO_PROCEDURE_ENTRY)
        {"ERR_error_string_n", (void **)&libcrypto.ERR_error_string_n},
        {"OPENSSL_init_crypto", (void **)&libcrypto.OPENSSL_init_crypto},
    };
    size_t count = sizeof functions / sizeof functions[0];
    if (!fingerly_lazy_library_open(FINGERLY_CRYPTO_SONAME, functions, count, loadProblem, sizeof loadProblem)) return;
    // Nothing used here needs the system's openssl.cnf, whose parsing was most of libcrypto's start. No
    // atexit cleanup: a process that exits while a probe thread is still inside libcrypto would free its
    // tables under it. The first initialisation decides both for the process, libssl's and libcurl's too.
    if (libcrypto.OPENSSL_init_crypto(OPENSSL_INIT_NO_LOAD_CONFIG | OPENSSL_INIT_NO_ATEXIT, NULL) != 1) {
        snprintf(loadProblem, sizeof loadProblem, "%s could not be initialised", FINGERLY_CRYPTO_SONAME);
        return;
    }
    atomic_store_explicit(&ready, 1, memory_order_release);
}

static _Bool loaded(void) {
    if (atomic_load_explicit(&ready, memory_order_acquire)) return 1;
    if (pthread_once(&loadOnce, load) != 0) return 0;
    return atomic_load_explicit(&ready, memory_order_acquire);
}

const char *fingerly_crypto_problem(void) {
    return loaded() ? NULL : loadProblem;
}

#define FINGERLY_CRYPTO_STUB(result, name, parameters, arguments, fallback) \
    __attribute__((visibility("hidden"))) result name parameters { \
        return loaded() ? libcrypto.name arguments : fallback; \
    }
#define FINGERLY_CRYPTO_PROCEDURE_STUB(name, parameters, arguments) \
    __attribute__((visibility("hidden"))) void name parameters { \
        if (loaded()) libcrypto.name arguments; \
    }
FINGERLY_CRYPTO_FUNCTIONS(FINGERLY_CRYPTO_STUB)
FINGERLY_CRYPTO_PROCEDURES(FINGERLY_CRYPTO_PROCEDURE_STUB)

// Its caller prints the buffer: without the library, the reason goes there.
__attribute__((visibility("hidden"))) void ERR_error_string_n(unsigned long code, char *buffer, size_t length) {
    if (loaded()) {
        libcrypto.ERR_error_string_n(code, buffer, length);
    } else if (length > 0) {
        snprintf(buffer, length, "%s", loadProblem);
    }
}
