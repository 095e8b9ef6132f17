#define _GNU_SOURCE
#include "fingerly_shims.h"
#include "text_buffer.h"

#include <errno.h>
#include <netdb.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>


static void hex(const unsigned char *bytes, unsigned int count, char *out) {
    static const char digits[] = "0123456789abcdef";
    for (unsigned int i = 0; i < count; i++) {
        out[2 * i] = digits[bytes[i] >> 4];
        out[2 * i + 1] = digits[bytes[i] & 15];
    }
    out[2 * count] = 0;
}

static void name_line(X509_NAME *name, char *out, size_t capacity) {
    out[0] = 0;
    BIO *bio = BIO_new(BIO_s_mem());
    if (!bio) return;
    X509_NAME_print_ex(bio, name, 0, XN_FLAG_RFC2253 & ~ASN1_STRFLGS_ESC_MSB);
    int length = BIO_read(bio, out, (int)capacity - 1);
    out[length > 0 ? length : 0] = 0;
    for (char *c = out; *c; c++) if (*c == '\t' || *c == '\n') *c = ' ';
    BIO_free(bio);
}

/// One line per certificate: sha256 fingerprint, SPKI sha256 (base64), subject, issuer.
static void describe(X509 *certificate, struct text_out *out) {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    char fingerprint[2 * EVP_MAX_MD_SIZE + 1] = "";
    if (X509_digest(certificate, EVP_sha256(), digest, &length)) hex(digest, length, fingerprint);

    char pin[64] = "";
    unsigned char *spki = NULL;
    int spki_length = i2d_X509_PUBKEY(X509_get_X509_PUBKEY(certificate), &spki);
    if (spki_length > 0) {
        unsigned char spki_digest[EVP_MAX_MD_SIZE];
        unsigned int spki_digest_length = 0;
        EVP_Digest(spki, (size_t)spki_length, spki_digest, &spki_digest_length, EVP_sha256(), NULL);
        EVP_EncodeBlock((unsigned char *)pin, spki_digest, (int)spki_digest_length);
        OPENSSL_free(spki);
    }
    char subject[1024], issuer[1024];
    name_line(X509_get_subject_name(certificate), subject, sizeof subject);
    name_line(X509_get_issuer_name(certificate), issuer, sizeof issuer);
    put(out, fingerprint);
    put(out, "\t");
    put(out, pin);
    put(out, "\t");
    put(out, subject);
    put(out, "\t");
    put(out, issuer);
    put(out, "\n");
}

static int connect_to(const char *host, const char *port, int timeout_ms) {
    struct addrinfo hints, *results = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, port, &hints, &results) != 0) return -1;
    int fd = -1;
    for (struct addrinfo *address = results; address; address = address->ai_next) {
        fd = socket(address->ai_family, address->ai_socktype | SOCK_CLOEXEC, address->ai_protocol);
        if (fd < 0) continue;
        struct timeval timeout = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
        if (connect(fd, address->ai_addr, address->ai_addrlen) == 0) break;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(results);
    return fd;
}

int fingerly_tls_peer_chain(const char *host, const char *port, const char *proxy_host, const char *proxy_port,
                            int timeout_ms, char *buffer, size_t capacity) {
    struct text_out out = {buffer, capacity, 0};
    if (capacity) buffer[0] = 0;
    int fd = proxy_host && proxy_host[0] ? connect_to(proxy_host, proxy_port, timeout_ms) : connect_to(host, port, timeout_ms);
    if (fd < 0) return -1;
    if (proxy_host && proxy_host[0]) {
        // HTTP CONNECT through the configured proxy: the chain then shows what the proxy presents.
        char request[1024];
        int length = snprintf(request, sizeof request, "CONNECT %s:%s HTTP/1.1\r\nHost: %s:%s\r\n\r\n", host, port, host, port);
        if (write(fd, request, (size_t)length) != length) { close(fd); return -2; }
        char reply[1024];
        size_t used = 0;
        while (used < sizeof reply - 1) {
            ssize_t count = read(fd, reply + used, 1);
            if (count <= 0) { close(fd); return -2; }
            used += (size_t)count;
            reply[used] = 0;
            if (used >= 4 && strcmp(reply + used - 4, "\r\n\r\n") == 0) break;
        }
        if (strncmp(reply, "HTTP/1.1 200", 12) != 0 && strncmp(reply, "HTTP/1.0 200", 12) != 0) { close(fd); return -2; }
    }
    SSL_CTX *context = SSL_CTX_new(TLS_client_method());
    SSL *ssl = context ? SSL_new(context) : NULL;
    int result = -3;
    if (ssl) {
        SSL_set_fd(ssl, fd);
        SSL_set_tlsext_host_name(ssl, host);
        // No verification here: the point is to see what is presented, whoever signed it.
        SSL_set_verify(ssl, SSL_VERIFY_NONE, NULL);
        if (SSL_connect(ssl) == 1) {
            STACK_OF(X509) *chain = SSL_get_peer_cert_chain(ssl);
            for (int index = 0; chain && index < sk_X509_num(chain); index++) describe(sk_X509_value(chain, index), &out);
            result = 0;
            SSL_shutdown(ssl);
        }
        SSL_free(ssl);
    }
    if (context) SSL_CTX_free(context);
    close(fd);
    return result;
}

size_t fingerly_certificate_fingerprints(const char *pem, size_t length, char *buffer, size_t capacity) {
    struct text_out out = {buffer, capacity, 0};
    if (capacity) buffer[0] = 0;
    BIO *bio = BIO_new_mem_buf(pem, (int)length);
    if (!bio) return 0;
    char *name = NULL, *header = NULL;
    unsigned char *der = NULL;
    long der_length = 0;
    // PEM_read_bio only decodes base64: no X.509 parsing, which is most of the cost.
    while (PEM_read_bio(bio, &name, &header, &der, &der_length) == 1) {
        if (strcmp(name, "CERTIFICATE") == 0 || strcmp(name, "TRUSTED CERTIFICATE") == 0) {
            unsigned char digest[EVP_MAX_MD_SIZE];
            unsigned int digest_length = 0;
            char text[2 * EVP_MAX_MD_SIZE + 2];
            if (EVP_Digest(der, (size_t)der_length, digest, &digest_length, EVP_sha256(), NULL)) {
                hex(digest, digest_length, text);
                put(&out, text);
                put(&out, "\n");
            }
        }
        OPENSSL_free(name);
        OPENSSL_free(header);
        OPENSSL_free(der);
        name = header = NULL;
        der = NULL;
    }
    BIO_free(bio);
    return out.length;
}

struct block {
    unsigned char *der;
    long length;
    char fingerprint[2 * EVP_MAX_MD_SIZE + 1];
    int packaged;
};

size_t fingerly_scan_trusted_certificates(const char *pem, size_t length, const char *packaged_fingerprints,
                                          char *buffer, size_t capacity) {
    struct text_out out = {buffer, capacity, 0};
    if (capacity) buffer[0] = 0;
    BIO *bio = BIO_new_mem_buf(pem, (int)length);
    if (!bio) return 0;
    size_t count = 0, allocated = 256;
    struct block *blocks = calloc(allocated, sizeof *blocks);
    char *name = NULL, *header = NULL;
    unsigned char *der = NULL;
    long der_length = 0;
    while (blocks && PEM_read_bio(bio, &name, &header, &der, &der_length) == 1) {
        int certificate = strcmp(name, "CERTIFICATE") == 0 || strcmp(name, "TRUSTED CERTIFICATE") == 0;
        OPENSSL_free(name);
        OPENSSL_free(header);
        name = header = NULL;
        if (!certificate) { OPENSSL_free(der); der = NULL; continue; }
        if (count == allocated) {
            struct block *grown = realloc(blocks, 2 * allocated * sizeof *blocks);
            if (!grown) { OPENSSL_free(der); break; }
            blocks = grown;
            allocated *= 2;
        }
        struct block *entry = &blocks[count++];
        entry->der = der;
        entry->length = der_length;
        unsigned char digest[EVP_MAX_MD_SIZE];
        unsigned int digest_length = 0;
        EVP_Digest(der, (size_t)der_length, digest, &digest_length, EVP_sha256(), NULL);
        hex(digest, digest_length, entry->fingerprint);
        entry->packaged = packaged_fingerprints && strstr(packaged_fingerprints, entry->fingerprint) != NULL;
        der = NULL;
    }
    BIO_free(bio);

    // Only what is not shipped is parsed in full: decoding X.509 is most of the cost.
    size_t packaged = 0;
    for (size_t index = 0; index < count; index++) {
        if (blocks[index].packaged) { packaged++; continue; }
        const unsigned char *cursor = blocks[index].der;
        X509 *local = d2i_X509(NULL, &cursor, blocks[index].length);
        if (!local) continue;
        put(&out, "L\t");
        describe(local, &out);
        // A packaged root with the same subject but another key: found by the subject's DER
        // bytes inside the packaged certificates, then confirmed by parsing that one.
        // The common name's text is the same bytes whatever ASN.1 string type encodes it, so
        // it finds candidates that X509_NAME_cmp (canonical comparison) then confirms.
        char common_name[256] = "";
        int common_length = X509_NAME_get_text_by_NID(X509_get_subject_name(local), NID_commonName, common_name, sizeof common_name);
        for (size_t other = 0; common_length > 0 && other < count; other++) {
            if (!blocks[other].packaged || !memmem(blocks[other].der, (size_t)blocks[other].length, common_name, (size_t)common_length)) continue;
            const unsigned char *other_cursor = blocks[other].der;
            X509 *shipped = d2i_X509(NULL, &other_cursor, blocks[other].length);
            if (shipped) {
                if (X509_NAME_cmp(X509_get_subject_name(shipped), X509_get_subject_name(local)) == 0 &&
                    EVP_PKEY_eq(X509_get0_pubkey(shipped), X509_get0_pubkey(local)) != 1) {
                    put(&out, "I\t");
                    put(&out, blocks[index].fingerprint);
                    put(&out, "\n");
                }
                X509_free(shipped);
            }
        }
        X509_free(local);
    }
    char summary[64];
    snprintf(summary, sizeof summary, "P\t%zu\n", packaged);
    put(&out, summary);
    for (size_t index = 0; index < count; index++) OPENSSL_free(blocks[index].der);
    free(blocks);
    return out.length;
}
