import FingerlyHost
import FingerlyModel

/// Dynamic-loader injection points: LD_PRELOAD, LD_AUDIT, LD_LIBRARY_PATH and /etc/ld.so.preload.
package struct LoaderEnvironmentProbe: Probe {
    package let id = "loader-environment"
    /// Real preload files list a library or two; 64 KiB is far past any of them.
    static let preloadFileLimit = 64 * 1024
    static let variables = [
        ("LD_PRELOAD", "loader.ld_preload"),
        ("LD_AUDIT", "loader.ld_audit"),
        ("LD_LIBRARY_PATH", "loader.ld_library_path"),
    ]

    package func collect(into context: ProbeContext) throws(ProbeFailure) {
        let host = context.host
        if let environment = context.attempt({ () throws(HostReadError) in try ProcessEnvironment.read(from: host) }) {
            var set: [String] = []
            for (name, signal) in Self.variables {
                guard let value = environment[name], !value.isEmpty else { continue }
                set.append(name)
                context.emit(signal, value)
            }
            context.emit("loader.env_variables", set)
            if let preload = environment["LD_PRELOAD"], !preload.isEmpty {
                let objects = preload.split(whereSeparator: { $0 == " " || $0 == ":" }).map(String.init)
                context.emit("loader.preload_description", objects.map { object in
                    let known = context.tables.patterns("knownPreloads").first { object.contains($0.pattern) }?.kind
                    return "\((object as String).split(separator: "/").last.map(String.init) ?? object) is \(known ?? "not a library Fingerly knows")"
                }.joined(separator: "; "))
            }
        }
        if context.wants("loader.preload_file_entries"),
           // Raw system calls: a rootkit listed there typically hooks open() to hide the file.
           // glibc reads all of it, so a file too long to read whole is itself the finding.
           let text = context.attemptIfPresent({ () throws(HostReadError) in
               let bytes = try host.readWhole("/etc/ld.so.preload", limit: Self.preloadFileLimit, bypassingLibc: true)
               // Decoded with repair, not refused: the loader takes any bytes as a path, so an
               // invalid byte must not turn a listed library into missing evidence.
               return String(decoding: bytes, as: UTF8.self)
           }) {
            // ld.so(8): entries separated by white space; '#' starts a comment in glibc's parser.
            let entries = text.lines
                .map { $0.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first ?? "" }
                .flatMap { $0.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == ":" }) }
                .map(String.init)
            context.emit("loader.preload_file_entries", entries)
        } else if context.issues.contains(where: { $0.path == "/etc/ld.so.preload" && $0.detail == HostFileSystem.oversizedDetail(Self.preloadFileLimit) }) {
            context.emit("loader.preload_file_oversized", true)
        }
    }
}
