#include "fingerly_httpd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/// One open connection as the head watchdog sees it.
struct watched_connection {
    struct watched_connection *previous, *next;
    MHD_socket fd;
    /// Monotonic milliseconds since which the connection owes a request head; 0 while a request is
    /// being answered (its head is in), -1 once the watchdog shut it.
    _Atomic int64_t waiting_since;
};

/// libmicrohttpd's connection timeout counts idleness, and every byte is activity: a head sent one
/// byte at a time would hold its connection for ever. The watchdog shuts a connection whose head is
/// not in `head_deadline_ms` after it opened or after its previous answer; libmicrohttpd then sees the
/// socket end and closes it as its own.
struct fingerly_httpd {
    struct MHD_Daemon *daemon;
    MHD_AccessHandlerCallback handler;
    MHD_RequestCompletedCallback completed;
    void *context;
    int64_t head_deadline_ms;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    struct watched_connection *connections;
    int stopping;
    pthread_t watchdog;
    int watchdog_running;
};

void fingerly_httpd_request_free(struct fingerly_httpd_request *request) {
    if (request == NULL) return;
    free(request->target);
    free(request);
}

static void describe_peer(struct MHD_Connection *connection, char *out, size_t size) {
    out[0] = 0;
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (info == NULL || info->client_addr == NULL) return;
    const struct sockaddr *address = info->client_addr;
    if (address->sa_family == AF_INET) {
        inet_ntop(AF_INET, &((const struct sockaddr_in *)address)->sin_addr, out, (socklen_t)size);
    } else if (address->sa_family == AF_INET6) {
        struct in6_addr prefix = ((const struct sockaddr_in6 *)address)->sin6_addr;
        // An IPv4 client of a dual-stack socket is one address, not a /64.
        if (!IN6_IS_ADDR_V4MAPPED(&prefix)) memset(prefix.s6_addr + 8, 0, 8);
        inet_ntop(AF_INET6, &prefix, out, (socklen_t)size);
    }
}

static void *request_started(void *context, const char *uri, struct MHD_Connection *connection) {
    (void)context;
    struct fingerly_httpd_request *request = calloc(1, sizeof *request);
    if (request == NULL) return NULL;
    request->target = strdup(uri == NULL ? "" : uri);
    describe_peer(connection, request->peer, sizeof request->peer);
    return request;
}

static int64_t monotonic_milliseconds(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

static struct watched_connection *watched(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info == NULL ? NULL : info->socket_context;
}

/// Called by libmicrohttpd's threads when a connection opens and (before its socket is closed) when it ends.
static void connection_changed(void *cls, struct MHD_Connection *connection, void **socket_context,
                               enum MHD_ConnectionNotificationCode code) {
    struct fingerly_httpd *httpd = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
        struct watched_connection *entry = info == NULL ? NULL : calloc(1, sizeof *entry);
        if (entry == NULL) return;
        entry->fd = info->connect_fd;
        atomic_store(&entry->waiting_since, monotonic_milliseconds());
        pthread_mutex_lock(&httpd->lock);
        entry->next = httpd->connections;
        if (entry->next != NULL) entry->next->previous = entry;
        httpd->connections = entry;
        pthread_mutex_unlock(&httpd->lock);
        *socket_context = entry;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        struct watched_connection *entry = *socket_context;
        if (entry == NULL) return;
        // Unlinked under the lock before libmicrohttpd closes the socket: the watchdog never shuts
        // a descriptor number that a newer connection has since been given.
        pthread_mutex_lock(&httpd->lock);
        if (entry->previous != NULL) entry->previous->next = entry->next; else httpd->connections = entry->next;
        if (entry->next != NULL) entry->next->previous = entry->previous;
        pthread_mutex_unlock(&httpd->lock);
        free(entry);
        *socket_context = NULL;
    }
}

static enum MHD_Result access_handler(void *cls, struct MHD_Connection *connection, const char *url, const char *method,
                                      const char *version, const char *upload_data, size_t *upload_data_size,
                                      void **req_cls) {
    struct fingerly_httpd *httpd = cls;
    const struct fingerly_httpd_request *request = *req_cls;
    // The first call of a request: its head is in.
    if (request != NULL && request->state == NULL) {
        struct watched_connection *entry = watched(connection);
        if (entry != NULL) atomic_store(&entry->waiting_since, 0);
    }
    return httpd->handler(httpd->context, connection, url, method, version, upload_data, upload_data_size, req_cls);
}

static void request_completed(void *cls, struct MHD_Connection *connection, void **req_cls,
                              enum MHD_RequestTerminationCode code) {
    struct fingerly_httpd *httpd = cls;
    httpd->completed(httpd->context, connection, req_cls, code);
    // A kept-alive connection owes the next head from now on.
    struct watched_connection *entry = watched(connection);
    int64_t answering = 0;
    if (entry != NULL) atomic_compare_exchange_strong(&entry->waiting_since, &answering, monotonic_milliseconds());
}

static void *watch_heads(void *argument) {
    struct fingerly_httpd *httpd = argument;
    pthread_mutex_lock(&httpd->lock);
    while (!httpd->stopping) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += 250 * 1000000L;
        if (until.tv_nsec >= 1000000000L) { until.tv_sec += 1; until.tv_nsec -= 1000000000L; }
        pthread_cond_timedwait(&httpd->wake, &httpd->lock, &until);
        int64_t now = monotonic_milliseconds();
        for (struct watched_connection *entry = httpd->connections; entry != NULL; entry = entry->next) {
            int64_t since = atomic_load(&entry->waiting_since);
            if (since <= 0 || now - since <= httpd->head_deadline_ms) continue;
            if (atomic_compare_exchange_strong(&entry->waiting_since, &since, -1)) shutdown(entry->fd, SHUT_RDWR);
        }
    }
    pthread_mutex_unlock(&httpd->lock);
    return NULL;
}

static void release(struct fingerly_httpd *httpd) {
    if (httpd->watchdog_running) {
        pthread_mutex_lock(&httpd->lock);
        httpd->stopping = 1;
        pthread_cond_signal(&httpd->wake);
        pthread_mutex_unlock(&httpd->lock);
        pthread_join(httpd->watchdog, NULL);
    }
    pthread_cond_destroy(&httpd->wake);
    pthread_mutex_destroy(&httpd->lock);
    free(httpd);
}

struct fingerly_httpd *fingerly_httpd_start(const struct fingerly_httpd_settings *settings,
                                            MHD_AccessHandlerCallback handler,
                                            MHD_RequestCompletedCallback completed,
                                            void *context) {
    struct fingerly_httpd *httpd = calloc(1, sizeof *httpd);
    if (httpd == NULL) return NULL;
    httpd->handler = handler;
    httpd->completed = completed;
    httpd->context = context;
    httpd->head_deadline_ms = (int64_t)settings->connection_timeout * 1000;
    pthread_condattr_t attributes;
    pthread_condattr_init(&attributes);
    pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC);
    pthread_cond_init(&httpd->wake, &attributes);
    pthread_condattr_destroy(&attributes);
    pthread_mutex_init(&httpd->lock, NULL);

    // ITC: MHD_quiesce_daemon needs it to wake the pool's threads when it stops accepting.
    unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC;
    flags |= settings->use_epoll ? MHD_USE_EPOLL : MHD_USE_POLL;
    if (settings->address != NULL && settings->address->sa_family == AF_INET6) flags |= MHD_USE_IPv6;
    uint16_t port = 0;
    if (settings->address != NULL) {
        port = settings->address->sa_family == AF_INET6
            ? ntohs(((const struct sockaddr_in6 *)settings->address)->sin6_port)
            : ntohs(((const struct sockaddr_in *)settings->address)->sin_port);
    }
    int tls = settings->tls_certificate != NULL && settings->tls_key != NULL;
    if (tls) flags |= MHD_USE_TLS;

    struct MHD_OptionItem options[14];
    size_t count = 0;
    if (settings->address != NULL) {
        options[count++] = (struct MHD_OptionItem){MHD_OPTION_SOCK_ADDR, 0, (void *)settings->address};
    }
    options[count++] = (struct MHD_OptionItem){MHD_OPTION_THREAD_POOL_SIZE, settings->threads, NULL};
    options[count++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_LIMIT, settings->connection_limit, NULL};
    options[count++] =
        (struct MHD_OptionItem){MHD_OPTION_PER_IP_CONNECTION_LIMIT, settings->connections_per_address, NULL};
    options[count++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_TIMEOUT, settings->connection_timeout, NULL};
    options[count++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_MEMORY_LIMIT, (intptr_t)settings->connection_memory_limit, NULL};
    options[count++] = (struct MHD_OptionItem){MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)request_completed, httpd};
    options[count++] = (struct MHD_OptionItem){MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)connection_changed, httpd};
    options[count++] = (struct MHD_OptionItem){MHD_OPTION_URI_LOG_CALLBACK, (intptr_t)request_started, NULL};
    if (tls) {
        options[count++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, (void *)settings->tls_certificate};
        options[count++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, (void *)settings->tls_key};
    }
    options[count++] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};

    httpd->daemon = MHD_start_daemon(flags, port, NULL, NULL, access_handler, httpd,
                                     MHD_OPTION_ARRAY, options, MHD_OPTION_END);
    if (httpd->daemon == NULL) {
        int reason = errno;  // what the caller reports, e.g. the address in use
        release(httpd);
        errno = reason;
        return NULL;
    }
    httpd->watchdog_running = pthread_create(&httpd->watchdog, NULL, watch_heads, httpd) == 0;
    if (!httpd->watchdog_running) {
        MHD_stop_daemon(httpd->daemon);
        release(httpd);
        return NULL;
    }
    return httpd;
}

struct MHD_Daemon *fingerly_httpd_daemon(struct fingerly_httpd *httpd) {
    return httpd->daemon;
}

void fingerly_httpd_stop(struct fingerly_httpd *httpd) {
    if (httpd == NULL) return;
    // The daemon first: closing its connections unlinks them, with the watchdog still running.
    MHD_stop_daemon(httpd->daemon);
    release(httpd);
}

uint16_t fingerly_httpd_bound_port(struct fingerly_httpd *httpd) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(httpd->daemon, MHD_DAEMON_INFO_BIND_PORT);
    return info == NULL ? 0 : info->port;
}

int fingerly_httpd_supports_tls(void) {
    return MHD_is_feature_supported(MHD_FEATURE_TLS) == MHD_YES;
}

struct first_message {
    char *text;
    size_t capacity;
    int taken;
};

static void keep_first_message(void *context, const char *format, va_list arguments) {
    struct first_message *message = context;
    if (message->taken || message->capacity == 0) return;
    message->taken = 1;
    vsnprintf(message->text, message->capacity, format, arguments);
}

static enum MHD_Result refuse_request(void *cls, struct MHD_Connection *connection, const char *url, const char *method,
                                      const char *version, const char *upload_data, size_t *upload_data_size,
                                      void **req_cls) {
    (void)cls; (void)connection; (void)url; (void)method; (void)version;
    (void)upload_data; (void)upload_data_size; (void)req_cls;
    return MHD_NO;
}

int fingerly_httpd_check_tls(const char *certificate, const char *key, char *message, size_t capacity) {
    struct first_message first = {message, capacity, 0};
    if (capacity > 0) message[0] = 0;
    // No listening socket and no internal thread: the daemon only loads the credentials.
    unsigned int flags = MHD_USE_TLS | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ERROR_LOG;
    struct MHD_Daemon *daemon = MHD_start_daemon(flags, 0, NULL, NULL, refuse_request, NULL,
                                                 MHD_OPTION_EXTERNAL_LOGGER, keep_first_message, &first,
                                                 MHD_OPTION_HTTPS_MEM_CERT, certificate,
                                                 MHD_OPTION_HTTPS_MEM_KEY, key, MHD_OPTION_END);
    if (daemon == NULL) return 0;
    MHD_stop_daemon(daemon);
    return 1;
}
