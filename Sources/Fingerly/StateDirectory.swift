#if canImport(Glibc)
import FingerlyCatalogue
import Glibc
#endif
import FingerlyHost
import FingerlyModel
import FingerlyPolicy
import FingerlyProbes
import FingerlyTransport

/// Where the collector keeps its own state on the machine it runs on: the installation secret,
/// consent, the outbox of unsent reports and the device key. It always belongs to the real host, never to a `--root`
/// tree: the tree is what is inspected, not who inspects it.
enum StateDirectory {
    /// `FINGERLY_STATE_DIR`, else systemd's `StateDirectory=` (the first of several), else
    /// /var/lib/fingerly for root, else the XDG state home. nil when none can be named: the run
    /// then keys per run, and a failed submission cannot be queued.
    static func defaultPath(environment: [String: String], effectiveUID: uid_t = geteuid()) -> String? {
        if let own = environment["FINGERLY_STATE_DIR"], own.hasPrefix("/") { return own }
        if let systemd = environment["STATE_DIRECTORY"]?.split(separator: ":").first, systemd.hasPrefix("/") {
            return String(systemd)
        }
        if effectiveUID == 0 { return "/var/lib/fingerly" }
        // The XDG base directory specification ignores relative paths.
        if let xdg = environment["XDG_STATE_HOME"], xdg.hasPrefix("/") { return xdg + "/fingerly" }
        if let home = environment["HOME"], home.hasPrefix("/") { return home + "/.local/state/fingerly" }
        return nil
    }

    /// The default for this process, from the environment it was started with on the real host
    /// (`/proc/self/environ`, whatever `--root` says).
    static func defaultPathForThisProcess() -> String? {
        defaultPath(environment: (try? ProcessEnvironment.read(from: HostFileSystem()))?.variables ?? [:])
    }

    /// Opens `directory` (made if missing) as a place only this user (or root) may write:
    /// anyone else who may write it may swap a file in it for one they made. The descriptor,
    /// or why the directory cannot hold this user's state.
    static func openOwned(_ directory: String) -> Result<Int32, StateDirectoryProblem> {
        guard directory.hasPrefix("/") else { return .failure(StateDirectoryProblem("\(directory): not an absolute path")) }
        if let failure = makeDirectories(directory) { return .failure(StateDirectoryProblem(failure)) }
        let directoryFd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard directoryFd >= 0 else { return .failure(StateDirectoryProblem("\(directory): \(SystemError(errno))")) }
        var info = stat()
        guard fstat(directoryFd, &info) == 0 else {
            let code = errno
            close(directoryFd)
            return .failure(StateDirectoryProblem("\(directory): \(SystemError(code))"))
        }
        guard info.st_uid == geteuid() || info.st_uid == 0, info.st_mode & 0o022 == 0 else {
            close(directoryFd)
            return .failure(StateDirectoryProblem("\(directory): writable by another user"))
        }
        return .success(directoryFd)
    }

    /// Why a file of the state directory cannot be trusted: not a regular file, not this
    /// user's, or open to others through any bit of `othersMode` (0o077: neither read nor
    /// written by others; 0o022: not written). nil when it can.
    static func untrustedFile(_ info: stat, othersMode: mode_t) -> String? {
        guard info.st_mode & S_IFMT == S_IFREG else { return "not a regular file" }
        guard info.st_uid == geteuid() else { return "owned by uid \(info.st_uid), not by this user" }
        guard info.st_mode & othersMode == 0 else {
            let what = othersMode & 0o044 != 0 ? "readable or writable" : "writable"
            return "\(what) by others (mode \(String(info.st_mode & 0o777, radix: 8)))"
        }
        return nil
    }

    /// Why `directory`, or a file or directory the client keeps in it, cannot be trusted; nil
    /// when every one that exists can (what is missing is made later, private to this user).
    /// The installation secret's rule, applied to each before anything is read or written there:
    /// the directory and the outbox of this user (or root) and written by nobody else; the
    /// secrets (installation secret, device key) this user's and closed to everyone else; the
    /// consent record, the local store and the outbox's items written by nobody else.
    /// Only trust is judged here: a directory this user cannot reach is left to whoever uses it.
    package static func untrustedState(_ directory: String) -> String? {
        // A link another user owns is theirs to point elsewhere between runs (in a sticky or shared
        // parent): the directory it names today proves nothing about tomorrow's.
        var link = stat()
        if lstat(directory, &link) == 0, link.st_mode & S_IFMT == S_IFLNK, link.st_uid != geteuid(), link.st_uid != 0 {
            return "\(directory): a symbolic link owned by uid \(link.st_uid), not by this user"
        }
        let directoryFd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard directoryFd >= 0 else { return nil }
        defer { close(directoryFd) }
        var info = stat()
        guard fstat(directoryFd, &info) == 0 else { return nil }
        guard info.st_uid == geteuid() || info.st_uid == 0 else {
            return "\(directory): owned by uid \(info.st_uid), not by this user"
        }
        guard info.st_mode & 0o022 == 0 else {
            return "\(directory): writable by another user (mode \(String(info.st_mode & 0o7777, radix: 8)))"
        }
        let files: [(name: String, othersMode: mode_t, rootMayOwn: Bool)] = [
            (InstallationSecret.fileName, 0o077, false), (DeviceKey.fileName, 0o077, false),
            (ConsentRecord.fileName, 0o022, true),
        ] + ["", "-wal", "-shm", "-journal"].map { (Fingerly.localDatabaseName + $0, 0o022, false) }
        for file in files {
            var entry = stat()
            guard fstatat(directoryFd, file.name, &entry, AT_SYMLINK_NOFOLLOW) == 0 else { continue }
            // Root's consent record may sit in a user's directory that root made (machine-wide consent).
            let rootsOwn = file.rootMayOwn && entry.st_uid == 0 && entry.st_mode & S_IFMT == S_IFREG
            if rootsOwn, entry.st_mode & file.othersMode == 0 { continue }
            if let problem = untrustedFile(entry, othersMode: file.othersMode) {
                return "\(directory)/\(file.name): \(problem)"
            }
        }
        return Outbox.untrustedEntry(directory: directory + "/" + outboxName)
    }

    /// The outbox's directory inside the state directory.
    static let outboxName = "outbox"

    /// mkdir -p, new components private to this user.
    static func makeDirectories(_ path: String) -> String? {
        var prefix = ""
        for component in path.split(separator: "/") {
            prefix += "/"
            prefix.append(contentsOf: component)
            if mkdir(prefix, 0o700) != 0 && errno != EEXIST { return "\(prefix): \(SystemError(errno))" }
        }
        return nil
    }
}

/// Why a state directory cannot hold this user's state, for a message.
struct StateDirectoryProblem: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// The per-installation key for identifiers when no API key is given. Identifiers keyed with a
/// constant that ships in every client would let anyone link two reports of one host; this
/// secret never leaves the machine.
enum InstallationSecret {
    static let fileName = "identifier-key"
    static let length = IdentifierHasher.keyLength

    enum Outcome: Equatable {
        case secret([UInt8])
        /// Why the state directory could not give a secret (for the log; the run keys per run).
        case unavailable(String)
    }

    /// Reads the secret from `directory`, creating the directory and the secret on first use.
    /// Refuses a secret file that is a symbolic link, not a regular file, not owned by this
    /// user, readable by anyone else, or of the wrong size: someone else could know it.
    static func loadOrCreate(in directory: String) -> Outcome {
        // Anyone who may write the directory may swap the secret for one they know.
        let directoryFd: Int32
        switch StateDirectory.openOwned(directory) {
        case .success(let fd): directoryFd = fd
        case .failure(let problem): return .unavailable(problem.description)
        }
        defer { close(directoryFd) }

        switch readSecret(directoryFd) {
        case .secret(let bytes): return .secret(bytes)
        case .unavailable(let why): return .unavailable("\(directory)/\(fileName): \(why)")
        case nil: break
        }
        let bytes = randomBytes(length)
        // Written under a name of its own, then linked into place: a reader never sees half a
        // secret, and of two first runs racing, the second adopts the first one's secret instead
        // of replacing it.
        let temporary = ".\(fileName).\(randomBytes(8).map { String($0, radix: 16) }.joined())"
        let fd = openat(directoryFd, temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return .unavailable("\(directory): cannot create the secret: \(describe(errno))") }
        defer { unlinkat(directoryFd, temporary, 0) }
        let written = writeAll(fd, bytes) && fsync(fd) == 0
        close(fd)
        guard written else { return .unavailable("\(directory): cannot write the secret: \(describe(errno))") }
        if linkat(directoryFd, temporary, directoryFd, fileName, 0) == 0 {
            fsync(directoryFd)
            return .secret(bytes)
        }
        guard errno == EEXIST else { return .unavailable("\(directory): cannot create the secret: \(describe(errno))") }
        switch readSecret(directoryFd) {
        case .secret(let existing): return .secret(existing)
        case .unavailable(let why): return .unavailable("\(directory)/\(fileName): \(why)")
        case nil: return .unavailable("\(directory)/\(fileName): vanished while being created")
        }
    }

    /// nil: there is no secret yet.
    private static func readSecret(_ directoryFd: Int32) -> Outcome? {
        let fd = openat(directoryFd, fileName, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else {
            switch errno {
            case ENOENT: return nil
            case ELOOP: return .unavailable("is a symbolic link")
            default: return .unavailable(describe(errno))
            }
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { return .unavailable(describe(errno)) }
        if let problem = StateDirectory.untrustedFile(info, othersMode: 0o077) { return .unavailable(problem) }
        guard info.st_size == length else { return .unavailable("\(info.st_size) bytes, expected \(length)") }
        var bytes = [UInt8](repeating: 0, count: length)
        var filled = 0
        while filled < length {
            let result = bytes.withUnsafeMutableBytes { buffer in retryingOnInterrupt { read(fd, buffer.baseAddress! + filled, length - filled) } }
            guard case .success(let count) = result, count > 0 else { return .unavailable("short read") }
            filled += count
        }
        return .secret(bytes)
    }

    private static func writeAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let result = bytes.withUnsafeBytes { buffer in retryingOnInterrupt { write(fd, buffer.baseAddress! + offset, bytes.count - offset) } }
            guard case .success(let count) = result, count > 0 else { return false }
            offset += count
        }
        return true
    }

    private static func describe(_ code: Int32) -> String { SystemError(code).description }
}

/// The trust-store probe's cache (`trust-store-cache`): per certificate file, by its identity,
/// the SHA-256 fingerprints of the packaged roots it held. Only a cache: a copy that is not
/// this user's, is writable by others, is no regular file or is larger than its limit is ignored
/// and replaced; deleting it costs one run the reads it saves.
struct TrustStoreCacheFile: TrustStoreCacheStorage {
    static let fileName = "trust-store-cache"
    let directory: String

    func load() -> [UInt8]? {
        let directoryFd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard directoryFd >= 0 else { return nil }
        defer { close(directoryFd) }
        var directoryInfo = stat()
        guard fstat(directoryFd, &directoryInfo) == 0, directoryInfo.st_uid == geteuid() || directoryInfo.st_uid == 0,
              directoryInfo.st_mode & 0o022 == 0 else { return nil }
        let fd = openat(directoryFd, Self.fileName, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, StateDirectory.untrustedFile(info, othersMode: 0o022) == nil,
              info.st_size <= TrustStoreCache.byteLimit else { return nil }
        var bytes = [UInt8](repeating: 0, count: Int(info.st_size) + 1)
        var filled = 0
        // One byte past the size it had: a file that grew since fstat is not read in part.
        while filled < bytes.count {
            let result = bytes.withUnsafeMutableBytes { buffer in
                retryingOnInterrupt { read(fd, buffer.baseAddress! + filled, buffer.count - filled) }
            }
            guard case .success(let count) = result else { return nil }
            if count == 0 { break }
            filled += count
        }
        guard filled <= Int(info.st_size) else { return nil }
        return Array(bytes[0..<filled])
    }

    /// Written under a name of its own and renamed over the old copy: a reader sees one whole
    /// file or the other. Not synced: a copy torn by a crash fails the parser and is rebuilt.
    func save(_ contents: [UInt8]) {
        guard contents.count <= TrustStoreCache.byteLimit,
              case .success(let directoryFd) = StateDirectory.openOwned(directory) else { return }
        defer { close(directoryFd) }
        let temporary = ".\(Self.fileName).\(randomBytes(8).map { String($0, radix: 16) }.joined())"
        let fd = openat(directoryFd, temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return }
        var offset = 0
        while offset < contents.count {
            let result = contents.withUnsafeBytes { buffer in
                retryingOnInterrupt { write(fd, buffer.baseAddress! + offset, buffer.count - offset) }
            }
            guard case .success(let count) = result, count > 0 else { break }
            offset += count
        }
        close(fd)
        if offset != contents.count || renameat(directoryFd, temporary, directoryFd, Self.fileName) != 0 {
            unlinkat(directoryFd, temporary, 0)
        }
    }
}

extension FingerlyOptions {
    /// The state directory a process started with `environment` uses by default:
    /// `$FINGERLY_STATE_DIR`, else `$STATE_DIRECTORY` (systemd), else /var/lib/fingerly for root, else
    /// `$XDG_STATE_HOME/fingerly` or ~/.local/state/fingerly. nil when none can be named.
    package static func defaultStateDirectory(environment: [String: String]) -> String? {
        StateDirectory.defaultPath(environment: environment)
    }

    /// Why the state directory `directory`, or what the client keeps in it, cannot be trusted
    /// (another user may write it); nil when it can. `load` refuses such a directory, and every
    /// command of `fingerly-identify` does before it reads or writes there.
    package static func untrustedStateDirectory(_ directory: String) -> String? {
        StateDirectory.untrustedState(directory).map { "\($0); 'chmod go-w' it, or use another state directory" }
    }
}
