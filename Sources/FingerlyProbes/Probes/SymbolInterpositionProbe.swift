import FingerlyHost
import FingerlyModel

/// Calls to sensitive functions that do not reach the library defining them: an LD_PRELOAD or
/// ld.so.preload object interposed itself, or an injected one rewrote an object's GOT slots.
/// dladdr names the object the call really reaches.
package struct SymbolInterpositionProbe: Probe {
    package let id = "symbol-interposition"
    static let libc = ("libc.so.6", ["open", "openat", "read", "fopen", "connect", "getenv", "ptrace", "dlsym", "write", "readlink"])
    /// Checked only when libssl is loaded in this process.
    static let libssl = ("libssl.so.3", ["SSL_write", "SSL_read", "SSL_write_ex", "SSL_read_ex"])

    package func collect(into context: ProbeContext) throws(ProbeFailure) {
        guard context.host.isLiveHost else { throw ProbeFailure(.skipped, "inspects this process's symbol bindings; a root tree has none") }
        var interposed: [String] = []
        for (library, symbols) in [Self.libc, Self.libssl] {
            for symbol in symbols {
                if let culprit = Self.interposer(of: symbol, in: library) { interposed.append("\(symbol) -> \(culprit)") }
            }
        }
        context.emit("loader.interposed_symbols", interposed)

        // Patching a GOT slot redirects one object's calls and leaves every global lookup, and the
        // library's code, as they were.
        var redirected: [String] = []
        for (library, symbols) in [Self.libc, Self.libssl] {
            guard let (slots, found) = ProcessIntegrity.redirectedSlots(of: symbols, in: library) else { continue }
            redirected += slots.map { "\($0.symbol) in the GOT of \($0.object) -> \($0.target.isEmpty ? "unnamed memory" : $0.target)" }
            if found > slots.count {
                context.recordMalformed("GOT of loaded objects", "\(found) redirected slots for \(library); the first \(slots.count) are named")
            }
        }
        context.emit("loader.redirected_got_slots", redirected)
    }

    /// The object that global lookups of `symbol` reach when it is not `library` itself.
    static func interposer(of symbol: String, in library: String) -> String? {
        guard case .interposed(let path) = ProcessIntegrity.symbolOrigin(of: symbol, in: library) else { return nil }
        return path.isEmpty ? "an unnamed mapping" : path
    }
}
