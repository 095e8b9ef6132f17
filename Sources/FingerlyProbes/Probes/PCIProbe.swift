import FingerlyHost
import FingerlyModel

/// PCI devices: ids, class and driver, and those whose ids only virtual hardware carries (QEMU's VGA 1234:1111, the
/// subsystem 1af4:1100 QEMU gives the real chips it emulates), whatever vendor strings were patched.
package struct PCIProbe: Probe {
    package let id = "pci"

    package func collect(into context: ProbeContext) throws(ProbeFailure) {
        let inventory = context.deviceInventory()
        let devices: [DeviceNode]
        do {
            devices = try inventory.devices(DeviceQuery(subsystem: "pci", attributes: ["vendor", "device", "subsystem_vendor", "subsystem_device", "class"]))
        } catch { throw ProbeFailure(error) }

        var descriptions: [String] = []
        var inventoryLines: [String] = []
        var vendors: [String] = []
        var virtualDevices: [String] = []
        var virtualKind: String?
        let byDevice = context.tables.mapping("pciVirtualDevices"), bySubsystem = context.tables.mapping("pciVirtualSubsystems")
        for device in devices {
            let vendor = hexId(device.attributes["vendor"]), product = hexId(device.attributes["device"])
            let subVendor = hexId(device.attributes["subsystem_vendor"]), subProduct = hexId(device.attributes["subsystem_device"])
            let deviceClass = hexId(device.attributes["class"])
            descriptions.append("\(device.sysname) \(vendor):\(product) sub \(subVendor):\(subProduct) class \(deviceClass) driver \(device.driver ?? "-")")
            // Drivers are left out of the component: a kernel upgrade may rename them.
            inventoryLines.append("\(device.sysname) \(vendor):\(product) \(subVendor):\(subProduct) \(deviceClass)")
            if !vendors.contains(vendor) { vendors.append(vendor) }
            let ids = vendor + ":" + product, subsystem = subVendor + ":" + subProduct
            if let kind = byDevice[ids] ?? bySubsystem[subsystem] {
                let named = byDevice[ids] != nil ? ids : "sub " + subsystem
                if !virtualDevices.contains(named) { virtualDevices.append(named) }
                virtualKind = virtualKind ?? kind
            }
        }
        context.emit("pci.devices", descriptions)
        context.emit("pci.count", devices.count)
        context.emit("pci.vendor_ids", vendors.sorted())
        if let virtualKind {
            context.emit("pci.virtual_devices", virtualDevices)
            context.emit("pci.virtual_device_kind", virtualKind)
        }
        if !inventoryLines.isEmpty {
            context.contribute(.hardware, "pci-inventory", raw: inventoryLines.sorted().joined(separator: "\n"), worldReadable: true, signal: "pci.devices")
        }
    }
}

/// sysfs writes ids as "0x8086"; reports use the bare four hex digits.
package func hexId(_ text: String?) -> String {
    guard var text = text?.lowercased(), !text.isEmpty else { return "????" }
    if text.hasPrefix("0x") { text.removeFirst(2) }
    return text
}
