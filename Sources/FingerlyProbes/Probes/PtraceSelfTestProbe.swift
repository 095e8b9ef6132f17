#if canImport(Glibc)
import Glibc
#endif
import FingerlyHost
import FingerlyModel

/// A child calls PTRACE_TRACEME and exits at once, so this process is never left traced. If the child cannot,
/// something attached to it on its own: `strace -f`, or a debugger that follows forks. Deferred: starting a process
/// is the most expensive thing the integrity check does, even one sharing this one's memory.
package struct PtraceSelfTestProbe: Probe {
    package let id = "ptrace-self-test"

    package func collect(into context: ProbeContext) throws(ProbeFailure) {
        guard context.host.isLiveHost else { throw ProbeFailure(.skipped, "forks this process; meaningless for a root tree") }
        // Yama's scopes 2 (admin-only) and 3 (no attach) refuse PTRACE_TRACEME by themselves.
        let yama = context.attemptIfPresent { () throws(HostReadError) in try context.host.readAttribute("/proc/sys/kernel/yama/ptrace_scope") }
            .flatMap { Int($0) }
        if let yama { context.emit("debug.yama_ptrace_scope", yama) }
        switch ProcessIntegrity.traceMeSelfTest() {
        case .allowed: context.emit("debug.traceme", "allowed")
        case .refused(let error) where error.code == EPERM && (yama ?? 0) >= 2: context.emit("debug.traceme", "restricted")
        case .refused(let error) where error.code == EPERM: context.emit("debug.traceme", "blocked")
        default: context.emit("debug.traceme", "unavailable")
        }
    }
}
