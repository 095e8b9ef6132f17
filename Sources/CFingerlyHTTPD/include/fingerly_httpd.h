#ifndef FINGERLY_HTTPD_H
#define FINGERLY_HTTPD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <microhttpd.h>

// libmicrohttpd's start call, daemon and connection queries take their options as varargs,
// which Swift cannot call: these wrappers take them as a struct and fixed arguments.

struct fingerly_httpd_settings {
    /// Where to listen: a sockaddr_in or sockaddr_in6 (port 0: the kernel picks one).
    const struct sockaddr *address;
    /// Worker threads, each with its own poll loop over its share of the connections.
    unsigned int threads;
    unsigned int connection_limit;
    /// Connections open at once from one client address; more are closed as they are accepted.
    unsigned int connections_per_address;
    /// Seconds a connection may stay idle before it is closed, and seconds it gets to send a whole
    /// request head (from its opening, or from its previous answer) however busily it trickles.
    unsigned int connection_timeout;
    /// Bytes of per-connection memory, which bounds the request line and headers.
    size_t connection_memory_limit;
    /// PEM text of the certificate chain and its key, both NULL for plain HTTP.
    const char *tls_certificate;
    const char *tls_key;
    int use_epoll;
};

/// What the daemon keeps for one request from its request line on: libmicrohttpd hands the
/// access handler the target percent-decoded and without its query, and a signature covers
/// the target as sent. Made before the headers are read; freed by `fingerly_httpd_request_free`.
struct fingerly_httpd_request {
    /// The request-target exactly as received, query included (NUL-terminated; NULL when out of memory).
    char *target;
    /// The client's address as text (IPv4 dotted, IPv6 cut to its /64 prefix, since one host
    /// holds a whole /64); empty when unknown.
    char peer[64];
    /// The Swift side's own state of this request.
    void *state;
};

void fingerly_httpd_request_free(struct fingerly_httpd_request *request);

/// A running libmicrohttpd daemon and the watchdog of its connections' request heads.
struct fingerly_httpd;

/// Starts the daemon, or NULL (errno may say why). `handler` and `completed` receive `context`;
/// the access handler's `*req_cls` is a `struct fingerly_httpd_request *` from the first call on.
struct fingerly_httpd *fingerly_httpd_start(const struct fingerly_httpd_settings *settings,
                                            MHD_AccessHandlerCallback handler,
                                            MHD_RequestCompletedCallback completed,
                                            void *context);

/// The libmicrohttpd daemon itself, for `MHD_quiesce_daemon`.
struct MHD_Daemon *fingerly_httpd_daemon(struct fingerly_httpd *httpd);

/// Stops the daemon (`MHD_stop_daemon`) and its watchdog, and frees `httpd`.
void fingerly_httpd_stop(struct fingerly_httpd *httpd);

/// The port the daemon listens on (useful after asking for port 0), 0 when unknown.
uint16_t fingerly_httpd_bound_port(struct fingerly_httpd *httpd);

/// Whether this libmicrohttpd was built with HTTPS (GnuTLS).
int fingerly_httpd_supports_tls(void);

/// Whether GnuTLS takes this PEM certificate chain and key (both NUL-terminated) as a pair: 1 when it
/// does, else 0 with libmicrohttpd's first complaint in `message` (NUL-terminated, cut to `capacity`).
/// No socket is opened: a bad file is told apart from an address that cannot be listened on.
int fingerly_httpd_check_tls(const char *certificate, const char *key, char *message, size_t capacity);

#endif
