import FingerlyHost
import FingerlyModel

/// Network interfaces: driver, bus, virtual or not; permanent MACs hashed, and the class of
/// each NIC's vendor only where it names a virtual machine's NIC. The OUI itself is never
/// reported: with it known, a MAC's hash falls to a search of 2^24 values.
package struct NetworkInterfacesProbe: Probe {
    package let id = "net"

    package func collect(into context: ProbeContext) throws(ProbeFailure) {
        let devices: [DeviceNode]
        do {
            // The address is only read when a signal that needs it is wanted.
            let wantsAddress = context.wants("net.permanent_macs") || context.wants("net.nic_vendor_classes")
            devices = try context.deviceInventory().devices(DeviceQuery(subsystem: "net",
                attributes: wantsAddress ? ["address", "addr_assign_type", "type"] : ["type"]))
        } catch { throw ProbeFailure(error) }

        var descriptions: [String] = []
        var virtual: [String] = []
        var macs: [String] = []
        var vendorClasses: Set<String> = []
        for interface in devices {
            let driver = interface.driver ?? interface.ancestors.first?.driver ?? "-"
            let bus = interface.bus ?? "none"
            let name = Self.displayName(interface.sysname)
            descriptions.append("\(name) driver=\(driver) bus=\(bus) virtual=\(interface.isVirtual)")
            if interface.isVirtual { virtual.append(name); continue }
            guard interface.attributes["type"] == "1" else { continue }
            let permanent = Self.permanentAddress(of: interface, live: context.host.isLiveHost)
            if let address = permanent ?? interface.attributes["address"]?.lowercased(),
               let vendorClass = Self.vendorClass(of: address, table: context.tables.mapping("nicVendorClasses")) {
                vendorClasses.insert(vendorClass)
            }
            guard let mac = permanent, Self.isUniversal(mac) else { continue }
            macs.append(name + " " + context.hash(mac))
            // A USB adapter comes and goes; only NICs on the machine's own buses identify it.
            if !interface.isBehindUSB {
                context.contribute(.hardware, "nic", raw: mac, worldReadable: true, signal: "net.permanent_macs")
            }
        }
        context.emit("net.interfaces", descriptions)
        context.emit("net.virtual_interfaces", virtual)
        if context.wants("net.permanent_macs") { context.emit("net.permanent_macs", macs) }
        context.emit("net.nic_vendor_classes", vendorClasses.sorted())
    }

    /// The table's class for the longest prefix that matches; else `locally-administered`
    /// (cloud and container NICs make up their own addresses) or `physical-or-unknown`.
    /// Only the form the kernel writes, six pairs of ASCII hex digits joined by colons, has a class.
    static func vendorClass(of mac: String, table: [String: String]) -> String? {
        // Bytes, not split and joined substrings: this runs for every interface on every start.
        let bytes = Array(mac.utf8)
        guard bytes.count == 17, mac != "00:00:00:00:00:00" else { return nil }
        for (offset, byte) in bytes.enumerated() {
            let isHexDigit = (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
                || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(byte | 0x20)
            guard offset % 3 == 2 ? byte == UInt8(ascii: ":") : isHexDigit else { return nil }
        }
        guard let first = UInt8(String(decoding: bytes[0..<2], as: UTF8.self), radix: 16) else { return nil }
        for octets in [3, 2, 1] {
            if let vendorClass = table[String(decoding: bytes[0..<(octets * 3 - 1)], as: UTF8.self)] { return vendorClass }
        }
        return first & 0b10 != 0 ? "locally-administered" : "physical-or-unknown"
    }

    /// The burned-in address: ethtool's permanent address on the live host (it survives a
    /// randomised or user-set MAC), else the current one when addr_assign_type is 0 (NET_ADDR_PERM).
    static func permanentAddress(of interface: DeviceNode, live: Bool) -> String? {
        if live {
            // A driver without a permanent address (most virtual ones) leaves the sysfs attributes.
            do {
                let bytes = try NetworkDevice.permanentAddress(of: interface.sysname)
                if bytes.contains(where: { $0 != 0 }) {
                    return bytes.map { lowercaseHex([$0]) }.joined(separator: ":")
                }
            } catch {}
        }
        guard interface.attributes["addr_assign_type"] == "0" else { return nil }
        return interface.attributes["address"]?.lowercased()
    }

    /// systemd's MAC-based names (enx001122334455, wlx…) carry the raw address: report the
    /// kind of name, never the address.
    static func displayName(_ name: String) -> String {
        for prefix in ["enx", "wlx", "wwx", "ibx"] where name.hasPrefix(prefix) {
            let rest = name.dropFirst(prefix.count)
            if rest.count == 12 && rest.allSatisfy(\.isHexDigit) { return prefix + "<mac>" }
        }
        return name
    }

    /// Universally administered unicast, and not all zeros.
    static func isUniversal(_ mac: String) -> Bool {
        let octets = mac.split(separator: ":")
        guard octets.count == 6, let first = UInt8(octets[0], radix: 16) else { return false }
        return first & 0b11 == 0 && mac != "00:00:00:00:00:00"
    }
}
