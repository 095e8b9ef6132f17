#if canImport(Glibc)
import Glibc
#endif

/// `fingerly-server`: filled in by the server work.
package enum FingerlyServerCommand {
    package static func main() async -> Int32 {
        writeError("fingerly-server: not built yet\n")
        return 69
    }

    private static func writeError(_ text: String) {
        _ = text.utf8CString.withUnsafeBufferPointer { write(2, $0.baseAddress, $0.count - 1) }
    }
}
