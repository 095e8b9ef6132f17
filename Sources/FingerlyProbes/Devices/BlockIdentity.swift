import CBlkid
import CFingerlyDevices
import FingerlyHost
import FingerlyModel

/// What libblkid reads from a device node or image file.
package struct BlkidProbeResult {
    var values: [String: String] = [:]
    var partitionUUIDs: [String] = []
}

/// Thin wrapper over libblkid's low-level probe. Each call opens, probes and frees its own
/// handle, so nothing is shared between threads.
package enum Blkid {
    /// Superblock values (UUID, TYPE, LABEL) of a filesystem.
    static func superblock(at path: String, on host: HostFileSystem) throws(HostReadError) -> BlkidProbeResult {
        try probe(path, on: host) { probe in
            blkid_probe_enable_superblocks(probe, 1)
            blkid_probe_set_superblocks_flags(probe, Int32(BLKID_SUBLKS_UUID | BLKID_SUBLKS_TYPE))
            blkid_probe_enable_partitions(probe, 0)
        } collect: { probe, result in
            result.values = lookup(probe, ["UUID", "TYPE"])
        }
    }

    /// The partition table (PTUUID, PTTYPE) of a whole disk, and each partition's UUID.
    static func partitionTable(at path: String, on host: HostFileSystem) throws(HostReadError) -> BlkidProbeResult {
        try probe(path, on: host) { probe in
            blkid_probe_enable_superblocks(probe, 0)
            blkid_probe_enable_partitions(probe, 1)
            blkid_probe_set_partitions_flags(probe, Int32(BLKID_PARTS_ENTRY_DETAILS))
        } collect: { probe, result in
            result.values = lookup(probe, ["PTUUID", "PTTYPE"])
            if let list = blkid_probe_get_partitions(probe) {
                for index in 0..<max(0, blkid_partlist_numof_partitions(list)) {
                    if let partition = blkid_partlist_get_partition(list, index), let uuid = blkid_partition_get_uuid(partition) {
                        result.partitionUUIDs.append(String(cString: uuid))
                    }
                }
            }
        }
    }

    /// libblkid is handed a descriptor the host layer opened, never a path: under a root
    /// prefix it would resolve the path from "/" and follow the image's links out of the tree.
    private static func probe(_ path: String, on host: HostFileSystem, configure: (OpaquePointer) -> Void,
                              collect: (OpaquePointer, inout BlkidProbeResult) -> Void) throws(HostReadError) -> BlkidProbeResult {
        try host.withReadableDevice(path) { fd throws(HostReadError) in
            // libblkid is opened here, on first use, not by the loader at start.
            if let problem = fingerly_blkid_problem() {
                throw HostReadError(.error, path: path, detail: String(cString: problem))
            }
            guard let probe = blkid_new_probe() else {
                throw HostReadError(.error, path: path, detail: "libblkid could not allocate a probe")
            }
            defer { blkid_free_probe(probe) }
            guard blkid_probe_set_device(probe, fd, 0, 0) == 0 else {
                throw HostReadError(.error, path: path, detail: "libblkid could not use the device")
            }
            return try run(probe, path: path, configure: configure, collect: collect)
        }
    }

    private static func run(_ probe: OpaquePointer, path: String, configure: (OpaquePointer) -> Void,
                            collect: (OpaquePointer, inout BlkidProbeResult) -> Void) throws(HostReadError) -> BlkidProbeResult {
        configure(probe)
        let status = blkid_do_safeprobe(probe)
        guard status >= 0 else {
            throw HostReadError(.malformed, path: path, detail: status == -2 ? "ambiguous: more than one signature" : "libblkid could not probe it")
        }
        var result = BlkidProbeResult()
        if status == 0 { collect(probe, &result) }
        return result
    }

    private static func lookup(_ probe: OpaquePointer, _ names: [String]) -> [String: String] {
        var values: [String: String] = [:]
        for name in names {
            var data: UnsafePointer<CChar>?
            var length = 0
            if blkid_probe_lookup_value(probe, name, &data, &length) == 0, let data {
                values[name] = String(cString: data)
            }
        }
        return values
    }
}
