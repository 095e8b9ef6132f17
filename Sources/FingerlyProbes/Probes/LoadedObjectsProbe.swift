import FingerlyHost
import FingerlyModel

/// Shared objects mapped into this process that no DT_NEEDED entry of any loaded object asks
/// for: preloaded, injected or dlopen'ed from outside.
package struct LoadedObjectsProbe: Probe {
    package let id = "loaded-objects"
    /// The most objects and DT_NEEDED names taken from the loader.
    var objectLimit = ProcessIntegrity.objectLimit
    var neededLimit = ProcessIntegrity.neededLimit
    static let cutDetail = "more loaded objects or needed names than one listing holds: some were not examined"
    static let truncatedDetail = "a loaded object's path or name is longer than its field: shown cut"

    struct LoadedObjects {
        let objects: [(path: String, soname: String)]
        let needed: Set<String>
        let isCut: Bool
        let hasTruncatedName: Bool

        func explains(_ path: String, soname: String, plugins: [String]) -> Bool {
            let name = String(path.split(separator: "/").last ?? "")
            if path == "[main]" || name.hasPrefix("linux-vdso") || name.hasPrefix("linux-gate") || name.hasPrefix("ld-linux") {
                return true
            }
            return needed.contains(name) || needed.contains(soname) || plugins.contains { path.contains($0) }
        }
    }

    /// Every object the dynamic loader knows, with the DT_NEEDED names they all ask for.
    static func loadedObjects(objectLimit: Int = ProcessIntegrity.objectLimit, neededLimit: Int = ProcessIntegrity.neededLimit) -> LoadedObjects {
        let listing = ProcessIntegrity.loadedObjects(objectLimit: objectLimit, neededLimit: neededLimit)
        return LoadedObjects(objects: listing.objects.map { ($0.path, $0.soname) }, needed: Set(listing.objects.flatMap(\.needed)),
                             isCut: listing.isCut, hasTruncatedName: listing.objects.contains(where: \.hasTruncatedName))
    }

    package func collect(into context: ProbeContext) throws(ProbeFailure) {
        guard context.host.isLiveHost else { throw ProbeFailure(.skipped, "inspects this process's loaded objects; a root tree has none") }
        let loaded = Self.loadedObjects(objectLimit: objectLimit, neededLimit: neededLimit)
        if loaded.isCut { context.recordMalformed("dl_iterate_phdr", Self.cutDetail) }
        if loaded.hasTruncatedName { context.recordMalformed("dl_iterate_phdr", Self.truncatedDetail) }
        let objects = loaded.objects
        let unexplained = objects.filter { !loaded.explains($0.path, soname: $0.soname, plugins: context.tables.strings("dlopenPlugins")) }.map(\.path)
        context.emit("loader.object_count", objects.count)
        context.emit("loader.unexplained_objects", unexplained)
    }
}
