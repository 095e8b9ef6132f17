#if canImport(Glibc)
import Glibc
#endif

/// What an executable's `main` hands its testable command: the environment it was started
/// with and unbuffered writes to its streams. Shared by fingerly-identify and fingerly-server.
package enum CommandProcess {
    /// This process's environment, from `environ` (the live values, unlike /proc/self/environ).
    package static func environment() -> [String: String] {
        var environment: [String: String] = [:]
        var pointer = environ
        while let entry = pointer.pointee {
            let text = String(cString: entry)
            if let equals = text.firstIndex(of: "=") {
                environment[String(text[..<equals])] = String(text[text.index(after: equals)...])
            }
            pointer += 1
        }
        return environment
    }

    /// Unbuffered so stdout and stderr interleave in order; retries short writes and EINTR.
    package static func write(_ text: String, to descriptor: Int32) {
        var bytes = Array(text.utf8)[...]
        while !bytes.isEmpty {
            let written = bytes.withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress, $0.count) }
            if written < 0 && errno == EINTR { continue }
            guard written > 0 else { return }
            bytes = bytes.dropFirst(written)
        }
    }
}
