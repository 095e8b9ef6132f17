/// Network interfaces: driver, bus, virtual or not; permanent MACs hashed, with the OUI kept
/// as a non-identifying vendor signal.
struct NetworkInterfacesProbe: Probe {
    let id = "net"

    func collect(into context: ProbeContext) throws(ProbeFailure) {
        let devices: [DeviceNode]
        do {
            // The address is only read when a signal that needs it is wanted.
            let wantsAddress = context.wants("net.permanent_macs") || context.wants("net.ouis")
            devices = try context.deviceInventory().devices(DeviceQuery(subsystem: "net",
                attributes: wantsAddress ? ["address", "addr_assign_type", "type"] : ["type"]))
        } catch { throw ProbeFailure(error) }

        var descriptions: [String] = []
        var virtual: [String] = []
        var macs: [String] = []
        var ouis: [String] = []
        for interface in devices {
            let driver = interface.driver ?? interface.ancestors.first?.driver ?? "-"
            let bus = interface.bus ?? "none"
            descriptions.append("\(interface.sysname) driver=\(driver) bus=\(bus) virtual=\(interface.isVirtual)")
            if interface.isVirtual { virtual.append(interface.sysname); continue }
            // addr_assign_type 0 (NET_ADDR_PERM) means the address is the burned-in one; a
            // random or user-set address is neither stable nor the hardware's.
            guard interface.attributes["type"] == "1", interface.attributes["addr_assign_type"] == "0",
                  let mac = interface.attributes["address"]?.lowercased(), Self.isUniversal(mac) else { continue }
            macs.append(interface.sysname + " " + context.hash(mac))
            let oui = String(mac.prefix(8))
            if !ouis.contains(oui) { ouis.append(oui) }
            // A USB adapter comes and goes; only NICs on the machine's own buses identify it.
            if !interface.isBehindUSB {
                context.contribute(.hardware, "nic", raw: mac, worldReadable: true, signal: "net.permanent_macs")
            }
        }
        context.emit("net.interfaces", descriptions)
        context.emit("net.virtual_interfaces", virtual)
        if context.wants("net.permanent_macs") { context.emit("net.permanent_macs", macs) }
        context.emit("net.ouis", ouis.sorted())
    }

    /// Universally administered unicast, and not all zeros.
    static func isUniversal(_ mac: String) -> Bool {
        let octets = mac.split(separator: ":")
        guard octets.count == 6, let first = UInt8(octets[0], radix: 16) else { return false }
        return first & 0b11 == 0 && mac != "00:00:00:00:00:00"
    }
}
