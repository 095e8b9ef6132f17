/// Firmware vendor strings from /sys/class/dmi/id (world-readable, unlike the serials).
struct DMIProbe: Probe {
    let id = "dmi"
    static let directory = "/sys/class/dmi/id/"
    static let strings = [
        ("sys_vendor", "dmi.sys_vendor"),
        ("product_name", "dmi.product_name"),
        ("board_vendor", "dmi.board_vendor"),
        ("bios_vendor", "dmi.bios_vendor"),
    ]

    func collect(into context: ProbeContext) throws(ProbeFailure) {
        let host = context.host
        var vendorTexts: [String] = []
        // An ignored string is not read, so it cannot name a hypervisor either.
        for (file, signal) in Self.strings where context.wants(signal) {
            guard let value = context.attempt({ () throws(HostReadError) in try host.readAttribute(Self.directory + file) }),
                  !value.isEmpty else { continue }
            context.emit(signal, value)
            vendorTexts.append(value)
        }
        if context.wants("dmi.chassis_type") || context.wants("dmi.chassis_kind"),
           let text = context.attempt({ () throws(HostReadError) in try host.readAttribute(Self.directory + "chassis_type") }) {
            if let number = Int(text) {
                context.emit("dmi.chassis_type", number)
                context.emit("dmi.chassis_kind", context.tables.chassisTypes[String(number)] ?? "unknown")
            } else {
                context.recordMalformed(Self.directory + "chassis_type", "not an SMBIOS chassis number")
            }
        }
        // Vendor and model strings are world-readable and shared by every unit of a model: one
        // weak component, not an identifier on their own.
        if !vendorTexts.isEmpty {
            context.contribute(.hardware, "dmi-model", raw: vendorTexts.joined(separator: "|"), worldReadable: true, signal: "dmi.product_name")
        }
        // The first table row that any vendor string matches wins, so the table's order ranks vendors.
        let product = context.signals["dmi.product_name"]?.description ?? ""
        let bareMetal = context.tables.bareMetalProductSuffixes.contains { product.hasSuffix($0) }
        for row in context.tables.dmiVendors {
            guard vendorTexts.contains(where: { $0.lowercased().contains(row.pattern.lowercased()) }) else { continue }
            // A cloud's bare-metal instance carries the cloud's strings but runs no hypervisor.
            if !bareMetal { context.emit("dmi.virtualization_kind", row.kind) }
            if let cloud = row.cloud { context.emit("dmi.cloud", cloud) }
            break
        }
        if context.signals.isEmpty, context.issues.allSatisfy({ $0.status == .absent }) {
            throw ProbeFailure(.absent, "\(Self.directory) is not there: this machine exposes no DMI/SMBIOS")
        }
    }
}
