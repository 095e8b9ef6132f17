import FingerlyCatalogue
import FoundationEssentials
import FingerlyHost
import FingerlyModel
import FingerlyProbes

extension Fingerly {
    func collectBlocking(tag: String?, tiers: Set<Tier>, startedAt started: Double = monotonicMilliseconds(),
                         log: HostAccessLog? = nil, only probeIds: Set<String>? = nil, start: CollectorStart? = nil,
                         reusing prefetched: Prefetched? = nil, warmingUp: Bool = false) -> SignalReport {
        fingerlyCollectEntry()
        let hasher = warmingUp ? .perRun(freeText: freeText) : identifierHasher()
        let host = warmingUp ? HostFileSystem(root: Self.warmUpRoot) : HostFileSystem(root: options.root, log: log)
        var environment = ProbeEnvironment(host: host, tables: .embedded,
                                           filter: filter, hasher: hasher)
        environment.pinChecks = options.tlsPinChecks
        // Only for this host's own files: the identities of a --root tree say nothing of another tree's, and a tree
        // handed over may be anyone's.
        if !warmingUp, host.isLiveHost, let directory = options.stateDirectory ?? StateDirectory.defaultPathForThisProcess() {
            environment.trustStoreCacheStorage = TrustStoreCacheFile(directory: directory)
        }
        let start = start ?? CollectorStart.observe(environment.host)
        // Under a binary translator every probe runs slower by about as much: without more time the
        // probes that would see it time out first. The budget still ends the run.
        let timeoutScale = start.slowdown?.timeoutScale ?? 1
        var jobs: [ScheduledProbe] = []
        var ignored: [ProbeEntry] = []
        var collector: ProbeCatalogue.Entry?
        // The catalogue decides what runs and in which order the report lists it; each entry
        // finds its probe by id.
        for entry in catalogue.probes {
            guard let probe = probes[entry.id], probeIds?.contains(entry.id) ?? true else { continue }
            // Whatever the tiers, a starved run is evidence; the collector entry is built below.
            if probe.id == CollectorProbe.probeId {
                collector = entry
                continue
            }
            guard tiers.contains(entry.tier), prefetched?.ids.contains(entry.id) != true else { continue }
            let job = ScheduledProbe(probe: probe, tier: entry.tier, timeoutMs: schedule.sourceTimeoutOverrideMs
                ?? Self.scaled(entry.timeoutMs ?? schedule.defaultSourceTimeoutMs, by: timeoutScale, within: schedule.budgetMs),
                startsFirst: entry.startsFirst ?? false)
            if filter.ignores(probe: entry) {
                ignored.append(job.entry(.skipped, durationMs: 0, detail: "ignored by request (attributesToIgnore)"))
            } else {
                jobs.append(job)
            }
        }
        if warmingUp { jobs.append(ScheduledProbe(probe: WarmUpProbe(), tier: .fast, timeoutMs: 250)) }
        let traced = (start.tracerPid ?? 0) > 0
        var entries = Scheduler(budgetMs: schedule.budgetMs, concurrency: schedule.concurrency)
            .run(jobs, in: environment, startedAt: started,
                 slowdown: traced ? .traced : start.slowdown?.isInstrumented == true ? .translated : .none)
        entries += prefetched?.entries ?? []
        if options.frozenClock != nil { entries = entries.map(\.withoutDuration) }
        for entry in entries where entry.status != .ok && entry.status != .skipped && !warmingUp {
            logger?.log(.debug, "probe \(entry.id): \(entry.status.rawValue): \(entry.detail ?? "")")
        }
        let order = Dictionary(catalogue.probes.enumerated().map { ($0.element.id, $0.offset) }, uniquingKeysWith: { first, _ in first })
        let identity = HostIdentity.derive(from: entries.flatMap(\.identityComponents), hasher: hasher)
        let elapsedMs = options.frozenClock == nil ? monotonicMilliseconds() - started : 0
        var unscheduled = ignored
        if let collector {
            if filter.ignores(probe: collector) {
                unscheduled.append(ProbeEntry(id: collector.id, tier: collector.tier, status: .skipped, durationMs: 0,
                                          detail: "ignored by request (attributesToIgnore)", issues: [], signals: [:], identityComponents: []))
            } else {
                let context = ProbeContext(host: environment.host, tables: environment.tables, filter: filter, hasher: hasher)
                start.emit(into: context)
                CollectorRun(entries: entries, budgetMs: schedule.budgetMs, elapsedMs: elapsedMs).emit(into: context)
                unscheduled.append(ProbeEntry(id: collector.id, tier: collector.tier, status: .ok, durationMs: 0, detail: nil,
                                          issues: [], signals: context.signals, identityComponents: []))
            }
        }
        return SignalReport(schemaVersion: SignalReport.currentSchemaVersion, collectorVersion: Fingerly.version,
                            collectedAt: options.frozenClock ?? Date(), tag: tag, root: environment.host.root,
                            tiers: tiers.sorted(), budgetMs: schedule.budgetMs,
                            elapsedMs: elapsedMs.roundedToMicroseconds,
                            probes: (entries + unscheduled).sorted { order[$0.id, default: 0] < order[$1.id, default: 0] },
                            identity: identity, identifierKeying: hasher.keying, freeText: hasher.freeText,
                            prefetchedAgeMs: prefetched.map { (monotonicMilliseconds() - $0.collectedAt).roundedToMicroseconds })
    }
}

extension Fingerly {
    /// A root that holds nothing: every read under it fails as absent.
    static let warmUpRoot = "/proc/self/fdinfo/fingerly-warm-up"

    /// Runs a call's whole path once, against a root that holds nothing and with a key of its own, so
    /// that nothing of the host is read and nothing is kept. Natively this costs little; under a
    /// tracer that stops at every library call (ltrace), the Swift runtime's first use of each type
    /// on that path makes hundreds of calls of its own, about a millisecond each, and a first
    /// identify would spend its whole budget on them before its first probe.
    @discardableResult
    func warmUpCallPath() -> SignalReport {
        // No probe of the catalogue runs before consent; one of its own takes the probe thread's path.
        let report = collectBlocking(tag: nil, tiers: Set(Tier.allCases), only: [], warmingUp: true)
        _ = CollectorStart.tracer(inStatus: "Name:\tfingerly\nTracerPid:\t0\n")
        return report
    }

    /// The warm-up's own probe: it reads and reports nothing.
    struct WarmUpProbe: Probe {
        let id = "warm-up"
        func collect(into context: ProbeContext) throws(ProbeFailure) {}
    }

    static func scaled(_ timeoutMs: Int, by factor: Int, within budgetMs: Int) -> Int {
        guard factor > 1 else { return timeoutMs }
        let (product, overflow) = timeoutMs.multipliedReportingOverflow(by: factor)
        return overflow ? max(timeoutMs, budgetMs) : max(timeoutMs, min(product, budgetMs))
    }
}

extension ProbeEntry {
    /// For a frozen clock: the same entry, as if it took no time.
    var withoutDuration: ProbeEntry {
        ProbeEntry(id: id, tier: tier, status: status, durationMs: 0, detail: detail, issues: issues, signals: signals,
                   identityComponents: identityComponents)
    }
}
