#if canImport(Glibc)
import Glibc
#endif
import FingerlyHost

/// The consent persisted in `<state>/consent`: one word and a newline, machine-wide when the
/// state directory is. The SDK maps it to and from its public consent state.
package enum ConsentRecord {
    package static let fileName = "consent"

    package enum Value: String, Sendable, Hashable, CaseIterable {
        case granted
        case pending
        case denied
    }

    package enum Reading: Sendable, Hashable {
        /// Nothing recorded.
        case absent
        case recorded(Value)
        /// A file is there but cannot be trusted or understood. Not the same as absent: an
        /// administrator's "denied" that got damaged must not turn into "nobody said anything".
        /// Callers treat it as not granted.
        case invalid(String)
    }

    /// Longer than any valid record: nothing past it is read.
    static let readLimit = 16

    /// Reads the record in the state directory `directory`. A symbolic link, anything but a
    /// regular file, a file owned by another user or writable by anyone else, or any content but
    /// exactly `granted\n`, `pending\n` or `denied\n` is `.invalid` with the reason.
    package static func read(stateDirectory directory: String) -> Reading {
        let directoryFd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard directoryFd >= 0 else {
            // No state directory, one this user may not enter, or a file in its place: nothing
            // here can be this user's record (root's /var/lib/fingerly is not a user's state).
            // A record that is there but cannot be trusted is another matter: see below.
            return [ENOENT, EACCES, ENOTDIR].contains(errno) ? .absent : .invalid("\(directory): \(SystemError(errno))")
        }
        defer { close(directoryFd) }
        return read(in: directoryFd, directoryPath: directory)
    }

    static func read(in directoryFd: Int32, directoryPath: String) -> Reading {
        let path = directoryPath + "/" + fileName
        func invalid(_ why: String) -> Reading { .invalid("\(path): \(why)") }
        let fd = openat(directoryFd, fileName, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else {
            switch errno {
            case ENOENT: return .absent
            case ELOOP: return invalid("is a symbolic link")
            case let error: return invalid(SystemError(error).description)
            }
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { return invalid(SystemError(errno).description) }
        guard info.st_mode & S_IFMT == S_IFREG else { return invalid("not a regular file") }
        // Root's record may be read by a user's run (machine-wide consent), so root may own it.
        guard info.st_uid == geteuid() || info.st_uid == 0 else { return invalid("owned by uid \(info.st_uid)") }
        guard info.st_mode & 0o022 == 0 else { return invalid("writable by others (mode \(String(info.st_mode & 0o777, radix: 8)))") }
        var buffer = [UInt8](repeating: 0, count: readLimit)
        var filled = 0
        reading: while filled < buffer.count {
            let wanted = buffer.count - filled
            let result = buffer.withUnsafeMutableBytes { raw in retryingOnInterrupt { Glibc.read(fd, raw.baseAddress! + filled, wanted) } }
            switch result {
            case .success(0): break reading
            case .success(let count): filled += count
            case .failure(let error): return invalid(error.description)
            }
        }
        guard let value = parse(Array(buffer.prefix(filled))) else { return invalid("not one of granted, pending, denied") }
        return .recorded(value)
    }

    /// Exactly a value and one newline: no spaces, no case folding, no second line.
    static func parse(_ bytes: [UInt8]) -> Value? {
        guard bytes.last == UInt8(ascii: "\n") else { return nil }
        return Value(rawValue: String(decoding: bytes.dropLast(), as: UTF8.self))
    }

    /// Records `value` crash-safely (0600), creating the state directory's last component
    /// (0700) when missing, and sweeps what crashed writers left in it.
    package static func write(_ value: Value, stateDirectory directory: String, mode: mode_t = 0o600) throws(StateFileError) {
        let directoryFd = try DurableFile.openDirectory(directory, create: true, followingLink: true)
        defer { close(directoryFd) }
        DurableFile.sweepLeftovers(in: directoryFd)
        try DurableFile.write(Array((value.rawValue + "\n").utf8), as: fileName, in: directoryFd, directoryPath: directory, mode: mode)
    }

    /// Where an administrator's consent for the whole host is kept: readable by every user,
    /// written by root alone (`fingerly-identify consent` run as root). Denied or pending there
    /// wins over any user's own record and over an application's own consent.
    package static let systemDirectory = "/etc/fingerly"
    package static var systemPath: String { systemDirectory + "/" + fileName }
}
