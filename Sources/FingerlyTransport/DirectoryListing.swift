#if canImport(Glibc)
import Glibc
#endif
import FingerlyHost

/// The names in a directory, read through a descriptor of its own (a duplicate would share the
/// caller's position), at most `limit` of them, so a directory of a million planted files costs
/// a bounded amount of memory and time.
struct DirectoryListing {
    /// Each name as the kernel gave it, NUL-terminated, for the *at calls: a name that is not
    /// UTF-8 must still be removable.
    var names: [[CChar]] = []
    /// More names were there than `limit`.
    var truncated = false

    init(of directoryFd: Int32, limit: Int) throws(SystemError) {
        let fd: Int32
        switch retryingOnInterrupt({ openat(directoryFd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC) }) {
        case .success(let descriptor): fd = descriptor
        case .failure(let error): throw error
        }
        guard let stream = fdopendir(fd) else {
            let error = SystemError(errno)
            close(fd)
            throw error
        }
        defer { closedir(stream) }
        while let entry = readdir(stream) {
            let name: [CChar] = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                raw.prefix(while: { $0 != 0 }).map { CChar(bitPattern: $0) } + [0]
            }
            if name == [46, 0] || name == [46, 46, 0] { continue }
            guard names.count < limit else {
                truncated = true
                break
            }
            names.append(name)
        }
    }
}

extension Array where Element == CChar {
    /// The name's bytes without the terminating NUL.
    var nameBytes: [UInt8] { dropLast().map { UInt8(bitPattern: $0) } }
    var nameText: String { String(decoding: nameBytes, as: UTF8.self) }
}
