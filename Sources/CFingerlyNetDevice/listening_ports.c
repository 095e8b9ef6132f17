#include "fingerly_net_device.h"

#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

/// A dump answers in messages of at most a page each; a larger buffer only saves calls.
enum { receive_size = 32 * 1024 };
/// No kernel sends this many parts for one dump: a bound for the loop, not a limit in practice.
enum { part_limit = 1 << 16 };

static ssize_t receive_from_kernel(int fd, void *buffer, size_t size) {
    for (;;) {
        struct sockaddr_nl sender;
        socklen_t sender_length = sizeof sender;
        ssize_t count = recvfrom(fd, buffer, size, 0, (struct sockaddr *)&sender, &sender_length);
        if (count < 0 && errno == EINTR) continue;
        if (count < 0) return -errno;
        // Only the kernel (port 0) answers a dump; anything else on the socket is not the answer.
        if (sender_length != sizeof sender || sender.nl_family != AF_NETLINK || sender.nl_pid != 0) continue;
        return count;
    }
}

/// Marks the ports of every message in one received part; 1 when the dump ended, 0 to read on, else -errno.
static int mark_ports(const struct nlmsghdr *message, ssize_t count, uint32_t sequence,
                      unsigned char ports[FINGERLY_PORT_BITMAP_SIZE]) {
    int remaining = (int)count;
    for (; NLMSG_OK(message, remaining); message = NLMSG_NEXT(message, remaining)) {
        if (message->nlmsg_seq != sequence) continue;
        if (message->nlmsg_type == NLMSG_DONE) return 1;
        if (message->nlmsg_type == NLMSG_ERROR) {
            if (message->nlmsg_len < NLMSG_LENGTH(sizeof(struct nlmsgerr))) return -EPROTO;
            const struct nlmsgerr *failure = NLMSG_DATA(message);
            return failure->error < 0 ? failure->error : -EPROTO;
        }
        if (message->nlmsg_type != SOCK_DIAG_BY_FAMILY ||
            message->nlmsg_len < NLMSG_LENGTH(sizeof(struct inet_diag_msg))) continue;
        const struct inet_diag_msg *socket_entry = NLMSG_DATA(message);
        if (socket_entry->idiag_state != TCP_LISTEN) continue;
        uint16_t port = ntohs(socket_entry->id.idiag_sport);
        ports[port / 8] |= (unsigned char)(1u << (port % 8));
    }
    return 0;
}

int fingerly_tcp_listening_ports(int family, unsigned char ports[FINGERLY_PORT_BITMAP_SIZE]) {
    if (family != AF_INET && family != AF_INET6) return -EAFNOSUPPORT;
    int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (fd < 0) return -errno;
    // The kernel answers at once; a bound all the same, so no host stalls the probe past its timeout.
    struct timeval wait = {.tv_sec = 0, .tv_usec = 200 * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
    const uint32_t sequence = 1;
    struct {
        struct nlmsghdr header;
        struct inet_diag_req_v2 request;
    } query;
    memset(&query, 0, sizeof query);
    query.header.nlmsg_len = sizeof query;
    query.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    query.header.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
    query.header.nlmsg_seq = sequence;
    query.request.sdiag_family = (uint8_t)family;
    query.request.sdiag_protocol = IPPROTO_TCP;
    // Listeners only: the kernel then walks its listening table, not every established bucket as
    // /proc/net/tcp does (milliseconds on a machine with much memory).
    query.request.idiag_states = 1u << TCP_LISTEN;
    struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
    ssize_t sent;
    do {
        sent = sendto(fd, &query, sizeof query, 0, (struct sockaddr *)&kernel, sizeof kernel);
    } while (sent < 0 && errno == EINTR);
    if (sent != (ssize_t)sizeof query) {
        int error = sent < 0 ? errno : EIO;
        close(fd);
        return -error;
    }
    memset(ports, 0, FINGERLY_PORT_BITMAP_SIZE);
    // malloc keeps the alignment netlink headers need, and keeps 32 KiB off a probe thread's stack.
    struct nlmsghdr *buffer = malloc(receive_size);
    int result = buffer ? -E2BIG : -ENOMEM;
    for (int part = 0; buffer && part < part_limit; part++) {
        ssize_t count = receive_from_kernel(fd, buffer, receive_size);
        int marked = count > 0 ? mark_ports(buffer, count, sequence, ports) : count == 0 ? -EPROTO : (int)count;
        if (marked != 0) {
            result = marked;
            break;
        }
    }
    free(buffer);
    close(fd);
    return result == 1 ? 0 : result;
}
