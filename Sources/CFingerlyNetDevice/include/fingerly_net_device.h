#ifndef FINGERLY_NET_DEVICE_H
#define FINGERLY_NET_DEVICE_H

/// Bytes of an Ethernet hardware address.
enum { FINGERLY_MAC_LENGTH = 6 };

/// The burned-in MAC of a network interface (ETHTOOL_GPERMADDR), even after the address was
/// changed or randomised. Writes FINGERLY_MAC_LENGTH bytes and returns 0; or returns -errno:
/// -ENAMETOOLONG for a name no interface can have, -ENODATA when the driver keeps no
/// permanent address of that length, else what socket or the ioctl said.
int fingerly_permanent_mac(const char *interface, unsigned char out[FINGERLY_MAC_LENGTH]);

/// One bit per TCP port: bit (port % 8) of byte (port / 8).
enum { FINGERLY_PORT_BITMAP_SIZE = 65536 / 8 };

/// Marks in `ports` every TCP port with a listening socket of `family` (AF_INET or AF_INET6) in
/// this network namespace, asked of the kernel over sock_diag netlink. Returns 0, or -errno:
/// what socket, sendto or recvfrom said (EPERM or EACCES under a seccomp or LSM policy,
/// EPROTONOSUPPORT without sock_diag), the kernel's own error for the dump, -EPROTO for an
/// answer that is not a dump's.
int fingerly_tcp_listening_ports(int family, unsigned char ports[FINGERLY_PORT_BITMAP_SIZE]);

#endif
