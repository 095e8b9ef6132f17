import CFingerlyShims

/// Shared objects mapped into this process that no DT_NEEDED entry of any loaded object asks
/// for: preloaded, injected or dlopen'ed from outside.
struct LoadedObjectsProbe: Probe {
    let id = "loaded-objects"

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
        let unexplained = objects.filter { object in
            let name = String(object.path.split(separator: "/").last ?? "")
            if object.path == "[main]" || name.hasPrefix("linux-vdso") || name.hasPrefix("linux-gate") || name.hasPrefix("ld-linux") {
                return false
            }
            return !needed.contains(name) && !needed.contains(object.soname)
        }.map(\.path)
        context.emit("loader.object_count", objects.count)
        context.emit("loader.unexplained_objects", unexplained)
    }
}
