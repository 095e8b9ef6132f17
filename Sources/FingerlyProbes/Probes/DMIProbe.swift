import FingerlyCatalogue
import FingerlyHost
import FingerlyModel

/// Firmware vendor strings from /sys/class/dmi/id (world-readable, unlike the serials).
package struct DMIProbe: Probe {
    package let id = "dmi"
    static let directory = "/sys/class/dmi/id/"
    static let strings = [
        ("sys_vendor", "dmi.sys_vendor"),
        ("product_name", "dmi.product_name"),
        ("board_vendor", "dmi.board_vendor"),
        ("bios_vendor", "dmi.bios_vendor"),
    ]
    /// Versions that name a hypervisor (Hyper-V's "Hyper-V UEFI Release", Xen-era EC2's
    /// "4.11.amazon") but are no part of the model's identity.
    /// The chassis vendor, board name, family and SKU are what a hardened VM's patched strings most often leave as
    /// QEMU or VirtualBox wrote them.
    static let matchOnlyStrings = [
        ("product_version", "dmi.product_version"),
        ("bios_version", "dmi.bios_version"),
        ("chassis_vendor", "dmi.chassis_vendor"),
        ("board_name", "dmi.board_name"),
        ("product_family", "dmi.product_family"),
        ("product_sku", "dmi.product_sku"),
    ]
    /// Vendor strings every table row without `fields` is tested against.
    static let defaultMatchFields = ["sys_vendor", "product_name", "board_vendor", "bios_vendor", "product_version",
                                     "chassis_vendor", "board_name", "product_family", "product_sku"]
    static let smbiosBIOSEntry = "/sys/firmware/dmi/entries/0-0/raw"

    package func collect(into context: ProbeContext) throws(ProbeFailure) {
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
                context.emit("dmi.chassis_kind", context.tables.mapping("chassisTypes")[String(number)] ?? "unknown")
            } else {
                context.recordMalformed(Self.directory + "chassis_type", "not an SMBIOS chassis number")
            }
        }
        // Vendor and model strings are world-readable and shared by every unit of a model: one
        // weak component, not an identifier on their own.
        if !vendorTexts.isEmpty {
            context.contribute(.hardware, "dmi-model", raw: vendorTexts.joined(separator: "|"), worldReadable: true, signal: "dmi.product_name")
        }
        // Strings that only name a hypervisor, read for matching: the model's identity above
        // stays the four vendor strings.
        var attributes = Dictionary(uniqueKeysWithValues: zip(Self.strings.map(\.0), Self.strings.map(\.1))
            .compactMap { file, signal in context.signals[signal].map { (file, $0.description) } })
        for (file, signal) in Self.matchOnlyStrings where context.wants(signal) {
            guard let value = context.attemptIfPresent({ () throws(HostReadError) in try host.readAttribute(Self.directory + file) }),
                  !value.isEmpty else { continue }
            context.emit(signal, value)
            attributes[file] = value
        }
        let vmBit = context.wants("dmi.smbios_vm_bit") ? Self.smbiosVirtualMachineBit(context) : nil
        if let vmBit { context.emit("dmi.smbios_vm_bit", vmBit) }

        // The first table row that any vendor string matches wins, so the table's order ranks vendors.
        let product = attributes["product_name"] ?? ""
        let bareMetalProduct = context.tables.strings("bareMetalProductSuffixes").contains { Self.namesBareMetal(product, suffix: $0) }
        for row in context.tables.patterns("dmiVendors") where Self.matches(row, attributes) {
            // A cloud's bare-metal instance carries the cloud's strings but runs no hypervisor;
            // its firmware says so in the SMBIOS VM bit, and in the product name to those who
            // cannot read the raw table.
            let bitDecides = row.smbiosVMBitDecides == true || row.vmBitRequired == true
            let bareMetal = row.cloud != nil && (bitDecides && vmBit != nil ? vmBit == false : bareMetalProduct)
            // Alibaba's EBM reads "Alibaba Cloud ECS" as its VMs do: without the bit, the policy asks CPUID.
            let unconfirmed = row.vmBitRequired == true && vmBit == nil
            if !bareMetal {
                context.emit(unconfirmed ? "dmi.unconfirmed_virtualization_kind" : "dmi.virtualization_kind", row.kind)
            }
            if let cloud = row.cloud { context.emit("dmi.cloud", cloud) }
            break
        }
        if context.signals.isEmpty, context.issues.allSatisfy({ $0.status == .absent }) {
            throw ProbeFailure(.absent, "\(Self.directory) is not there: this machine exposes no DMI/SMBIOS")
        }
    }

    /// A row's pattern begins the string as a word, as systemd matches prefixes: "Xen" names "Xen" and "Xen HVM",
    /// never a board "XENON-PRO" or a model with "Xen" inside a word. A row with `match: contains` (a version's
    /// "4.11.amazon") is found anywhere. `requires` and `excludes` are found anywhere.
    static func matches(_ row: DetectionTables.PatternRow, _ attributes: [String: String]) -> Bool {
        func has(_ field: String, _ needle: String) -> Bool {
            attributes[field]?.lowercased().contains(needle.lowercased()) == true
        }
        func begins(_ field: String) -> Bool {
            guard let value = attributes[field] else { return false }
            return row.match == "contains" ? has(field, row.pattern) : beginsWithWord(value, row.pattern)
        }
        guard (row.fields ?? defaultMatchFields).contains(where: begins) else { return false }
        if let requires = row.requires, !requires.allSatisfy({ has($0.key, $0.value) }) { return false }
        if let excludes = row.excludes, excludes.contains(where: { has($0.key, $0.value) }) { return false }
        return true
    }

    /// Whether `value` begins with `word`, case-insensitively in ASCII, and no letter follows it ("VMware7,1" begins
    /// with "VMware"; "Xenon" does not begin with "Xen"). Bytes: the string-processing searcher costs a
    /// generic-metadata lookup on every start.
    static func beginsWithWord(_ value: String, _ word: String) -> Bool {
        func lower(_ byte: UInt8) -> UInt8 { (65...90).contains(byte) ? byte + 32 : byte }
        let text = Array(value.utf8), wanted = Array(word.utf8)
        guard !wanted.isEmpty, wanted.count <= text.count,
              zip(text, wanted).allSatisfy({ lower($0) == lower($1) }) else { return false }
        guard wanted.count < text.count else { return true }
        let next = lower(text[wanted.count])
        return !(97...122).contains(next) && next < 0x80
    }

    /// "c7i.metal" and "m7g.metal-48xl" are bare metal; "x.metallic" is not.
    static func namesBareMetal(_ product: String, suffix: String) -> Bool {
        // Bytes: the string-processing searcher costs a generic-metadata lookup on every start.
        let text = Array(product.utf8), wanted = Array(suffix.utf8)
        guard !wanted.isEmpty, wanted.count <= text.count else { return false }
        return (0...(text.count - wanted.count)).contains { start in
            let end = start + wanted.count
            return text[start..<end].elementsEqual(wanted) && (end == text.count || text[end] == UInt8(ascii: "-"))
        }
    }

    /// SMBIOS BIOS Information (type 0), characteristics extension byte 2, bit 4: "this is a
    /// virtual machine". Root-only; an older table without that byte says nothing either way.
    static func smbiosVirtualMachineBit(_ context: ProbeContext) -> Bool? {
        guard let bytes = context.attemptIfPresent({ () throws(HostReadError) in try context.host.read(smbiosBIOSEntry, limit: 256) }) else {
            return nil
        }
        guard bytes.count >= 20, bytes[0] == 0, bytes[1] >= 20 else { return nil }
        return bytes[19] & 0x10 != 0
    }
}
