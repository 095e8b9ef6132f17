#if canImport(Glibc)
import Glibc
#endif
import Dispatch
import FingerlyCatalogue
import Synchronization
import FingerlyHost
import FingerlyModel
import FingerlyPolicy
import FingerlyProbes

/// A probe with the tier and timeout it runs under.
struct ScheduledProbe: Sendable {
    let probe: any Probe
    let tier: Tier
    let timeoutMs: Int
    /// Taken before every other probe, whatever its tier (the catalogue's `startsFirst`).
    var startsFirst = false
}

/// Everything a probe needs to build its context on its own thread.
struct ProbeEnvironment: Sendable {
    let host: HostFileSystem
    let tables: DetectionTables
    let filter: AttributeFilter
    let hasher: IdentifierHasher
    var pinChecks: [TLSPinCheck] = []
    var trustStoreCacheStorage: (any TrustStoreCacheStorage)?
}

/// What the collector saw of its own speed before a run.
enum RunSlowdown: Sendable {
    case none
    /// An instrumenting runtime or a binary translator (valgrind, QEMU user mode).
    case translated
    /// A tracer is attached.
    case traced
}

/// Runs probes concurrently under a hard wall-clock budget.
///
/// Probes run on OS threads (kept from earlier runs: `ProbeThreads`), at most `concurrency` at
/// once. Each thread takes the next probe itself as it finishes one, so a run of microsecond
/// probes costs a few thread wake-ups, not two per probe: between CPUs of a virtual machine
/// each one costs tens of microseconds. The coordinator waits on a semaphore with a deadline and
/// never on a probe, so a probe stuck in a system call is abandoned (reported `timeout`, its
/// thread replaced) and `run` still returns on time. Fast probes are queued before deferred ones,
/// so the deferred tier can never starve the fast tier of slots.
struct Scheduler: Sendable {
    /// Which job is taken when. Stable: what starts first, then fast before deferred, catalogue order within a
    /// tier. A run lasts at least as long as its longest probe: begun last, that one would be the whole run's
    /// tail. At least one thread is left to the rest, so a slow first probe never holds up the fast tier alone.
    /// Under a tracer or a translator the tiers keep their order: the run is slow whatever comes first, and a
    /// library loaded while other threads run through their first calls is where ltrace loses track of a process.
    static func startingOrder(of jobs: [ScheduledProbe], concurrency: Int, slowdown: RunSlowdown = .none) -> [Int] {
        let firsts = slowdown == .none ? max(0, concurrency - 1) : 0
        let leading = Set(jobs.indices.filter { jobs[$0].startsFirst }.prefix(firsts))
        func rank(_ index: Int) -> (Int, Tier, Int) { (leading.contains(index) ? 0 : 1, jobs[index].tier, index) }
        return jobs.indices.sorted { rank($0) < rank($1) }
    }

    let budgetMs: Int
    let concurrency: Int

    /// The longest single wait on the semaphore. Deadlines are rechecked after each wake-up, so a
    /// cap only costs an extra loop on absurd schedules, and keeps the microsecond count an Int.
    static let longestWaitMs = 60_000.0
    /// How many of its slowest turns the coordinator keeps back from the budget to finish in.
    static let reservedTurns = 8.0

    private struct RunningProbe {
        let startedAt: Double
        let deadline: Double
        let allowance: ReadAllowance
    }

    /// What the coordinator and the probe threads share, under one lock.
    private struct RunState {
        var pending: ArraySlice<Int>
        var running: [Int: RunningProbe] = [:]
        var finished: [Int: ProbeEntry] = [:]
        /// Threads taking probes, not counting those whose probe was abandoned.
        var threads = 0
        /// No probe starts at or after this (the budget less what finishing needs).
        var stopAt: Double
        /// When the coordinator wakes next: a probe started with an earlier deadline wakes it.
        var coordinatorWakesAt = -Double.infinity
    }

    /// - Parameters:
    ///   - startedAt: when the caller's budget began (monotonic ms); defaults to now.
    ///   - slowdown: what was seen before the run. Under a translator, preparing the run took about as
    ///     long as finishing will, and that time is kept back. A tracer that stops at every library
    ///     call (ltrace) makes finishing cost more than preparing, which the load's warm-up made
    ///     cheap: each of the coordinator's calls waits for the tracer to be done with every probe
    ///     thread's; half the budget is kept back. Natively nothing is: a first call's one-time costs
    ///     (an installation secret written and synced) would cut its probes' time for nothing.
    func run(_ jobs: [ScheduledProbe], in environment: ProbeEnvironment, startedAt: Double = monotonicMilliseconds(),
             slowdown: RunSlowdown = .none) -> [ProbeEntry] {
        let budgetDeadline = startedAt + Double(budgetMs)
        // What finishing costs: after the last probe the coordinator still builds the entries, and
        // the caller the report. The run keeps that back from the budget, up to half of it, and ends
        // that much early: what the slowdown seen before the run says (above), or a few of this
        // loop's slowest turns (under ltrace 10-30 ms each; natively tens of microseconds), whichever
        // is larger.
        var reserveMs: Double
        switch slowdown {
        case .none: reserveMs = 0
        case .translated: reserveMs = min(Double(budgetMs) / 2, max(0, monotonicMilliseconds() - startedAt))
        case .traced: reserveMs = Double(budgetMs) / 2
        }
        var runDeadline: Double { budgetDeadline - reserveMs }

        let order = Self.startingOrder(of: jobs, concurrency: concurrency, slowdown: slowdown)
        let shared = Mutex(RunState(pending: order[...], stopAt: runDeadline))
        let wakeUp = DispatchSemaphore(value: 0)
        var entries: [Int: ProbeEntry] = [:]

        let takeProbes: @Sendable () -> Void = {
            while true {
                let now = monotonicMilliseconds()
                let taken = shared.withLock { state -> (index: Int, running: RunningProbe, urgent: Bool)? in
                    guard now < state.stopAt, let index = state.pending.popFirst() else {
                        state.threads -= 1
                        return nil
                    }
                    let running = RunningProbe(startedAt: now, deadline: now + Double(jobs[index].timeoutMs),
                                               allowance: ReadAllowance(bytes: Self.readAllowanceBytes))
                    state.running[index] = running
                    return (index, running, running.deadline < state.coordinatorWakesAt)
                }
                guard let taken else {
                    wakeUp.signal()
                    return
                }
                if taken.urgent { wakeUp.signal() }
                let entry = Self.execute(jobs[taken.index], in: environment, allowance: taken.running.allowance,
                                         startedAt: taken.running.startedAt,
                                         deadline: min(taken.running.deadline, budgetDeadline))
                let kept = shared.withLock { state in
                    guard state.running.removeValue(forKey: taken.index) != nil else { return false }
                    state.finished[taken.index] = entry
                    return true
                }
                // Abandoned: another thread has taken this one's place, and the result is dropped.
                guard kept else { return }
            }
        }
        func startThreads(_ count: Int) {
            for _ in 0..<count {
                shared.withLock { $0.threads += 1 }
                if !ProbeThreads.shared.start(takeProbes) { shared.withLock { $0.threads -= 1 } }
            }
        }
        startThreads(min(max(1, concurrency), jobs.count))

        while true {
            let (arrived, wakeAt, done, starved) = shared.withLock { state in
                let arrived = state.finished
                state.finished.removeAll()
                state.stopAt = runDeadline
                state.coordinatorWakesAt = min(state.running.values.map(\.deadline).min() ?? runDeadline, runDeadline)
                let starved = state.threads == 0 && !state.pending.isEmpty
                return (arrived, state.coordinatorWakesAt, state.pending.isEmpty && state.running.isEmpty, starved)
            }
            entries.merge(arrived) { first, _ in first }
            if done { break }
            if starved && monotonicMilliseconds() < runDeadline {
                // Not one thread could be started: what has not run cannot run. (Threads also stop
                // taking probes when the budget is out; the wait below then ends the run.)
                let unstarted = shared.withLock { state in
                    defer { state.pending.removeAll() }
                    return Array(state.pending)
                }
                for index in unstarted {
                    entries[index] = jobs[index].entry(.error, durationMs: 0, detail: ProbeFailure.threadStartFailure)
                }
                continue
            }

            let waitMs = min(max(0, wakeAt - monotonicMilliseconds()), Self.longestWaitMs)
            let asked = monotonicMilliseconds() + waitMs
            _ = wakeUp.wait(timeout: .now() + .microseconds(Int(waitMs * 1000)))
            let woke = monotonicMilliseconds()
            // A late wake-up counts too: this thread could not run when it asked to.
            let turnMs = monotonicMilliseconds() - woke + max(0, woke - asked)
            reserveMs = min(Double(budgetMs) / 2, max(reserveMs, Self.reservedTurns * turnMs))
            let now = monotonicMilliseconds()

            let (overdue, replacements) = shared.withLock { state -> ([(Int, RunningProbe)], Int) in
                let overdue = state.running.filter { $0.value.deadline <= now }
                for (index, _) in overdue { state.running[index] = nil }
                state.threads -= overdue.count
                return (Array(overdue), state.pending.isEmpty ? 0 : overdue.count)
            }
            for (index, slot) in overdue {
                slot.allowance.abandon()
                entries[index] = jobs[index].entry(.timeout, durationMs: now - slot.startedAt,
                                                   detail: "exceeded its \(jobs[index].timeoutMs) ms timeout and was abandoned")
            }
            if now >= runDeadline {
                let why = reserveMs < 10 ? "the \(budgetMs) ms budget ran out"
                    : "the \(budgetMs) ms budget ran out (\(Int(reserveMs)) ms of it kept to finish: this process runs slowly)"
                let stillRunning = "still running when \(why); abandoned", notStarted = "not started: \(why)"
                let (arrivedLast, running, unstarted) = shared.withLock { state in
                    defer {
                        state.finished.removeAll()
                        state.running.removeAll()
                        state.pending.removeAll()
                        state.stopAt = -Double.infinity
                    }
                    return (state.finished, state.running, Array(state.pending))
                }
                entries.merge(arrivedLast) { first, _ in first }
                for (index, slot) in running {
                    slot.allowance.abandon()
                    entries[index] = jobs[index].entry(.timeout, durationMs: now - slot.startedAt, detail: stillRunning)
                }
                for index in unstarted {
                    // timeout, not skipped: its evidence is missing and the verdicts must say so.
                    entries[index] = jobs[index].entry(.timeout, durationMs: 0, detail: notStarted)
                }
                break
            }
            // An abandoned probe's thread is stuck: others take its place while probes wait.
            startThreads(replacements)
        }
        return jobs.indices.compactMap { entries[$0] }
    }

    /// What one probe may read in all: the largest legitimate reader (the trust store) reads a
    /// few hundred KiB; a tree of sparse files must not make one read gigabytes.
    static let readAllowanceBytes = 8 * 1024 * 1024

    private static func execute(_ job: ScheduledProbe, in environment: ProbeEnvironment, allowance: ReadAllowance,
                                startedAt: Double, deadline: Double) -> ProbeEntry {
        let context = ProbeContext(host: environment.host.limited(by: allowance), tables: environment.tables,
                                   filter: environment.filter, hasher: environment.hasher, pinChecks: environment.pinChecks)
        context.deadline = deadline
        context.trustStoreCacheStorage = environment.trustStoreCacheStorage
        var status: ProbeStatus
        var detail: String?
        do {
            try job.probe.collect(into: context)
            status = context.completedStatus
            detail = status == .ok ? (context.notes.isEmpty ? nil : context.notes.joined(separator: "; "))
                                    : context.issues.first?.description
        } catch {
            status = error.status
            detail = error.detail
        }
        return ProbeEntry(id: job.probe.id, tier: job.tier, status: status,
                          durationMs: (monotonicMilliseconds() - startedAt).roundedToMicroseconds,
                          detail: detail, issues: context.issues, signals: context.signals,
                          identityComponents: context.components)
    }
}

/// Probe threads kept between runs. Starting and ending a thread costs more than most probes
/// take, and an application checks its integrity again and again; a thread done with its probe
/// waits a while for the next one. A thread whose probe never returns never comes back, so an
/// abandoned probe costs its thread, as before, and never a later run's.
final class ProbeThreads: Sendable {
    static let shared = ProbeThreads()
    /// How long an idle thread waits for another probe before it ends.
    static let idleMs = 2_000

    private final class Worker: Sendable {
        let wake = DispatchSemaphore(value: 0)
        let work = Mutex<(@Sendable () -> Void)?>(nil)
    }

    /// The idle threads and the process they belong to: after a fork the child has none of them.
    private let idle = Mutex<(process: pid_t, workers: [Worker])>((getpid(), []))

    /// How many threads wait for a probe now.
    var idleCount: Int { idle.withLock { $0.process == getpid() ? $0.workers.count : 0 } }

    /// Runs `body` on an idle thread, or on a new one; false when no thread could be started.
    func start(_ body: @escaping @Sendable () -> Void) -> Bool {
        let process = getpid()
        let waiting = idle.withLock { state -> Worker? in
            if state.process != process { state = (process, []) }
            return state.workers.popLast()
        }
        if let waiting {
            waiting.work.withLock { $0 = body }
            waiting.wake.signal()
            return true
        }
        let worker = Worker()
        worker.work.withLock { $0 = body }
        return startDetachedThread { self.serve(worker, of: process) }
    }

    private func serve(_ worker: Worker, of process: pid_t) {
        // A kept thread outlives the call that made it: it takes none of the host's process signals
        // (a host's sigwait keeps them), only the faults a thread raises itself; and it says whose it is.
        var asynchronous = sigset_t()
        sigfillset(&asynchronous)
        for fault in [SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGABRT, SIGSYS] { sigdelset(&asynchronous, fault) }
        pthread_sigmask(SIG_BLOCK, &asynchronous, nil)
        nameCurrentThread("fingerly-probe")
        while true {
            // Its own scope: what the job holds (a closed instance, a run's tree) is let go before the wait.
            do {
                guard let body = worker.work.withLock({ work in
                    defer { work = nil }
                    return work
                }) else { return }
                body()
            }
            let parked = idle.withLock { state in
                guard state.process == process else { return false }
                state.workers.append(worker)
                return true
            }
            guard parked else { return }
            if worker.wake.wait(timeout: .now() + .milliseconds(Self.idleMs)) == .timedOut {
                let retired = idle.withLock { state in
                    guard let at = state.workers.firstIndex(where: { $0 === worker }) else { return false }
                    state.workers.remove(at: at)
                    return true
                }
                if retired { return }
                // Taken just as the wait ended: its probe is on the way.
                worker.wake.wait()
            }
        }
    }
}

extension ScheduledProbe {
    func entry(_ status: ProbeStatus, durationMs: Double, detail: String) -> ProbeEntry {
        ProbeEntry(id: probe.id, tier: tier, status: status, durationMs: durationMs.roundedToMicroseconds,
                   detail: detail, issues: [], signals: [:], identityComponents: [])
    }
}


extension Double {
    var roundedToMicroseconds: Double { (self * 1000).rounded() / 1000 }
}
