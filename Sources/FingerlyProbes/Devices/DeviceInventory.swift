import FingerlyHost
import FingerlyModel

/// What a device probe asks for: one subsystem, and the attributes to read of each device.
package struct DeviceQuery: Sendable {
    let subsystem: String
    var devtype: String? = nil
    var attributes: [String] = []
    /// False when the probe has no use for devices without hardware (loop, zram, dm): they are
    /// then left out before anything of them is read, and a machine with dozens of snap loop
    /// devices costs what one without does.
    var includesVirtual = true
}

/// One device as the inventory sees it. `path` is the sysfs path on the host ("/sys/devices/…"),
/// never prefixed with `--root`.
package struct DeviceNode: Sendable, Hashable {
    let path: String
    let subsystem: String
    let sysname: String
    let devtype: String?
    let driver: String?
    /// udev properties: the kernel's uevent plus udev's database where there is one.
    let properties: [String: String]
    /// The requested attributes that exist, trimmed.
    let attributes: [String: String]
    /// Ancestors that belong to a subsystem, nearest first.
    let ancestors: [DeviceAncestor]

    /// Devices the kernel creates without hardware (bridges, veth, loop, uinput).
    var isVirtual: Bool { Self.isVirtual(path) }

    static func isVirtual(_ path: String) -> Bool { path.hasPrefix("/sys/devices/virtual/") }

    /// The first ancestor on a bus, e.g. "pci", "usb", "serio", "virtio".
    var bus: String? {
        ancestors.first { !["scsi", "scsi_host", "scsi_target", "ata_port", "ata_link", "ata_device", "nvme", "hid"].contains($0.subsystem) }?.subsystem
    }

    func ancestor(_ subsystem: String, devtype: String? = nil) -> DeviceAncestor? {
        ancestors.first { $0.subsystem == subsystem && (devtype == nil || $0.devtype == devtype) }
    }

    var isBehindUSB: Bool { ancestors.contains { $0.subsystem == "usb" } }
}

package struct DeviceAncestor: Sendable, Hashable {
    let path: String
    let subsystem: String
    let sysname: String
    let devtype: String?
    let driver: String?
}

/// Where device information came from.
package enum DeviceSource: String, Sendable {
    /// libudev on the live host, with udev's database.
    case udev
    /// libudev on the live host, but udev's database is missing (containers, minimal systems):
    /// only what the kernel exposes in sysfs.
    case udevWithoutDatabase = "udev-no-database"
    /// sysfs read directly through the host layer (under `--root`).
    case sysfs

    var note: String? {
        switch self {
        case .udev: return nil
        case .udevWithoutDatabase: return "udev database missing (/run/udev/data): sysfs attributes only"
        case .sysfs: return "read from sysfs under the root prefix (libudev cannot be re-rooted)"
        }
    }
}

/// Enumerates devices: libudev on the live host, sysfs through the host layer under a root prefix.
package protocol DeviceInventory {
    var source: DeviceSource { get }
    func devices(_ query: DeviceQuery) throws(HostReadError) -> [DeviceNode]
}

package enum DeviceInventories {
    static func make(for host: HostFileSystem, recordFailure: @escaping (HostReadError) -> Void = { _ in }) -> any DeviceInventory {
        if host.isLiveHost, let problem = UdevInventory.libraryProblem {
            return UnloadableUdevInventory(problem: problem)
        }
        if host.isLiveHost, let udev = UdevInventory(host: host, recordFailure: recordFailure) { return udev }
        return SysfsInventory(host: host, recordFailure: recordFailure)
    }
}

extension ProbeContext {
    /// Opens the device inventory and says in the probe's entry where the data came from.
    func deviceInventory() -> any DeviceInventory {
        let inventory = DeviceInventories.make(for: host) { [weak self] error in self?.record(error) }
        if let note = inventory.source.note { self.note(note) }
        return inventory
    }
}
