import FingerlyHost
import FingerlyModel

/// How the objects mapped into this process came in. Preloaded before `main` without the
/// program asking is tampering's evidence; loaded while the program ran is what Python, Ruby,
/// PAM, NSS and plugin hosts do every day, so it is reported with its place and judged by what
/// the code does (the code-integrity, symbol-interposition and process-maps probes), not by
/// having arrived.
package struct LoadedObjectsProbe: Probe {
    package let id = "loaded-objects"
    /// The most objects and DT_NEEDED names taken from the loader.
    var objectLimit = ProcessIntegrity.objectLimit
    var neededLimit = ProcessIntegrity.neededLimit
    static let cutDetail = "more loaded objects or needed names than one listing holds: some were not examined"
    static let truncatedDetail = "a loaded object's path or name is longer than its field: shown cut"
    /// Places that say more than a system directory does, in the order a reason lists them.
    static let unusualPlaces: [ObjectPlace] = [.memory, .deleted, .temporary]

    struct LoadedObjects {
        let objects: [LoadedObject]
        let needed: Set<String>
        let isCut: Bool
        let hasTruncatedName: Bool

        /// Whether a mapping of `path` is accounted for by a DT_NEEDED name or a known plugin place.
        func explains(_ path: String, soname: String, plugins: [String]) -> Bool {
            let name = ObjectArrival.fileName(path)
            if path == "[main]" || ["linux-vdso", "linux-gate", "ld-linux"].contains(where: name.hasPrefix) { return true }
            return needed.contains(name) || needed.contains(soname) || plugins.contains { path.contains($0) }
        }

        var arrival: ObjectArrival {
            ObjectArrival(objects.map {
                ObjectArrival.Object(path: $0.path, soname: $0.soname, needed: $0.needed, isLoaderInfrastructure: $0.isLoaderInfrastructure)
            })
        }
    }

    /// Every object the dynamic loader knows, with the DT_NEEDED names they all ask for.
    static func loadedObjects(objectLimit: Int = ProcessIntegrity.objectLimit, neededLimit: Int = ProcessIntegrity.neededLimit) -> LoadedObjects {
        let listing = ProcessIntegrity.loadedObjects(objectLimit: objectLimit, neededLimit: neededLimit)
        return LoadedObjects(objects: listing.objects, needed: Set(listing.objects.flatMap(\.needed)),
                             isCut: listing.isCut, hasTruncatedName: listing.objects.contains(where: \.hasTruncatedName))
    }

    package func collect(into context: ProbeContext) throws(ProbeFailure) {
        let host = context.host
        guard host.isLiveHost else { throw ProbeFailure(.skipped, "inspects this process's loaded objects; a root tree has none") }
        let loaded = Self.loadedObjects(objectLimit: objectLimit, neededLimit: neededLimit)
        if loaded.isCut { context.recordMalformed("dl_iterate_phdr", Self.cutDetail) }
        if loaded.hasTruncatedName { context.recordMalformed("dl_iterate_phdr", Self.truncatedDetail) }
        let objects = loaded.objects
        let arrival = loaded.arrival
        context.emit("loader.object_count", objects.count)
        context.emit("loader.preloaded_objects", arrival.preloaded.map { objects[$0].path })
        let startUp = objects.indices.dropLast(arrival.loadedAtRunTime.count)
        context.emit("loader.duplicate_sonames", arrival.duplicateSonames.map { soname in
            "\(soname): " + startUp.filter { objects[$0].soname == soname }.map { objects[$0].path }.joined(separator: ", ")
        })

        let program = context.attemptIfPresent { () throws(HostReadError) in try host.readLink("/proc/self/exe") }
        var places: Set<ObjectPlace> = []
        var unusual: [String] = []
        for index in arrival.loadedAtRunTime {
            let path = objects[index].path
            let place = ObjectPlace.of(path, programPath: program) { (path: String) -> Bool in
                do throws(HostReadError) {
                    _ = try host.status(path)
                    return true
                } catch {
                    // Unreadable is not gone: only a file that is absent counts as deleted.
                    if error.failure != .absent { context.record(error) }
                    return error.failure != .absent
                }
            }
            places.insert(place)
            if Self.unusualPlaces.contains(place) { unusual.append("\(place.rawValue): \(path)") }
        }
        context.emit("loader.runtime_object_count", arrival.loadedAtRunTime.count)
        context.emit("loader.runtime_object_places", ObjectPlace.allCases.filter(places.contains).map(\.rawValue))
        context.emit("loader.runtime_objects_in_unusual_places", unusual)
    }
}
