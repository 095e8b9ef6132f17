import CFingerlyDevices
import CUdev
import FingerlyHost
import FingerlyModel

/// libudev enumeration. Each instance owns its own `udev` context and is used by one probe on
/// one thread, as libudev requires.
package final class UdevInventory: DeviceInventory {
    private let context: OpaquePointer
    package let source: DeviceSource

    /// Why libudev cannot be used, or nil; it is opened here, on first use, not by the loader at start.
    static var libraryProblem: String? { fingerly_udev_problem().map { String(cString: $0) } }

    /// The parents, read from sysfs: libudev resolves each parent's path anew for every child, component by
    /// component, some forty system calls a parent, and the devices of one subsystem share most of theirs.
    private let sysfs: SysfsInventory

    init?(host: HostFileSystem, recordFailure: @escaping (HostReadError) -> Void = { _ in }) {
        guard let context = udev_new() else { return nil }
        self.context = context
        sysfs = SysfsInventory(host: host, recordFailure: recordFailure)
        // libudev works without its database but then only knows what sysfs says.
        source = host.exists("/run/udev/data") ? .udev : .udevWithoutDatabase
    }

    deinit { udev_unref(context) }

    package func devices(_ query: DeviceQuery) throws(HostReadError) -> [DeviceNode] {
        // Listed from sysfs, as libudev's enumeration lists them: it builds a device for each entry only to look
        // at its subsystem, resolving the path component by component, and the device is then built again here.
        let paths: [String]
        do {
            paths = try sysfs.listed(query.subsystem).map(\.path)
        } catch where error.failure == .absent {
            paths = []  // no such bus or class on this kernel: no devices, as libudev says it
        }
        var nodes: [DeviceNode] = []
        var known: [String: DeviceAncestor?] = [:]
        for path in paths.sorted() where query.includesVirtual || !DeviceNode.isVirtual(path) {
            guard let device = udev_device_new_from_syspath(context, path) else { continue }
            defer { udev_device_unref(device) }
            let devtype = string(udev_device_get_devtype(device))
            if let wanted = query.devtype, devtype != wanted { continue }
            var properties: [String: String] = [:]
            var property = udev_device_get_properties_list_entry(device)
            while let current = property {
                if let name = udev_list_entry_get_name(current), let value = udev_list_entry_get_value(current) {
                    properties[String(cString: name)] = String(cString: value)
                }
                property = udev_list_entry_get_next(current)
            }
            var attributes: [String: String] = [:]
            for name in query.attributes {
                if let value = udev_device_get_sysattr_value(device, name) {
                    attributes[name] = String(cString: value).trimmingWhitespace()
                }
            }
            let ancestors = sysfs.ancestors(of: string(udev_device_get_syspath(device)) ?? path, known: &known)
            nodes.append(DeviceNode(path: path, subsystem: query.subsystem, sysname: string(udev_device_get_sysname(device)) ?? "",
                                    devtype: devtype, driver: string(udev_device_get_driver(device)),
                                    properties: properties, attributes: attributes, ancestors: ancestors))
        }
        return nodes
    }

    private func string(_ pointer: UnsafePointer<CChar>?) -> String? {
        pointer.map { String(cString: $0) }
    }
}

/// The live host's inventory when libudev cannot be opened: each query fails with the loader's reason,
/// so every device probe says why it has no data instead of reading another source unannounced.
package struct UnloadableUdevInventory: DeviceInventory {
    let problem: String
    package let source = DeviceSource.udev

    package func devices(_ query: DeviceQuery) throws(HostReadError) -> [DeviceNode] {
        throw HostReadError(.error, path: "/sys/class/\(query.subsystem)", detail: problem)
    }
}
