#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CFingerlyShims
import Synchronization

/// Why a host read produced no usable content.
public enum HostReadFailure: String, Sendable, Codable, Hashable {
    /// ENOENT/ENOTDIR: the thing is not there.
    case absent
    /// EACCES/EPERM: normal for non-root users and inside containers.
    case denied
    /// The content was read but could not be understood.
    case malformed
    /// Any other system error.
    case error
}

/// A failed read, with the path relative to the host root so reports read the same under `--root`.
public struct HostReadError: Error, Sendable, Hashable, CustomStringConvertible {
    public let failure: HostReadFailure
    public let path: String
    public let detail: String

    public init(_ failure: HostReadFailure, path: String, detail: String) {
        self.failure = failure
        self.path = path
        self.detail = detail
    }

    init(path: String, systemError: SystemError) {
        let failure: HostReadFailure
        switch systemError.code {
        case ENOENT, ENOTDIR: failure = .absent
        case EACCES, EPERM: failure = .denied
        default: failure = .error
        }
        self.init(failure, path: path, detail: systemError.description)
    }

    public var description: String { "\(path): \(failure.rawValue) (\(detail))" }
}

/// Keeps a list of every host path a probe touched; tests compare it with the catalogue.
final class HostAccessLog: Sendable {
    private let paths = Mutex<[String]>([])

    func record(_ path: String) { paths.withLock { $0.append(path) } }
    var recorded: [String] { paths.withLock { $0 } }
}

/// Every file-reading probe reads the host through this one layer, so a fixture tree, a container's
/// root filesystem or a mounted disk image can be inspected exactly like the live host.
public struct HostFileSystem: Sendable {
    /// Largest file read unless a caller asks for less: /proc and /sys files are small, and an
    /// unbounded read of a hostile or looping file must not exhaust memory.
    public static let defaultReadLimit = 256 * 1024

    /// The root prefix; "/" for the live host.
    public let root: String
    let log: HostAccessLog?

    public init(root: String = "/") {
        self.init(root: root, log: nil)
    }

    init(root: String, log: HostAccessLog?) {
        var trimmed = root
        while trimmed.count > 1 && trimmed.hasSuffix("/") { trimmed.removeLast() }
        self.root = trimmed.isEmpty ? "/" : trimmed
        self.log = log
    }

    /// True when this is the machine the process runs on, not a tree inspected from outside.
    public var isLiveHost: Bool { root == "/" }

    /// The path to open for a host path. Under a root prefix every symbolic link on the way is
    /// resolved inside the tree, so an absolute link in an image (/var/lib/dbus/machine-id ->
    /// /etc/machine-id) can never reach the live host's files.
    func hostPath(_ path: String, followFinalLink: Bool = true) -> String {
        precondition(path.hasPrefix("/"), "host paths are absolute")
        guard root != "/" else { return path }
        var resolved: [Substring] = []
        var pending = path.split(separator: "/")
        var hops = 0
        while !pending.isEmpty {
            let part = pending.removeFirst()
            if part == "." { continue }
            if part == ".." { _ = resolved.popLast(); continue }
            let candidate = root + "/" + (resolved + [part]).joined(separator: "/")
            if (followFinalLink || !pending.isEmpty), hops < 40, let target = Self.linkTarget(candidate) {
                hops += 1
                if target.hasPrefix("/") { resolved = [] }
                pending = target.split(separator: "/") + pending
                continue
            }
            resolved.append(part)
        }
        return root + "/" + resolved.joined(separator: "/")
    }

    private static func linkTarget(_ path: String) -> String? {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let length = readlink(path, &buffer, buffer.count - 1)
        guard length > 0 else { return nil }
        return String(decoding: buffer[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Reads at most `limit` bytes of a file.
    public func read(_ path: String, limit: Int = HostFileSystem.defaultReadLimit) throws(HostReadError) -> [UInt8] {
        log?.record(path)
        let fd: Int32
        // Under a root prefix hostPath has resolved every link inside the tree; one still left
        // (a loop) must fail rather than let the kernel follow it out of the tree.
        let flags = O_RDONLY | O_CLOEXEC | (isLiveHost ? 0 : O_NOFOLLOW)
        switch retryingOnInterrupt({ open(hostPath(path), flags) }) {
        case .success(let descriptor): fd = descriptor
        case .failure(let error): throw HostReadError(path: path, systemError: error)
        }
        defer { close(fd) }

        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while bytes.count < limit {
            let wanted = min(chunk.count, limit - bytes.count)
            let result = chunk.withUnsafeMutableBytes { buffer in
                retryingOnInterrupt { Glibc.read(fd, buffer.baseAddress, wanted) }
            }
            switch result {
            case .success(0): return bytes
            case .success(let count): bytes.append(contentsOf: chunk[0..<count])
            case .failure(let error): throw HostReadError(path: path, systemError: error)
            }
        }
        return bytes
    }

    /// Reads a file as UTF-8 text; invalid UTF-8 is malformed rather than silently repaired.
    public func readText(_ path: String, limit: Int = HostFileSystem.defaultReadLimit) throws(HostReadError) -> String {
        let bytes = try read(path, limit: limit)
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw HostReadError(.malformed, path: path, detail: "not valid UTF-8 text")
        }
        return text
    }

    /// Reads a file of this very process (/proc/self/…) with raw system calls on the live host,
    /// so an LD_PRELOAD hook on open/read cannot filter it; under a root prefix it is an
    /// ordinary read of the tree.
    public func readBypassingLibc(_ path: String, limit: Int = HostFileSystem.defaultReadLimit) throws(HostReadError) -> [UInt8] {
        guard isLiveHost else { return try read(path, limit: limit) }
        log?.record(path)
        // /proc files give no size up front: start small and read again, larger, only when full.
        var capacity = min(limit, 64 * 1024)
        while true {
            var buffer = [UInt8](repeating: 0, count: capacity)
            let count = buffer.withUnsafeMutableBytes { raw in
                fingerly_raw_read_file(path, raw.baseAddress!.assumingMemoryBound(to: CChar.self), capacity)
            }
            guard count >= 0 else { throw HostReadError(path: path, systemError: SystemError(Int32(-count))) }
            if count < capacity || capacity == limit { return Array(buffer[0..<count]) }
            capacity = min(limit, capacity * 4)
        }
    }

    public func readTextBypassingLibc(_ path: String, limit: Int = HostFileSystem.defaultReadLimit) throws(HostReadError) -> String {
        let bytes = try readBypassingLibc(path, limit: limit)
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw HostReadError(.malformed, path: path, detail: "not valid UTF-8 text")
        }
        return text
    }

    /// The first line of a sysfs-style attribute file, trimmed.
    public func readAttribute(_ path: String) throws(HostReadError) -> String {
        let text = try readText(path, limit: 4096)
        return text.split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false)
            .first.map { $0.trimmingWhitespace() } ?? ""
    }

    /// The target of a symbolic link, as stored (never resolved against the root prefix).
    public func readLink(_ path: String) throws(HostReadError) -> String {
        log?.record(path)
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let capacity = buffer.count - 1
        let result = buffer.withUnsafeMutableBufferPointer { pointer in
            retryingOnInterrupt { readlink(hostPath(path, followFinalLink: false), pointer.baseAddress!, capacity) }
        }
        switch result {
        case .success(let length):
            return String(decoding: buffer[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        case .failure(let error):
            throw HostReadError(path: path, systemError: error)
        }
    }

    /// Names in a directory, without "." and "..", sorted for stable output.
    public func listDirectory(_ path: String) throws(HostReadError) -> [String] {
        log?.record(path)
        let resolved = hostPath(path)
        guard let directory = opendir(resolved) else {
            throw HostReadError(path: path, systemError: .current)
        }
        defer { closedir(directory) }
        var names: [String] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names.sorted()
    }

    /// Whether anything exists at the path (without following a final symlink).
    public func exists(_ path: String) -> Bool {
        log?.record(path)
        var info = stat()
        return lstat(hostPath(path, followFinalLink: false), &info) == 0
    }
}

extension StringProtocol {
    /// Trims ASCII white space and NULs, working on UTF-8 bytes: this runs on every line of
    /// every /proc file, where Character iteration would dominate.
    func trimmingWhitespace() -> String {
        let bytes = Array(utf8)
        let isSpace: (UInt8) -> Bool = { $0 == 0x20 || $0 == 0x09 || $0 == 0x0A || $0 == 0x0D || $0 == 0 }
        guard let first = bytes.firstIndex(where: { !isSpace($0) }) else { return "" }
        let last = bytes.lastIndex(where: { !isSpace($0) })!
        return String(decoding: bytes[first...last], as: UTF8.self)
    }
}
