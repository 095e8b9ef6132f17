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
            func note(_ bytes: ArraySlice<UInt8>, in list: inout [String]) {
                let id = String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self).trimmingWhitespace()
                if !id.isEmpty && !list.contains(id) && list.count < Self.acpiIdLimit { list.append(id) }
            }
            for name in names where !["data", "dynamic"].contains(name) {
                guard let header = context.attempt({ () throws(HostReadError) in try host.read("/sys/firmware/acpi/tables/" + name, limit: 36) }),
                      header.count >= 16 else { continue }
                note(header[10..<16], in: &oems)
                if header.count >= 24 { note(header[16..<24], in: &tableIds) }
                if header.count >= 32 { note(header[28..<32], in: &creators) }
            }
            context.emit("virt.acpi_oem_ids", oems)
            context.emit("virt.acpi_table_ids", tableIds)
            context.emit("virt.acpi_creator_ids", creators)
            if let kind = oems.lazy.compactMap({ tables.mapping("acpiOemIds")[$0] }).first { context.emit("virt.acpi_kind", kind) }
            let prefixes = tables.mapping("acpiTableIdPrefixes")
            let byTable = tableIds.lazy.compactMap { id in prefixes.first { id.hasPrefix($0.key) }?.value }.first
            if let kind = byTable ?? creators.lazy.compactMap({ tables.mapping("acpiCreatorIds")[$0] }).first {
                context.emit("virt.acpi_id_kind", kind)
            }
        }
        var fwCfg = host.exists("/sys/firmware/qemu_fw_cfg")
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
        let drivers = tables.patterns("guestDrivers").filter { modules.contains($0.pattern) }
        if !drivers.isEmpty {
            context.emit("virt.guest_drivers", drivers.map(\.pattern))
            context.emit("virt.guest_driver_kind", drivers[0].kind)
        }
        if host.exists("/sys/bus/vmbus") { context.emit("virt.bus_kind", "hyperv") }
    }

    /// Distinct ids kept per field: a host has a few dozen tables, a hostile tree any number.
    static let acpiIdLimit = 64

    /// /sys/hypervisor/properties/features: hexadecimal without "0x", at most 64 bits.
    static func hexadecimal(_ text: String) -> UInt64? {
        let digits = text.trimmingWhitespace()
        guard !digits.isEmpty, digits.utf8.count <= 16 else { return nil }
        return UInt64(digits, radix: 16)
    }
}
