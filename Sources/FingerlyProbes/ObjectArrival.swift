/// How each object in the loader's list came into this process, told from the list's order.
///
/// glibc lists the program first, then the vDSO, then what `LD_PRELOAD` and `/etc/ld.so.preload`
/// name, then the program's DT_NEEDED closure (the loader itself placed among it); `dlopen`
/// appends to the end, and audit modules live in namespaces listed after the first. So every
/// object the program's own dependencies do not ask for, placed before the last of them, came in
/// before `main` without being asked for: preloaded. Everything after it was loaded while the
/// program ran, which is what applications do with their plugins and extension modules.
package struct ObjectArrival: Sendable, Hashable {
    /// Objects loaded before `main` that no dependency of the program asks for, without those
    /// they in turn need: what a preload named.
    package let preloaded: [Int]
    /// Objects loaded after start-up, by `dlopen` or an audit namespace.
    package let loadedAtRunTime: [Int]

    /// - Parameters:
    ///   - objects: the loader's list in its order, the program first.
    package init(_ objects: [(path: String, soname: String, needed: [String])]) {
        var byName: [String: [Int]] = [:]
        for (index, object) in objects.enumerated() {
            for name in Set([Self.fileName(object.path), object.soname]) where !name.isEmpty {
                byName[name, default: []].append(index)
            }
        }
        func closure(from roots: [Int]) -> Set<Int> {
            var reached = Set(roots)
            var queue = roots
            while let next = queue.popLast() {
                for name in objects[next].needed {
                    for index in byName[name] ?? [] where reached.insert(index).inserted { queue.append(index) }
                }
            }
            return reached
        }
        guard let program = objects.indices.first else {
            preloaded = []
            loadedAtRunTime = []
            return
        }
        let infrastructure = objects.indices.filter { Self.isLoaderInfrastructure(objects[$0].path) }
        let asked = closure(from: [program] + infrastructure)
        // What a preload needs is loaded at start-up too, and may be listed after the program's
        // last dependency: grow the start-up range until it holds the closure of all it holds.
        var lastStartUp = asked.max() ?? program
        var startUp = asked
        while true {
            let unasked = (program...lastStartUp).filter { !asked.contains($0) }
            startUp = asked.union(closure(from: unasked))
            guard let last = startUp.max(), last > lastStartUp else { break }
            lastStartUp = last
        }
        let unasked = (program...lastStartUp).filter { !asked.contains($0) }
        // A preload's own dependencies are loaded with it; only what nothing asked for is named.
        let broughtAlong = closure(from: unasked.flatMap { index in
            objects[index].needed.flatMap { byName[$0] ?? [] }
        })
        preloaded = unasked.filter { !broughtAlong.contains($0) }
        loadedAtRunTime = Array(objects.indices.dropFirst(lastStartUp + 1))
    }

    /// The vDSO and the dynamic loader are there before anything asks for them.
    static func isLoaderInfrastructure(_ path: String) -> Bool {
        let name = fileName(path)
        return name.hasPrefix("linux-vdso") || name.hasPrefix("linux-gate") || name.hasPrefix("ld-linux")
    }

    static func fileName(_ path: String) -> String {
        path.split(separator: "/", omittingEmptySubsequences: true).last.map(String.init) ?? ""
    }
}

/// Where an object loaded at run time lives. A place says little by itself: PyInstaller, JNA and
/// cffi extract their objects to a temporary directory, and a package upgrade deletes a file
/// that a running program still maps.
package enum ObjectPlace: String, Sendable, CaseIterable {
    /// The distribution's library directories.
    case system
    /// Below the program's own installation (the parent of its bin/, sbin/ or libexec/ directory).
    case program
    /// /tmp, /var/tmp, /dev/shm or a user's runtime directory.
    case temporary
    /// The file the loader opened is no longer there.
    case deleted
    /// Opened from a file descriptor (memfd_create, /proc/self/fd): code with no file on disk.
    case memory
    case other

    static let systemDirectories = ["/lib/", "/lib32/", "/lib64/", "/libx32/", "/usr/lib/", "/usr/lib32/", "/usr/lib64/",
                                    "/usr/libx32/", "/usr/local/lib/"]
    static let temporaryDirectories = ["/tmp/", "/var/tmp/", "/dev/shm/", "/run/user/"]
    static let descriptorPrefixes = ["/memfd:", "/proc/", "/dev/fd/"]

    /// - Parameters:
    ///   - path: as the loader names the object.
    ///   - programPath: the program's executable, to find its installation.
    ///   - exists: whether the file is still there.
    package static func of(_ path: String, programPath: String?, exists: (String) -> Bool) -> ObjectPlace {
        // ".." would let /usr/lib/../../tmp/x.so pass for a system library.
        let normal = lexicallyNormal(path)
        if descriptorPrefixes.contains(where: normal.hasPrefix) { return .memory }
        if !exists(path) { return .deleted }
        if temporaryDirectories.contains(where: normal.hasPrefix) { return .temporary }
        if systemDirectories.contains(where: normal.hasPrefix) { return .system }
        if let tree = programPath.flatMap(installationTree), normal.hasPrefix(tree + "/") { return .program }
        return .other
    }

    /// /opt/app/bin/app -> /opt/app; /opt/app/app -> /opt/app. None for a program at the top.
    static func installationTree(of program: String) -> String? {
        var components = lexicallyNormal(program).split(separator: "/").dropLast()
        if let last = components.last, ["bin", "sbin", "libexec"].contains(last) { components = components.dropLast() }
        return components.isEmpty ? nil : "/" + components.joined(separator: "/")
    }

    /// "." and ".." resolved by name, symbolic links left alone; a relative path stays relative.
    static func lexicallyNormal(_ path: String) -> String {
        var kept: [Substring] = []
        for component in path.split(separator: "/") where component != "." {
            if component == ".." { _ = kept.popLast() } else { kept.append(component) }
        }
        return (path.hasPrefix("/") ? "/" : "") + kept.joined(separator: "/")
    }
}
