import FingerlyHost
import FingerlyModel

/// udev's database: one file per device under /run/udev/data, "E:KEY=value" lines for properties.
package enum UdevDatabase {
    /// A device without an entry is normal (udev keeps none for many, and containers have no
    /// database at all): that throws `absent`, which callers take as no properties.
    static func properties(of id: String, on host: HostFileSystem) throws(HostReadError) -> [String: String] {
        let text = try host.readText("/run/udev/data/" + id, limit: 64 * 1024)
        var properties: [String: String] = [:]
        for line in text.lines where line.hasPrefix("E:") {
            let entry = line.dropFirst(2)
            guard let equals = entry.firstIndex(of: "=") else { continue }
            properties[String(entry[..<equals])] = String(entry[entry.index(after: equals)...])
        }
        return properties
    }
}

/// Walks sysfs through the host layer, so a root tree (a fixture, a container's root filesystem
/// or an image with a saved /sys) is enumerated the way libudev enumerates the live host.
package struct SysfsInventory: DeviceInventory {
    let host: HostFileSystem
    /// Where a source that exists but could not be read goes (the probe's issues): a device
    /// listed without an attribute it has must not look like a device without that attribute.
    /// A missing attribute, uevent, link or database entry is normal and not reported.
    var recordFailure: (HostReadError) -> Void = { _ in }
    package var source: DeviceSource { .sysfs }

    /// Buses list their devices under /sys/bus; classes under /sys/class.
    static let deepestDevice = 64
    private static let buses: Set<String> = ["pci", "usb", "scsi", "serio", "hid", "platform", "virtio", "i2c", "acpi"]

    /// A subsystem's devices as libudev's enumeration finds them: the entries of its bus's or class's directory,
    /// each with its /sys/devices path.
    func listed(_ subsystem: String) throws(HostReadError) -> [(name: String, path: String)] {
        let directory = Self.buses.contains(subsystem) ? "/sys/bus/\(subsystem)/devices" : "/sys/class/\(subsystem)"
        return try host.listDirectory(directory).map { ($0, resolve(directory + "/" + $0)) }
    }

    package func devices(_ query: DeviceQuery) throws(HostReadError) -> [DeviceNode] {
        var nodes: [DeviceNode] = []
        var known: [String: DeviceAncestor?] = [:]
        for (name, path) in try listed(query.subsystem) {
            if !query.includesVirtual && DeviceNode.isVirtual(path) { continue }
            let properties = uevent(path)
            let devtype = properties["DEVTYPE"]
            if let wanted = query.devtype, devtype != wanted { continue }
            var merged = properties
            for (key, value) in databaseProperties(path: path, subsystem: query.subsystem, sysname: name, properties: properties)
            where merged[key] == nil {
                merged[key] = value
            }
            var attributes: [String: String] = [:]
            for attribute in query.attributes {
                if let value = ifPresent({ () throws(HostReadError) in try host.readAttribute(path + "/" + attribute) }) { attributes[attribute] = value }
            }
            nodes.append(DeviceNode(path: path, subsystem: query.subsystem, sysname: name, devtype: devtype,
                                    driver: properties["DRIVER"] ?? linkName(path + "/driver"),
                                    properties: merged, attributes: attributes, ancestors: ancestors(of: path, known: &known)))
        }
        return nodes.sorted { $0.path < $1.path }
    }

    /// The canonical /sys/devices path behind a class or bus symlink.
    func resolve(_ path: String) -> String {
        guard let target = ifPresent({ () throws(HostReadError) in try host.linkTarget(path) }) ?? nil else { return path }
        if target.hasPrefix("/") { return target }
        // Components as the kernel sees them, split at the byte "/": splitting by characters cost more than
        // reading the link.
        let slash = UInt8(ascii: "/")
        var components = path.utf8.split(separator: slash).dropLast().map { String(Substring($0)) }
        for part in target.utf8.split(separator: slash) {
            if part.elementsEqual("..".utf8) { _ = components.popLast() }
            else if !part.elementsEqual(".".utf8) { components.append(String(Substring(part))) }
        }
        return "/" + components.joined(separator: "/")
    }

    private func linkName(_ path: String) -> String? {
        (ifPresent { () throws(HostReadError) in try host.linkTarget(path) } ?? nil).flatMap { $0.split(separator: "/").last.map(String.init) }
    }

    private func uevent(_ path: String) -> [String: String] {
        guard let text = ifPresent({ () throws(HostReadError) in try host.readText(path + "/uevent", limit: 64 * 1024) }) else { return [:] }
        var properties: [String: String] = [:]
        for line in text.lines {
            guard let equals = line.firstIndex(of: "=") else { continue }
            properties[String(line[..<equals])] = String(line[line.index(after: equals)...])
        }
        return properties
    }

    /// udev's database entry, named as udev names it: b/c + major:minor for device nodes,
    /// n + ifindex for network interfaces, +subsystem:sysname otherwise.
    private func databaseProperties(path: String, subsystem: String, sysname: String, properties: [String: String]) -> [String: String] {
        let id: String
        if let major = properties["MAJOR"], let minor = properties["MINOR"] {
            id = (subsystem == "block" ? "b" : "c") + major + ":" + minor
        } else if subsystem == "net", let index = properties["IFINDEX"] {
            id = "n" + index
        } else {
            id = "+" + subsystem + ":" + sysname
        }
        return ifPresent { () throws(HostReadError) in try UdevDatabase.properties(of: id, on: host) } ?? [:]
    }

    private func ifPresent<T>(_ read: () throws(HostReadError) -> T) -> T? {
        do {
            return try read()
        } catch {
            if error.failure != .absent { recordFailure(error) }
            return nil
        }
    }

    /// The ancestors of a /sys/devices path that belong to a subsystem, nearest first, as libudev's parent walk
    /// finds them. `known` keeps each one read for the devices that share it.
    func ancestors(of path: String, known: inout [String: DeviceAncestor?]) -> [DeviceAncestor] {
        var result: [DeviceAncestor] = []
        var components = path.utf8.split(separator: UInt8(ascii: "/")).map { String(Substring($0)) }
        // Real sysfs nests some thirty deep; a tree's links can name paths of thousands of directories, each
        // of whose prefixes the walk would read and keep.
        guard components.count <= Self.deepestDevice else {
            recordFailure(HostReadError(.malformed, path: path,
                                        detail: "more than \(Self.deepestDevice) directories deep: its parents were not read"))
            return []
        }
        while components.count > 3 {  // stop at /sys/devices
            components.removeLast()
            let ancestor = "/" + components.joined(separator: "/")
            if let found = known[ancestor] {
                if let found { result.append(found) }
                continue
            }
            guard let subsystem = linkName(ancestor + "/subsystem") else {
                known[ancestor] = .some(nil)
                continue
            }
            let properties = uevent(ancestor)
            // libudev's sysname: "!" in a directory's name stands for "/". By bytes: the generic replacing costs a
            // generic-metadata lookup on every start.
            let name = components.last ?? ""
            let sysname = name.utf8.contains(UInt8(ascii: "!"))
                ? String(decoding: name.utf8.map { $0 == UInt8(ascii: "!") ? UInt8(ascii: "/") : $0 }, as: UTF8.self) : name
            let found = DeviceAncestor(path: ancestor, subsystem: subsystem, sysname: sysname,
                                       devtype: properties["DEVTYPE"],
                                       driver: properties["DRIVER"] ?? linkName(ancestor + "/driver"))
            known[ancestor] = found
            result.append(found)
        }
        return result
    }
}
