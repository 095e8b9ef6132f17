import FingerlyHost
import FingerlyModel

/// Disks: model, size, rotational, removable, transport; serials and WWNs hashed. Fixed disks
/// are identity components, removable and USB ones are not. A fixed disk whose vendor and model, or whose serial's
/// shape, only an emulator writes names that emulator; a serial is matched here, before hashing, and only the
/// emulator's name leaves the probe.
package struct BlockProbe: Probe {
    package let id = "block"

    package func collect(into context: ProbeContext) throws(ProbeFailure) {
        let devices: [DeviceNode]
        do {
            // Only what is wanted is read: the serial's shape is judged from the serial, so ignoring block.serials
            // keeps the serials unread and that judgement unmade.
            let identifiers = (context.wants("block.serials") ? ["serial", "device/serial"] : [])
                + (context.wants("block.wwns") ? ["wwid", "device/wwid"] : [])
            devices = try context.deviceInventory().devices(DeviceQuery(subsystem: "block", devtype: "disk",
                attributes: ["size", "removable", "queue/rotational", "device/model", "device/vendor", "device/transport"] + identifiers,
                includesVirtual: false))
        } catch { throw ProbeFailure(error) }

        var descriptions: [String] = []
        var serials: [String] = []
        var wwns: [String] = []
        var fixed = 0
        var modelKind: String?, serialKind: String?
        let models = context.tables.patterns("diskModels"), shapes = context.tables.patterns("diskSerialShapes")
        let judgesSerials = context.wants("block.serials") && context.wants("block.emulated_disk_serial_kind")
        for disk in devices {
            let attributes = disk.attributes
            let model = (attributes["device/model"] ?? disk.properties["ID_MODEL"] ?? "").trimmingWhitespace()
            let vendor = (attributes["device/vendor"] ?? "").trimmingWhitespace()
            // sysfs counts 512-byte sectors; a size no disk can have is left out, never a trap.
            let bytes = Int(attributes["size"] ?? "").flatMap { sectors -> Int? in
                let (bytes, overflow) = sectors.multipliedReportingOverflow(by: 512)
                return overflow || sectors < 0 ? nil : bytes
            }
            if bytes == nil, let size = attributes["size"], !size.isEmpty {
                context.recordMalformed(disk.path + "/size", "not a sector count in range: \(size.prefix(40))")
            }
            let removable = attributes["removable"] == "1" || disk.isBehindUSB
            let transport = Self.transport(of: disk)
            var line = "\(disk.sysname) transport=\(transport) removable=\(removable)"
            if let rotational = attributes["queue/rotational"] { line += " rotational=\(rotational == "1")" }
            if let bytes { line += " size=\(bytes)" }
            if !vendor.isEmpty { line += " vendor='\(vendor)'" }
            if !model.isEmpty { line += " model='\(model)'" }
            descriptions.append(line)
            if !removable, modelKind == nil {
                let named = vendor.isEmpty ? model : vendor + " " + model
                modelKind = models.first { named.containsUTF8($0.pattern) }?.kind
            }

            // sysfs attributes first: they are the same with or without udev's database, so a
            // container and its host agree. All of them are world-readable.
            let serial = context.wants("block.serials") ? (attributes["serial"] ?? attributes["device/serial"]).flatMap { $0.isEmpty ? nil : $0 }
                ?? disk.properties["ID_SERIAL_SHORT"] : nil
            let wwn = context.wants("block.wwns") ? (attributes["wwid"] ?? attributes["device/wwid"]).flatMap { $0.isEmpty ? nil : $0 }
                ?? disk.properties["ID_WWN"] : nil
            if !removable, serialKind == nil, judgesSerials, let serial {
                let trimmed = serial.trimmingWhitespace()
                serialKind = shapes.first { Self.hasShape(trimmed, $0.pattern) }?.kind
            }
            if let serial { serials.append(disk.sysname + " " + context.hash(serial)) }
            if let wwn { wwns.append(disk.sysname + " " + context.hash(wwn)) }
            if !removable, let stable = wwn.map({ "wwn:" + $0 }) ?? serial.map({ "serial:" + $0 }) {
                fixed += 1
                context.contribute(.hardware, "disk", raw: stable, worldReadable: true, signal: wwn == nil ? "block.serials" : "block.wwns")
            }
        }
        context.emit("block.disks", descriptions)
        context.emit("block.fixed_disks", fixed)
        if context.wants("block.serials") { context.emit("block.serials", serials) }
        if context.wants("block.wwns") { context.emit("block.wwns", wwns) }
        if let modelKind { context.emit("block.virtual_disk_kind", modelKind) }
        if let serialKind { context.emit("block.emulated_disk_serial_kind", serialKind) }
    }

    private static let hexadecimalDigits = Set("0123456789abcdefABCDEF".utf8)

    /// A serial of the shape exactly: each '#' one hexadecimal digit, every other byte itself, the same length.
    static func hasShape(_ serial: String, _ shape: String) -> Bool {
        let text = Array(serial.utf8), form = Array(shape.utf8)
        guard text.count == form.count else { return false }
        return zip(text, form).allSatisfy { byte, expected in
            expected == UInt8(ascii: "#") ? hexadecimalDigits.contains(byte) : byte == expected
        }
    }

    static func transport(of disk: DeviceNode) -> String {
        if let bus = disk.properties["ID_BUS"], !bus.isEmpty, bus != "scsi" { return bus }
        if disk.ancestor("nvme") != nil || disk.sysname.hasPrefix("nvme") { return "nvme" }
        if disk.isBehindUSB { return "usb" }
        if disk.ancestors.contains(where: { $0.subsystem == "ata_port" || $0.sysname.hasPrefix("ata") }) { return "ata" }
        if disk.ancestor("virtio") != nil { return "virtio" }
        if disk.ancestor("mmc") != nil { return "mmc" }
        if disk.ancestor("scsi") != nil { return "scsi" }
        return disk.bus ?? "unknown"
    }
}
