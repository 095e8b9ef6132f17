import FoundationEssentials
import Synchronization

/// How the scheduler spends its time.
public struct ScheduleOptions: Sendable, Hashable {
    /// Hard wall-clock bound for a whole collection, in milliseconds.
    public var budgetMs: Int
    /// Timeout for a probe whose catalogue entry names none.
    public var defaultSourceTimeoutMs: Int
    /// Probes running at once.
    public var concurrency: Int
    public var tiers: Set<Tier>
    /// When set, every probe gets this timeout instead of its catalogue entry's: for slow or
    /// instrumented hosts (valgrind, emulation) where the catalogue's figures are too tight.
    public var sourceTimeoutOverrideMs: Int?

    /// Budgets and timeouts above a day are clamped to it: nobody waits that long, and the
    /// scheduler's deadline arithmetic stays far from overflow.
    static let longestMs = 86_400_000

    public init(budgetMs: Int = 1200, defaultSourceTimeoutMs: Int = 250, concurrency: Int = 4,
                tiers: Set<Tier> = Set(Tier.allCases), sourceTimeoutOverrideMs: Int? = nil) {
        self.budgetMs = budgetMs
        self.defaultSourceTimeoutMs = defaultSourceTimeoutMs
        self.concurrency = concurrency
        self.tiers = tiers
        self.sourceTimeoutOverrideMs = sourceTimeoutOverrideMs
    }
}

/// What to collect and how to judge it.
public struct CollectionOptions: Sendable {
    /// Root prefix for every host read: "/" for this host, or a fixture, container root or image.
    public var root: String
    /// Signal names, `prefix.*` patterns or probe ids that are neither read nor reported.
    public var attributesToIgnore: Set<String>
    /// Verdict rules; the embedded default when nil.
    public var policy: Policy?
    /// TLS endpoints to connect to and check against expected pins (deferred tier, opt-in).
    public var tlsPinChecks: [TLSPinCheck]
    /// The collector's own state directory on the real host (never under `root`), where the
    /// secret that keys identifiers without an API key is kept. nil: `$STATE_DIRECTORY`, else
    /// /var/lib/fingerly for root, else `$XDG_STATE_HOME/fingerly` or ~/.local/state/fingerly.
    /// When it cannot be used, identifiers are keyed per run.
    public var stateDirectory: String?
    /// What becomes of free text that can name a person. nil: the policy's `privacy.freeText`,
    /// `fingerprint` where it says nothing.
    public var freeText: FreeTextHandling?
    var effectiveFreeText: FreeTextHandling { freeText ?? policy?.freeText ?? .fingerprint }

    public init(root: String = "/", attributesToIgnore: Set<String> = [], policy: Policy? = nil, tlsPinChecks: [TLSPinCheck] = [],
                stateDirectory: String? = nil, freeText: FreeTextHandling? = nil) {
        self.root = root
        self.attributesToIgnore = attributesToIgnore
        self.policy = policy
        self.tlsPinChecks = tlsPinChecks
        self.stateDirectory = stateDirectory
        self.freeText = freeText
    }
}

/// Whether the user agreed to collection. Until it is `.granted`, nothing is read or sent.
public enum Consent: String, Sendable, Codable, Hashable {
    case granted, denied, unknown
}

public struct ConsentError: Error, Sendable, CustomStringConvertible {
    public let consent: Consent
    public var description: String { "consent is \(consent.rawValue): nothing is read or sent until it is granted" }
}

/// A failed submission. `retryable` is true for network errors, 429 and 5xx.
public struct TransportError: Error, Sendable, CustomStringConvertible {
    public let message: String
    public let status: Int?
    public let retryable: Bool

    public init(_ message: String, status: Int?, retryable: Bool) {
        self.message = message
        self.status = status
        self.retryable = retryable
    }

    public var description: String { status.map { "HTTP \($0): \(message)" } ?? message }
}

public enum FingerlyError: Error, Sendable, Equatable, CustomStringConvertible {
    case invalidConfiguration(String)
    /// This build cannot submit reports yet; use `submit: false`.
    case submissionUnavailable

    public var description: String {
        switch self {
        case .invalidConfiguration(let message): return message
        case .submissionUnavailable: return "submission is not implemented in this version; collect locally with submit: false (CLI: --no-submit)"
        }
    }
}

/// The service region, decided by the API key's prefix (`eu_…`, `ap_…`; anything else is `us`).
public enum Region: String, Sendable, Codable {
    case us, eu, ap

    public init(apiKey: String?) {
        let prefix = apiKey?.split(whereSeparator: { $0 == "_" || $0 == "-" }).first.map { $0.lowercased() }
        self = prefix.flatMap(Region.init(rawValue:)) ?? .us
    }
}

/// The entry point: load once with your key, then `identify` before each sensitive action.
public final class Fingerly: Sendable {
    public let region: Region
    public let endpoint: String?
    public let schedule: ScheduleOptions
    let options: CollectionOptions
    private let apiKey: String?
    /// Without an API key, the key is the installation secret, found (or created) on the first
    /// collection, after consent: nothing is written before then.
    private let localHasher = Mutex<IdentifierHasher?>(nil)
    let filter: AttributeFilter
    let logger: (any FingerlyLogHandler)?
    private let consent: Mutex<Consent>
    let probes: [any Probe]
    let catalogue: ProbeCatalogue
    /// The policy, its engine and the probes the integrity verdicts need: built once, on a
    /// thread of their own, so parsing the policy overlaps the first collection.
    private let judgement: Prepared<Judgement>

    struct Judgement: Sendable {
        let policy: Policy
        let engine: VerdictEngine
        let integrityProbeIds: Set<String>
    }

    var policy: Policy { judgement.value.policy }
    var engine: VerdictEngine { judgement.value.engine }
    var integrityProbeIds: Set<String> { judgement.value.integrityProbeIds }

    /// - Parameters:
    ///   - apiKey: keys the identifier hashes and, by its prefix, picks the region. May be nil
    ///     for local-only collection: identifiers are then keyed by a secret of this
    ///     installation (`CollectionOptions.stateDirectory`), else by a key of the run.
    ///   - endpoint: overrides the region's endpoint.
    public static func load(apiKey: String?, endpoint: String? = nil, schedule: ScheduleOptions = ScheduleOptions(),
                            consent: Consent = .unknown, options: CollectionOptions = CollectionOptions(),
                            logger: (any FingerlyLogHandler)? = nil) throws(FingerlyError) -> Fingerly {
        IdentifierHasher.warmUp()
        guard schedule.budgetMs > 0 else { throw .invalidConfiguration("budgetMs must be positive, got \(schedule.budgetMs)") }
        guard schedule.defaultSourceTimeoutMs > 0 else {
            throw .invalidConfiguration("defaultSourceTimeoutMs must be positive, got \(schedule.defaultSourceTimeoutMs)")
        }
        guard schedule.concurrency > 0 else { throw .invalidConfiguration("concurrency must be at least 1, got \(schedule.concurrency)") }
        if let override = schedule.sourceTimeoutOverrideMs, override <= 0 {
            throw .invalidConfiguration("sourceTimeoutOverrideMs must be positive, got \(override)")
        }
        var schedule = schedule
        schedule.budgetMs = min(schedule.budgetMs, ScheduleOptions.longestMs)
        schedule.defaultSourceTimeoutMs = min(schedule.defaultSourceTimeoutMs, ScheduleOptions.longestMs)
        schedule.sourceTimeoutOverrideMs = schedule.sourceTimeoutOverrideMs.map { min($0, ScheduleOptions.longestMs) }
        let filter = AttributeFilter(ignored: options.attributesToIgnore)
        let unknown = filter.unknownAttributes(in: .embedded)
        guard unknown.isEmpty else {
            throw .invalidConfiguration("unknown attribute(s) to ignore: \(unknown.joined(separator: ", ")); `fingerly-identify probes` lists them")
        }
        // Decode the embedded tables now, so no identify call pays for it inside its budget.
        _ = DetectionTables.embedded
        return Fingerly(apiKey: apiKey, endpoint: endpoint, schedule: schedule, consent: consent, options: options,
                        filter: filter, logger: logger)
    }

    init(apiKey: String?, endpoint: String?, schedule: ScheduleOptions, consent: Consent, options: CollectionOptions,
         filter: AttributeFilter, logger: (any FingerlyLogHandler)?,
         probes: [any Probe] = ProbeRegistry.builtIn, catalogue: ProbeCatalogue = .embedded) {
        self.probes = probes
        self.catalogue = catalogue
        region = Region(apiKey: apiKey)
        self.endpoint = endpoint
        self.schedule = schedule
        self.options = options
        self.apiKey = apiKey
        self.filter = filter
        self.logger = logger
        self.consent = Mutex(consent)
        let given = options.policy
        judgement = Prepared {
            let policy = given ?? Policy.embedded()
            let engine = VerdictEngine(policy: policy, catalogue: catalogue)
            let integrity = Set(IntegrityResult.verdictNames.flatMap { policy.signals(of: $0) }.compactMap { engine.owners[$0] })
            return Judgement(policy: policy, engine: engine, integrityProbeIds: integrity)
        }
    }

    public func setConsent(_ consent: Consent) {
        self.consent.withLock { $0 = consent }
    }

    public var currentConsent: Consent { consent.withLock { $0 } }

    /// Runs the probes of the selected tiers and returns the report, without verdicts.
    public func collect(tag: String? = nil, tiers: Set<Tier>? = nil) async throws(ConsentError) -> SignalReport {
        let consent = currentConsent
        guard consent == .granted else { throw ConsentError(consent: consent) }
        let selected = tiers ?? schedule.tiers
        // The budget counts from the caller's request, not from when the scheduler got going.
        let requestedAt = monotonicMilliseconds()
        // Before any thread starts: a tracer that then stalls every probe is still named.
        let start = CollectorStart.observe(HostFileSystem(root: options.root))
        return await withCheckedContinuation { continuation in
            // The coordinator blocks on a semaphore; keep it off the cooperative pool.
            let started = startDetachedThread {
                continuation.resume(returning: self.collectBlocking(tag: tag, tiers: selected, startedAt: requestedAt, start: start))
            }
            if !started { continuation.resume(returning: self.collectBlocking(tag: tag, tiers: selected, startedAt: requestedAt, start: start)) }
        }
    }

    /// Collects, applies the policy, and (one day) submits.
    public func identify(tag: String? = nil, tiers: Set<Tier>? = nil, submit: Bool = true) async throws -> IdentifyResult {
        if submit { throw FingerlyError.submissionUnavailable }
        let report = try await collect(tag: tag, tiers: tiers)
        return IdentifyResult.local(report: report, verdicts: engine.evaluate(report),
                                    policy: policy)
    }

    /// The hasher of this instance's runs: the API key's, else the installation secret's, else
    /// one per-run key for the life of this instance.
    func identifierHasher() -> IdentifierHasher {
        if let apiKey { return IdentifierHasher(apiKey: apiKey, freeText: options.effectiveFreeText) }
        return localHasher.withLock { cached in
            if let cached { return cached }
            let made: IdentifierHasher
            switch options.stateDirectory ?? StateDirectory.defaultPathForThisProcess() {
            case nil:
                logger?.log(.info, "no state directory can be named; identifiers are keyed per run")
                made = .perRun(freeText: options.effectiveFreeText)
            case let directory?:
                switch InstallationSecret.loadOrCreate(in: directory) {
                case .secret(let secret):
                    made = IdentifierHasher(secret: secret, keying: .installationSecret, freeText: options.effectiveFreeText)
                case .unavailable(let why):
                    logger?.log(.warning, "installation secret unavailable (\(why)); identifiers are keyed per run")
                    made = .perRun(freeText: options.effectiveFreeText)
                }
            }
            cached = made
            return made
        }
    }

    func collectBlocking(tag: String?, tiers: Set<Tier>, startedAt started: Double = monotonicMilliseconds(),
                         log: HostAccessLog? = nil, only probeIds: Set<String>? = nil, start: CollectorStart? = nil) -> SignalReport {
        fingerlyCollectEntry()
        let hasher = identifierHasher()
        var environment = ProbeEnvironment(host: HostFileSystem(root: options.root, log: log), tables: .embedded,
                                           filter: filter, hasher: hasher)
        environment.pinChecks = options.tlsPinChecks
        let start = start ?? CollectorStart.observe(environment.host)
        var jobs: [ScheduledProbe] = []
        var ignored: [ProbeEntry] = []
        var collector: ProbeCatalogue.Entry?
        for probe in probes {
            guard let entry = catalogue.entry(probe.id), probeIds?.contains(probe.id) ?? true else { continue }
            // Whatever the tiers, a starved run is evidence; the collector entry is built below.
            if probe.id == CollectorProbe.probeId {
                collector = entry
                continue
            }
            guard tiers.contains(entry.tier) else { continue }
            let job = ScheduledProbe(probe: probe, tier: entry.tier,
                                     timeoutMs: schedule.sourceTimeoutOverrideMs ?? entry.timeoutMs ?? schedule.defaultSourceTimeoutMs)
            if filter.ignores(probe: entry) {
                ignored.append(job.entry(.skipped, durationMs: 0, detail: "ignored by request (attributesToIgnore)"))
            } else {
                jobs.append(job)
            }
        }
        let entries = Scheduler(budgetMs: schedule.budgetMs, concurrency: schedule.concurrency).run(jobs, in: environment, startedAt: started)
        for entry in entries where entry.status != .ok && entry.status != .skipped {
            logger?.log(.debug, "probe \(entry.id): \(entry.status.rawValue): \(entry.detail ?? "")")
        }
        let order = Dictionary(uniqueKeysWithValues: probes.enumerated().map { ($0.element.id, $0.offset) })
        let identity = HostIdentity.derive(from: entries.flatMap(\.identityComponents), hasher: hasher)
        let elapsedMs = monotonicMilliseconds() - started
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
                            collectedAt: Date(), tag: tag, root: environment.host.root,
                            tiers: tiers.sorted(), budgetMs: schedule.budgetMs,
                            elapsedMs: elapsedMs.roundedToMicroseconds,
                            probes: (entries + unscheduled).sorted { order[$0.id, default: 0] < order[$1.id, default: 0] },
                            identity: identity, identifierKeying: hasher.keying, freeText: hasher.freeText)
    }

    public static let version = "0.1.0"
}
