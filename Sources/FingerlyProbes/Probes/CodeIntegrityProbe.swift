import FingerlyHost
import FingerlyModel

/// Compares the first bytes of sensitive functions in memory with the same bytes in the ELF
/// file they were loaded from: an inline hook (a jump written over the prologue), a software
/// breakpoint or a uprobe all show up as a difference.
package struct CodeIntegrityProbe: Probe {
    package let id = "code-integrity"
    static let compared = 16

    package func collect(into context: ProbeContext) throws(ProbeFailure) {
        guard context.host.isLiveHost else { throw ProbeFailure(.skipped, "inspects this process's code; a root tree has none") }
        // This process is linked against libc: not finding it means the look-up was falsified.
        guard ProcessIntegrity.isLoaded(SymbolInterpositionProbe.libc.0) else {
            throw ProbeFailure(.error, "\(SymbolInterpositionProbe.libc.0) is not found among this process's objects although it is linked against it")
        }
        var hooks: [String] = []
        var breakpoints: [String] = []
        var checked = 0
        for (name, address) in Self.functions() {
            guard let comparison = ProcessIntegrity.compareCodeWithFile(at: address, count: Self.compared) else { continue }
            checked += 1
            guard !comparison.matches else { continue }
            let file = comparison.path
            if BreakpointsProbe.startsWithBreakpoint(address) && !BreakpointsProbe.startsWithBreakpoint(comparison.disk) {
                breakpoints.append("\(name) in \(file)")
            } else {
                hooks.append("\(name) in \(file): \(Self.describe(comparison.memory))")
            }
        }
        context.emit("integrity.functions_checked", checked)
        context.emit("integrity.inline_hooks", hooks)
        context.emit("integrity.code_breakpoints", breakpoints)
    }

    /// The real definitions (inside their libraries, not what an interposer answers), and this
    /// library's own entry points.
    static func functions() -> [(String, UnsafeRawPointer)] {
        var result: [(String, UnsafeRawPointer)] = []
        for (library, symbols) in [SymbolInterpositionProbe.libc, SymbolInterpositionProbe.libssl] {
            for symbol in symbols {
                if let address = ProcessIntegrity.definition(of: symbol, in: library) { result.append((symbol, address)) }
            }
        }
        for (name, address) in BreakpointsProbe.watchedEntries() where name != "_r_debug.r_brk" {
            if let address { result.append((name, address)) }
        }
        return result
    }

    /// Names the usual x86-64 trampolines.
    static func describe(_ bytes: [UInt8]) -> String {
        let hex = bytes.prefix(8).map { lowercaseHex([$0]) }.joined(separator: " ")
        var body = bytes[...]
        // endbr64 may precede the jump.
        if body.starts(with: [0xF3, 0x0F, 0x1E, 0xFA]) { body = body.dropFirst(4) }
        let kind: String
        switch Array(body.prefix(2)) {
        case let prefix where prefix.first == 0xE9: kind = "jmp rel32 trampoline"
        case let prefix where prefix.first == 0xEB: kind = "short jmp"
        case [0xFF, 0x25]: kind = "jmp [rip+disp] trampoline"
        case [0x48, 0xB8], [0x49, 0xBB], [0x49, 0xBA]:
            kind = body.dropFirst(10).starts(with: [0xFF, 0xE0]) || body.dropFirst(10).starts(with: [0x41, 0xFF]) ? "mov+jmp trampoline" : "movabs"
        case let prefix where prefix.first == 0x68: kind = "push+ret trampoline"
        default: kind = "modified prologue"
        }
        return "\(kind) (\(hex))"
    }
}

