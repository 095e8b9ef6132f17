import FingerlyHost
import FingerlyModel

/// The collector's own condition. A tracer that stops the process at every call, or a host that
/// slows it down, makes probes time out: their evidence goes missing, and a report built from
/// what is left would read as a clean host. So the tracer state is read before any probe thread
/// exists, and how much of the run was starved is evidence in its own right.
///
/// It is not scheduled like the others: `Fingerly` reads its early part synchronously before
/// the scheduler starts, and adds the run's figures once the scheduler is done.
package struct CollectorProbe: Probe {
    package static let probeId = "collector"
    package let id = CollectorProbe.probeId

    package func collect(into context: ProbeContext) throws(ProbeFailure) {
        CollectorStart.observe(context.host).emit(into: context)
    }
}

/// What is read before any probe thread starts: this process's tracer, and how much slower it
/// runs code new to it (a binary translator), measured before other threads compete for the CPU.
package struct CollectorStart: Sendable {
    /// nil when it could not be read; never read under a root prefix.
    package let tracerPid: Int?
    let tracerComm: String?
    /// nil under a root prefix (the tree is not this process) or when the CPU clock is unusable.
    package var slowdown: CodeSlowdown? = nil
    /// Reads that failed: no probe context exists yet to record them, so they wait here for
    /// the collector probe's entry.
    var readFailures: [HostReadError] = []

    /// Raw system calls only (a preloaded hook cannot hide the tracer), and only on the live host:
    /// under a root prefix the collector's own tracer is not the tree's, and a file of the tree
    /// could block (a FIFO) where no timeout guards this read.
    package static func observe(_ host: HostFileSystem, slowdownMemory: CodeSlowdown.Memory = .process) -> CollectorStart {
        guard host.isLiveHost else { return CollectorStart(tracerPid: nil, tracerComm: nil) }
        // First, so that nothing of ours has yet run the measured code in this call.
        let slowdown = CodeSlowdown.measure(seed: UInt64(bitPattern: Int64(monotonicMilliseconds() * 1000)),
                                            memory: slowdownMemory)
        var failures: [HostReadError] = []
        func read(_ path: String, limit: Int) -> String? {
            do { return try host.readTextBypassingLibc(path, limit: limit) } catch {
                // A tracer that exits between the two reads leaves no comm: gone, not hidden.
                if error.failure != .absent || path == "/proc/self/status" { failures.append(error) }
                return nil
            }
        }
        let status = read("/proc/self/status", limit: 64 * 1024)
        let tracer = status.flatMap(tracer(inStatus:))
        var comm: String?
        if let tracer, tracer > 0 {
            comm = read("/proc/\(tracer)/comm", limit: 256)?.trimmingWhitespace()
        }
        return CollectorStart(tracerPid: tracer, tracerComm: comm, slowdown: slowdown, readFailures: failures)
    }

    /// The `TracerPid` of a `/proc/PID/status` text; nil when it has none, or a negative one.
    package static func tracer(inStatus status: String) -> Int? {
        ProcessContextProbe.field("TracerPid", in: status).flatMap { Int($0) }.flatMap { $0 >= 0 ? $0 : nil }
    }

    package func emit(into context: ProbeContext) {
        readFailures.forEach(context.record)
        if let tracerPid { context.emit("collector.early_tracer_pid", tracerPid) }
        if let tracerComm, !tracerComm.isEmpty { context.emit("collector.early_tracer_comm", tracerComm) }
        if let slowdown {
            context.emit("collector.code_slowdown_factor", slowdown.highestFactorInProcess)
            context.emit("collector.fresh_code_us", slowdown.freshCodeMicroseconds)
            context.emit("collector.reference_code_us", slowdown.referenceMicroseconds)
            context.emit("collector.slowdown_measurement_us", slowdown.costMicroseconds)
        }
    }
}

/// How starved a finished run was.
package struct CollectorRun: Sendable, Hashable {
    /// Figures beyond this say nothing more, and keep every conversion in range.
    static let percentCeiling = 1_000_000

    /// Probes that timed out, were never started, or could not get a thread, out of those scheduled.
    let unfinishedPercent: Int
    /// Wall-clock time of the run against its budget.
    let budgetUsedPercent: Int

    package init(entries: [ProbeEntry], budgetMs: Int, elapsedMs: Double) {
        let scheduled = entries.filter { $0.status != .skipped }
        let unfinished = scheduled.filter { $0.status == .timeout || ($0.status == .error && $0.detail == ProbeFailure.threadStartFailure) }
        unfinishedPercent = scheduled.isEmpty ? 0 : unfinished.count * 100 / scheduled.count
        budgetUsedPercent = Self.percent(elapsedMs, of: Double(max(1, budgetMs)))
    }

    private static func percent(_ part: Double, of whole: Double) -> Int {
        let ratio = part / whole * 100
        guard ratio.isFinite else { return percentCeiling }
        return Int(min(max(ratio, 0), Double(percentCeiling)).rounded(.down))
    }

    package func emit(into context: ProbeContext) {
        context.emit("collector.unfinished_percent", unfinishedPercent)
        context.emit("collector.budget_used_percent", budgetUsedPercent)
    }
}
