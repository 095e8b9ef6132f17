#include "fingerly_httpd.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

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

struct MHD_Daemon *fingerly_httpd_start(const struct fingerly_httpd_settings *settings,
                                        MHD_AccessHandlerCallback handler,
                                        MHD_RequestCompletedCallback completed,
                                        void *context) {
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

    struct MHD_OptionItem options[12];
    size_t count = 0;
    if (settings->address != NULL) {
        options[count++] = (struct MHD_OptionItem){MHD_OPTION_SOCK_ADDR, 0, (void *)settings->address};
    }
    options[count++] = (struct MHD_OptionItem){MHD_OPTION_THREAD_POOL_SIZE, settings->threads, NULL};
    options[count++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_LIMIT, settings->connection_limit, NULL};
    options[count++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_TIMEOUT, settings->connection_timeout, NULL};
    options[count++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_MEMORY_LIMIT, (intptr_t)settings->connection_memory_limit, NULL};
    options[count++] = (struct MHD_OptionItem){MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)completed, context};
    options[count++] = (struct MHD_OptionItem){MHD_OPTION_URI_LOG_CALLBACK, (intptr_t)request_started, NULL};
    if (tls) {
        options[count++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, (void *)settings->tls_certificate};
        options[count++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, (void *)settings->tls_key};
    }
    options[count++] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};

    return MHD_start_daemon(flags, port, NULL, NULL, handler, context,
                            MHD_OPTION_ARRAY, options, MHD_OPTION_END);
}

uint16_t fingerly_httpd_bound_port(struct MHD_Daemon *daemon) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    return info == NULL ? 0 : info->port;
}

int fingerly_httpd_supports_tls(void) {
    return MHD_is_feature_supported(MHD_FEATURE_TLS) == MHD_YES;
}
