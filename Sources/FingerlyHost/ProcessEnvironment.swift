import Synchronization

/// The process environment as the kernel holds it in `/proc/self/environ`.
///
/// Read through the host layer rather than `getenv`, so that `--root` trees carry their own
/// environment and a hooked `getenv` or an `unsetenv` in a preloaded constructor cannot hide
/// what the process was started with; on the live host with raw system calls, so a hooked
/// `read` cannot filter it either.
package struct ProcessEnvironment: Sendable {
    package static let path = "/proc/self/environ"

    package let variables: [String: String]
    /// Entries that were not `NAME=value`.
    let malformedEntries: Int

    init(variables: [String: String], malformedEntries: Int = 0) {
        self.variables = variables
        self.malformedEntries = malformedEntries
    }

    /// The kernel keeps the environment block a process was started with; it never changes, so
    /// the live host's is read and parsed once per process (two probes of every integrity check
    /// ask for it).
    private static let live = Mutex<ProcessEnvironment?>(nil)

    package static func read(from host: HostFileSystem) throws(HostReadError) -> ProcessEnvironment {
        if host.isLiveHost, let cached = live.withLock({ $0 }) { return cached }
        let bytes = try host.readBypassingLibc(path, limit: 1024 * 1024)
        var variables: [String: String] = [:]
        var malformed = 0
        for entry in bytes.split(separator: 0) {
            guard let equals = entry.firstIndex(of: UInt8(ascii: "=")), equals != entry.startIndex,
                  let name = String(validating: entry[..<equals], as: UTF8.self) else {
                malformed += 1
                continue
            }
            variables[name] = String(decoding: entry[(equals + 1)...], as: UTF8.self)
        }
        if variables.isEmpty && malformed > 0 {
            throw HostReadError(.malformed, path: path, detail: "\(malformed) entries and none of the form NAME=value")
        }
        let environment = ProcessEnvironment(variables: variables, malformedEntries: malformed)
        if host.isLiveHost { live.withLock { $0 = environment } }
        return environment
    }

    package subscript(name: String) -> String? { variables[name] }
}
