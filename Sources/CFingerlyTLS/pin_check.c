#define _GNU_SOURCE
#include "fingerly_tls.h"
#include "certificate_text.h"
#include "ssl_loader.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>


/// Milliseconds on the monotonic clock, the clock the deadline is kept on.
static int64_t monotonic_ms(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

/// What is left until the deadline, for poll: 0 once it has passed.
static int remaining_ms(int64_t deadline) {
    int64_t left = deadline - monotonic_ms();
    if (left <= 0) return 0;
    return left > INT_MAX ? INT_MAX : (int)left;
}

/// Waits until fd is ready for `events`: 1 ready, 0 deadline passed, -1 error.
static int wait_until(int fd, short events, int64_t deadline) {
    for (;;) {
        int left = remaining_ms(deadline);
        if (left == 0) return 0;
        struct pollfd entry = {fd, events, 0};
        int ready = poll(&entry, 1, left);
        if (ready > 0) return 1;
        if (ready == 0) return 0;
        if (errno != EINTR) return -1;
    }
}

/// Appends to the report's detail as much as fits, and flags what did not.
static void add_detail(fingerly_pin_check_report *report, const char *text) {
    size_t used = strnlen(report->detail, sizeof report->detail);
    if (fingerly_copy_bounded(report->detail + used, sizeof report->detail - used, text, strlen(text))) report->detail_truncated = true;
}

enum host_kind { host_invalid, host_name, host_ipv4, host_ipv6 };


static int is_unreserved_or_sub_delim(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr("-._~!$&'()*+,;=", c) != NULL;
}

static int is_hex(unsigned char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

/// RFC 3986 host: a bracketed IPv6 literal, an IPv4 literal, or a reg-name, whatever its length.
/// Whatever goes into the CONNECT request, SNI and the resolver passes this first, so CR, LF,
/// spaces, '@' or ':' never reach the proxy. A dotted run of digits is an address or nothing:
/// inet_aton's "127.1" and "0x7f.1" are not hosts. The Swift side checks the same, and the DNS
/// length limit, before calling; this is the last line, not the first.
static enum host_kind host_syntax(const char *host) {
    size_t length = strlen(host);
    if (length == 0) return host_invalid;
    if (host[0] == '[') {
        char inner[INET6_ADDRSTRLEN + 1];
        if (length < 3 || host[length - 1] != ']' || length - 2 >= sizeof inner) return host_invalid;
        memcpy(inner, host + 1, length - 2);
        inner[length - 2] = 0;
        struct in6_addr address;
        return inet_pton(AF_INET6, inner, &address) == 1 ? host_ipv6 : host_invalid;
    }
    int digits_and_dots = 1;
    for (size_t i = 0; i < length; i++) {
        unsigned char c = (unsigned char)host[i];
        if (c == '%') {
            if (i + 2 >= length || !is_hex((unsigned char)host[i + 1]) || !is_hex((unsigned char)host[i + 2])) return host_invalid;
            i += 2;
            digits_and_dots = 0;
            continue;
        }
        if (!is_unreserved_or_sub_delim(c)) return host_invalid;
        if (!(c == '.' || (c >= '0' && c <= '9'))) digits_and_dots = 0;
    }
    if (digits_and_dots) {
        struct in_addr address;
        return inet_pton(AF_INET, host, &address) == 1 ? host_ipv4 : host_invalid;
    }
    return host_name;
}

/// The host as the resolver, SNI and the name check take it: without an IPv6 literal's brackets.
/// False when it does not fit, which no DNS name (at most 253 characters) does.
static int bare_host_of(const char *host, enum host_kind kind, char *bare, size_t capacity) {
    size_t length = strlen(host);
    if (kind == host_ipv6) {
        if (length < 2 || length - 2 >= capacity) return 0;
        memcpy(bare, host + 1, length - 2);
        bare[length - 2] = 0;
        return 1;
    }
    if (length >= capacity) return 0;
    memcpy(bare, host, length + 1);
    return 1;
}

/// A port is 1 to 65535 in plain decimal, nothing else.
static int valid_port(const char *port) {
    size_t length = strlen(port);
    if (length == 0 || length > 5) return 0;
    long value = 0;
    for (size_t i = 0; i < length; i++) {
        if (port[i] < '0' || port[i] > '9') return 0;
        value = value * 10 + (port[i] - '0');
    }
    return value >= 1 && value <= 65535;
}

/// A name lookup on a thread of its own. getaddrinfo cannot be interrupted, so the caller waits
/// only until its deadline and walks away; whichever side finishes last frees the lookup, so an
/// abandoned one costs a thread until the resolver's own timeouts end it, and nothing after.
struct lookup {
    pthread_mutex_t lock;
    pthread_cond_t finished;
    int references;
    int done;
    int status;
    struct addrinfo *result;
    char host[256];
    char port[8];
};

static void release_lookup(struct lookup *lookup) {
    pthread_mutex_lock(&lookup->lock);
    int last = --lookup->references == 0;
    pthread_mutex_unlock(&lookup->lock);
    if (!last) return;
    if (lookup->result) freeaddrinfo(lookup->result);
    pthread_cond_destroy(&lookup->finished);
    pthread_mutex_destroy(&lookup->lock);
    free(lookup);
}

static void *run_lookup(void *argument) {
    struct lookup *lookup = argument;
    struct addrinfo hints, *result = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    int status = getaddrinfo(lookup->host, lookup->port, &hints, &result);
    pthread_mutex_lock(&lookup->lock);
    lookup->status = status;
    lookup->result = status == 0 ? result : NULL;
    lookup->done = 1;
    pthread_cond_broadcast(&lookup->finished);
    pthread_mutex_unlock(&lookup->lock);
    release_lookup(lookup);
    return NULL;
}

/// Resolves host (bare, no brackets) and port by the deadline: 0 with *out set, -1 no address, -2 timed out.
static int resolve(const char *host, const char *port, int64_t deadline, struct addrinfo **out) {
    *out = NULL;
    struct addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
    // A literal needs no resolver and cannot block.
    if (getaddrinfo(host, port, &hints, out) == 0) return 0;
    *out = NULL;
    if (strlen(host) >= sizeof ((struct lookup *)0)->host || strlen(port) >= sizeof ((struct lookup *)0)->port) return -1;

    struct lookup *lookup = calloc(1, sizeof *lookup);
    if (!lookup) return -1;
    pthread_condattr_t attributes;
    pthread_condattr_init(&attributes);
    pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC);
    pthread_mutex_init(&lookup->lock, NULL);
    pthread_cond_init(&lookup->finished, &attributes);
    pthread_condattr_destroy(&attributes);
    strcpy(lookup->host, host);
    strcpy(lookup->port, port);
    lookup->references = 2;

    pthread_attr_t thread_attributes;
    pthread_t thread;
    pthread_attr_init(&thread_attributes);
    pthread_attr_setdetachstate(&thread_attributes, PTHREAD_CREATE_DETACHED);
    int started = pthread_create(&thread, &thread_attributes, run_lookup, lookup) == 0;
    pthread_attr_destroy(&thread_attributes);
    if (!started) {
        lookup->references = 1;
        release_lookup(lookup);
        return -1;
    }

    struct timespec until;
    until.tv_sec = (time_t)(deadline / 1000);
    until.tv_nsec = (long)(deadline % 1000) * 1000000;
    int result = -2;
    pthread_mutex_lock(&lookup->lock);
    while (!lookup->done) {
        if (pthread_cond_timedwait(&lookup->finished, &lookup->lock, &until) == ETIMEDOUT) break;
    }
    if (lookup->done) {
        result = lookup->status == 0 ? 0 : -1;
        *out = lookup->result;
        lookup->result = NULL;
    }
    pthread_mutex_unlock(&lookup->lock);
    release_lookup(lookup);
    return result;
}

/// Connects to host:port by the deadline, trying each address in turn. Returns a non-blocking
/// socket, or a negative fingerly_pin_outcome.
static int connect_to(const char *host, const char *port, int64_t deadline) {
    struct addrinfo *results = NULL;
    int resolved = resolve(host, port, deadline, &results);
    if (resolved == -2) return FINGERLY_PIN_TIMED_OUT;
    if (resolved != 0) return FINGERLY_PIN_NO_ADDRESS;
    int fd = -1, timed_out = 0;
    for (struct addrinfo *address = results; address && fd < 0 && !timed_out; address = address->ai_next) {
        fd = socket(address->ai_family, address->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, address->ai_protocol);
        if (fd < 0) continue;
        if (connect(fd, address->ai_addr, address->ai_addrlen) == 0) break;
        int error = errno;
        if (error == EINPROGRESS) {
            int ready = wait_until(fd, POLLOUT, deadline);
            socklen_t length = sizeof error;
            if (ready == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0 && error == 0) break;
            if (ready == 0) timed_out = 1;
        }
        close(fd);
        fd = -1;
    }
    freeaddrinfo(results);
    if (fd >= 0) return fd;
    return timed_out ? FINGERLY_PIN_TIMED_OUT : FINGERLY_PIN_NO_CONNECTION;
}

/// Writes all of `length` bytes by the deadline: 1, 0 deadline passed, -1 error.
static int send_all(int fd, const char *bytes, size_t length, int64_t deadline) {
    size_t sent = 0;
    while (sent < length) {
        ssize_t count = send(fd, bytes + sent, length - sent, MSG_NOSIGNAL);
        if (count > 0) { sent += (size_t)count; continue; }
        if (count < 0 && errno == EINTR) continue;
        if (count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int ready = wait_until(fd, POLLOUT, deadline);
            if (ready <= 0) return ready;
            continue;
        }
        return -1;
    }
    return 1;
}

/// Reads the proxy's reply header block, a byte at a time so nothing of the TLS stream after it
/// is consumed. Returns 1 for a 200, 0 deadline passed, -1 refused or broken.
static int read_proxy_reply(int fd, int64_t deadline) {
    char reply[1024];
    size_t used = 0;
    while (used < sizeof reply - 1) {
        ssize_t count = recv(fd, reply + used, 1, 0);
        if (count < 0 && errno == EINTR) continue;
        if (count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int ready = wait_until(fd, POLLIN, deadline);
            if (ready <= 0) return ready;
            continue;
        }
        if (count <= 0) return -1;
        used += (size_t)count;
        reply[used] = 0;
        if (used >= 4 && memcmp(reply + used - 4, "\r\n\r\n", 4) == 0) break;
    }
    if (used < 4 || memcmp(reply + used - 4, "\r\n\r\n", 4) != 0) return -1;
    return strncmp(reply, "HTTP/1.1 200", 12) == 0 || strncmp(reply, "HTTP/1.0 200", 12) == 0 ? 1 : -1;
}


/// Whether `pin` is one of the newline-separated `pins`.
static int pin_listed(const char *pins, const char *pin) {
    size_t length = strlen(pin);
    if (length == 0) return 0;
    for (const char *line = pins; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t line_length = end ? (size_t)(end - line) : strlen(line);
        if (line_length == length && memcmp(line, pin, length) == 0) return 1;
        line = end ? end + 1 : NULL;
    }
    return 0;
}

/// Every error the verification meets, sorted by what it means for the pin.
struct verification {
    int path_error;   // no signed path from the leaf to a pinned key: first such error
    int host_error;   // the path holds, but the leaf is not for this host
    int time_error;   // the path holds, but a certificate on it is out of date or not for TLS servers
};

static int note_verification_error(int ok, X509_STORE_CTX *context) {
    if (ok) return 1;
    struct verification *found = X509_STORE_CTX_get_app_data(context);
    int error = X509_STORE_CTX_get_error(context);
    switch (error) {
    case X509_V_ERR_HOSTNAME_MISMATCH:
    case X509_V_ERR_IP_ADDRESS_MISMATCH:
        if (!found->host_error) found->host_error = error;
        break;
    case X509_V_ERR_CERT_NOT_YET_VALID:
    case X509_V_ERR_CERT_HAS_EXPIRED:
    // A signed path with the wrong key usage is the pinned key holder's mistake, not an interceptor's.
    case X509_V_ERR_INVALID_PURPOSE:
        if (!found->time_error) found->time_error = error;
        break;
    default:
        if (!found->path_error) found->path_error = error;
    }
    // Go on: every error is collected, and the outcome is decided from all of them.
    return 1;
}

/// Decides the pin from a completed handshake.
///
/// The presented chain is the peer's word and nothing more: an interceptor can append the genuine
/// leaf or CA to its own chain. So a pin counts only at the end of a chain of real signatures
/// starting at the leaf, whose private key the handshake itself proved the peer holds. The chain
/// is built by X509_verify_cert with the presented certificates as untrusted and, as the only
/// trust anchors, those of them whose SPKI hash is pinned (X509_V_FLAG_PARTIAL_CHAIN, so a pinned
/// intermediate or leaf anchors as well as a root). An anchor taken from the peer's chain may
/// carry any name or extensions, but its key is the pinned one, so whatever it is found to sign
/// was signed by the pinned key's holder. The host name (or IP literal) is checked on the leaf.
static enum fingerly_pin_outcome verify_pin(SSL *ssl, const char *bare_host, enum host_kind kind, const char *pins,
                                            fingerly_pin_check_report *report) {
    X509 *leaf = SSL_get0_peer_certificate(ssl);
    STACK_OF(X509) *presented = SSL_get_peer_cert_chain(ssl);
    if (!leaf) return FINGERLY_PIN_NO_CERTIFICATE;

    X509_STORE *anchors = X509_STORE_new();
    X509_STORE_CTX *context = X509_STORE_CTX_new();
    enum fingerly_pin_outcome outcome = FINGERLY_PIN_VERIFICATION_FAILED;
    if (!anchors || !context) goto done;

    int pinned = 0;
    for (int index = 0; presented && index < sk_X509_num(presented); index++) {
        X509 *certificate = sk_X509_value(presented, index);
        char pin[FINGERLY_SPKI_PIN_SIZE];
        fingerly_spki_pin(certificate, pin);
        if (pin_listed(pins, pin) && X509_STORE_add_cert(anchors, certificate) == 1) pinned++;
    }
    if (!pinned) {
        add_detail(report, "no presented certificate carries a pinned key");
        outcome = FINGERLY_PIN_MISMATCH;
        goto done;
    }

    struct verification found = {0, 0, 0};
    if (X509_STORE_CTX_init(context, anchors, leaf, presented) != 1 || X509_STORE_CTX_set_default(context, "ssl_server") != 1) goto done;
    X509_VERIFY_PARAM *parameters = X509_STORE_CTX_get0_param(context);
    X509_VERIFY_PARAM_set_flags(parameters, X509_V_FLAG_PARTIAL_CHAIN);
    X509_VERIFY_PARAM_set_hostflags(parameters, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    int named = kind == host_name ? X509_VERIFY_PARAM_set1_host(parameters, bare_host, 0)
                                  : X509_VERIFY_PARAM_set1_ip_asc(parameters, bare_host);
    if (named != 1) goto done;
    X509_STORE_CTX_set_app_data(context, &found);
    X509_STORE_CTX_set_verify_cb(context, note_verification_error);
    int verified = X509_verify_cert(context);

    if (found.path_error) {
        add_detail(report, X509_verify_cert_error_string(found.path_error));
        outcome = FINGERLY_PIN_MISMATCH;
    } else if (found.host_error) {
        add_detail(report, "the certificate is not for ");
        add_detail(report, bare_host);
        outcome = FINGERLY_PIN_NOT_VALID;
    } else if (found.time_error) {
        add_detail(report, X509_verify_cert_error_string(found.time_error));
        outcome = FINGERLY_PIN_NOT_VALID;
    } else if (verified == 1) {
        outcome = FINGERLY_PIN_CONFIRMED;
    }
done:
    if (context) X509_STORE_CTX_free(context);
    if (anchors) X509_STORE_free(anchors);
    return outcome;
}

/// SIGPIPE is blocked on this thread while the socket is in use: libssl writes with write(2),
/// and a peer that hangs up must not kill the process. A SIGPIPE raised meanwhile is consumed.
struct pipe_guard {
    sigset_t previous;
    int was_pending;
};

static void guard_sigpipe(struct pipe_guard *guard) {
    sigset_t pipe_only, pending;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    sigpending(&pending);
    guard->was_pending = sigismember(&pending, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_only, &guard->previous);
}

static void unguard_sigpipe(struct pipe_guard *guard) {
    sigset_t pipe_only, pending;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    sigpending(&pending);
    if (!guard->was_pending && sigismember(&pending, SIGPIPE)) {
        struct timespec none = {0, 0};
        sigtimedwait(&pipe_only, NULL, &none);
    }
    pthread_sigmask(SIG_SETMASK, &guard->previous, NULL);
}

int fingerly_tls_pin_check(const char *host, const char *port, const char *proxy_host, const char *proxy_port,
                           const char *pins, int timeout_ms, fingerly_certificate *chain, size_t chain_capacity,
                           fingerly_pin_check_report *report) {
    memset(report, 0, sizeof *report);
    int64_t deadline = monotonic_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    int proxied = proxy_host && proxy_host[0];

    enum host_kind kind = host_syntax(host);
    if (kind == host_invalid || !valid_port(port) || !pins) {
        add_detail(report, "the host is not an RFC 3986 host or the port is not 1-65535");
        return FINGERLY_PIN_INVALID_REQUEST;
    }
    // The request is built, and refused if it does not fit, before anything is connected.
    char request[1024];
    int request_length = 0;
    enum host_kind proxy_kind = proxied ? host_syntax(proxy_host) : host_invalid;
    char bare_host[256], bare_proxy[256];
    if (proxied) {
        if (proxy_kind == host_invalid || !proxy_port || !valid_port(proxy_port)
            || !bare_host_of(proxy_host, proxy_kind, bare_proxy, sizeof bare_proxy)) {
            add_detail(report, "the proxy address is not a host and port");
            return FINGERLY_PIN_INVALID_REQUEST;
        }
        request_length = snprintf(request, sizeof request, "CONNECT %s:%s HTTP/1.1\r\nHost: %s:%s\r\n\r\n", host, port, host, port);
        if (request_length < 0 || (size_t)request_length >= sizeof request) {
            add_detail(report, "the CONNECT request does not fit");
            return FINGERLY_PIN_INVALID_REQUEST;
        }
    }
    if (!bare_host_of(host, kind, bare_host, sizeof bare_host)) {
        add_detail(report, "the host name is too long");
        return FINGERLY_PIN_INVALID_REQUEST;
    }

    struct pipe_guard guard;
    guard_sigpipe(&guard);
    ERR_clear_error();
    SSL_CTX *tls = NULL;
    SSL *ssl = NULL;
    int outcome;
    int fd = proxied ? connect_to(bare_proxy, proxy_port, deadline) : connect_to(bare_host, port, deadline);
    if (fd < 0) {
        outcome = fd;
        goto done;
    }
    if (proxied) {
        int sent = send_all(fd, request, (size_t)request_length, deadline);
        int replied = sent == 1 ? read_proxy_reply(fd, deadline) : sent;
        if (replied != 1) {
            outcome = replied == 0 ? FINGERLY_PIN_TIMED_OUT : FINGERLY_PIN_PROXY_REFUSED;
            goto done;
        }
    }
    tls = SSL_CTX_new(TLS_client_method());
    ssl = tls ? SSL_new(tls) : NULL;
    if (!ssl || SSL_set_fd(ssl, fd) != 1) {
        outcome = FINGERLY_PIN_HANDSHAKE_FAILED;
        const char *problem = fingerly_ssl_problem();
        if (problem) add_detail(report, problem);
        goto done;
    }
    // SNI names a host, never an address (RFC 6066).
    if (kind == host_name) SSL_set_tlsext_host_name(ssl, bare_host);
    // The handshake itself trusts nothing: verify_pin judges the chain against the pins alone.
    SSL_set_verify(ssl, SSL_VERIFY_NONE, NULL);
    for (;;) {
        int result = SSL_connect(ssl);
        if (result == 1) break;
        int error = SSL_get_error(ssl, result);
        int ready = error == SSL_ERROR_WANT_READ ? wait_until(fd, POLLIN, deadline)
                  : error == SSL_ERROR_WANT_WRITE ? wait_until(fd, POLLOUT, deadline) : -1;
        if (ready == 1) continue;
        if (ready == 0) {
            outcome = FINGERLY_PIN_TIMED_OUT;
        } else {
            outcome = FINGERLY_PIN_HANDSHAKE_FAILED;
            unsigned long code = ERR_peek_last_error();
            if (code) {
                char text[256];
                ERR_error_string_n(code, text, sizeof text);
                add_detail(report, text);
            }
        }
        goto done;
    }
    STACK_OF(X509) *presented = SSL_get_peer_cert_chain(ssl);
    for (int index = 0; presented && index < sk_X509_num(presented); index++) {
        size_t position = report->chain.found++;
        if (position < chain_capacity) {
            fingerly_describe_certificate(sk_X509_value(presented, index), &chain[position]);
            report->chain.count = position + 1;
        } else {
            report->chain.cut = true;
        }
    }
    outcome = verify_pin(ssl, bare_host, kind, pins, report);

done:
    // Every path ends here, also for a check whose probe was abandoned long ago: the deadline
    // bounds each wait above, so this is reached and nothing stays open.
    if (ssl) SSL_free(ssl);
    if (tls) SSL_CTX_free(tls);
    if (fd >= 0) close(fd);
    ERR_clear_error();
    unguard_sigpipe(&guard);
    return outcome;
}
