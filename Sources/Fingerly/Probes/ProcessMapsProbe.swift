/// This process's memory map, read with raw system calls: instrumentation and record/replay
/// tools that map themselves in, and executable memfd regions.
struct ProcessMapsProbe: Probe {
    let id = "process-maps"

    func collect(into context: ProbeContext) throws(ProbeFailure) {
        let host = context.host
        let maps: String
        do { maps = try host.readTextBypassingLibc("/proc/self/maps", limit: 4 * 1024 * 1024) } catch { throw ProbeFailure(error) }
        let regions = Self.regions(maps)

        var markers: [String] = []
        let patterns = context.tables.mappingMarkers.map { ($0.pattern.lowercased(), $0.kind) }
        for path in Self.mappedFiles(regions).sorted() {
            let lowered = path.lowercased()
            if let marker = patterns.first(where: { lowered.contains($0.0) }) { markers.append("\(marker.1): \(path)") }
        }
        context.emit("process.mapped_tool_markers", markers)
        let memfd = regions.filter { $0.permissions.contains("x") && $0.path.hasPrefix("/memfd:") }.map(\.path)
        context.emit("process.executable_memfd_mappings", Array(Set(memfd)).sorted())

    }

    struct Region {
        let permissions: String
        let path: String
    }

    /// Lines of "address perms offset dev inode [path]"; the path starts at the first non-blank
    /// after the fifth field and may contain spaces. Parsed on bytes: a Swift process maps
    /// hundreds of regions and this runs on every integrity check.
    static func regions(_ maps: String) -> [Region] {
        var regions: [Region] = []
        let bytes = Array(maps.utf8)
        var lineStart = 0
        while lineStart < bytes.count {
            var lineEnd = lineStart
            while lineEnd < bytes.count && bytes[lineEnd] != UInt8(ascii: "\n") { lineEnd += 1 }
            var index = lineStart
            var fieldStarts: [Int] = []
            while index < lineEnd && fieldStarts.count < 6 {
                while index < lineEnd && bytes[index] == UInt8(ascii: " ") { index += 1 }
                if index < lineEnd { fieldStarts.append(index) }
                if fieldStarts.count == 6 { break }
                while index < lineEnd && bytes[index] != UInt8(ascii: " ") { index += 1 }
            }
            if fieldStarts.count >= 5 {
                var permissionsEnd = fieldStarts[1]
                while permissionsEnd < lineEnd && bytes[permissionsEnd] != UInt8(ascii: " ") { permissionsEnd += 1 }
                let permissions = String(decoding: bytes[fieldStarts[1]..<permissionsEnd], as: UTF8.self)
                let path = fieldStarts.count == 6 ? String(decoding: bytes[fieldStarts[5]..<lineEnd], as: UTF8.self) : ""
                regions.append(Region(permissions: permissions, path: path))
            }
            lineStart = lineEnd + 1
        }
        return regions
    }

    static func mappedFiles(_ regions: [Region]) -> Set<String> {
        Set(regions.map(\.path).filter { $0.hasPrefix("/") })
    }
}
