#if canImport(Glibc)
import Glibc
#endif
import FingerlyHost

/// Why a secret file that exists was not used: anyone else who could read, replace or have
/// planted it could know the secret.
package enum SecretFileRefusal: Sendable, Hashable, CustomStringConvertible {
    case symbolicLink
    case notRegularFile
    case ownedByAnotherUser(uid: UInt32)
    case accessibleByOthers(mode: UInt32)
    case wrongSize(bytes: Int64, expected: Int)

    package var description: String {
        switch self {
        case .symbolicLink: "is a symbolic link"
        case .notRegularFile: "not a regular file"
        case .ownedByAnotherUser(let uid): "owned by uid \(uid), not by this user"
        case .accessibleByOthers(let mode): "readable or writable by others (mode \(String(mode, radix: 8)))"
        case .wrongSize(let bytes, let expected): "\(bytes) bytes, expected \(expected)"
        }
    }
}

package enum SecretFileError: Error, Sendable, Hashable, CustomStringConvertible {
    case relativeDirectory(String)
    /// The directory could not be created, opened or examined.
    case directoryUnavailable(path: String, SystemError)
    /// Anyone who may write the directory may swap the secret for one they know.
    case directoryWritableByOthers(path: String)
    case refused(path: String, SecretFileRefusal)
    /// Reading, writing, linking or removing failed; `action` says which.
    case failed(path: String, action: String, SystemError?)

    package var description: String {
        switch self {
        case .relativeDirectory(let path): "\(path): not an absolute path"
        case .directoryUnavailable(let path, let error): "\(path): \(error)"
        case .directoryWritableByOthers(let path): "\(path): writable by another user"
        case .refused(let path, let why): "\(path): refused: \(why)"
        case .failed(let path, let action, let error): "\(path): cannot \(action)" + (error.map { ": \($0)" } ?? "")
        }
    }
}

/// A private directory of small fixed-size secret files (the device key), opened once so that
/// every file operation is relative to the directory that was checked, not to a path someone
/// could re-point in between.
///
/// Secrets are written under a temporary name of their own, synced, then hard-linked into place:
/// a reader never sees half a secret, a crash leaves either nothing or the whole file, and of two
/// processes creating the same secret at once the second adopts the first one's instead of
/// replacing it.
package struct SecretDirectory: ~Copyable {
    package let path: String
    private let descriptor: Int32

    /// Opens `path`, creating missing components private to this user (0700).
    package init(creatingIfMissing path: String) throws(SecretFileError) {
        guard path.hasPrefix("/") else { throw .relativeDirectory(path) }
        var prefix = ""
        for component in path.split(separator: "/") {
            prefix += "/" + component
            if mkdir(prefix, 0o700) != 0 && errno != EEXIST { throw .directoryUnavailable(path: prefix, SystemError(errno)) }
        }
        try self.init(existing: path)
    }

    /// Opens an existing `path`.
    package init(existing path: String) throws(SecretFileError) {
        guard path.hasPrefix("/") else { throw .relativeDirectory(path) }
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw .directoryUnavailable(path: path, SystemError(errno)) }
        var info = stat()
        guard fstat(fd, &info) == 0 else {
            let error = SystemError(errno)
            close(fd)
            throw .directoryUnavailable(path: path, error)
        }
        guard info.st_uid == geteuid() || info.st_uid == 0, info.st_mode & 0o022 == 0 else {
            close(fd)
            throw .directoryWritableByOthers(path: path)
        }
        self.path = path
        descriptor = fd
    }

    deinit { close(descriptor) }

    private func display(_ name: String) -> String { path + "/" + name }

    /// Fills `buffer` (exactly its size) from the file `name`; false when there is no such file.
    package func readSecret(named name: String, into buffer: UnsafeMutableRawBufferPointer) throws(SecretFileError) -> Bool {
        let fd = openat(descriptor, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY)
        guard fd >= 0 else {
            switch errno {
            case ENOENT: return false
            case ELOOP: throw .refused(path: display(name), .symbolicLink)
            case let error: throw .failed(path: display(name), action: "open", SystemError(error))
            }
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw .failed(path: display(name), action: "examine", SystemError(errno)) }
        guard info.st_mode & S_IFMT == S_IFREG else { throw .refused(path: display(name), .notRegularFile) }
        guard info.st_uid == geteuid() else { throw .refused(path: display(name), .ownedByAnotherUser(uid: info.st_uid)) }
        guard info.st_mode & 0o077 == 0 else { throw .refused(path: display(name), .accessibleByOthers(mode: info.st_mode & 0o7777)) }
        guard info.st_size == buffer.count else {
            throw .refused(path: display(name), .wrongSize(bytes: Int64(info.st_size), expected: buffer.count))
        }
        var filled = 0
        while filled < buffer.count {
            let result = retryingOnInterrupt { read(fd, buffer.baseAddress! + filled, buffer.count - filled) }
            switch result {
            case .success(let count) where count > 0: filled += count
            case .success: throw .failed(path: display(name), action: "read (the file shrank)", nil)
            case .failure(let error): throw .failed(path: display(name), action: "read", error)
            }
        }
        return true
    }

    /// Creates the file `name` (mode 0600) holding `contents`, unless it exists already: then
    /// nothing is written and the result is false, and the caller reads the one that won.
    package func createSecret(named name: String, contents: UnsafeRawBufferPointer) throws(SecretFileError) -> Bool {
        let temporary = "." + name + "." + randomBytes(8).map { byte in
            (byte < 16 ? "0" : "") + String(byte, radix: 16)
        }.joined()
        let fd = openat(descriptor, temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw .failed(path: display(temporary), action: "create", SystemError(errno)) }
        // Removed whatever happens: once linked, the secret lives on under its real name.
        defer { unlinkat(descriptor, temporary, 0) }
        var offset = 0
        while offset < contents.count {
            switch retryingOnInterrupt({ write(fd, contents.baseAddress! + offset, contents.count - offset) }) {
            case .success(let count) where count > 0: offset += count
            case .success:
                close(fd)
                throw .failed(path: display(temporary), action: "write", nil)
            case .failure(let error):
                close(fd)
                throw .failed(path: display(temporary), action: "write", error)
            }
        }
        if fsync(fd) != 0 {
            let error = SystemError(errno)
            close(fd)
            throw .failed(path: display(temporary), action: "sync", error)
        }
        close(fd)
        guard linkat(descriptor, temporary, descriptor, name, 0) == 0 else {
            if errno == EEXIST { return false }
            throw .failed(path: display(name), action: "link into place", SystemError(errno))
        }
        // The new name must survive a crash as well as the bytes behind it.
        guard fsync(descriptor) == 0 else { throw .failed(path: path, action: "sync the directory", SystemError(errno)) }
        return true
    }

    /// Removes the file `name` and any temporary copies a crash left behind; absent is fine.
    package func removeSecret(named name: String) throws(SecretFileError) {
        for leftover in temporaryNames(of: name) { unlinkat(descriptor, leftover, 0) }
        if unlinkat(descriptor, name, 0) != 0 && errno != ENOENT {
            throw .failed(path: display(name), action: "remove", SystemError(errno))
        }
        guard fsync(descriptor) == 0 else { throw .failed(path: path, action: "sync the directory", SystemError(errno)) }
    }

    /// Names `createSecret` writes before linking: ".<name>." and 16 hex digits.
    private func temporaryNames(of name: String) -> [String] {
        let duplicate = dup(descriptor)
        guard duplicate >= 0, let directory = fdopendir(duplicate) else {
            if duplicate >= 0 { close(duplicate) }
            return []
        }
        defer { closedir(directory) }
        rewinddir(directory)
        let prefix = "." + name + "."
        var names: [String] = []
        while let entry = readdir(directory) {
            let entryName = withUnsafeBytes(of: entry.pointee.d_name) { bytes in
                String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self)
            }
            let suffix = entryName.utf8.dropFirst(prefix.utf8.count)
            if entryName.hasPrefix(prefix), suffix.count == 16,
               suffix.allSatisfy({ (48...57).contains($0) || (97...102).contains($0) }) {
                names.append(entryName)
            }
        }
        return names
    }
}
