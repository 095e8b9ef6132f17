#ifndef FINGERLY_NET_DEVICE_H
#define FINGERLY_NET_DEVICE_H

/// Bytes of an Ethernet hardware address.
enum { FINGERLY_MAC_LENGTH = 6 };

/// The burned-in MAC of a network interface (ETHTOOL_GPERMADDR), even after the address was
/// changed or randomised. Writes FINGERLY_MAC_LENGTH bytes and returns 0; or returns -errno:
/// -ENAMETOOLONG for a name no interface can have, -ENODATA when the driver keeps no
/// permanent address of that length, else what socket or the ioctl said.
int fingerly_permanent_mac(const char *interface, unsigned char out[FINGERLY_MAC_LENGTH]);

#endif
