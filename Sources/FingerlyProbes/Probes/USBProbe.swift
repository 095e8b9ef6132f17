import FingerlyHost
import FingerlyModel

/// USB devices: ids, position on the bus, removability; serials hashed. Plugging a stick in or
/// out must not move an identifier, so nothing here is an identity component.
package struct USBProbe: Probe {
    package let id = "usb"

    package func collect(into context: ProbeContext) throws(ProbeFailure) {
        let devices: [DeviceNode]
        do {
            devices = try context.deviceInventory().devices(DeviceQuery(subsystem: "usb", devtype: "usb_device",
                attributes: ["idVendor", "idProduct", "removable", "devpath", "busnum", "product"]
                    + (context.wants("usb.serials") ? ["serial"] : [])))
        } catch { throw ProbeFailure(error) }

        var descriptions: [String] = []
        var serials: [String] = []
        for device in devices {
            let ids = "\(hexId(device.attributes["idVendor"])):\(hexId(device.attributes["idProduct"]))"
            let position = "bus \(device.attributes["busnum"] ?? "?") port \(device.attributes["devpath"] ?? "?")"
            var line = "\(device.sysname) \(ids) \(position) removable=\(device.attributes["removable"] ?? "unknown")"
            if let product = device.attributes["product"], !product.isEmpty { line += " '\(product)'" }
            descriptions.append(line)
            if let serial = device.attributes["serial"], !serial.isEmpty {
                serials.append(ids + " " + context.hash(serial))
            }
        }
        context.emit("usb.devices", descriptions)
        context.emit("usb.count", devices.count)
        context.emit("usb.serials", serials)
    }
}
