#if canImport(Glibc)
import Glibc
#endif
import FingerlyHost

/// A failed file operation in the state directory: which file, which step, which errno.
package struct StateFileError: Error, Sendable, Hashable, CustomStringConvertible {
    package enum Step: String, Sendable, Hashable {
        case openDirectory = "open the directory"
        case create
        case write
        case sync
        case rename
        case syncDirectory = "sync the directory"
        case remove
        case read
        case lock
    }

    package let path: String
    package let step: Step
    package let error: SystemError

    package init(path: String, step: Step, error: SystemError) {
        self.path = path
        self.step = step
        self.error = error
    }

    /// The file system (or this process's file-size limit) had no room: nothing was replaced.
    package var isOutOfSpace: Bool { [ENOSPC, EFBIG, EDQUOT].contains(error.code) }

    package var description: String { "\(path): cannot \(step.rawValue): \(error)" }
}

/// Small files replaced whole, so that a crash or a full disk at any instant leaves either the
/// old file or the new one under the name, never a mix, and a power loss after the call
/// returned cannot take the new one back.
package enum DurableFile {
    /// Names starting with this are a writer's work in progress; `sweepLeftovers` removes the
    /// ones whose writer is gone.
    package static let temporaryPrefix = ".tmp."

    /// Opens a state directory, creating its last component (0700) when `create` says so. The
    /// directory must belong to this user (or root) and be writable by nobody else: whoever
    /// may write it may swap any file in it. `followingLink`: whether the last component may be
    /// a symbolic link (an operator's state directory may be; the outbox inside it may not).
    package static func openDirectory(_ path: String, create: Bool, followingLink: Bool = false) throws(StateFileError) -> Int32 {
        if create, mkdir(path, 0o700) != 0, errno != EEXIST {
            throw StateFileError(path: path, step: .create, error: SystemError(errno))
        }
        let fd: Int32
        let flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC | (followingLink ? 0 : O_NOFOLLOW)
        switch retryingOnInterrupt({ open(path, flags) }) {
        case .success(let descriptor): fd = descriptor
        case .failure(let error): throw StateFileError(path: path, step: .openDirectory, error: error)
        }
        var info = stat()
        guard fstat(fd, &info) == 0 else {
            let error = SystemError(errno)
            close(fd)
            throw StateFileError(path: path, step: .openDirectory, error: error)
        }
        guard info.st_uid == geteuid() || info.st_uid == 0, info.st_mode & 0o022 == 0 else {
            close(fd)
            throw StateFileError(path: path, step: .openDirectory, error: SystemError(EPERM))
        }
        return fd
    }

    /// Writes `bytes` as `name` in the directory `directoryFd` (called `directoryPath` in errors):
    /// a temporary file beside it, written, synced, renamed over the name, then the directory
    /// synced. On any failure the temporary file is removed and whatever had the name before
    /// is untouched.
    package static func write(_ bytes: [UInt8], as name: String, in directoryFd: Int32, directoryPath: String,
                              mode: mode_t = 0o600) throws(StateFileError) {
        // A sweeper can take a temporary file in the instant between its creation and its
        // writer's lock; the writer then finds it gone at the rename and starts over.
        var attemptsLeft = 3
        while true {
            attemptsLeft -= 1
            do {
                try writeOnce(bytes, as: name, in: directoryFd, directoryPath: directoryPath, mode: mode)
                return
            } catch let failure where failure.step == .rename && failure.error.code == ENOENT && attemptsLeft > 0 {
                continue
            }
        }
    }

    private static func writeOnce(_ bytes: [UInt8], as name: String, in directoryFd: Int32, directoryPath: String,
                                  mode: mode_t) throws(StateFileError) {
        let temporary = temporaryPrefix + hex(randomBytes(12))
        let temporaryPath = directoryPath + "/" + temporary
        let fd: Int32
        switch retryingOnInterrupt({ openat(directoryFd, temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode) }) {
        case .success(let descriptor): fd = descriptor
        case .failure(let error): throw StateFileError(path: temporaryPath, step: .create, error: error)
        }
        var keep = false
        defer {
            if !keep { unlinkat(directoryFd, temporary, 0) }
            close(fd)
        }
        // Held until close: a live writer's temporary file is never swept. Released by the
        // kernel when the writer dies, which is what marks a leftover.
        if case .failure(let error) = retryingOnInterrupt({ flock(fd, LOCK_EX) }) {
            throw StateFileError(path: temporaryPath, step: .lock, error: error)
        }
        // The umask may have narrowed the mode; it may not have widened it, but say it exactly.
        _ = fchmod(fd, mode)
        var offset = 0
        while offset < bytes.count {
            let result = bytes.withUnsafeBytes { buffer in
                retryingOnInterrupt { Glibc.write(fd, buffer.baseAddress! + offset, bytes.count - offset) }
            }
            switch result {
            case .success(let count) where count > 0: offset += count
            // write(2) returns 0 only for a zero-length request; treat it as no room.
            case .success: throw StateFileError(path: temporaryPath, step: .write, error: SystemError(ENOSPC))
            case .failure(let error): throw StateFileError(path: temporaryPath, step: .write, error: error)
            }
        }
        if case .failure(let error) = retryingOnInterrupt({ fsync(fd) }) {
            throw StateFileError(path: temporaryPath, step: .sync, error: error)
        }
        if case .failure(let error) = retryingOnInterrupt({ renameat(directoryFd, temporary, directoryFd, name) }) {
            throw StateFileError(path: directoryPath + "/" + name, step: .rename, error: error)
        }
        keep = true
        // Without it the rename may still be only in memory: a power loss would bring back the
        // old file after the caller was told the new one is there.
        if case .failure(let error) = retryingOnInterrupt({ fsync(directoryFd) }) {
            throw StateFileError(path: directoryPath, step: .syncDirectory, error: error)
        }
    }

    /// Removes `name` from the directory and makes the removal durable. A name already gone is
    /// not an error.
    package static func remove(_ name: String, in directoryFd: Int32, directoryPath: String) throws(StateFileError) {
        if unlinkat(directoryFd, name, 0) != 0 {
            let error = errno
            if error == ENOENT { return }
            throw StateFileError(path: directoryPath + "/" + name, step: .remove, error: SystemError(error))
        }
        if case .failure(let error) = retryingOnInterrupt({ fsync(directoryFd) }) {
            throw StateFileError(path: directoryPath, step: .syncDirectory, error: error)
        }
    }

    /// Removes the temporary files of writers that are gone (crashed, killed) from the
    /// directory, looking at no more than `limit` entries. Returns how many it removed.
    @discardableResult
    package static func sweepLeftovers(in directoryFd: Int32, limit: Int = 1024) -> Int {
        guard let listing = try? DirectoryListing(of: directoryFd, limit: limit) else { return 0 }
        var removed = 0
        for name in listing.names where name.nameBytes.starts(with: temporaryPrefix.utf8) {
            if removeIfAbandoned(name, in: directoryFd) { removed += 1 }
        }
        return removed
    }

    /// Whether a temporary file (by its name in the directory) belongs to a writer that is
    /// gone, in which case it is removed. Returns true when it was removed.
    static func removeIfAbandoned(_ name: UnsafePointer<CChar>, in directoryFd: Int32) -> Bool {
        let fd = openat(directoryFd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        if fd < 0 {
            // A link or something else no writer of ours makes: nobody is writing it.
            if errno == ELOOP || errno == ENXIO || errno == EACCES { return unlinkat(directoryFd, name, 0) == 0 }
            return false
        }
        defer { close(fd) }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else { return false }
        return unlinkat(directoryFd, name, 0) == 0
    }

    static func hex(_ bytes: some Sequence<UInt8>) -> String { lowercaseHex(Array(bytes)) }
}
