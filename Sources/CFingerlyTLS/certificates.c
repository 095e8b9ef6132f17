#define _GNU_SOURCE
#include "fingerly_tls.h"
#include "certificate_text.h"

#include <errno.h>
#include <limits.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stdint.h>
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

enum common_name_state { common_name_unread, common_name_absent, common_name_found, common_name_unknown };

struct block {
    const unsigned char *der;
    long length;
    char fingerprint[FINGERLY_FINGERPRINT_SIZE];
    int packaged;
    /// A shipped certificate's subject, decoded for the impersonation check once whatever number of local
    /// ones ask (the host writes both lists, so decodes must not be their product), and the whole certificate
    /// only where a name matched.
    X509_NAME *subject;
    bool subject_failed;
    X509 *parsed;
    bool parse_failed;
    /// The subject's first common name in canonical form, worked out on first use: what decides which shipped
    /// subjects are worth decoding, at a fraction of a decode's cost.
    enum common_name_state state;
    unsigned char common_name[FINGERLY_COMMON_NAME_SIZE];
    size_t common_name_length;
};

/// One DER header at `*cursor`: its tag, and the length of its contents, which lie inside `end`. Only DER's
/// own length forms: libcrypto also takes a longer form than needed, and a walk that read it would see other
/// bytes than libcrypto's canonical re-encoding compares, so anything else is no header here.
static bool der_header(const unsigned char **cursor, const unsigned char *end, unsigned char *tag, size_t *length) {
    const unsigned char *at = *cursor;
    if (end - at < 2) return false;
    *tag = *at++;
    size_t count = *at++;
    if (count & 0x80) {
        size_t digits = count & 0x7f;
        if (digits == 0 || digits > 4 || (size_t)(end - at) < digits || *at == 0) return false;
        count = 0;
        for (size_t digit = 0; digit < digits; digit++) count = count << 8 | *at++;
        if (count < 0x80) return false;
    }
    if (count > (size_t)(end - at)) return false;
    *cursor = at;
    *length = count;
    return true;
}

/// Where a certificate's subject Name lies in its DER (tag and length included): the sixth field of
/// tbsCertificate, after the optional version, the serial, the signature algorithm, the issuer and the
/// validity. A subject is found or nothing; it is decoded by libcrypto, never trusted as found.
static bool subject_bytes(const unsigned char *der, long der_length, const unsigned char **subject, long *length) {
    const unsigned char *cursor = der, *end = der + der_length;
    unsigned char tag;
    size_t size;
    if (!der_header(&cursor, end, &tag, &size) || tag != 0x30) return false;
    end = cursor + size;
    if (!der_header(&cursor, end, &tag, &size) || tag != 0x30) return false;
    end = cursor + size;
    static const unsigned char skipped[] = {0x02, 0x30, 0x30, 0x30};
    for (int field = -1; field < 4; field++) {
        const unsigned char *start = cursor;
        if (!der_header(&cursor, end, &tag, &size)) return false;
        if (field == -1 && tag != 0xa0) {
            cursor = start;  // no version: the serial comes first
            continue;
        }
        if (field >= 0 && tag != skipped[field]) return false;
        cursor += size;
    }
    const unsigned char *start = cursor;
    if (!der_header(&cursor, end, &tag, &size) || tag != 0x30) return false;
    *subject = start;
    *length = (long)(cursor + size - start);
    return true;
}

static bool append_code_point(uint32_t point, unsigned char *out, size_t capacity, size_t *length) {
    unsigned char bytes[4];
    size_t count;
    if (point < 0x80) { bytes[0] = (unsigned char)point; count = 1; }
    else if (point < 0x800) { bytes[0] = 0xc0 | point >> 6; bytes[1] = 0x80 | (point & 0x3f); count = 2; }
    else if (point < 0x10000) {
        bytes[0] = 0xe0 | point >> 12; bytes[1] = 0x80 | (point >> 6 & 0x3f); bytes[2] = 0x80 | (point & 0x3f); count = 3;
    } else if (point < 0x110000) {
        bytes[0] = 0xf0 | point >> 18; bytes[1] = 0x80 | (point >> 12 & 0x3f);
        bytes[2] = 0x80 | (point >> 6 & 0x3f); bytes[3] = 0x80 | (point & 0x3f); count = 4;
    } else return false;
    if (capacity - *length < count) return false;
    memcpy(out + *length, bytes, count);
    *length += count;
    return true;
}

/// A string value as X509_NAME_cmp's canonical form writes it: converted to UTF-8 (a one-byte type's bytes are
/// Latin-1, BMPString UCS-2, UniversalString UCS-4), white space (as ossl_isspace has it) trimmed at both ends
/// and each inner run one space, ASCII letters lowercased. False for a type that form keeps as it is, for text
/// the conversion would refuse, and for more than `capacity` bytes.
static bool canonical_string(unsigned char tag, const unsigned char *value, size_t size, unsigned char *out,
                             size_t capacity, size_t *length) {
    size_t width;
    switch (tag) {
    case 0x0c: width = 0; break;                                    // UTF8String: its bytes
    case 0x13: case 0x14: case 0x16: case 0x1a: width = 1; break;  // Printable, T61, IA5, Visible
    case 0x1e: width = 2; break;                                    // BMPString
    case 0x1c: width = 4; break;                                    // UniversalString
    default: return false;
    }
    if (width > 1 && size % width != 0) return false;
    unsigned char utf8[1024];
    size_t converted = 0;
    if (width == 0) {
        if (size > sizeof utf8) return false;
        memcpy(utf8, value, size);
        converted = size;
    } else {
        for (size_t at = 0; at < size; at += width) {
            uint32_t point = 0;
            for (size_t byte = 0; byte < width; byte++) point = point << 8 | value[at + byte];
            if (!append_code_point(point, utf8, sizeof utf8, &converted)) return false;
        }
    }
    size_t start = 0, end = converted;
    #define FINGERLY_IS_SPACE(c) ((c) == ' ' || ((c) >= '\t' && (c) <= '\r'))
    while (start < end && FINGERLY_IS_SPACE(utf8[start])) start++;
    while (end > start && FINGERLY_IS_SPACE(utf8[end - 1])) end--;
    *length = 0;
    for (size_t at = start; at < end;) {
        unsigned char byte = utf8[at];
        if (FINGERLY_IS_SPACE(byte)) {
            byte = ' ';
            while (at < end && FINGERLY_IS_SPACE(utf8[at])) at++;
        } else {
            if (byte >= 'A' && byte <= 'Z') byte = (unsigned char)(byte - 'A' + 'a');
            at++;
        }
        if (*length == capacity) return false;
        out[(*length)++] = byte;
    }
    #undef FINGERLY_IS_SPACE
    return true;
}

/// The first common name of a certificate's subject, canonical; unknown where the walk cannot say (no subject
/// found, that name sharing its RDN with another attribute, whose order the canonical form may change, or a
/// value canonical_string declines). Names X509_NAME_cmp finds equal have equal first common names.
static enum common_name_state first_common_name(const unsigned char *der, long der_length, unsigned char *out,
                                                size_t capacity, size_t *length) {
    static const unsigned char common_name_oid[] = {0x55, 0x04, 0x03};  // 2.5.4.3
    const unsigned char *subject, *cursor;
    long subject_length;
    unsigned char tag;
    size_t size;
    if (!subject_bytes(der, der_length, &subject, &subject_length)) return common_name_unknown;
    cursor = subject;
    const unsigned char *end = subject + subject_length;
    if (!der_header(&cursor, end, &tag, &size)) return common_name_unknown;
    while (cursor < end) {
        if (!der_header(&cursor, end, &tag, &size) || tag != 0x31) return common_name_unknown;
        const unsigned char *set_end = cursor + size;
        size_t entries = 0;
        const unsigned char *value = NULL;
        unsigned char value_tag = 0;
        size_t value_size = 0;
        while (cursor < set_end) {
            if (!der_header(&cursor, set_end, &tag, &size) || tag != 0x30) return common_name_unknown;
            const unsigned char *entry_end = cursor + size;
            entries++;
            size_t oid_size;
            if (!der_header(&cursor, entry_end, &tag, &oid_size) || tag != 0x06) return common_name_unknown;
            if (oid_size == sizeof common_name_oid && memcmp(cursor, common_name_oid, sizeof common_name_oid) == 0) {
                const unsigned char *inner = cursor + oid_size;
                if (!der_header(&inner, entry_end, &value_tag, &value_size)) return common_name_unknown;
                value = inner;
            }
            cursor = entry_end;
        }
        if (value) {
            if (entries != 1) return common_name_unknown;
            return canonical_string(value_tag, value, value_size, out, capacity, length) ? common_name_found
                                                                                         : common_name_unknown;
        }
    }
    return common_name_absent;
}

int fingerly_first_common_name(const unsigned char *der, size_t length, unsigned char *out, size_t *written) {
    *written = 0;
    if (length > LONG_MAX) return -1;
    switch (first_common_name(der, (long)length, out, FINGERLY_COMMON_NAME_SIZE, written)) {
    case common_name_found: return 1;
    case common_name_absent: return 0;
    default: return -1;
    }
}

static void read_common_name(struct block *block) {
    if (block->state == common_name_unread)
        block->state = first_common_name(block->der, block->length, block->common_name, sizeof block->common_name,
                                         &block->common_name_length);
}

/// Whether two certificates' subjects may be equal: false only when their first common names tell them apart.
static bool names_may_match(struct block *one, struct block *other) {
    read_common_name(one);
    read_common_name(other);
    if (one->state == common_name_unknown || other->state == common_name_unknown) return true;
    if (one->state != other->state) return false;
    return one->state == common_name_absent ||
           (one->common_name_length == other->common_name_length &&
            memcmp(one->common_name, other->common_name, one->common_name_length) == 0);
}

/// A shipped certificate's subject, decoded once; NULL when it cannot be.
static X509_NAME *packaged_subject(struct block *shipped) {
    if (!shipped->subject && !shipped->subject_failed) {
        const unsigned char *bytes;
        long length;
        if (subject_bytes(shipped->der, shipped->length, &bytes, &length))
            shipped->subject = d2i_X509_NAME(NULL, &bytes, length);
        shipped->subject_failed = shipped->subject == NULL;
    }
    return shipped->subject;
}

static X509 *packaged_certificate(struct block *shipped) {
    if (!shipped->parsed && !shipped->parse_failed) {
        const unsigned char *cursor = shipped->der;
        shipped->parsed = d2i_X509(NULL, &cursor, shipped->length);
        shipped->parse_failed = shipped->parsed == NULL;
    }
    return shipped->parsed;
}

/// Whether a shipped certificate carries `local`'s subject with another key. Names are compared as
/// OpenSSL compares them when it builds a chain (X509_NAME_cmp: case, runs of spaces and the string type
/// do not count), against every shipped subject whose first common name may match: a raw search for the
/// common name's bytes would miss a copy written in capitals, with doubled spaces or as a BMPString, which
/// verifies the same chains.
static bool impersonates_packaged(X509 *local, struct block *local_block, struct block *blocks, size_t count) {
    const X509_NAME *name = X509_get_subject_name(local);
    for (size_t other = 0; name && other < count; other++) {
        if (!blocks[other].packaged || !names_may_match(local_block, &blocks[other])) continue;
        const X509_NAME *subject = packaged_subject(&blocks[other]);
        X509 *shipped = NULL;
        if (!subject) {
            // A subject this walk does not find: the whole certificate, as libcrypto reads it.
            shipped = packaged_certificate(&blocks[other]);
            if (!shipped) continue;
            subject = X509_get_subject_name(shipped);
        }
        if (X509_NAME_cmp(subject, name) != 0) continue;
        if (!shipped) shipped = packaged_certificate(&blocks[other]);
        if (shipped && EVP_PKEY_eq(X509_get0_pubkey(shipped), X509_get0_pubkey(local)) != 1) return true;
    }
    return false;
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
        entry->impersonates_packaged = impersonates_packaged(parsed, &blocks[index], blocks, count);
        scan->local.count++;
        scan->local.found++;
        X509_free(parsed);
    }
    for (size_t index = 0; index < count; index++) {
        X509_free(blocks[index].parsed);
        X509_NAME_free(blocks[index].subject);
    }
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
