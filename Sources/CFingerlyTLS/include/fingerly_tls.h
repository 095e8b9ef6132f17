#ifndef FINGERLY_TLS_H
#define FINGERLY_TLS_H

#include <stdbool.h>
#include <stddef.h>

/// Sizes of the text fields below, NUL included.
enum {
    /// SHA-256 in lowercase hex: always exactly this long, never cut.
    FINGERLY_FINGERPRINT_SIZE = 65,
    /// SHA-256 in base64 (44 characters): always exactly this long, never cut.
    FINGERLY_SPKI_PIN_SIZE = 45,
    /// An RFC 2253 name; a longer one is cut at a character boundary and flagged.
    FINGERLY_NAME_SIZE = 1024,
    FINGERLY_DETAIL_SIZE = 512,
};

/// The SHA-256 fingerprint of one certificate's DER bytes.
typedef struct {
    char hex[FINGERLY_FINGERPRINT_SIZE];
} fingerly_fingerprint;

/// One certificate as libcrypto describes it.
typedef struct {
    fingerly_fingerprint fingerprint;
    /// SHA-256 of the SubjectPublicKeyInfo, base64: the value HPKP-style pins use. Empty when
    /// the key could not be encoded.
    char spki_pin[FINGERLY_SPKI_PIN_SIZE];
    char subject[FINGERLY_NAME_SIZE];
    bool subject_truncated;
    char issuer[FINGERLY_NAME_SIZE];
    bool issuer_truncated;
} fingerly_certificate;

/// How much of a list fitted the caller's array.
typedef struct {
    size_t count;
    /// Entries there were, written or not.
    size_t found;
    /// found > count: the array was too small.
    bool cut;
} fingerly_list_extent;

/// Why libcrypto could not be used (it is opened on the first call into it, crypto_loader.c), or NULL once it
/// is. Every function below that needs it fails, as it says, without it.
const char *fingerly_crypto_problem(void);

/// The SHA-256 fingerprint of every certificate in PEM text, without parsing them, into
/// `fingerprints`. Returns 0, or -errno (-EFBIG for text libcrypto cannot take, -ENOMEM).
int fingerly_certificate_fingerprints(const char *pem, size_t length, fingerly_fingerprint *fingerprints,
                                      size_t capacity, fingerly_list_extent *extent);

/// A trusted certificate whose fingerprint is not among the packaged ones.
typedef struct {
    fingerly_certificate certificate;
    /// It carries a packaged certificate's subject with another key.
    bool impersonates_packaged;
} fingerly_local_certificate;

typedef struct {
    /// Certificates whose fingerprint is packaged.
    size_t packaged_count;
    /// Local certificates described in the array, and those there were; `cut` when some were
    /// not examined because the array was full.
    fingerly_list_extent local;
} fingerly_trust_scan;

/// Scans trusted certificates in PEM text against the packaged fingerprints (`packaged`, sorted
/// by strcmp, looked up by binary search: the host writes both lists, so a lookup must not cost
/// their product): each certificate not shipped is described into `local`, and the shipped ones
/// counted. Shipped certificates are hashed, not parsed; nor are local ones once the array is full.
/// Returns 0, or -errno (-EFBIG for text libcrypto cannot take, -ENOMEM).
int fingerly_scan_trusted_certificates(const char *pem, size_t length, const fingerly_fingerprint *packaged,
                                       size_t packaged_count, fingerly_local_certificate *local, size_t capacity,
                                       fingerly_trust_scan *scan);

/// One certificate's DER, decoded from its PEM block by the caller, and whether its fingerprint is packaged.
typedef struct {
    const unsigned char *der;
    size_t length;
    bool packaged;
} fingerly_certificate_block;

/// fingerly_scan_trusted_certificates for blocks the caller decoded and matched against the packaged
/// fingerprints itself: only the local ones, and the packaged ones they might impersonate, are parsed.
int fingerly_describe_trusted_blocks(const fingerly_certificate_block *blocks, size_t count,
                                     fingerly_local_certificate *local, size_t capacity, fingerly_trust_scan *scan);

/// The capacity fingerly_first_common_name needs: a longer common name is one the walk cannot say.
enum { FINGERLY_COMMON_NAME_SIZE = 256 };

/// The first common name of a certificate's subject in the canonical form the impersonation check compares
/// (no libcrypto): 1 with its `*written` bytes in `out` (FINGERLY_COMMON_NAME_SIZE), 0 when the subject has
/// none, -1 when the walk cannot say. Two subjects X509_NAME_cmp finds equal have equal answers, or one is -1.
int fingerly_first_common_name(const unsigned char *der, size_t length, unsigned char *out, size_t *written);

/// What fingerly_tls_pin_check found.
enum fingerly_pin_outcome {
    /// A chain of verified signatures runs from the leaf, valid for the host, up to a pinned key.
    FINGERLY_PIN_CONFIRMED = 0,
    /// The handshake completed but no verified path leads from the leaf to a pinned key.
    FINGERLY_PIN_MISMATCH = 1,
    /// The path to a pinned key holds, but the leaf is not for this host or a certificate is out of date.
    FINGERLY_PIN_NOT_VALID = 2,
    FINGERLY_PIN_NO_CONNECTION = -1,
    FINGERLY_PIN_PROXY_REFUSED = -2,
    FINGERLY_PIN_HANDSHAKE_FAILED = -3,
    FINGERLY_PIN_NO_CERTIFICATE = -4,
    FINGERLY_PIN_TIMED_OUT = -5,
    /// Nothing was sent: the host or port is not valid, or the CONNECT request does not fit.
    FINGERLY_PIN_INVALID_REQUEST = -6,
    FINGERLY_PIN_NO_ADDRESS = -7,
    /// The verification itself could not run (out of memory).
    FINGERLY_PIN_VERIFICATION_FAILED = -8,
};

/// What a pin check saw besides its outcome.
typedef struct {
    /// The presented chain, leaf first, as far as the caller's array had room.
    fingerly_list_extent chain;
    /// Why, in words: the verification error, the handshake's error, what was not valid.
    char detail[FINGERLY_DETAIL_SIZE];
    bool detail_truncated;
} fingerly_pin_check_report;

/// Opens TLS to host:port (an RFC 3986 host; an IPv6 literal in brackets), through an HTTP CONNECT
/// proxy when proxy_host is given, and checks the presented chain against `pins` (SPKI SHA-256,
/// base64, one a line). Connecting, resolving, the proxy exchange and the handshake all end within
/// timeout_ms; the socket and TLS state are freed on every path. Describes the presented chain
/// into `chain` and says why in `report`. Returns a fingerly_pin_outcome.
int fingerly_tls_pin_check(const char *host, const char *port, const char *proxy_host, const char *proxy_port,
                           const char *pins, int timeout_ms, fingerly_certificate *chain, size_t chain_capacity,
                           fingerly_pin_check_report *report);

/// The text fields of the structs above, as a pointer and a length up to the NUL: Swift reads
/// them through these rather than through the imported `char[N]` tuples, whose type metadata the
/// Swift runtime would otherwise build on first use.
size_t fingerly_fingerprint_text(const fingerly_fingerprint *fingerprint, const char **text);
size_t fingerly_certificate_pin(const fingerly_certificate *certificate, const char **text);
size_t fingerly_certificate_subject(const fingerly_certificate *certificate, const char **text);
size_t fingerly_certificate_issuer(const fingerly_certificate *certificate, const char **text);
size_t fingerly_pin_check_detail(const fingerly_pin_check_report *report, const char **text);
/// Sets a fingerprint from `length` bytes of hex (at most 64; more are not copied).
void fingerly_fingerprint_set(fingerly_fingerprint *fingerprint, const char *hex, size_t length);

#endif
