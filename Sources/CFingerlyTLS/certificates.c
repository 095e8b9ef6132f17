#define _GNU_SOURCE
#include "fingerly_tls.h"
#include "certificate_text.h"

#include <errno.h>
#include <limits.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stdlib.h>
#include <string.h>

/// Whether a PEM block's label is a certificate's.
/// Whether a PEM block's label is one libcrypto reads a certificate from (PEM_STRING_X509, _TRUSTED, _OLD):
/// a store loading the file trusts all three, so a root under any of them must be seen here.
static bool is_certificate(const char *name) {
    return strcmp(name, "CERTIFICATE") == 0 || strcmp(name, "TRUSTED CERTIFICATE") == 0 ||
           strcmp(name, "X509 CERTIFICATE") == 0;
}

int fingerly_certificate_fingerprints(const char *pem, size_t length, fingerly_fingerprint *fingerprints,
                                      size_t capacity, fingerly_list_extent *extent) {
    memset(extent, 0, sizeof *extent);
    if (length > INT_MAX) return -EFBIG;
    BIO *bio = BIO_new_mem_buf(pem, (int)length);
    if (!bio) return -ENOMEM;
    char *name = NULL, *header = NULL;
    unsigned char *der = NULL;
    long der_length = 0;
    // PEM_read_bio only decodes base64: no X.509 parsing, which is most of the cost.
    while (PEM_read_bio(bio, &name, &header, &der, &der_length) == 1) {
        if (is_certificate(name)) {
            unsigned char digest[EVP_MAX_MD_SIZE];
            unsigned int digest_length = 0;
            if (EVP_Digest(der, (size_t)der_length, digest, &digest_length, EVP_sha256(), NULL) && digest_length == 32) {
                size_t position = extent->found++;
                if (position < capacity) {
                    fingerly_hex(digest, digest_length, fingerprints[position].hex);
                    extent->count = position + 1;
                } else {
                    extent->cut = true;
                }
            }
        }
        OPENSSL_free(name);
        OPENSSL_free(header);
        OPENSSL_free(der);
        name = header = NULL;
        der = NULL;
    }
    BIO_free(bio);
    return 0;
}

struct block {
    const unsigned char *der;
    long length;
    char fingerprint[FINGERLY_FINGERPRINT_SIZE];
    int packaged;
    /// A shipped certificate parsed for the impersonation check, once whatever number of local
    /// ones ask: the host writes both lists, so parses must not be their product.
    X509 *parsed;
    bool parse_failed;
};

/// Whether a shipped certificate carries `local`'s subject with another key. Candidates are found
/// by the common name's bytes inside the shipped DER (the same bytes whatever ASN.1 string type
/// encodes it), then confirmed by parsing: X509_NAME_cmp compares canonically.
static bool impersonates_packaged(X509 *local, struct block *blocks, size_t count) {
    char common_name[256] = "";
    int common_length = X509_NAME_get_text_by_NID(X509_get_subject_name(local), NID_commonName, common_name, sizeof common_name);
    bool found = false;
    for (size_t other = 0; common_length > 0 && other < count && !found; other++) {
        if (!blocks[other].packaged || !memmem(blocks[other].der, (size_t)blocks[other].length, common_name, (size_t)common_length)) continue;
        if (!blocks[other].parsed && !blocks[other].parse_failed) {
            const unsigned char *cursor = blocks[other].der;
            blocks[other].parsed = d2i_X509(NULL, &cursor, blocks[other].length);
            blocks[other].parse_failed = blocks[other].parsed == NULL;
        }
        X509 *shipped = blocks[other].parsed;
        if (!shipped) continue;
        found = X509_NAME_cmp(X509_get_subject_name(shipped), X509_get_subject_name(local)) == 0 &&
                EVP_PKEY_eq(X509_get0_pubkey(shipped), X509_get0_pubkey(local)) != 1;
    }
    return found;
}

static int compare_fingerprints(const void *left, const void *right) {
    return strcmp(((const fingerly_fingerprint *)left)->hex, ((const fingerly_fingerprint *)right)->hex);
}

/// Describes the blocks that are not packaged (as many as `local` holds, the rest counted) and counts the
/// packaged ones. Only what is not shipped is parsed in full: decoding X.509 is most of the cost.
static int describe_blocks(struct block *blocks, size_t count, fingerly_local_certificate *local, size_t capacity,
                           fingerly_trust_scan *scan) {
    for (size_t index = 0; index < count; index++) {
        if (blocks[index].packaged) { scan->packaged_count++; continue; }
        if (scan->local.count == capacity) {
            // Counted, not parsed: the caller learns how many were not examined.
            scan->local.found++;
            scan->local.cut = true;
            continue;
        }
        const unsigned char *cursor = blocks[index].der;
        X509 *parsed = d2i_X509(NULL, &cursor, blocks[index].length);
        if (!parsed) continue;
        fingerly_local_certificate *entry = &local[scan->local.count];
        fingerly_describe_certificate(parsed, &entry->certificate);
        entry->impersonates_packaged = impersonates_packaged(parsed, blocks, count);
        scan->local.count++;
        scan->local.found++;
        X509_free(parsed);
    }
    for (size_t index = 0; index < count; index++) X509_free(blocks[index].parsed);
    return 0;
}

int fingerly_scan_trusted_certificates(const char *pem, size_t length, const fingerly_fingerprint *packaged,
                                       size_t packaged_count, fingerly_local_certificate *local, size_t capacity,
                                       fingerly_trust_scan *scan) {
    memset(scan, 0, sizeof *scan);
    if (length > INT_MAX) return -EFBIG;
    BIO *bio = BIO_new_mem_buf(pem, (int)length);
    if (!bio) return -ENOMEM;
    size_t count = 0, allocated = 256;
    struct block *blocks = calloc(allocated, sizeof *blocks);
    int result = blocks ? 0 : -ENOMEM;
    char *name = NULL, *header = NULL;
    unsigned char *der = NULL;
    long der_length = 0;
    while (result == 0 && PEM_read_bio(bio, &name, &header, &der, &der_length) == 1) {
        bool certificate = is_certificate(name);
        OPENSSL_free(name);
        OPENSSL_free(header);
        name = header = NULL;
        if (!certificate) { OPENSSL_free(der); der = NULL; continue; }
        if (count == allocated) {
            struct block *grown = allocated <= SIZE_MAX / 2 / sizeof *blocks ? realloc(blocks, 2 * allocated * sizeof *blocks) : NULL;
            if (!grown) { OPENSSL_free(der); der = NULL; result = -ENOMEM; break; }
            blocks = grown;
            allocated *= 2;
        }
        struct block *entry = &blocks[count++];
        memset(entry, 0, sizeof *entry);
        entry->der = der;
        entry->length = der_length;
        unsigned char digest[EVP_MAX_MD_SIZE];
        unsigned int digest_length = 0;
        if (EVP_Digest(der, (size_t)der_length, digest, &digest_length, EVP_sha256(), NULL) && digest_length == 32)
            fingerly_hex(digest, digest_length, entry->fingerprint);
        fingerly_fingerprint key;
        memcpy(key.hex, entry->fingerprint, sizeof key.hex);
        entry->packaged = entry->fingerprint[0] && packaged && packaged_count > 0 &&
                          bsearch(&key, packaged, packaged_count, sizeof *packaged, compare_fingerprints) != NULL;
        der = NULL;
    }
    BIO_free(bio);
    if (result == 0) result = describe_blocks(blocks, count, local, capacity, scan);
    for (size_t index = 0; blocks && index < count; index++) OPENSSL_free((void *)blocks[index].der);
    free(blocks);
    return result;
}

int fingerly_describe_trusted_blocks(const fingerly_certificate_block *decoded, size_t count,
                                     fingerly_local_certificate *local, size_t capacity, fingerly_trust_scan *scan) {
    memset(scan, 0, sizeof *scan);
    if (count == 0) return 0;
    if (count > SIZE_MAX / sizeof(struct block)) return -ENOMEM;
    struct block *blocks = calloc(count, sizeof *blocks);
    if (!blocks) return -ENOMEM;
    int result = 0;
    for (size_t index = 0; index < count && result == 0; index++) {
        if (decoded[index].length > LONG_MAX) result = -EFBIG;
        blocks[index].der = decoded[index].der;
        blocks[index].length = (long)decoded[index].length;
        blocks[index].packaged = decoded[index].packaged;
    }
    if (result == 0) result = describe_blocks(blocks, count, local, capacity, scan);
    free(blocks);
    return result;
}
