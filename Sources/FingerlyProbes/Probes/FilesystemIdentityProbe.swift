#if canImport(Glibc)
import Glibc
#endif
import FingerlyHost
import FingerlyModel

/// The root filesystem's UUID and type, and the partition table of the disk it lives on, all
/// hashed. Read in order of who may read them: udev's database and /dev/disk/by-* links
/// (anyone), then libblkid on the device node itself (usually root only).
package struct FilesystemIdentityProbe: Probe {
    package let id = "filesystem"

    struct RootMount {
        let major: Int
        let minor: Int
        let type: String
    }

    package func collect(into context: ProbeContext) throws(ProbeFailure) {
        let host = context.host
        let mountinfo: String
        do { mountinfo = try host.readText("/proc/self/mountinfo", limit: 2 * 1024 * 1024) } catch { throw ProbeFailure(error) }
        guard let root = Self.rootMount(in: mountinfo) else {
            throw ProbeFailure(.malformed, "/proc/self/mountinfo: no mount at /")
        }
        context.emit("fs.root_type", root.type)
        guard root.major != 0 else {
            context.note("the root filesystem is \(root.type), not on a block device")
            return
        }

        let devicePath = "/sys/dev/block/\(root.major):\(root.minor)"
        let sysfs = SysfsInventory(host: host, recordFailure: context.record)
        let resolved = sysfs.resolve(devicePath)
        let partition = String(resolved.split(separator: "/").last ?? "")
        let isPartition = host.exists(resolved + "/partition")
        let disk = isPartition ? String(resolved.split(separator: "/").dropLast().last ?? "") : partition
        let database = context.attemptIfPresent { () throws(HostReadError) in try UdevDatabase.properties(of: "b\(root.major):\(root.minor)", on: host) } ?? [:]

        if context.wants("fs.root_uuid") {
            var uuid = database["ID_FS_UUID"].map { ($0, "udev-database", true) }
                ?? Self.linkName(in: "/dev/disk/by-uuid", pointingTo: partition, context: context).map { ($0, "by-uuid", true) }
            if uuid == nil, let node = Self.deviceNode(partition, host: host),
               let result = context.attemptIfPresent({ () throws(HostReadError) in try Blkid.superblock(at: node, on: host) }),
               let value = result.values["UUID"] {
                uuid = (value, "libblkid", Self.isWorldReadable(node, context: context))
            }
            if let (value, source, worldReadable) = uuid {
                context.emitIdentifier("fs.root_uuid", raw: value)
                context.emit("fs.root_uuid_source", source)
                context.contribute(.instance, "root-filesystem", raw: value, worldReadable: worldReadable, signal: "fs.root_uuid")
            }
        }

        guard isPartition || !disk.isEmpty, context.wants("fs.boot_disk_ptuuid") || context.wants("fs.boot_disk_partition_uuids") else { return }
        let diskDatabase = Self.diskDatabase(context, disk: disk)
        var table: (ptuuid: String?, type: String?, partitions: [String], worldReadable: Bool)?
        if let ptuuid = diskDatabase["ID_PART_TABLE_UUID"] {
            table = (ptuuid, diskDatabase["ID_PART_TABLE_TYPE"], Self.partitionUUIDsFromDatabase(context, disk: disk), true)
        } else if let node = Self.deviceNode(disk, host: host),
                  // The root filesystem on a whole disk: its node was just probed, and refused.
                  !context.issues.contains(where: { $0.path == node }),
                  let result = context.attemptIfPresent({ () throws(HostReadError) in try Blkid.partitionTable(at: node, on: host) }) {
            table = (result.values["PTUUID"], result.values["PTTYPE"], result.partitionUUIDs, Self.isWorldReadable(node, context: context))
        }
        if let table {
            if let type = table.type { context.emit("fs.boot_disk_pttype", type) }
            if let ptuuid = table.ptuuid {
                context.emitIdentifier("fs.boot_disk_ptuuid", raw: ptuuid)
                context.contribute(.instance, "partition-table", raw: ptuuid, worldReadable: table.worldReadable, signal: "fs.boot_disk_ptuuid")
            }
            if context.wants("fs.boot_disk_partition_uuids") {
                context.emit("fs.boot_disk_partition_uuids", table.partitions.map { context.hash($0) }.sorted())
            }
        }
    }

    /// The last mount at "/" wins: later mounts stack on earlier ones.
    static func rootMount(in mountinfo: String) -> RootMount? {
        var found: RootMount?
        for line in mountinfo.lines {
            let fields = line.split(separator: " ")
            guard fields.count >= 10, fields[4] == "/", let separator = fields.firstIndex(of: "-"),
                  separator + 1 < fields.count else { continue }
            let numbers = fields[2].split(separator: ":").compactMap { Int($0) }
            guard numbers.count == 2 else { continue }
            found = RootMount(major: numbers[0], minor: numbers[1], type: String(fields[separator + 1]))
        }
        return found
    }

    static func diskDatabase(_ context: ProbeContext, disk: String) -> [String: String] {
        let host = context.host
        guard let dev = context.attemptIfPresent({ () throws(HostReadError) in try host.readAttribute("/sys/class/block/\(disk)/dev") }) else { return [:] }
        return context.attemptIfPresent { () throws(HostReadError) in try UdevDatabase.properties(of: "b" + dev, on: host) } ?? [:]
    }

    static func partitionUUIDsFromDatabase(_ context: ProbeContext, disk: String) -> [String] {
        let host = context.host
        let entries = context.attemptIfPresent { () throws(HostReadError) in try host.listDirectory("/sys/class/block/\(disk)") } ?? []
        return entries.filter { $0.hasPrefix(disk) }.compactMap { partition in
            context.attemptIfPresent { () throws(HostReadError) in
                try UdevDatabase.properties(of: "b" + host.readAttribute("/sys/class/block/\(disk)/\(partition)/dev"), on: host)
            }?["ID_PART_ENTRY_UUID"]
        }
    }

    /// /dev/disk/by-uuid/<uuid> -> ../../vda1: the link's name is the value.
    static func linkName(in directory: String, pointingTo device: String, context: ProbeContext) -> String? {
        let host = context.host
        let names = context.attemptIfPresent { () throws(HostReadError) in try host.listDirectory(directory) } ?? []
        return names.first { name in
            (context.attemptIfPresent { () throws(HostReadError) in try host.linkTarget(directory + "/" + name) } ?? nil)?
                .split(separator: "/").last.map(String.init) == device
        }
    }

    static func deviceNode(_ name: String, host: HostFileSystem) -> String? {
        host.exists("/dev/" + name) ? "/dev/" + name : nil
    }

    static func isWorldReadable(_ path: String, context: ProbeContext) -> Bool {
        context.attempt { () throws(HostReadError) in try context.host.status(path) }?.isWorldReadable ?? false
    }
}
