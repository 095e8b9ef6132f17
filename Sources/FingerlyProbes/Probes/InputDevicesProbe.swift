import FingerlyHost
import FingerlyModel

/// Input devices: name, bus, ids, and whether a physical device stands behind them. A device
/// with no physical parent (uinput) is how automation tools type and click.
package struct InputDevicesProbe: Probe {
    package let id = "input"

    package func collect(into context: ProbeContext) throws(ProbeFailure) {
        let devices: [DeviceNode]
        do {
            devices = try context.deviceInventory().devices(DeviceQuery(subsystem: "input", attributes: ["name", "id/bustype", "id/vendor", "id/product"]))
        } catch { throw ProbeFailure(error) }

        var descriptions: [String] = []
        var virtual: [String] = []
        // inputN are the devices; eventN/mouseN/jsN are their nodes.
        for device in devices where device.sysname.hasPrefix("input") {
            // A Bluetooth device's name is often its owner's ("Alice's Keyboard").
            let name = (device.attributes["name"] ?? device.properties["NAME"]?.trimmingCharacters(in: "\"")).map(context.personal) ?? "?"
            // PRODUCT=bustype/vendor/product/version, for when the id/ attributes are not there.
            let product = device.properties["PRODUCT"]?.split(separator: "/").map { String(repeating: "0", count: max(0, 4 - $0.count)) + $0 }
            let vendor = device.attributes["id/vendor"] ?? product.flatMap { $0.count == 4 ? $0[1] : nil }
            let model = device.attributes["id/product"] ?? product.flatMap { $0.count == 4 ? $0[2] : nil }
            let ids = "\(hexId(vendor)):\(hexId(model))"
            let physical = !device.isVirtual
            descriptions.append("\(device.sysname) '\(name)' bus=\(device.bus ?? "none") \(ids) physical=\(physical)")
            if !physical { virtual.append(name) }
        }
        context.emit("input.devices", descriptions)
        context.emit("input.virtual_devices", virtual)
    }
}

extension String {
    /// Without the leading and trailing characters that `set` holds. Indices only: reversed views of a
    /// string cost a generic-metadata lookup at run time on every start.
    func trimmingCharacters(in set: String) -> String {
        guard let first = firstIndex(where: { !set.contains($0) }),
              let last = lastIndex(where: { !set.contains($0) }) else { return "" }
        return String(self[first...last])
    }
}
