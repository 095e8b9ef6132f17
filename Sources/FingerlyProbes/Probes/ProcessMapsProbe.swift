#if canImport(Glibc)
import Glibc
#endif
import FingerlyHost
import FingerlyModel
/// This process's memory map, read with raw system calls: instrumentation and record/replay
/// tools that map themselves in, and executable memfd regions.
package struct ProcessMapsProbe: Probe {
    package let id = "process-maps"

    package func collect(into context: ProbeContext) throws(ProbeFailure) {
        let host = context.host
        let maps: String
        do { maps = try host.readTextBypassingLibc("/proc/self/maps", limit: 2 * 1024 * 1024) } catch { throw ProbeFailure(error) }
        let regions = Self.regions(maps)

        var markers: [String] = []
        // Bytes made once, not per mapped file: a Swift process maps hundreds.
        let patterns = context.tables.patterns("mappingMarkers").map { (Array($0.pattern.lowercased().utf8), $0.kind) }
        for path in Self.mappedFiles(regions).sorted() {
            let lowered = Array(path.lowercased().utf8)
            if let marker = patterns.first(where: { Self.bytes(lowered, contain: $0.0) }) {
                markers.append("\(marker.1): \(path)")
            }
        }
        context.emit("process.mapped_tool_markers", markers)
        let memfd = regions.filter { $0.permissions.utf8.contains(UInt8(ascii: "x")) && $0.path.hasPrefix("/memfd:") }.map(\.path)
        context.emit("process.executable_memfd_mappings", Array(Set(memfd)).sorted())

        // A shared object mapped by hand (mmap of a .so, a manual loader) never shows in the
        // loader's list. Compared by device and inode: the loader says libudev.so.1, the map
        // libudev.so.1.7.5, and both are the same file.
        guard host.isLiveHost else { return }
        let loaded = LoadedObjectsProbe.loadedObjects()
        if loaded.isCut { context.recordMalformed("dl_iterate_phdr", LoadedObjectsProbe.cutDetail) }
        var known: Set<FileIdentity> = []
        for object in loaded.objects {
            // The vDSO and the like have a name but no file.
            let path = object.path == "[main]" ? "/proc/self/exe" : object.path
            guard path.hasPrefix("/") else { continue }
            // A library replaced on disk since it was loaded is gone: nothing to compare, no failure.
            if let status = context.attemptIfPresent({ () throws(HostReadError) in try host.status(path) }) {
                known.insert(FileIdentity(device: status.device, inode: status.inode))
            }
        }
        var unloaded: [String] = []
        for region in regions where region.path.hasPrefix("/") && Self.fileName(region.path).containsUTF8(".so") {
            guard let identity = region.identity, !known.contains(identity), !unloaded.contains(region.path),
                  !loaded.explains(region.path, soname: "", plugins: context.tables.strings("dlopenPlugins")) else { continue }
            unloaded.append(region.path)
        }
        context.emit("loader.objects_mapped_without_loader", unloaded)

    }

    struct FileIdentity: Hashable {
        let device: UInt64
        let inode: UInt64
    }

    struct Region {
        let permissions: String
        let path: String
        /// The mapped file's device and inode, from the map's "MAJ:MIN inode" fields.
        var identity: FileIdentity? = nil
    }

    /// Lines of "address perms offset dev inode [path]"; the path starts at the first non-blank
    /// after the fifth field and may contain spaces. Parsed on the string's own bytes, with no
    /// array per line: a Swift process maps hundreds of regions and this runs on every integrity check.
    static func regions(_ maps: String) -> [Region] {
        var maps = maps
        return maps.withUTF8 { regions(in: $0) }
    }

    private typealias Bytes = Slice<UnsafeBufferPointer<UInt8>>

    private static func regions(in bytes: UnsafeBufferPointer<UInt8>) -> [Region] {
        let space = UInt8(ascii: " "), newline = UInt8(ascii: "\n")
        var regions: [Region] = []
        var lineStart = 0
        while lineStart < bytes.count {
            var lineEnd = lineStart
            while lineEnd < bytes.count && bytes[lineEnd] != newline { lineEnd += 1 }
            // Where the first six fields start, the sixth (the path) running to the end of the line.
            var fieldStarts: (Int, Int, Int, Int, Int, Int) = (0, 0, 0, 0, 0, 0)
            var fieldCount = 0
            var index = lineStart
            while index < lineEnd && fieldCount < 6 {
                while index < lineEnd && bytes[index] == space { index += 1 }
                if index < lineEnd {
                    switch fieldCount {
                    case 0: fieldStarts.0 = index
                    case 1: fieldStarts.1 = index
                    case 2: fieldStarts.2 = index
                    case 3: fieldStarts.3 = index
                    case 4: fieldStarts.4 = index
                    default: fieldStarts.5 = index
                    }
                    fieldCount += 1
                }
                if fieldCount == 6 { break }
                while index < lineEnd && bytes[index] != space { index += 1 }
            }
            if fieldCount >= 5 {
                func field(from start: Int) -> Bytes {
                    var end = start
                    while end < lineEnd && bytes[end] != space { end += 1 }
                    return bytes[start..<end]
                }
                let permissions = String(decoding: field(from: fieldStarts.1), as: UTF8.self)
                let path = fieldCount == 6 ? String(decoding: bytes[fieldStarts.5..<lineEnd], as: UTF8.self) : ""
                let identity = path.hasPrefix("/")
                    ? identity(device: field(from: fieldStarts.3), inode: field(from: fieldStarts.4)) : nil
                regions.append(Region(permissions: permissions, path: path, identity: identity))
            }
            lineStart = lineEnd + 1
        }
        return regions
    }

    private static func identity(device: Bytes, inode: Bytes) -> FileIdentity? {
        // As splitting on ":" (empty pieces left out) and keeping the pieces that are numbers would:
        // exactly two numbers make the device.
        var numbers: (UInt64, UInt64) = (0, 0)
        var numberCount = 0
        var pieceStart = device.startIndex
        while pieceStart < device.endIndex && numberCount <= 2 {
            var pieceEnd = pieceStart
            while pieceEnd < device.endIndex && device[pieceEnd] != UInt8(ascii: ":") { pieceEnd += 1 }
            if pieceEnd > pieceStart, let value = number(in: device[pieceStart..<pieceEnd], radix: 16, below: 1 << 32) {
                if numberCount == 0 { numbers.0 = value } else { numbers.1 = value }
                numberCount += 1
            }
            pieceStart = pieceEnd + 1
        }
        guard numberCount == 2, let inode = number(in: inode, radix: 10, below: nil) else { return nil }
        // glibc's makedev encoding (a macro Swift cannot call).
        let major = numbers.0, minor = numbers.1
        let encoded = ((major & 0xFFFF_F000) << 32) | ((major & 0xFFF) << 8) | ((minor & 0xFFFF_FF00) << 12) | (minor & 0xFF)
        return FileIdentity(device: encoded, inode: inode)
    }

    /// The number the bytes spell in `radix` with an optional leading "+" (as Swift's integer
    /// parsing takes it), or nil when they spell none or one of `limit` or more.
    private static func number(in digits: Bytes, radix: UInt64, below limit: UInt64?) -> UInt64? {
        var digits = digits
        if digits.first == UInt8(ascii: "+") { digits = digits.dropFirst() }
        guard !digits.isEmpty else { return nil }
        var value: UInt64 = 0
        for byte in digits {
            let digit: UInt64
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt64(byte - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "z"): digit = UInt64(byte - UInt8(ascii: "a")) + 10
            case UInt8(ascii: "A")...UInt8(ascii: "Z"): digit = UInt64(byte - UInt8(ascii: "A")) + 10
            default: return nil
            }
            guard digit < radix else { return nil }
            let (shifted, overflowShift) = value.multipliedReportingOverflow(by: radix)
            let (sum, overflowAdd) = shifted.addingReportingOverflow(digit)
            guard !overflowShift, !overflowAdd else { return nil }
            value = sum
        }
        if let limit, value >= limit { return nil }
        return value
    }

    /// Whether `pattern` occurs in `text`, both bytes already.
    static func bytes(_ text: [UInt8], contain pattern: [UInt8]) -> Bool {
        guard !pattern.isEmpty else { return true }
        guard text.count >= pattern.count else { return false }
        var start = 0
        while start <= text.count - pattern.count {
            if text[start] == pattern[0] {
                var offset = 1
                while offset < pattern.count && text[start + offset] == pattern[offset] { offset += 1 }
                if offset == pattern.count { return true }
            }
            start += 1
        }
        return false
    }

    /// What follows the last "/", found on bytes: this runs for each of a Swift process's hundreds of regions.
    static func fileName(_ path: String) -> Substring {
        guard let slash = path.utf8.lastIndex(of: UInt8(ascii: "/")) else { return Substring(path) }
        return path[path.utf8.index(after: slash)...]
    }

    static func mappedFiles(_ regions: [Region]) -> Set<String> {
        Set(regions.map(\.path).filter { $0.hasPrefix("/") })
    }
}
