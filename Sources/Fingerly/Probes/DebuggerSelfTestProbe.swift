import CFingerlyShims
#if canImport(Glibc)
import Glibc
#endif

/// Clues a debugger leaves that TracerPid alone would miss: a forked child that cannot call
/// PTRACE_TRACEME (it was auto-attached, as `strace -f` does), and ASLR switched off for this
/// process (gdb's default) or for the whole system.
struct DebuggerSelfTestProbe: Probe {
    let id = "debugger-self-test"
    /// personality(2) flag ADDR_NO_RANDOMIZE.
    static let addressNoRandomize = 0x0040000

    func collect(into context: ProbeContext) throws(ProbeFailure) {
        let host = context.host
        if let text = context.attempt({ () throws(HostReadError) in try host.readAttribute("/proc/self/personality") }) {
            if let personality = Int(text, radix: 16) {
                context.emit("debug.aslr_disabled", personality & Self.addressNoRandomize != 0)
            } else {
                context.recordMalformed("/proc/self/personality", "not a hexadecimal personality")
            }
        }
        if let text = context.attemptIfPresent({ () throws(HostReadError) in try host.readAttribute("/proc/sys/kernel/randomize_va_space") }),
           let value = Int(text) {
            context.emit("debug.randomize_va_space", value)
        }
        // The fork tests this process, not a root tree.
        guard host.isLiveHost else { return }
        let result = fingerly_traceme_selftest()
        switch result {
        case 0: context.emit("debug.traceme", "allowed")
        case EPERM: context.emit("debug.traceme", "blocked")
        default: context.emit("debug.traceme", "unavailable")
        }
    }
}
