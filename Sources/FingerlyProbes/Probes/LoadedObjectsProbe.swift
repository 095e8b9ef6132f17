import CFingerlyShims
import FingerlyHost
import FingerlyModel

/// Shared objects mapped into this process that no DT_NEEDED entry of any loaded object asks
/// for: preloaded, injected or dlopen'ed from outside.
package struct LoadedObjectsProbe: Probe {
    package let id = "loaded-objects"

    struct LoadedObjects {
        let objects: [(path: String, soname: String)]
        let needed: Set<String>

        func explains(_ path: String, soname: String, plugins: [String]) -> Bool {
            let name = String(path.split(separator: "/").last ?? "")
            if path == "[main]" || name.hasPrefix("linux-vdso") || name.hasPrefix("linux-gate") || name.hasPrefix("ld-linux") {
                return true
            }
            return needed.contains(name) || needed.contains(soname) || plugins.contains { path.contains($0) }
        }
    }

    /// Every object the dynamic loader knows, with the DT_NEEDED names they all ask for.
    static func loadedObjects() -> LoadedObjects {
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
        return LoadedObjects(objects: objects, needed: needed)
    }

    package func collect(into context: ProbeContext) throws(ProbeFailure) {
        guard context.host.isLiveHost else { throw ProbeFailure(.skipped, "inspects this process's loaded objects; a root tree has none") }
        let loaded = Self.loadedObjects()
        let objects = loaded.objects
        let unexplained = objects.filter { !loaded.explains($0.path, soname: $0.soname, plugins: context.tables.strings("dlopenPlugins")) }.map(\.path)
        context.emit("loader.object_count", objects.count)
        context.emit("loader.unexplained_objects", unexplained)
    }
}
