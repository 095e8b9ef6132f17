import FingerlyHost
import FingerlyModel

/// USB devices: ids, position on the bus, removability; serials hashed. Plugging a stick in or
/// out must not move an identifier, so nothing here is an identity component. The ids and product strings of the
/// USB devices emulators attach (QEMU's tablet, VirtualBox's mouse) name the emulator.
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
        var virtualKind: String?
        let byIds = context.tables.mapping("usbVirtualDevices"), products = context.tables.patterns("usbVirtualProducts")
        for device in devices {
            let ids = "\(hexId(device.attributes["idVendor"])):\(hexId(device.attributes["idProduct"]))"
            let position = "bus \(device.attributes["busnum"] ?? "?") port \(device.attributes["devpath"] ?? "?")"
            var line = "\(device.sysname) \(ids) \(position) removable=\(device.attributes["removable"] ?? "unknown")"
            if let product = device.attributes["product"], !product.isEmpty { line += " '\(product)'" }
            descriptions.append(line)
            if virtualKind == nil {
                let product = device.attributes["product"] ?? ""
                virtualKind = byIds[ids] ?? products.first { product.hasPrefix($0.pattern) }?.kind
            }
            if let serial = device.attributes["serial"], !serial.isEmpty {
                serials.append(ids + " " + context.hash(serial))
            }
        }
        context.emit("usb.devices", descriptions)
        context.emit("usb.count", devices.count)
        context.emit("usb.serials", serials)
        if let virtualKind { context.emit("usb.virtual_device_kind", virtualKind) }
    }
}
