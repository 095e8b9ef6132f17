#if canImport(Glibc)
import Glibc
#endif
import CFingerlyShims

/// Shared objects mapped into this process that no DT_NEEDED entry of any loaded object asks
/// for: preloaded, injected or dlopen'ed from outside.
struct LoadedObjectsProbe: Probe {
    let id = "loaded-objects"

    static func realPath(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(decoding: UnsafeRawBufferPointer(start: resolved, count: strlen(resolved)), as: UTF8.self)
    }

    func collect(into context: ProbeContext) throws(ProbeFailure) {
        guard context.host.isLiveHost else { throw ProbeFailure(.skipped, "inspects this process's loaded objects; a root tree has none") }
        var buffer = [CChar](repeating: 0, count: 256 * 1024)
        let length = fingerly_loaded_objects(&buffer, buffer.count)
        let listing = String(decoding: buffer[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)

        var objects: [(path: String, soname: String)] = []
        var needed: Set<String> = []
        for line in listing.split(separator: "\n") {
            let fields = line.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)
            if fields.first == "O", fields.count >= 3 { objects.append((fields[1], fields[2])) }
            if fields.first == "N", fields.count >= 2 { needed.insert(fields[1]) }
        }
        let plugins = context.tables.dlopenPlugins
        func explained(_ path: String, soname: String) -> Bool {
            let name = String(path.split(separator: "/").last ?? "")
            if path == "[main]" || name.hasPrefix("linux-vdso") || name.hasPrefix("linux-gate") || name.hasPrefix("ld-linux") {
                return true
            }
            return needed.contains(name) || needed.contains(soname) || plugins.contains { path.contains($0) }
        }
        var unexplained = objects.filter { !explained($0.path, soname: $0.soname) }.map(\.path)
        // An object mapped by hand (mmap of a .so, a manual loader) never shows in
        // dl_iterate_phdr: look at the raw map for shared objects the loader does not know.
        // Compared by real path: the loader names libudev.so.1, the map shows libudev.so.1.7.5.
        var known = Set(objects.compactMap { Self.realPath($0.path == "[main]" ? "/proc/self/exe" : $0.path) })
        known.formUnion(objects.map(\.path))
        if let maps = context.attempt({ () throws(HostReadError) in try context.host.readTextBypassingLibc("/proc/self/maps", limit: 4 * 1024 * 1024) }) {
            for path in ProcessMapsProbe.mappedFiles(ProcessMapsProbe.regions(maps)).sorted() {
                let name = String(path.split(separator: "/").last ?? "")
                guard name.contains(".so"), !known.contains(path), !known.contains(Self.realPath(path) ?? path),
                      !explained(path, soname: ""), !unexplained.contains(path) else { continue }
                unexplained.append(path + " (mapped without the loader)")
            }
        }
        context.emit("loader.object_count", objects.count)
        context.emit("loader.unexplained_objects", unexplained)
    }
}
