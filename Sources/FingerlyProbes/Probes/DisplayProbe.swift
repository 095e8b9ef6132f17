import FingerlyHost
import FingerlyModel

/// GPUs and monitors: PCI ids of each DRM card, and the EDID of each connected connector
/// (manufacturer and model in clear, serial hashed).
package struct DisplayProbe: Probe {
    package let id = "drm"
    /// Connectors wired inside the machine; an external monitor is unplugged at will.
    static let builtInConnectors = ["eDP", "LVDS", "DSI"]

    package func collect(into context: ProbeContext) throws(ProbeFailure) {
        let devices: [DeviceNode]
        do {
            devices = try context.deviceInventory().devices(DeviceQuery(subsystem: "drm", attributes: ["status"]))
        } catch { throw ProbeFailure(error) }

        var gpus: [String] = []
        var monitors: [String] = []
        var serials: [String] = []
        for device in devices {
            if device.devtype == "drm_minor" || !device.sysname.contains("-") {
                guard device.sysname.hasPrefix("card"), let pci = device.ancestor("pci") else { continue }
                let vendor = context.attemptIfPresent({ () throws(HostReadError) in try context.host.readAttribute(pci.path + "/vendor") }).map { hexId($0) } ?? "????"
                let product = context.attemptIfPresent({ () throws(HostReadError) in try context.host.readAttribute(pci.path + "/device") }).map { hexId($0) } ?? "????"
                gpus.append("\(device.sysname) \(vendor):\(product) driver=\(pci.driver ?? "-")")
                continue
            }
            guard device.attributes["status"] == "connected", context.wants("drm.monitors") || context.wants("drm.monitor_serials"),
                  let bytes = context.attemptIfPresent({ () throws(HostReadError) in try context.host.read(device.path + "/edid", limit: 32 * 1024) }),
                  !bytes.isEmpty else { continue }
            let connector = String(device.sysname.drop { $0 != "-" }.dropFirst())
            guard let edid = EDID(bytes) else {
                context.recordMalformed(device.path + "/edid", "not an EDID block (bad header or checksum)")
                continue
            }
            var line = "\(connector) \(edid.manufacturer) product 0x\(String(edid.productCode, radix: 16))"
            if let name = edid.name { line += " '\(name)'" }
            monitors.append(line)
            if let serial = edid.serial {
                serials.append(connector + " " + context.hash(serial))
                if Self.builtInConnectors.contains(where: connector.hasPrefix) {
                    context.contribute(.hardware, "built-in-panel", raw: "\(edid.manufacturer):\(edid.productCode):\(serial)", worldReadable: true, signal: "drm.monitor_serials")
                }
            }
        }
        context.emit("drm.gpus", gpus)
        context.emit("drm.monitors", monitors)
        if context.wants("drm.monitor_serials") { context.emit("drm.monitor_serials", serials) }
    }
}

/// The parts of an EDID 1.x base block that identify a monitor.
package struct EDID {
    let manufacturer: String
    let productCode: Int
    /// The serial string descriptor when present, else the 32-bit serial number.
    let serial: String?
    let name: String?

    init?(_ bytes: [UInt8]) {
        guard bytes.count >= 128, bytes[0..<8] == [0x00, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x00],
              bytes[0..<128].reduce(0, { ($0 + Int($1)) & 0xFF }) == 0 else { return nil }
        // Three 5-bit letters, 'A' = 1, big-endian in bytes 8-9.
        let packed = Int(bytes[8]) << 8 | Int(bytes[9])
        manufacturer = String(String.UnicodeScalarView([10, 5, 0].compactMap { shift in
            Unicode.Scalar(UInt8(((packed >> shift) & 0x1F) + 64))
        }))
        productCode = Int(bytes[10]) | Int(bytes[11]) << 8
        let number = UInt32(bytes[12]) | UInt32(bytes[13]) << 8 | UInt32(bytes[14]) << 16 | UInt32(bytes[15]) << 24
        var serialText: String?
        var nameText: String?
        for offset in stride(from: 54, to: 126, by: 18) where bytes[offset] == 0 && bytes[offset + 1] == 0 {
            let text = String(decoding: bytes[(offset + 5)..<(offset + 18)].prefix { $0 != 0x0A }, as: UTF8.self)
                .trimmingWhitespace()
            switch bytes[offset + 3] {
            case 0xFF: serialText = text
            case 0xFC: nameText = text
            default: break
            }
        }
        serial = serialText.flatMap { $0.isEmpty ? nil : $0 } ?? (number == 0 ? nil : String(number))
        name = nameText
    }
}
