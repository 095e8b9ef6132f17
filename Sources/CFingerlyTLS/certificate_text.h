#ifndef FINGERLY_CERTIFICATE_TEXT_H
#define FINGERLY_CERTIFICATE_TEXT_H

#include "fingerly_tls.h"

#include <openssl/x509.h>
#include "fingerly_text.h"

#define FINGERLY_INTERNAL __attribute__((visibility("hidden")))

/// Lowercase hex of `count` bytes into `out`, which holds 2 * count + 1.
FINGERLY_INTERNAL void fingerly_hex(const unsigned char *bytes, unsigned int count, char *out);

/// The SPKI SHA-256 of a certificate, base64, as pins are written; empty when it cannot be made.
FINGERLY_INTERNAL void fingerly_spki_pin(X509 *certificate, char out[FINGERLY_SPKI_PIN_SIZE]);

/// Fingerprint, SPKI pin, subject and issuer (RFC 2253), each name cut to its field and flagged.
FINGERLY_INTERNAL void fingerly_describe_certificate(X509 *certificate, fingerly_certificate *out);


#endif
