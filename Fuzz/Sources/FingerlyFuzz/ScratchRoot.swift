#if canImport(Glibc)
import Glibc
#endif
@testable import Fingerly
@testable import FingerlyHost
@testable import FingerlyModel
@testable import FingerlyPolicy
@testable import FingerlyCatalogue
@testable import FingerlyProbes

/// A host tree in a temporary directory that the probes read through `--root`, so a harness runs a
/// probe's real reading and parsing code on fuzzed file contents without any change to the probe.
/// Each input overwrites the same files; the directory goes at exit.
final class ScratchRoot: @unchecked Sendable {
    let path: String
    let host: HostFileSystem
    private var createdDirectories: Set<String> = []

    init() {
        let base = getenv("TMPDIR").map { String(cString: $0) } ?? "/tmp"
        var template = Array((base + "/fingerly-fuzz-XXXXXX").utf8CString)
        guard let made = mkdtemp(&template) else {
            fail("cannot create a scratch root under \(base)")
        }
        path = String(cString: made)
        host = HostFileSystem(root: path)
        ScratchRoot.removeAtExit = path
        atexit { if let path = ScratchRoot.removeAtExit { ScratchRoot.remove(path) } }
    }

    nonisolated(unsafe) private static var removeAtExit: String?

    /// Writes (or truncates and rewrites) a host file, creating its directories the first time.
    func write(_ hostPath: String, _ bytes: [UInt8]) {
        let full = path + hostPath
        let parent = String(full[..<full.lastIndex(of: "/")!])
        if !createdDirectories.contains(parent) {
            var prefix = ""
            for component in parent.split(separator: "/") {
                prefix += "/" + component
                mkdir(prefix, 0o755)
            }
            createdDirectories.insert(parent)
        }
        let fd = open(full, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else { fail("cannot write \(full): errno \(errno)") }
        defer { close(fd) }
        var written = 0
        while written < bytes.count {
            let result = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + written, bytes.count - written) }
            guard result > 0 else { fail("short write to \(full): errno \(errno)") }
            written += result
        }
    }

    /// What a probe sees of the tree, as the scheduler would build it.
    func context() -> ProbeContext {
        ProbeContext(host: host, tables: .embedded, filter: .none, hasher: IdentifierHasher(organization: "fuzz"))
    }

    /// Runs a probe over the tree the way the scheduler does, minus threads and deadlines.
    func run(_ probe: some Probe) {
        try? probe.collect(into: context())
    }

    private static func remove(_ path: String) {
        var info = stat()
        guard lstat(path, &info) == 0 else { return }
        if info.st_mode & S_IFMT == S_IFDIR, let directory = opendir(path) {
            var names: [String] = []
            while let entry = readdir(directory) {
                let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix(while: { $0 != 0 }), as: UTF8.self) }
                if name != "." && name != ".." { names.append(name) }
            }
            closedir(directory)
            for name in names { remove(path + "/" + name) }
            rmdir(path)
        } else {
            unlink(path)
        }
    }
}
