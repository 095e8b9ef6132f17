/// How each object in the loader's list came into this process, told from the list's order.
///
/// glibc lists the program first, then the vDSO, then what `LD_PRELOAD` and `/etc/ld.so.preload`
/// name, then the program's DT_NEEDED closure (the loader itself placed among it); `dlopen`
/// appends to the end. So every object placed before the last one that the program's closure
/// reaches, and that the closure does not reach, came in before `main` without being asked for:
/// preloaded, with whatever it needed itself. Everything after it was loaded while the program
/// ran, which is what applications do with their plugins and extension modules. (`dl_iterate_phdr`
/// lists the caller's namespace only: audit modules do not appear.)
///
/// A needed name is resolved as the loader resolves it, to the first object in list order that
/// carries it as its soname; an object without a soname answers to its file name, and a name
/// with a slash to that path. So a preload cannot pass for a dependency by taking its file name.
package struct ObjectArrival: Sendable, Hashable {
    package struct Object: Sendable {
        let path: String
        let soname: String
        let needed: [String]
        let isLoaderInfrastructure: Bool

        package init(path: String, soname: String, needed: [String], isLoaderInfrastructure: Bool = false) {
            self.path = path
            self.soname = soname
            self.needed = needed
            self.isLoaderInfrastructure = isLoaderInfrastructure
        }
    }

    /// Objects loaded before `main` that the program's dependencies do not reach: what a preload
    /// named, and what those objects need that the program does not.
    package let preloaded: [Int]
    /// Objects loaded after start-up, by `dlopen`.
    package let loadedAtRunTime: [Int]
    /// Sonames that two objects loaded at start-up both carry: the loader resolves a name to one
    /// object, so at start-up a second can only come in by path, as a preload that took a
    /// dependency's soname and loads the real one behind it does.
    package let duplicateSonames: [String]

    /// - Parameter objects: the loader's list in its order, the program first.
    package init(_ objects: [Object]) {
        guard !objects.isEmpty else {
            preloaded = []
            loadedAtRunTime = []
            duplicateSonames = []
            return
        }
        let names = NeededNames(objects)
        // One walk over the whole list: each object is reached once and each of its needed names
        // resolved once, however the start-up range grows.
        var reached = [Bool](repeating: false, count: objects.count)
        // The first object in list order that needs each one: the loader places a dependency after
        // the first object that asks for it, and only a preload can stand before all of them.
        var firstNeeder = [Int?](repeating: nil, count: objects.count)
        var queue: [Int] = []
        var lastReached = 0
        func reach(_ index: Int) {
            guard !reached[index] else { return }
            reached[index] = true
            lastReached = max(lastReached, index)
            queue.append(index)
        }
        func drain() {
            while let next = queue.popLast() {
                for name in objects[next].needed {
                    guard let index = names.resolve(name) else { continue }
                    if index != next { firstNeeder[index] = min(firstNeeder[index] ?? next, next) }
                    reach(index)
                }
            }
        }
        reach(0)
        for index in objects.indices where objects[index].isLoaderInfrastructure { reach(index) }
        drain()
        let asked = reached
        var examined = 0
        // What a preload needs is loaded at start-up too and may be listed after the program's
        // last dependency: the range grows until it holds all that it reaches.
        while examined <= lastReached {
            let end = lastReached
            for index in examined...end where !reached[index] {
                reach(index)
                drain()
            }
            examined = end + 1
        }
        // A "dependency" listed before every object that needs it came in first: a preload that
        // took the name of a library the program's libraries need. (The program's own needs
        // cannot be told so: it stands first.)
        preloaded = (0...lastReached).filter { index in
            guard asked[index] else { return true }
            guard index > 0, !objects[index].isLoaderInfrastructure, let needer = firstNeeder[index] else { return false }
            return needer > index
        }
        loadedAtRunTime = Array(objects.indices.dropFirst(lastReached + 1))
        var holders: [String: Int] = [:]
        var duplicates: [String] = []
        for index in 0...lastReached where !objects[index].soname.isEmpty {
            holders[objects[index].soname, default: 0] += 1
            if holders[objects[index].soname] == 2 { duplicates.append(objects[index].soname) }
        }
        duplicateSonames = duplicates
    }

    static func fileName(_ path: String) -> String {
        path.split(separator: "/", omittingEmptySubsequences: true).last.map(String.init) ?? ""
    }
}

/// The loader's answer to a DT_NEEDED name: the first object in list order that carries it as
/// its soname; an object without a soname answers to its file name, a name with a slash to that
/// path.
package struct NeededNames: Sendable {
    private let objects: [ObjectArrival.Object]
    private var bySoname: [String: Int] = [:], byFileName: [String: Int] = [:], byPath: [String: Int] = [:]

    package init(_ objects: [ObjectArrival.Object]) {
        self.objects = objects
        for (index, object) in objects.enumerated() {
            if !object.soname.isEmpty {
                if bySoname[object.soname] == nil { bySoname[object.soname] = index }
            } else {
                let name = ObjectArrival.fileName(object.path)
                if !name.isEmpty && byFileName[name] == nil { byFileName[name] = index }
            }
        }
        // Only a name with a slash is looked up by path, and hardly any program has one.
        guard objects.contains(where: { $0.needed.contains { $0.utf8.contains(UInt8(ascii: "/")) } }) else { return }
        for (index, object) in objects.enumerated() {
            let path = ObjectPlace.lexicallyNormal(object.path)
            if byPath[path] == nil { byPath[path] = index }
        }
    }

    package func resolve(_ name: String) -> Int? {
        if name.utf8.contains(UInt8(ascii: "/")) { return byPath[ObjectPlace.lexicallyNormal(name)] }
        return bySoname[name] ?? byFileName[name]
    }

    /// `root` and every object its needed names reach, and theirs in turn.
    package func closure(from root: Int) -> Set<Int> {
        var reached: Set<Int> = [root]
        var queue = [root]
        while let next = queue.popLast() {
            for name in objects[next].needed {
                if let index = resolve(name), reached.insert(index).inserted { queue.append(index) }
            }
        }
        return reached
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
        // Nearly every path the loader names is normal already, and this runs for each of them.
        if !path.utf8.contains(UInt8(ascii: ".")) && !path.contains("//") { return path }
        var kept: [Substring] = []
        for component in path.split(separator: "/") where component != "." {
            if component == ".." { _ = kept.popLast() } else { kept.append(component) }
        }
        return (path.hasPrefix("/") ? "/" : "") + kept.joined(separator: "/")
    }
}
