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
