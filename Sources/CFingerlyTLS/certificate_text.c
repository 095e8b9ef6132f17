#include "certificate_text.h"

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <string.h>

void fingerly_hex(const unsigned char *bytes, unsigned int count, char *out) {
    static const char digits[] = "0123456789abcdef";
    for (unsigned int i = 0; i < count; i++) {
        out[2 * i] = digits[bytes[i] >> 4];
        out[2 * i + 1] = digits[bytes[i] & 15];
    }
    out[2 * count] = 0;
}

/// An X.509 name in RFC 2253 form (control characters escaped), cut to `capacity`.
static bool name_text(X509_NAME *name, char *out, size_t capacity) {
    out[0] = 0;
    BIO *bio = BIO_new(BIO_s_mem());
    if (!bio) return false;
    X509_NAME_print_ex(bio, name, 0, XN_FLAG_RFC2253 & ~ASN1_STRFLGS_ESC_MSB);
    char *text = NULL;
    long length = BIO_get_mem_data(bio, &text);
    bool cut = text && length > 0 ? fingerly_copy_bounded(out, capacity, text, (size_t)length) : false;
    BIO_free(bio);
    return cut;
}

void fingerly_spki_pin(X509 *certificate, char out[FINGERLY_SPKI_PIN_SIZE]) {
    out[0] = 0;
    unsigned char *spki = NULL;
    int spki_length = i2d_X509_PUBKEY(X509_get_X509_PUBKEY(certificate), &spki);
    if (spki_length <= 0) return;
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int digest_length = 0;
    // 32 bytes are 44 base64 characters: exactly the field, NUL included.
    if (EVP_Digest(spki, (size_t)spki_length, digest, &digest_length, EVP_sha256(), NULL) && digest_length == 32)
        EVP_EncodeBlock((unsigned char *)out, digest, (int)digest_length);
    OPENSSL_free(spki);
}

void fingerly_describe_certificate(X509 *certificate, fingerly_certificate *out) {
    memset(out, 0, sizeof *out);
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    if (X509_digest(certificate, EVP_sha256(), digest, &length) && length == 32) fingerly_hex(digest, length, out->fingerprint.hex);
    fingerly_spki_pin(certificate, out->spki_pin);
    out->subject_truncated = name_text(X509_get_subject_name(certificate), out->subject, sizeof out->subject);
    out->issuer_truncated = name_text(X509_get_issuer_name(certificate), out->issuer, sizeof out->issuer);
}

size_t fingerly_fingerprint_text(const fingerly_fingerprint *fingerprint, const char **text) {
    *text = fingerprint->hex;
    return strnlen(fingerprint->hex, sizeof fingerprint->hex);
}

size_t fingerly_certificate_pin(const fingerly_certificate *certificate, const char **text) {
    *text = certificate->spki_pin;
    return strnlen(certificate->spki_pin, sizeof certificate->spki_pin);
}

size_t fingerly_certificate_subject(const fingerly_certificate *certificate, const char **text) {
    *text = certificate->subject;
    return strnlen(certificate->subject, sizeof certificate->subject);
}

size_t fingerly_certificate_issuer(const fingerly_certificate *certificate, const char **text) {
    *text = certificate->issuer;
    return strnlen(certificate->issuer, sizeof certificate->issuer);
}

size_t fingerly_pin_check_detail(const fingerly_pin_check_report *report, const char **text) {
    *text = report->detail;
    return strnlen(report->detail, sizeof report->detail);
}

void fingerly_fingerprint_set(fingerly_fingerprint *fingerprint, const char *hex, size_t length) {
    size_t kept = length < sizeof fingerprint->hex - 1 ? length : sizeof fingerprint->hex - 1;
    memcpy(fingerprint->hex, hex, kept);
    fingerprint->hex[kept] = 0;
}
