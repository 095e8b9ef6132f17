#if canImport(Glibc)
import Glibc
#endif

/// Files named by the operator (a policy, a configuration), not by the measured host.
package enum OperatorFile {
    /// Why an operator's file could not be read; the caller names the file.
    package struct ReadError: Error, Sendable, Hashable {
        package let message: String
    }

    /// Reads a whole regular file of at most `limit` bytes. The path is the operator's, not
    /// the measured host's, so it is opened as given (relative to the working directory);
    /// O_NONBLOCK keeps a FIFO without a writer from holding open(2) forever, and the type is
    /// checked on the descriptor that is then read, so nothing can be swapped in between.
    package static func readRegularFile(_ path: String, limit: Int) throws(ReadError) -> [UInt8] {
        func failure(_ message: String) -> ReadError { ReadError(message: message) }
        func unreadable(_ error: SystemError) -> ReadError {
            failure("cannot read: \(HostReadError(path: path, systemError: error).failure.rawValue) (\(error))")
        }
        let fd: Int32
        switch retryingOnInterrupt({ open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC) }) {
        case .success(let descriptor): fd = descriptor
        case .failure(let error): throw unreadable(error)
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw unreadable(.current) }
        guard (info.st_mode & S_IFMT) == S_IFREG else { throw failure("not a regular file (\(fileKind(info.st_mode)))") }
        guard info.st_size <= limit else { throw failure("\(info.st_size) bytes, larger than the limit of \(limit) bytes") }

        // One byte past the limit tells a file that grew since fstat from one that fits.
        var bytes: [UInt8] = []
        bytes.reserveCapacity(Int(info.st_size))
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while bytes.count <= limit {
            let wanted = min(chunk.count, limit + 1 - bytes.count)
            let result = chunk.withUnsafeMutableBytes { buffer in
                retryingOnInterrupt { Glibc.read(fd, buffer.baseAddress, wanted) }
            }
            switch result {
            case .success(0): return bytes
            case .success(let count): bytes.append(contentsOf: chunk[0..<count])
            case .failure(let error): throw unreadable(error)
            }
        }
        throw failure("larger than the limit of \(limit) bytes")
    }

    private static func fileKind(_ mode: mode_t) -> String {
        switch mode & S_IFMT {
        case S_IFIFO: return "a FIFO"
        case S_IFCHR: return "a character device"
        case S_IFBLK: return "a block device"
        case S_IFDIR: return "a directory"
        case S_IFSOCK: return "a socket"
        default: return "of type \(String(mode & S_IFMT, radix: 8))"
        }
    }
}
