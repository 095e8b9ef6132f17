@testable import FingerlyCatalogue
import Foundation
import Synchronization
import Testing
@testable import Fingerly
@testable import FingerlyHost
@testable import FingerlyModel
@testable import FingerlyPolicy
@testable import FingerlyProbes

/// Counts how many probes run at once and in which order they started.
final class RunTracker: Sendable {
    let running = Atomic<Int>(0)
    let peak = Atomic<Int>(0)
    let starts = Mutex<[String]>([])

    func enter(_ id: String) {
        starts.withLock { $0.append(id) }
        let now = running.wrappingAdd(1, ordering: .sequentiallyConsistent).newValue
        var seen = peak.load(ordering: .sequentiallyConsistent)
        while now > seen {
            let (exchanged, original) = peak.compareExchange(expected: seen, desired: now, ordering: .sequentiallyConsistent)
            if exchanged { break }
            seen = original
        }
    }

    func leave() { running.wrappingSubtract(1, ordering: .sequentiallyConsistent) }
}

/// A probe that sleeps, for scheduling tests.
struct SleepingProbe: Probe {
    let id: String
    let sleepMs: Int
    let tracker: RunTracker

    func collect(into context: ProbeContext) throws(ProbeFailure) {
        tracker.enter(id)
        usleep(UInt32(sleepMs * 1000))
        tracker.leave()
        context.emit("test.\(id)", true)
    }
}

/// A probe that reads one host file, for budget tests with a FIFO.
struct ReadingProbe: Probe {
    let id: String
    let path: String

    func collect(into context: ProbeContext) throws(ProbeFailure) {
        do { _ = try context.host.read(path) } catch { throw ProbeFailure(error) }
        context.emit("test.read", true)
    }
}

private func environment(root: String = "/") -> ProbeEnvironment {
    ProbeEnvironment(host: HostFileSystem(root: root), tables: .embedded, filter: .none, hasher: IdentifierHasher(organization: "acme"))
}

/// Blocks in read(2) on a pipe nobody writes: a probe stuck in a system call, which only the
/// scheduler's deadline can end. (A FIFO in a tree no longer blocks: the host layer refuses it.)
struct BlockedInSystemCallProbe: Probe {
    let id: String

    func collect(into context: ProbeContext) throws(ProbeFailure) {
        var ends: [Int32] = [0, 0]
        guard pipe(&ends) == 0 else { throw ProbeFailure(.error, "pipe failed") }
        var byte: UInt8 = 0
        _ = read(ends[0], &byte, 1)
        context.emit("test.read", true)
    }
}

/// Runs blocking work on its own thread so timing tests never hold Swift's cooperative pool,
/// which every other async test (and `identify`'s own resumption) needs.
func offPool<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
    await withCheckedContinuation { continuation in
        Thread { continuation.resume(returning: body()) }.start()
    }
}

/// `offPool`, with the milliseconds the body itself took on its thread: a cooperative pool
/// that other tests keep busy may be slow to resume the caller, and that is not the scheduler's time.
func timedOffPool<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> (value: T, elapsedMs: Double) {
    await offPool {
        let started = monotonicMilliseconds()
        let value = body()
        return (value, monotonicMilliseconds() - started)
    }
}

@Suite struct SchedulerTests {
    /// More probe threads than CPUs only take turns: by default one more than the CPUs `nproc` counts (the
    /// affinity mask), from 2 to 4.
    @Test func theDefaultConcurrencyFollowsTheUsableCPUs() throws {
        let counted = try runProcess("/usr/bin/nproc", [])
        let cpus = try #require(Int(counted.standardOutput.trimmingCharacters(in: .whitespacesAndNewlines)))
        #expect(ScheduleOptions.defaultConcurrency == min(4, max(2, cpus + 1)))
        #expect(ScheduleOptions().concurrency == ScheduleOptions.defaultConcurrency)
        #expect((2...4).contains(ScheduleOptions.defaultConcurrency))
    }

    @Test func concurrencyLimitIsObserved() async {
        let tracker = RunTracker()
        let jobs = (0..<6).map { ScheduledProbe(probe: SleepingProbe(id: "p\($0)", sleepMs: 40, tracker: tracker), tier: .fast, timeoutMs: 2000) }
        let entries = await offPool { Scheduler(budgetMs: 5000, concurrency: 2).run(jobs, in: environment()) }
        #expect(entries.count == 6)
        #expect(entries.allSatisfy { $0.status == .ok })
        #expect(tracker.peak.load(ordering: .sequentiallyConsistent) == 2)
    }

    @Test func probesRunConcurrentlyUpToTheLimit() async {
        let tracker = RunTracker()
        let jobs = (0..<4).map { ScheduledProbe(probe: SleepingProbe(id: "p\($0)", sleepMs: 400, tracker: tracker), tier: .fast, timeoutMs: 5000) }
        let (entries, elapsed) = await timedOffPool { Scheduler(budgetMs: 5000, concurrency: 4).run(jobs, in: environment()) }
        #expect(entries.allSatisfy { $0.status == .ok })
        #expect(tracker.peak.load(ordering: .sequentiallyConsistent) == 4)
        // Four 400 ms sleeps in parallel take 400 ms, in series 1600 ms: the bound leaves a loaded
        // machine 800 ms and still tells the two apart.
        #expect(elapsed < 1200, "four parallel 400 ms probes took \(elapsed) ms")
    }

    @Test func aProbeOverItsOwnTimeoutIsAbandonedAndOthersFinish() async {
        let tracker = RunTracker()
        let jobs = [
            ScheduledProbe(probe: SleepingProbe(id: "slow", sleepMs: 5000, tracker: tracker), tier: .fast, timeoutMs: 60),
            ScheduledProbe(probe: SleepingProbe(id: "quick", sleepMs: 5, tracker: tracker), tier: .fast, timeoutMs: 1000),
        ]
        let (entries, elapsed) = await timedOffPool { Scheduler(budgetMs: 5000, concurrency: 2).run(jobs, in: environment()) }
        #expect(entries.map(\.status) == [.timeout, .ok])
        #expect(entries[0].detail?.contains("60 ms timeout") == true)
        #expect(entries[0].signals.isEmpty)
        // Waiting for the abandoned probe would take 5 s; its 60 ms timeout plus a loaded machine's delays stay far below.
        #expect(elapsed < 2500, "the run waited for the abandoned probe: \(elapsed) ms")
    }

    @Test func fastTierStartsBeforeDeferredEvenWhenListedLater() async {
        let tracker = RunTracker()
        let jobs = [
            ScheduledProbe(probe: SleepingProbe(id: "heavy1", sleepMs: 20, tracker: tracker), tier: .deferred, timeoutMs: 1000),
            ScheduledProbe(probe: SleepingProbe(id: "heavy2", sleepMs: 20, tracker: tracker), tier: .deferred, timeoutMs: 1000),
            ScheduledProbe(probe: SleepingProbe(id: "cheap1", sleepMs: 1, tracker: tracker), tier: .fast, timeoutMs: 1000),
            ScheduledProbe(probe: SleepingProbe(id: "cheap2", sleepMs: 1, tracker: tracker), tier: .fast, timeoutMs: 1000),
        ]
        let entries = await offPool { Scheduler(budgetMs: 5000, concurrency: 1).run(jobs, in: environment()) }
        #expect(tracker.starts.withLock { $0 } == ["cheap1", "cheap2", "heavy1", "heavy2"])
        // The report keeps the order the probes were given in.
        #expect(entries.map(\.id) == ["heavy1", "heavy2", "cheap1", "cheap2"])
    }

    @Test func aProbeThatStartsFirstIsTakenBeforeEitherTierWhenAThreadIsLeftForThem() async {
        let tracker = RunTracker()
        let jobs = [
            ScheduledProbe(probe: SleepingProbe(id: "cheap", sleepMs: 1, tracker: tracker), tier: .fast, timeoutMs: 1000),
            ScheduledProbe(probe: SleepingProbe(id: "other", sleepMs: 1, tracker: tracker), tier: .deferred, timeoutMs: 1000),
            ScheduledProbe(probe: SleepingProbe(id: "longest", sleepMs: 5, tracker: tracker), tier: .deferred, timeoutMs: 1000,
                           startsFirst: true),
        ]
        #expect(Scheduler.startingOrder(of: jobs, concurrency: 2) == [2, 0, 1])
        // Two that start first on two threads: one goes first, the other keeps its tier's place.
        let second = ScheduledProbe(probe: SleepingProbe(id: "second", sleepMs: 1, tracker: tracker), tier: .deferred,
                                    timeoutMs: 1000, startsFirst: true)
        #expect(Scheduler.startingOrder(of: jobs + [second], concurrency: 2) == [2, 0, 1, 3])
        #expect(Scheduler.startingOrder(of: jobs + [second], concurrency: 4) == [2, 3, 0, 1])
        #expect(Scheduler.startingOrder(of: jobs, concurrency: 4, slowdown: .traced) == [0, 1, 2])
        #expect(Scheduler.startingOrder(of: jobs, concurrency: 4, slowdown: .translated) == [0, 1, 2])
        // One thread: the fast tier is not held up behind it.
        let entries = await offPool { Scheduler(budgetMs: 5000, concurrency: 1).run(jobs, in: environment()) }
        #expect(tracker.starts.withLock { $0 } == ["cheap", "other", "longest"])
        #expect(entries.map(\.id) == ["cheap", "other", "longest"])
    }

    /// The shipped catalogue marks only the trust store, the run's longest probe on every machine measured.
    @Test func onlyTheTrustStoreStartsFirstInTheCatalogue() {
        #expect(ProbeCatalogue.embedded.probes.filter { $0.startsFirst == true }.map(\.id) == ["trust-store"])
    }

    @Test func budgetIsAHardBoundWhenAProbeBlocksForeverInASystemCall() async throws {
        let root = try TestPaths.temporaryDirectory("blocked")
        let tracker = RunTracker()
        let jobs = [
            ScheduledProbe(probe: BlockedInSystemCallProbe(id: "blocked"), tier: .fast, timeoutMs: 10_000),
            ScheduledProbe(probe: SleepingProbe(id: "fine", sleepMs: 1, tracker: tracker), tier: .fast, timeoutMs: 10_000),
            ScheduledProbe(probe: SleepingProbe(id: "late", sleepMs: 1, tracker: tracker), tier: .deferred, timeoutMs: 10_000),
        ]
        let (entries, elapsed) = await timedOffPool { Scheduler(budgetMs: 200, concurrency: 1).run(jobs, in: environment(root: root)) }
        // The blocked probe never returns and every timeout is 10 s: only the budget can end the
        // run. An upper bound alone, with room for a loaded machine; the statuses below show it was the budget.
        #expect(elapsed < 200 + 500, "returned after \(elapsed) ms for a 200 ms budget")
        #expect(entries.map(\.status) == [.timeout, .timeout, .timeout])
        #expect(entries[0].detail?.contains("budget") == true)
        #expect(entries[1].detail?.hasPrefix("not started") == true)
    }

    @Test func identifyReturnsSoonAfterTheBudgetWithABlockedProbe() async throws {
        let root = try TestPaths.temporaryDirectory("blocked-identify")
        // Every probe's timeout is 10 s and the os probe blocks forever, so only the 60 ms budget can end the run.
        let schedule = ScheduleOptions(budgetMs: 60, defaultSourceTimeoutMs: 250, concurrency: 4, tiers: [.fast],
                                       sourceTimeoutOverrideMs: 10_000)
        let probes: [any Probe] = ProbeRegistry.builtIn.map { $0.id == "os" ? BlockedInSystemCallProbe(id: "os") : $0 }
        let fingerly = try Fingerly.loadBlocking(apiKey: TestKeys.standard, schedule: schedule, consent: .granted,
                                                 options: FingerlyOptions(root: root), probes: probesById(probes))
        let clock = ContinuousClock()
        let started = clock.now
        let result = try await fingerly.identify(submit: false)
        let elapsed = started.duration(to: clock.now)
        // Budget plus room for a loaded machine, far below the 10 s a probe timeout would take.
        #expect(elapsed < .milliseconds(60 + 500), "identify took \(elapsed)")
        #expect(try result.probe("os").status == .timeout)
        #expect(try result.probe("memory").status == .absent)
    }

    @Test func emptyJobListReturnsImmediately() async {
        #expect(await offPool { Scheduler(budgetMs: 1000, concurrency: 2).run([], in: environment()) }.isEmpty)
    }
}

/// A probe that blocks until its gate opens or a few seconds pass, as a probe does whose
/// process is stopped by a tracer at every call.
struct BlockedProbe: Probe {
    let id: String
    let gate: DispatchSemaphore

    func collect(into context: ProbeContext) throws(ProbeFailure) {
        _ = gate.wait(timeout: .now() + .seconds(5))
        context.emit("test.unreachable", true)
    }
}

@Suite struct StarvationTests {
    /// Every probe of the registry replaced by one that never finishes in time: the collector
    /// entry (when there is one) is what still speaks.
    static func starvedFingerly(gate: DispatchSemaphore, budgetMs: Int) -> Fingerly {
        let probes: [any Probe] = ProbeRegistry.builtIn.map { $0.id == "collector" ? $0 : BlockedProbe(id: $0.id, gate: gate) }
        return try! Fingerly.loadBlocking(apiKey: TestKeys.standard, schedule: ScheduleOptions(budgetMs: budgetMs, concurrency: 4, tiers: [.fast]),
                                          consent: .granted, options: FingerlyOptions(), probes: probesById(probes))
    }

    @Test func aCollectorWhoseProbesAllBlockIsMissingEvidenceNotAVerdict() async throws {
        let gate = DispatchSemaphore(value: 0)
        defer { for _ in 0..<64 { gate.signal() } }
        let result = try await Self.starvedFingerly(gate: gate, budgetMs: 150).identify(submit: false)
        let signals = result.report.signals
        #expect(signals["collector.unfinished_percent"] == .int(100), "\(signals.filter { $0.key.hasPrefix("collector.") })")
        guard case .int(let used)? = signals["collector.budget_used_percent"] else {
            Issue.record("no collector.budget_used_percent"); return
        }
        // The coordinator keeps a few of its turns back to finish in, so it may end a little early.
        #expect(used >= 90)
        // Starvation is what a busy machine does too: no verdict, but no clean one either. Every
        // verdict says its evidence is missing, at low confidence.
        for name in VerdictName.allCases {
            let verdict = result.verdicts[name]
            #expect(!verdict.value, "\(name) came true on starvation alone: \(verdict.reasons)")
            #expect(verdict.confidence == .low && verdict.missingEvidence.contains { $0.status == .timeout },
                    "\(name): \(verdict.confidence) \(verdict.missingEvidence)")
        }
        #expect(result.report.probes.contains { $0.id == "collector" && $0.status == .ok })
    }

    @Test func runFiguresAreShareOfUnfinishedProbesAndOfTheBudgetUsed() {
        func entry(_ id: String, _ status: ProbeStatus, _ detail: String? = nil) -> ProbeEntry {
            ProbeEntry(id: id, tier: .fast, status: status, durationMs: 0, detail: detail, issues: [], signals: [:], identityComponents: [])
        }
        let entries = [entry("a", .ok), entry("b", .timeout), entry("c", .timeout), entry("d", .absent),
                       entry("e", .error, ProbeFailure.threadStartFailure), entry("f", .error, "EIO")]
        let figures = CollectorRun(entries: entries, budgetMs: 1000, elapsedMs: 3021.7)
        #expect(figures.unfinishedPercent == 50)
        #expect(figures.budgetUsedPercent == 302)
        // A run the kernel stopped for longer than Int can count still yields a figure, not a trap.
        #expect(CollectorRun(entries: [], budgetMs: 1, elapsedMs: .greatestFiniteMagnitude).budgetUsedPercent == CollectorRun.percentCeiling)
        #expect(CollectorRun(entries: [], budgetMs: 1, elapsedMs: .nan).budgetUsedPercent == CollectorRun.percentCeiling)
        #expect(CollectorRun(entries: [], budgetMs: 1000, elapsedMs: 10).unfinishedPercent == 0)
    }
}

@Suite struct HugeScheduleTests {
    /// A budget and a timeout near Int.max used to overflow the scheduler's wait (SIGILL).
    @Test func aHugeBudgetAndTimeoutDoNotTrap() async {
        let tracker = RunTracker()
        let jobs = [ScheduledProbe(probe: SleepingProbe(id: "p", sleepMs: 1, tracker: tracker), tier: .fast, timeoutMs: .max)]
        let entries = await offPool { Scheduler(budgetMs: .max, concurrency: 1).run(jobs, in: environment()) }
        #expect(entries.map(\.status) == [.ok])
    }

    /// Refused past the ranges `fingerly-identify`'s flags take, so every binding refuses what the
    /// CLI refuses (BindingParityTests), and each message names the field and its bound.
    @Test func theLibraryRejectsNegativeAndAbsurdSchedules() throws {
        let absurd: [(String, ScheduleOptions)] = [
            ("schedule.sourceTimeoutOverrideMs", ScheduleOptions(sourceTimeoutOverrideMs: -5)),
            ("schedule.budgetMs", ScheduleOptions(budgetMs: -1)),
            ("schedule.budgetMs", ScheduleOptions(budgetMs: .max)),
            ("schedule.budgetMs", ScheduleOptions(budgetMs: 600_001)),
            ("schedule.defaultSourceTimeoutMs", ScheduleOptions(defaultSourceTimeoutMs: 1_000_000_000)),
            ("schedule.sourceTimeoutOverrideMs", ScheduleOptions(sourceTimeoutOverrideMs: .max)),
            ("schedule.concurrency", ScheduleOptions(concurrency: 65)),
        ]
        for (field, schedule) in absurd {
            do {
                _ = try Fingerly.loadBlocking(apiKey: nil, schedule: schedule, consent: .granted)
                Issue.record("\(field): accepted")
            } catch {
                guard case .invalidConfiguration(let named, _) = error else { throw error }
                #expect(named == field)
            }
        }
        let longest = try Fingerly.loadBlocking(apiKey: nil, schedule: ScheduleOptions(budgetMs: 600_000, concurrency: 64),
                                                consent: .granted)
        #expect(longest.schedule.budgetMs == 600_000 && longest.schedule.concurrency == 64)
    }
}
