/// This process's memory map, read with raw system calls: instrumentation and record/replay
/// tools that map themselves in, executable memfd regions, and whether the libc view of
/// /proc/self differs from the raw one (a hook filtering what the process sees of itself).
struct ProcessMapsProbe: Probe {
    let id = "process-maps"

    func collect(into context: ProbeContext) throws(ProbeFailure) {
        let host = context.host
        let maps: String
        do { maps = try host.readTextBypassingLibc("/proc/self/maps", limit: 4 * 1024 * 1024) } catch { throw ProbeFailure(error) }
        let regions = Self.regions(maps)

        var markers: [String] = []
        for path in Self.mappedFiles(regions) {
            if let marker = context.tables.mappingMarkers.first(where: { path.lowercased().contains($0.pattern.lowercased()) }),
               !markers.contains(where: { $0.hasSuffix(path) }) {
                markers.append("\(marker.kind): \(path)")
            }
        }
        context.emit("process.mapped_tool_markers", markers)
        let memfd = regions.filter { $0.permissions.contains("x") && $0.path.hasPrefix("/memfd:") }.map(\.path)
        context.emit("process.executable_memfd_mappings", Array(Set(memfd)).sorted())

        // Both views are read now, one right after the other: anything one shows and the other
        // does not was filtered on its way through libc.
        guard host.isLiveHost else { return }
        var mismatches: [String] = []
        if let viaLibc = context.attempt({ () throws(HostReadError) in try host.readText("/proc/self/maps", limit: 4 * 1024 * 1024) }) {
            let hidden = Self.mappedFiles(regions).subtracting(Self.mappedFiles(Self.regions(viaLibc)))
            if !hidden.isEmpty { mismatches.append("/proc/self/maps hides \(hidden.sorted().joined(separator: ", "))") }
        }
        for (path, field) in [("/proc/self/status", "TracerPid")] {
            let raw = context.attempt { () throws(HostReadError) in try host.readTextBypassingLibc(path) }
            let viaLibc = context.attempt { () throws(HostReadError) in try host.readText(path) }
            if let raw, let viaLibc, ProcessContextProbe.parseStatus(raw)[field] != ProcessContextProbe.parseStatus(viaLibc)[field] {
                mismatches.append("\(path) \(field) differs")
            }
        }
        if let raw = context.attempt({ () throws(HostReadError) in try host.readBypassingLibc(ProcessEnvironment.path, limit: 1024 * 1024) }),
           let viaLibc = context.attempt({ () throws(HostReadError) in try host.read(ProcessEnvironment.path, limit: 1024 * 1024) }),
           raw != viaLibc {
            mismatches.append("\(ProcessEnvironment.path) differs")
        }
        context.emit("integrity.view_mismatches", mismatches)
    }

    struct Region {
        let permissions: String
        let path: String
    }

    static func regions(_ maps: String) -> [Region] {
        maps.split(separator: "\n").compactMap { line in
            // address perms offset dev inode [path]; the path may contain spaces.
            let fields = line.split(separator: " ", maxSplits: 5, omittingEmptySubsequences: true)
            guard fields.count >= 5 else { return nil }
            return Region(permissions: String(fields[1]), path: fields.count == 6 ? fields[5].trimmingWhitespace() : "")
        }
    }

    static func mappedFiles(_ regions: [Region]) -> Set<String> {
        Set(regions.map(\.path).filter { $0.hasPrefix("/") })
    }
}
