#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CFingerlyFiles
import Synchronization

/// Why a host read produced no usable content.
package enum HostReadFailure: String, Sendable, Codable, Hashable {
    /// ENOENT/ENOTDIR: the thing is not there. ESRCH too: a /proc file whose thread or process ended
    /// between its listing and its read.
    case absent
    /// EACCES/EPERM: normal for non-root users and inside containers.
    case denied
    /// The content was read but could not be understood.
    case malformed
    /// Any other system error.
    case error
}

/// A failed read, with the path relative to the host root so reports read the same under `--root`.
package struct HostReadError: Error, Sendable, Hashable, CustomStringConvertible {
    package let failure: HostReadFailure
    package let path: String
    package let detail: String

    package init(_ failure: HostReadFailure, path: String, detail: String) {
        self.failure = failure
        self.path = path
        self.detail = detail
    }

    package init(path: String, systemError: SystemError) {
        let failure: HostReadFailure
        switch systemError.code {
        case ENOENT, ENOTDIR, ESRCH: failure = .absent
        case EACCES, EPERM: failure = .denied
        default: failure = .error
        }
        self.init(failure, path: path, detail: systemError.description)
    }

    package var description: String { "\(path): \(failure.rawValue) (\(detail))" }
}

/// Keeps a list of every host path a probe touched; tests compare it with the catalogue.
package final class HostAccessLog: Sendable {
    private let paths = Mutex<[String]>([])

    func record(_ path: String) { paths.withLock { $0.append(path) } }
    var recorded: [String] { paths.withLock { $0 } }
}

/// How much one probe may read, and whether it has been abandoned. The scheduler gives each
/// probe its own: a hostile tree of sparse or endless files must not let one probe read
/// gigabytes, and a probe abandoned at its timeout must stop at its next read instead of
/// reading on in the background.
package final class ReadAllowance: Sendable {
    let limit: Int
    private let spent = Atomic<Int>(0)
    private let abandonedFlag = Atomic<Bool>(false)

    package init(bytes: Int) { limit = bytes }

    package func abandon() { abandonedFlag.store(true, ordering: .relaxed) }
    var isAbandoned: Bool { abandonedFlag.load(ordering: .relaxed) }
    var remaining: Int { max(0, limit - spent.load(ordering: .relaxed)) }

    func charge(_ bytes: Int) { spent.add(bytes, ordering: .relaxed) }

    /// Throws when the probe may read no more.
    func check(_ path: String) throws(HostReadError) {
        if isAbandoned {
            throw HostReadError(.error, path: path, detail: "not read: the probe was abandoned at its timeout")
        }
        if remaining == 0 {
            throw HostReadError(.error, path: path, detail: "not read: the probe has read its limit of \(limit / 1024 / 1024) MiB")
        }
    }
}

/// The directory a root prefix names, held open for the life of the collector so that every
/// lookup starts from the same directory, whatever is renamed in the meantime.
package final class RootDirectory: Sendable {
    /// -errno when the root could not be opened.
    let descriptor: Int32

    package init(_ path: String) {
        let fd = open(path, fingerlyOpenPath | O_DIRECTORY | O_CLOEXEC)
        descriptor = fd >= 0 ? fd : -errno
    }

    deinit { if descriptor >= 0 { close(descriptor) } }
}

/// Every file-reading probe reads the host through this one layer, so a fixture tree, a container's
/// root filesystem or a mounted disk image can be inspected exactly like the live host.
///
/// Under a root prefix nothing is ever opened by a path the kernel resolves from "/": every
/// lookup goes through `openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)` on the root's
/// descriptor (or a component-wise O_NOFOLLOW walk where the kernel lacks it), and reading,
/// listing, readlink and stat work on the descriptor it returns. An image's links, absolute or
/// relative, at any depth, and swapped in while the collector runs, stay inside the tree.
package struct HostFileSystem: Sendable {
    /// Largest file read unless a caller asks for less: /proc and /sys files are small, and an
    /// unbounded read of a hostile or looping file must not exhaust memory.
    package static let defaultReadLimit = 256 * 1024
    /// Most names taken from one directory: no host has more NICs, disks, PCI functions or
    /// certificates, and a tree of hundreds of thousands of 255-byte names must not hold megabytes
    /// in every probe that lists it. /proc asks for more, keeping only the short numeric names.
    package static let directoryEntryLimit = 4_096

    /// The root prefix; "/" for the live host.
    package let root: String
    let log: HostAccessLog?
    private let rootDirectory: RootDirectory?
    let resolution: fingerly_resolution
    let allowance: ReadAllowance?

    package init(root: String = "/") {
        self.init(root: root, log: nil)
    }

    package init(root: String, log: HostAccessLog?, resolution: fingerly_resolution = fingerly_resolution_automatic) {
        var trimmed = root
        while trimmed.count > 1 && trimmed.hasSuffix("/") { trimmed.removeLast() }
        self.root = trimmed.isEmpty ? "/" : trimmed
        self.log = log
        self.rootDirectory = self.root == "/" ? nil : RootDirectory(self.root)
        self.resolution = resolution
        self.allowance = nil
    }

    private init(copying other: HostFileSystem, allowance: ReadAllowance?) {
        root = other.root
        log = other.log
        rootDirectory = other.rootDirectory
        resolution = other.resolution
        self.allowance = allowance
    }

    /// The same host, read under a probe's own allowance.
    package func limited(by allowance: ReadAllowance) -> HostFileSystem {
        HostFileSystem(copying: self, allowance: allowance)
    }

    /// True when this is the machine the process runs on, not a tree inspected from outside.
    package var isLiveHost: Bool { root == "/" }

    /// Opens a host path. With `followFinalLink` false a final symbolic link is opened itself
    /// (O_PATH), to read or stat the link.
    func openDescriptor(_ path: String, flags: Int32, followFinalLink: Bool = true) throws(HostReadError) -> Int32 {
        // Paths are built from host data too (HOME from the environment): an error, never a trap.
        guard path.hasPrefix("/") else { throw HostReadError(.malformed, path: path, detail: "not an absolute path") }
        try allowance?.check(path)
        guard let rootDirectory else {
            let finalFlags = followFinalLink ? flags : (fingerlyOpenPath | O_NOFOLLOW)
            switch retryingOnInterrupt({ open(path, finalFlags | O_CLOEXEC) }) {
            case .success(let fd): return fd
            case .failure(let error): throw HostReadError(path: path, systemError: error)
            }
        }
        guard rootDirectory.descriptor >= 0 else {
            throw HostReadError(path: path, systemError: SystemError(-rootDirectory.descriptor))
        }
        while true {
            let fd = fingerly_open_beneath(rootDirectory.descriptor, path, flags, followFinalLink, resolution)
            if fd >= 0 { return fd }
            if -fd != EINTR && -fd != EAGAIN {
                throw HostReadError(path: path, systemError: SystemError(-fd))
            }
            // EAGAIN: openat2 saw a rename race and asks for a retry; the allowance bounds it.
            try allowance?.check(path)
        }
    }

    /// Reads at most `limit` bytes of a regular file. Never opens anything that could block
    /// (a FIFO, a socket, a terminal): a hostile tree would hang the probe.
    package func read(_ path: String, limit: Int = HostFileSystem.defaultReadLimit) throws(HostReadError) -> [UInt8] {
        log?.record(path)
        let (fd, status) = try openForReading(path, what: "a regular file") { $0.isRegularFile }
        defer { close(fd) }
        return try read(fd, status: status, path: path, limit: limit)
    }

    private func read(_ fd: Int32, status: FileStatus, path: String, limit: Int) throws(HostReadError) -> [UInt8] {
        let wantedTotal = min(limit, allowance.map { $0.remaining } ?? limit)
        var bytes: [UInt8] = []
        // A regular file says its size: one allocation of exactly what will be read, instead of
        // doublings that hold up to twice the limit at the peak.
        if status.size > 0 { bytes.reserveCapacity(status.size < UInt64(wantedTotal) ? Int(status.size) : wantedTotal) }
        // /proc files say size 0 and sysfs ones 4096: a small first chunk, the file's own size when larger.
        let sizeHint = status.size < UInt64(64 * 1024) ? Int(status.size) + 1 : 64 * 1024
        var chunk = [UInt8](repeating: 0, count: max(1, min(wantedTotal, max(4096, sizeHint))))
        while bytes.count < wantedTotal {
            try allowance?.check(path)
            let wanted = min(chunk.count, wantedTotal - bytes.count)
            let result = chunk.withUnsafeMutableBytes { buffer in
                retryingOnInterrupt { Glibc.read(fd, buffer.baseAddress, wanted) }
            }
            switch result {
            case .success(0): return bytes
            case .success(let count):
                allowance?.charge(count)
                bytes.append(contentsOf: chunk[0..<count])
            case .failure(let error): throw HostReadError(path: path, systemError: error)
            }
        }
        if bytes.count < limit {
            // Cut by the allowance, not by the caller's limit: say so rather than hand back a prefix.
            try allowance?.check(path)
        }
        return bytes
    }

    /// Reads a whole file of at most `limit` bytes; a longer one is malformed, never cut. For
    /// files whose every line counts (ld.so.preload, trusted certificates): a prefix judged as
    /// the whole would let padding hide what follows it.
    package func readWhole(_ path: String, limit: Int, bypassingLibc: Bool = false) throws(HostReadError) -> [UInt8] {
        let bytes = bypassingLibc ? try readBypassingLibc(path, limit: limit + 1) : try read(path, limit: limit + 1)
        guard bytes.count <= limit else {
            throw HostReadError(.malformed, path: path, detail: Self.oversizedDetail(limit))
        }
        return bytes
    }

    /// `readWhole`, unless `known` recognises the file by its identity (device, inode, size,
    /// modification and change times) before a byte of it is read: then what it gave. The
    /// identity is that of the very inode the bytes would have been read from.
    package func readWhole<Known>(_ path: String, limit: Int, unless known: (FileIdentity) -> Known?)
        throws(HostReadError) -> WholeFileRead<Known> {
        log?.record(path)
        // The live host is asked by path first, one system call where opening safely takes five: most of the
        // files asked about are known. Nothing is opened, so what sits there cannot act on being opened.
        if isLiveHost, path.hasPrefix("/") {
            try allowance?.check(path)
            var raw = fingerly_file_status()
            let result = fingerly_status_path(path, &raw)
            guard result == 0 else { throw HostReadError(path: path, systemError: SystemError(-result)) }
            let status = FileStatus(raw)
            if status.isRegularFile, let found = known(status.identity) {
                allowance?.charge(Int(min(status.size, UInt64(limit))))
                return .known(found)
            }
        }
        let (fd, status) = try openForReading(path, what: "a regular file") { $0.isRegularFile }
        defer { close(fd) }
        if let found = known(status.identity) {
            // Charged as if read: a file known from an earlier run must not let a probe read more.
            allowance?.charge(Int(min(status.size, UInt64(limit))))
            return .known(found)
        }
        let bytes = try read(fd, status: status, path: path, limit: limit + 1)
        guard bytes.count <= limit else {
            throw HostReadError(.malformed, path: path, detail: Self.oversizedDetail(limit))
        }
        return .read(bytes, status.identity)
    }

    package static func oversizedDetail(_ limit: Int) -> String {
        "larger than the \(limit)-byte limit: not read in part, since a part would be judged as the whole"
    }

    /// Reads a file as UTF-8 text; invalid UTF-8 is malformed rather than silently repaired.
    package func readText(_ path: String, limit: Int = HostFileSystem.defaultReadLimit) throws(HostReadError) -> String {
        try Self.utf8Text(read(path, limit: limit), path: path)
    }

    private static func utf8Text(_ bytes: [UInt8], path: String) throws(HostReadError) -> String {
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw HostReadError(.malformed, path: path, detail: "not valid UTF-8 text")
        }
        return text
    }

    /// Reads a file of this very process (/proc/self/…) with raw system calls on the live host,
    /// so an LD_PRELOAD hook on open/read cannot filter it; under a root prefix it is an
    /// ordinary read of the tree.
    package func readBypassingLibc(_ path: String, limit: Int = HostFileSystem.defaultReadLimit) throws(HostReadError) -> [UInt8] {
        guard isLiveHost else { return try read(path, limit: limit) }
        log?.record(path)
        try allowance?.check(path)
        // /proc files give no size up front: start small and read again, larger, only when full.
        var capacity = min(limit, 64 * 1024)
        while true {
            let bytes: [UInt8]
            do {
                bytes = try ProcessIntegrity.readBypassingLibc(path, capacity: capacity)
            } catch {
                throw HostReadError(path: path, systemError: error)
            }
            allowance?.charge(bytes.count)
            if bytes.count < capacity || capacity == limit { return bytes }
            try allowance?.check(path)
            capacity = min(limit, capacity * 4)
        }
    }

    package func readTextBypassingLibc(_ path: String, limit: Int = HostFileSystem.defaultReadLimit) throws(HostReadError) -> String {
        try Self.utf8Text(readBypassingLibc(path, limit: limit), path: path)
    }

    /// The first line of a sysfs-style attribute file, trimmed.
    package func readAttribute(_ path: String) throws(HostReadError) -> String {
        let text = try readText(path, limit: 4096)
        // The first line by its byte: a split by characters segments the text, which cost more than the read.
        return text[..<(text.utf8.firstIndex(of: UInt8(ascii: "\n")) ?? text.endIndex)].trimmingWhitespace()
    }

    /// The target of a symbolic link, as stored (never resolved against the root prefix).
    package func readLink(_ path: String) throws(HostReadError) -> String {
        log?.record(path)
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let capacity = buffer.count - 1
        let length: Int
        if isLiveHost {
            // /proc/<pid>/fd/N and /proc/self/exe are magic links: their targets are the answer.
            try allowance?.check(path)
            let result = buffer.withUnsafeMutableBufferPointer { pointer in
                retryingOnInterrupt { readlink(path, pointer.baseAddress!, capacity) }
            }
            switch result {
            case .success(let count): length = count
            case .failure(let error): throw HostReadError(path: path, systemError: error)
            }
        } else {
            let fd = try openDescriptor(path, flags: fingerlyOpenPath, followFinalLink: false)
            defer { close(fd) }
            let count = buffer.withUnsafeMutableBufferPointer { fingerly_read_link_fd(fd, $0.baseAddress!, UInt(capacity)) }
            guard count >= 0 else {
                // ENOENT from readlinkat on an O_PATH descriptor that is no link: as readlink(2) says it.
                let code = Int32(-count) == ENOENT ? EINVAL : Int32(-count)
                throw HostReadError(path: path, systemError: SystemError(code))
            }
            length = count
        }
        return String(decoding: buffer[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The target of a symbolic link, or nil when nothing is there or it is not a link: readlink
    /// says EINVAL for those, an answer where a path may or may not be a link, not a failure.
    package func linkTarget(_ path: String) throws(HostReadError) -> String? {
        do {
            return try readLink(path)
        } catch where error.failure == .absent {
            return nil
        } catch {
            guard try status(path, followFinalLink: false).isSymbolicLink else { return nil }
            throw error
        }
    }

    /// Names in a directory, without "." and "..", sorted for stable output; at most
    /// `directoryEntryLimit` of them.
    package func listDirectory(_ path: String) throws(HostReadError) -> [String] {
        try listDirectory(path, limit: Self.directoryEntryLimit, keeping: nil)
    }

    /// Names in a directory that `keeping` accepts (before any is stored), at most `limit`.
    package func listDirectory(_ path: String, limit: Int, keeping: ((String) -> Bool)?) throws(HostReadError) -> [String] {
        try entries(path, limit: limit, keeping: keeping) { _, _, _, _ throws(HostReadError) in () }.map(\.name)
    }

    /// Every name in a directory that `keeping` accepts, or an error when there are more than
    /// `directoryEntryLimit`: for a caller that must judge the whole directory, never a part of it as the whole.
    package func listWholeDirectory(_ path: String, keeping: ((String) -> Bool)?) throws(HostReadError) -> [String] {
        try entries(path, limit: Self.directoryEntryLimit, whole: true, keeping: keeping) {
            _, _, _, _ throws(HostReadError) in ()
        }.map(\.name)
    }

    package static func directoryCutDetail(_ limit: Int) -> String {
        "more than \(limit) entries: the directory is not judged by a part of it"
    }

    /// The names in a directory that `keeping` accepts, at most `directoryEntryLimit`, each with its target when
    /// it is a symbolic link (nil when it is none) or why that could not be read. Each link is read relative to
    /// the open directory: one lookup per name where `linkTarget` would walk the whole path again.
    package func listLinks(_ path: String, keeping: ((String) -> Bool)?) throws(HostReadError)
        -> [(name: String, target: Result<String?, HostReadError>)] {
        try listLinks(path, keeping: keeping, opened: nil)
    }

    /// `listLinks`, leaving out the names `judged` gives for the directory's identity (device, inode, size,
    /// modification and change times), name to target: links a caller read before. A link cannot be changed in place,
    /// only replaced, and every entry made, removed or renamed sets the directory's change time, so an unchanged
    /// identity means unchanged names and targets.
    package func listLinks(_ path: String, keeping: ((String) -> Bool)?, unless judged: @escaping (FileIdentity) -> [String: String]?)
        throws(HostReadError) -> LinkListing {
        var identity: FileIdentity?
        var skipped: [String: String] = [:]
        // Compared as bytes: String equality takes canonically equivalent text as equal, and "\u{212A}.pem" (the
        // Kelvin sign) is then "K.pem", another file.
        var skippedBytes: Set<[UInt8]> = []
        let links = try listLinks(path, keeping: { name in !skippedBytes.contains(Array(name.utf8)) && keeping?(name) ?? true }) {
            directory throws(HostReadError) in
            let status = try status(of: directory, path: path)
            identity = status.identity
            skipped = judged(status.identity) ?? [:]
            skippedBytes = Set(skipped.keys.map { Array($0.utf8) })
        }
        guard let identity else { throw HostReadError(.malformed, path: path, detail: "listed without a status") }
        return LinkListing(identity: identity, judged: skipped, links: links)
    }

    private func listLinks(_ path: String, keeping: ((String) -> Bool)?,
                           opened: ((Int32) throws(HostReadError) -> Void)?) throws(HostReadError)
        -> [(name: String, target: Result<String?, HostReadError>)] {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let capacity = buffer.count - 1
        return try entries(path, limit: Self.directoryEntryLimit, whole: true, keeping: keeping, opened: opened) {
            directory, name, type, exact throws(HostReadError) -> Result<String?, HostReadError> in
            guard exact else {
                return .failure(HostReadError(.malformed, path: path + "/" + name,
                                              detail: "a name that is not UTF-8, which cannot be opened again by it: not read"))
            }
            guard type == UInt8(DT_LNK) || type == UInt8(DT_UNKNOWN) else { return .success(nil) }
            log?.record(path + "/" + name)
            try allowance?.check(path)
            let result = buffer.withUnsafeMutableBufferPointer { pointer in
                retryingOnInterrupt { readlinkat(directory, name, pointer.baseAddress!, capacity) }
            }
            switch result {
            case .success(let count):
                let bytes = buffer[0..<count].map { UInt8(bitPattern: $0) }
                let target = String(decoding: bytes, as: UTF8.self)
                // Decoding repairs what is not UTF-8, and the repaired text names another file.
                guard target.utf8.elementsEqual(bytes) else {
                    return .failure(HostReadError(.malformed, path: path + "/" + name,
                                                  detail: "a link whose target is not UTF-8: read as a file, not by its target"))
                }
                return .success(target)
            // Not a link, or gone since it was listed: as linkTarget answers.
            case .failure(let error) where error.code == EINVAL || error.code == ENOENT: return .success(nil)
            case .failure(let error): return .failure(HostReadError(path: path + "/" + name, systemError: error))
            }
        }.map { ($0.name, $0.extra) }
    }

    /// The names in a directory that `keeping` accepts, each with what `known` recognises from its status: the
    /// entry's own, a link not followed, nothing opened. Nil where it recognised nothing or the status could not
    /// be had: the caller then reads that file by its path as it would have. A known file counts against the
    /// allowance as if read, up to `limit` bytes. One lookup of one name per file, where a status by path walks
    /// the whole path again.
    package func listKnown<Known>(_ path: String, keeping: ((String) -> Bool)?, limit: Int,
                                  known: (FileIdentity) -> Known?) throws(HostReadError) -> [(name: String, known: Known?)] {
        try entries(path, limit: Self.directoryEntryLimit, whole: true, keeping: keeping) {
            directory, name, type, _ throws(HostReadError) -> Known? in
            guard type == UInt8(DT_REG) || type == UInt8(DT_UNKNOWN) else { return nil }
            log?.record(path + "/" + name)
            try allowance?.check(path)
            var raw = fingerly_file_status()
            guard fingerly_status_entry(directory, name, &raw) == 0 else { return nil }
            let status = FileStatus(raw)
            guard status.isRegularFile, let found = known(status.identity) else { return nil }
            allowance?.charge(Int(min(status.size, UInt64(limit))))
            return found
        }.map { ($0.name, $0.extra) }
    }

    /// `whole`: more than `limit` kept names is an error, not a listing cut short.
    private func entries<Extra>(_ path: String, limit: Int, whole: Bool = false, keeping: ((String) -> Bool)?,
                                opened: ((Int32) throws(HostReadError) -> Void)? = nil,
                                _ extra: (_ directory: Int32, _ name: String, _ type: UInt8, _ exact: Bool)
                                    throws(HostReadError) -> Extra)
        throws(HostReadError) -> [(name: String, extra: Extra)] {
        log?.record(path)
        let fd = try openDescriptor(path, flags: O_RDONLY | O_DIRECTORY | O_NONBLOCK)
        guard let directory = fdopendir(fd) else {
            let error = SystemError.current
            close(fd)
            throw HostReadError(path: path, systemError: error)
        }
        defer { closedir(directory) }
        try opened?(fd)
        var names: [String] = []
        var extras: [Extra] = []
        while let entry = readdir(directory) {
            // exact: the name is UTF-8, so the String spells the very bytes; otherwise decoding repaired it and a
            // path made of it names no entry.
            let (name, exact) = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                let bytes = raw.prefix(while: { $0 != 0 })
                let name = String(decoding: bytes, as: UTF8.self)
                return (name, name.utf8.elementsEqual(bytes))
            }
            guard name != "." && name != "..", keeping?(name) ?? true else { continue }
            guard names.count < limit else {
                guard whole else { break }
                throw HostReadError(.malformed, path: path, detail: Self.directoryCutDetail(limit))
            }
            extras.append(try extra(fd, name, entry.pointee.d_type, exact))
            names.append(name)
            // Names count against the probe's allowance like file contents do.
            allowance?.charge(name.utf8.count + 16)
            if names.count % 256 == 0 { try allowance?.check(path) }
        }
        // Sorted as indices into the names: a sort of the generic pairs themselves is not specialised and took
        // more time than listing a directory of a few hundred names.
        return names.indices.sorted { names[$0] < names[$1] }.map { (names[$0], extras[$0]) }
    }

    /// Whether anything exists at the path (without following a final symlink).
    package func exists(_ path: String) -> Bool {
        log?.record(path)
        // try? justified: a yes/no question. An O_PATH open fails only when the path is missing or a
        // directory on the way cannot be searched, and either way nothing is visible there; a
        // caller that must tell denied from absent asks `status`, which throws.
        guard let fd = try? openDescriptor(path, flags: fingerlyOpenPath, followFinalLink: false) else { return false }
        close(fd)
        return true
    }

    /// What stat says of a path, following a final link inside the root.
    package func status(_ path: String, followFinalLink: Bool = true) throws(HostReadError) -> FileStatus {
        log?.record(path)
        let fd = try openDescriptor(path, flags: fingerlyOpenPath, followFinalLink: followFinalLink)
        defer { close(fd) }
        return try status(of: fd, path: path)
    }

    /// Runs `body` with a descriptor open for reading on an image file, or on the live host a
    /// block device (for libraries such as libblkid that read a device themselves), closed
    /// afterwards. Under a root prefix a device node is the live kernel's device whatever tree
    /// it sits in (and libblkid would look the device up in the live /sys): only files.
    package func withReadableDevice<T>(_ path: String, _ body: (Int32) throws(HostReadError) -> T) throws(HostReadError) -> T {
        log?.record(path)
        let (fd, _) = try openForReading(path, what: isLiveHost ? "a block device or image file" : "an image file") {
            $0.isRegularFile || (isLiveHost && $0.isBlockDevice)
        }
        defer { close(fd) }
        return try body(fd)
    }

    /// Opens a file for reading only once its type is known to be acceptable. Under a root
    /// prefix the path is resolved to an O_PATH descriptor, its type checked on that descriptor,
    /// and the same inode then opened through /proc/self/fd: opening a device node the tree
    /// planted (a watchdog, a tape, a serial line) acts on the live host, so it never happens,
    /// and nothing can be swapped in between the check and the open.
    private func openForReading(_ path: String, what: String, accept: (FileStatus) -> Bool) throws(HostReadError) -> (Int32, FileStatus) {
        let flags = O_RDONLY | O_NONBLOCK | O_NOCTTY
        // procfs and sysfs hold no device nodes and no FIFOs: there the plain open is safe and
        // saves two system calls on the hottest path. Elsewhere on the live host a file can be a
        // link the user made ($HOME/.config/dconf/user -> /dev/watchdog under `sudo -E`).
        guard !isLiveHost || !(path.hasPrefix("/proc/") || path.hasPrefix("/sys/")) else {
            let fd = try openDescriptor(path, flags: flags)
            let status: FileStatus
            do { status = try self.status(of: fd, path: path) } catch { close(fd); throw error }
            guard accept(status) else {
                close(fd)
                throw HostReadError(.malformed, path: path, detail: "not \(what) (\(status.kindName))")
            }
            return (fd, status)
        }
        // The live host resolves the path as the kernel would; a root prefix inside its tree.
        let located = try openDescriptor(path, flags: fingerlyOpenPath)
        defer { close(located) }
        let status = try status(of: located, path: path)
        guard accept(status) else { throw HostReadError(.malformed, path: path, detail: "not \(what) (\(status.kindName))") }
        switch retryingOnInterrupt({ open("/proc/self/fd/\(located)", flags | O_CLOEXEC) }) {
        case .success(let fd): return (fd, status)
        case .failure(let error):
            let detail = error.code == ENOENT ? "cannot be opened safely: /proc is not mounted" : error.description
            throw HostReadError(error.code == ENOENT ? .error : HostReadError(path: path, systemError: error).failure, path: path, detail: detail)
        }
    }

    private func status(of fd: Int32, path: String) throws(HostReadError) -> FileStatus {
        var raw = fingerly_file_status()
        let result = fingerly_status_fd(fd, &raw)
        guard result == 0 else { throw HostReadError(path: path, systemError: SystemError(-result)) }
        return FileStatus(raw)
    }
}

/// What tells one version of a file from another without reading it. The change time (ctime)
/// is set by the kernel on every write, rename, chmod or chown, and no unprivileged caller can
/// set it back, unlike the modification time.
package struct FileIdentity: Sendable, Hashable {
    package let device: UInt64
    package let inode: UInt64
    package let size: UInt64
    package let modifiedSeconds: Int64
    package let modifiedNanoseconds: UInt32
    package let changedSeconds: Int64
    package let changedNanoseconds: UInt32

    package init(device: UInt64, inode: UInt64, size: UInt64, modifiedSeconds: Int64, modifiedNanoseconds: UInt32,
                 changedSeconds: Int64, changedNanoseconds: UInt32) {
        self.device = device
        self.inode = inode
        self.size = size
        self.modifiedSeconds = modifiedSeconds
        self.modifiedNanoseconds = modifiedNanoseconds
        self.changedSeconds = changedSeconds
        self.changedNanoseconds = changedNanoseconds
    }
}

/// A directory's links as `listLinks(_:keeping:unless:)` lists them: its identity, the names left out as judged,
/// and the others with their targets.
package struct LinkListing {
    package let identity: FileIdentity
    /// The links left out, name to target: as they were, since the directory is as it was.
    package let judged: [String: String]
    package let links: [(name: String, target: Result<String?, HostReadError>)]
}

/// A whole file read, or recognised from its identity and not read.
package enum WholeFileRead<Known> {
    case known(Known)
    case read([UInt8], FileIdentity)
}

/// O_PATH: a descriptor that names a file without opening it for reading.
package let fingerlyOpenPath = fingerly_open_path_flag

/// The few stat fields probes use.
package struct FileStatus: Sendable, Hashable {
    let mode: UInt32
    let ownerId: UInt32
    let size: UInt64
    package let modifiedSeconds: Int64
    let modifiedNanoseconds: UInt32
    let changedSeconds: Int64
    let changedNanoseconds: UInt32
    package let birthSeconds: Int64?
    /// st_dev as stat(2) encodes it, and st_ino.
    package let device: UInt64
    package let inode: UInt64

    package init(_ raw: fingerly_file_status) {
        mode = raw.mode
        ownerId = raw.uid
        size = raw.size
        modifiedSeconds = raw.modified_seconds
        modifiedNanoseconds = raw.modified_nanoseconds
        changedSeconds = raw.changed_seconds
        changedNanoseconds = raw.changed_nanoseconds
        birthSeconds = raw.birth_seconds < 0 ? nil : raw.birth_seconds
        device = raw.device
        inode = raw.inode
    }

    package var identity: FileIdentity {
        FileIdentity(device: device, inode: inode, size: size, modifiedSeconds: modifiedSeconds,
                     modifiedNanoseconds: modifiedNanoseconds, changedSeconds: changedSeconds,
                     changedNanoseconds: changedNanoseconds)
    }

    private var type: UInt32 { mode & UInt32(S_IFMT) }
    var isRegularFile: Bool { type == UInt32(S_IFREG) }
    var isDirectory: Bool { type == UInt32(S_IFDIR) }
    var isSymbolicLink: Bool { type == UInt32(S_IFLNK) }
    var isBlockDevice: Bool { type == UInt32(S_IFBLK) }
    var isCharacterDevice: Bool { type == UInt32(S_IFCHR) }
    package var isWorldReadable: Bool { mode & UInt32(S_IROTH) != 0 }

    var kindName: String {
        switch type {
        case UInt32(S_IFREG): return "regular file"
        case UInt32(S_IFDIR): return "directory"
        case UInt32(S_IFLNK): return "symbolic link"
        case UInt32(S_IFIFO): return "FIFO"
        case UInt32(S_IFSOCK): return "socket"
        case UInt32(S_IFCHR): return "character device"
        case UInt32(S_IFBLK): return "block device"
        default: return "unknown type"
        }
    }
}

extension StringProtocol {
    /// Trims ASCII white space and NULs, working on UTF-8 bytes: this runs on every line of
    /// every /proc file, where Character iteration would dominate.
    @inlinable
    package func trimmingWhitespace() -> String {
        // On the text's own bytes: a copy into an array per line cost more than the trimming.
        let bytes = utf8
        let isSpace: (UInt8) -> Bool = { $0 == 0x20 || $0 == 0x09 || $0 == 0x0A || $0 == 0x0D || $0 == 0 }
        guard let first = bytes.firstIndex(where: { !isSpace($0) }) else { return "" }
        // Forward: a StringProtocol's UTF-8 view promises no walking backwards.
        var last = first, index = first
        while index != bytes.endIndex {
            if !isSpace(bytes[index]) { last = index }
            bytes.formIndex(after: &index)
        }
        return String(decoding: bytes[first...last], as: UTF8.self)
    }

    /// Whether `needle`'s UTF-8 bytes occur in this text. Bytes rather than Characters: the
    /// Character search costs about 20,000 instructions a call, and a combining mark written after
    /// a marker's last letter would hide the marker from it.
    package func containsUTF8(_ needle: some StringProtocol) -> Bool {
        // On the strings' own buffers when they have them: two arrays made per call cost more
        // than the search, and a probe searches each of hundreds of mapped paths.
        if let found = utf8.withContiguousStorageIfAvailable({ text in
            needle.utf8.withContiguousStorageIfAvailable { pattern in utf8Buffer(text, contains: pattern) }
        }) ?? nil {
            return found
        }
        let pattern = Array(needle.utf8), text = Array(utf8)
        return text.withUnsafeBufferPointer { text in
            pattern.withUnsafeBufferPointer { pattern in utf8Buffer(text, contains: pattern) }
        }
    }
}

private func utf8Buffer(_ text: UnsafeBufferPointer<UInt8>, contains pattern: UnsafeBufferPointer<UInt8>) -> Bool {
    guard !pattern.isEmpty else { return true }
    guard text.count >= pattern.count else { return false }
    let first = pattern[0]
    var start = 0
    while start <= text.count - pattern.count {
        if text[start] == first {
            var offset = 1
            while offset < pattern.count && text[start + offset] == pattern[offset] { offset += 1 }
            if offset == pattern.count { return true }
        }
        start += 1
    }
    return false
}

extension String {
    /// The non-empty lines, split on the newline byte. Splitting on the Character "\n" runs the
    /// grapheme breaker over every byte, and it keeps "\r\n" whole, so a file written with CRLF
    /// endings would read as one line.
    @inlinable
    package var lines: [Substring] {
        utf8.split(separator: UInt8(ascii: "\n")).map { Substring($0) }
    }
}
