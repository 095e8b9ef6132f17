#include "fingerly_net_device.h"

#include <errno.h>
#include <net/if.h>
#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

int fingerly_permanent_mac(const char *interface, unsigned char out[FINGERLY_MAC_LENGTH]) {
    // A longer name would be cut to another interface's name, and its address reported.
    if (strnlen(interface, IFNAMSIZ) >= IFNAMSIZ) return -ENAMETOOLONG;
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    // The header's flexible data array runs on into the union's spare bytes.
    enum { address_room = 32 };
    union {
        struct ethtool_perm_addr header;
        unsigned char bytes[sizeof(struct ethtool_perm_addr) + address_room];
    } request;
    memset(&request, 0, sizeof request);
    request.header.cmd = ETHTOOL_GPERMADDR;
    request.header.size = address_room;
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    memcpy(ifr.ifr_name, interface, strlen(interface));
    ifr.ifr_data = (void *)&request;
    int result = ioctl(fd, SIOCETHTOOL, &ifr);
    int error = errno;
    close(fd);
    if (result < 0) return -error;
    if (request.header.size != FINGERLY_MAC_LENGTH) return -ENODATA;
    memcpy(out, request.header.data, FINGERLY_MAC_LENGTH);
    return 0;
}
