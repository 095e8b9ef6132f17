import CFingerlyNetDevice

package enum NetworkDevice {
    /// The burned-in hardware address of an interface (ETHTOOL_GPERMADDR), which survives a
    /// randomised or user-set MAC: six bytes. ENODATA or EOPNOTSUPP when the driver keeps none,
    /// as virtual ones do.
    package static func permanentAddress(of interface: String) throws(SystemError) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: Int(FINGERLY_MAC_LENGTH))
        let result = fingerly_permanent_mac(interface, &bytes)
        guard result == 0 else { throw SystemError(-result) }
        return bytes
    }
}

extension NetworkDevice {
    /// The TCP ports with a listening socket of one address family in this network namespace, as
    /// the kernel's sock_diag netlink answers (`family`: AF_INET or AF_INET6). EPERM or EACCES
    /// where a policy forbids netlink sockets, EPROTONOSUPPORT without sock_diag.
    package static func listeningTCPPorts(family: Int32) throws(SystemError) -> Set<Int> {
        var bitmap = [UInt8](repeating: 0, count: Int(FINGERLY_PORT_BITMAP_SIZE))
        let result = fingerly_tcp_listening_ports(family, &bitmap)
        guard result == 0 else { throw SystemError(-result) }
        var ports: Set<Int> = []
        for (index, byte) in bitmap.enumerated() where byte != 0 {
            for bit in 0..<8 where byte & (1 << bit) != 0 { ports.insert(index * 8 + bit) }
        }
        return ports
    }
}
