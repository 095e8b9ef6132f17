import FingerlyHost
import FingerlyModel

/// What a guest kernel and its firmware say about the hypervisor beyond CPUID and DMI: Xen's
/// interfaces (telling dom0 from a guest), device-tree nodes, s390 and POWER firmware files,
/// ACPI table OEM ids, the VM generation counter, clocksources and paravirtual buses.
package struct HypervisorMarkersProbe: Probe {
    package let id = "hypervisor-markers"

    package func collect(into context: ProbeContext) throws(ProbeFailure) {
        let host = context.host
        let tables = context.tables.group("hypervisorMarkers")
        func text(_ path: String) -> String? {
            context.attemptIfPresent { () throws(HostReadError) in try host.readText(path, limit: 64 * 1024) }
        }

        // Xen: the hardware domain has feature bit 11 (XENFEAT_dom0) in /sys/hypervisor, and
        // control_d in /proc/xen/capabilities; a dom0 is a hypervisor host, not a guest.
        let dom0: Bool
        if let features = text("/sys/hypervisor/properties/features").flatMap(Self.hexadecimal) {
            dom0 = features & (1 << 11) != 0
        } else {
            dom0 = text("/proc/xen/capabilities")?.contains("control_d") == true
        }
        let hypervisorType = text("/sys/hypervisor/type")?.trimmingWhitespace()
        // A xen bus beside xen-backend is a domain serving devices to others, not a plain guest.
        let xenBus = host.exists("/sys/bus/xen/drivers") && !host.exists("/sys/bus/xen-backend")
        let xenInterfaces = host.exists("/proc/xen") || hypervisorType == "xen" || xenBus
        context.emit("virt.xen_dom0", dom0)
        context.emit("virt.xen_guest", xenInterfaces && !dom0)

        if let compatible = text("/proc/device-tree/hypervisor/compatible") {
            let named = tables.patterns("deviceTreeHypervisors").first { compatible.containsUTF8($0.pattern) }?.kind
            context.emit("virt.devicetree_kind", named ?? "vm-other")
        } else if host.exists("/proc/device-tree/ibm,partition-name"), host.exists("/proc/device-tree/hmc-managed?"),
                  !host.exists("/proc/device-tree/chosen/qemu,graphic-width") {
            // An HMC-managed partition that QEMU did not describe: PowerVM.
            context.emit("virt.devicetree_kind", "powervm")
        } else if let nodes = context.attemptIfPresent({ () throws(HostReadError) in try host.listDirectory("/proc/device-tree") }),
                  nodes.contains(where: { $0.contains("fw-cfg") }) {
            context.emit("virt.devicetree_kind", "qemu")
        } else if let compatible = text("/proc/device-tree/compatible"),
                  let kind = tables.patterns("deviceTreeCompatible").first(where: { compatible.containsUTF8($0.pattern) })?.kind {
            context.emit("virt.devicetree_kind", kind)
        }

        // Platform files, in order: the first that names something wins.
        var platform: String?
        if let sysinfo = text("/proc/sysinfo") {
            for row in tables.patterns("sysinfo") where sysinfo.containsUTF8(row.pattern) { platform = row.kind; break }
        }
        if platform == nil, let cpuinfo = text("/proc/cpuinfo") {
            for row in tables.patterns("cpuinfo") where cpuinfo.containsUTF8(row.pattern) { platform = row.kind; break }
        }
        if platform == nil, host.exists("/proc/ppc64/lparcfg") { platform = "powervm" }
        if platform == nil, host.exists("/dev/mdesc") { platform = "ldoms" }
        if platform == nil, let hypervisorType, !hypervisorType.isEmpty, hypervisorType != "xen" { platform = "vm-other" }
        if let platform { context.emit("virt.platform_kind", platform) }

        // An ACPI table header (36 bytes) names its writer three times: the OEM id (10..<16), the OEM table id
        // (16..<24) and the creator id (28..<32). Patches against detection often rename only the first; QEMU's
        // "BXPC" stays behind in the others. The tables are root-only.
        if let names = context.attemptIfPresent({ () throws(HostReadError) in try host.listDirectory("/sys/firmware/acpi/tables") }) {
            var oems: [String] = [], tableIds: [String] = [], creators: [String] = []
            let byOem = tables.mapping("acpiOemIds"), prefixes = tables.mapping("acpiTableIdPrefixes")
            let byCreator = tables.mapping("acpiCreatorIds")
            var oemKind: String?, tableIdKind: String?, creatorKind: String?
            // Every header is judged; only the lists reported are capped, so padding tables cannot push a BXPC out.
            func note(_ bytes: ArraySlice<UInt8>, in list: inout [String]) -> String? {
                let id = String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self).trimmingWhitespace()
                guard !id.isEmpty else { return nil }
                if !list.contains(id) && list.count < Self.acpiIdLimit { list.append(id) }
                return id
            }
            for name in names where !["data", "dynamic"].contains(name) {
                guard let header = context.attempt({ () throws(HostReadError) in try host.read("/sys/firmware/acpi/tables/" + name, limit: 36) }),
                      header.count >= 16 else { continue }
                if let id = note(header[10..<16], in: &oems) { oemKind = oemKind ?? byOem[id] }
                if header.count >= 24, let id = note(header[16..<24], in: &tableIds) {
                    tableIdKind = tableIdKind ?? prefixes.first { id.hasPrefix($0.key) }?.value
                }
                if header.count >= 32, let id = note(header[28..<32], in: &creators) {
                    creatorKind = creatorKind ?? byCreator[id]
                }
            }
            context.emit("virt.acpi_oem_ids", oems)
            context.emit("virt.acpi_table_ids", tableIds)
            context.emit("virt.acpi_creator_ids", creators)
            if let oemKind { context.emit("virt.acpi_kind", oemKind) }
            if let kind = tableIdKind ?? creatorKind { context.emit("virt.acpi_id_kind", kind) }
        }
        // The driver makes /sys/firmware/qemu_fw_cfg when it loads (or is built in) whether or not a device is there;
        // the revision file (root-only to read, not to see) appears only once it has found one.
        var fwCfg = host.exists("/sys/firmware/qemu_fw_cfg/rev")
        if let devices = context.attemptIfPresent({ () throws(HostReadError) in try host.listDirectory("/sys/bus/acpi/devices") }) {
            context.emit("virt.vm_generation_counter", devices.contains { $0.hasPrefix("VMGENCTR") || $0.hasPrefix("QEMUVGID") })
            // QEMU0002 is QEMU's firmware configuration device (fw_cfg), which only QEMU emulates.
            fwCfg = fwCfg || devices.contains { $0.hasPrefix("QEMU0002:") }
        }
        if fwCfg { context.emit("virt.qemu_fw_cfg", true) }

        if let available = text("/sys/devices/system/clocksource/clocksource0/available_clocksource") {
            let sources = available.split(whereSeparator: { $0 == " " || $0 == "\n" }).map(String.init)
            if let kind = sources.lazy.compactMap({ source in tables.patterns("clocksources").first { source.hasPrefix($0.pattern) }?.kind }).first {
                context.emit("virt.clocksource_kind", kind)
            }
        }
        let modules = context.attemptIfPresent { () throws(HostReadError) in try host.listDirectory("/sys/module") } ?? []
        let drivers = tables.patterns("guestDrivers").filter {
            modules.contains($0.pattern) && Self.isInUse(module: $0.pattern, context)
        }
        if !drivers.isEmpty {
            context.emit("virt.guest_drivers", drivers.map(\.pattern))
            context.emit("virt.guest_driver_kind", drivers[0].kind)
        }
        if host.exists("/sys/bus/vmbus") { context.emit("virt.bus_kind", "hyperv") }
    }

    /// Whether a guest driver is loaded as a module (it has an `initstate`) or drives a device. A kernel with the
    /// driver built in has /sys/module/<name> without any of the hardware, since the kernel makes one for every
    /// built-in driver; and such a module loads by itself only when its device appears.
    static func isInUse(module: String, _ context: ProbeContext) -> Bool {
        let directory = "/sys/module/" + module
        if context.host.exists(directory + "/initstate") { return true }
        guard let buses = context.attemptIfPresent({ () throws(HostReadError) in
            try context.host.listDirectory(directory + "/drivers")
        }) else { return false }
        return buses.contains { bus in
            let entries = context.attemptIfPresent { () throws(HostReadError) in
                try context.host.listDirectory(directory + "/drivers/" + bus)
            } ?? []
            return entries.contains { !driverControlFiles.contains($0) }
        }
    }

    /// What a driver's sysfs directory holds besides the devices it drives.
    static let driverControlFiles: Set<String> = ["bind", "unbind", "uevent", "module", "new_id", "remove_id"]

    /// Distinct ids kept per field: a host has a few dozen tables, a hostile tree any number.
    static let acpiIdLimit = 64

    /// /sys/hypervisor/properties/features: hexadecimal without "0x", at most 64 bits.
    static func hexadecimal(_ text: String) -> UInt64? {
        let digits = text.trimmingWhitespace()
        guard !digits.isEmpty, digits.utf8.count <= 16 else { return nil }
        return UInt64(digits, radix: 16)
    }
}
