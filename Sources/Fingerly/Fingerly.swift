import FingerlyCatalogue
import FoundationEssentials
import Synchronization
import FingerlyHost
@_exported import FingerlyModel
import FingerlyEngine
import FingerlyPolicy
import FingerlyProbes
import FingerlyTransport

/// The entry point: load once, then `identify` before each sensitive action.
///
/// ```swift
/// let fingerly = try await Fingerly.load(apiKey: nil, schedule: ScheduleOptions(budgetMs: 800))
/// let result = try await fingerly.identify(tag: "checkout:8412", tiers: [.fast], submit: false)
/// if result.verdicts.debugger.value, result.verdicts.debugger.confidence == .high { /* refuse */ }
/// ```
public final class Fingerly: Sendable {
    /// The library's version, as reports carry it.
    public static let version = "0.1.0"

    /// The schedule every call of this instance runs under.
    public let schedule: ScheduleOptions
    package let region: Region
    package let endpoint: String
    package let options: FingerlyOptions
    let apiKey: APIKey?
    /// The key as given, for the Authorization header alone: never logged, never in a preview.
    let apiKeyText: String?
    /// This installation's signing key, loaded or made at the first submission.
    let signingKey = Mutex<DeviceKey?>(nil)
    /// One flush at a time in this process (the outbox's lock keeps other processes out).
    let flushGate = Mutex<Void>(())
    /// The engine of the local mode, opened on first use.
    let localEngineCache = Mutex<IdentityEngine?>(nil)
    /// When the local store was last purged (seconds since the epoch).
    let localPurgedAt = Mutex<Int64>(0)
    /// Whether the caller named an endpoint (then there is no local mode: a server is meant).
    let endpointWasGiven: Bool
    /// The deferred tier collected ahead of time (`FingerlyOptions.prefetch`).
    let prefetched = Mutex<Prefetched?>(nil)
    /// Without an API key, the key is the installation secret, found (or created) on the first
    /// collection, after consent: nothing is written before then.
    private let localHasher = Mutex<IdentifierHasher?>(nil)
    package let filter: AttributeFilter
    /// How personal free text is reported: the caller's choice, else the policy's. Known at
    /// load, so the first collection need not wait for the policy to be parsed.
    let freeText: FreeTextHandling
    var logger: (any FingerlyLogHandler)? { options.logger }
    let consent: Mutex<ConsentState>
    package let probes: [String: any Probe]
    package let catalogue: ProbeCatalogue
    /// The policy, its engine and the probes the integrity verdicts need: built once, on a
    /// thread of their own, so parsing the policy overlaps the first collection.
    private let judgement: Prepared<Judgement>

    struct Judgement: Sendable {
        let policy: Policy
        let engine: VerdictEngine
        let integrityProbeIds: Set<String>
    }

    package var policy: Policy { judgement.value.policy }
    package var engine: VerdictEngine { judgement.value.engine }
    var integrityProbeIds: Set<String> { judgement.value.integrityProbeIds }

    /// Checks the configuration and prepares an instance. Nothing of the host is read here.
    ///
    /// - Parameters:
    ///   - apiKey: `fly_pk_<region>_<environment>_<org>_<random>`. Its organization keys the
    ///     identifier hashes (so rotating keys keeps every identifier) and its region picks the API
    ///     origin. nil for local-only use: identifiers are then keyed by a secret of this
    ///     installation (`FingerlyOptions.stateDirectory`), else by a key of the run.
    ///   - endpoint: an http(s) URL that replaces the region's origin; "" uses the region's.
    ///   - schedule: the time budget and concurrency of every call.
    ///   - consent: the application's consent state; until `.granted`, calls throw `ConsentError`.
    ///   - options: root, attributes to ignore, policy, state directory, logger.
    /// - Throws: `FingerlyError.invalidConfiguration` naming the field that cannot be used.
    public static func load(apiKey: String? = nil, endpoint: String = "", schedule: ScheduleOptions = ScheduleOptions(),
                            consent: ConsentState = .granted,
                            options: FingerlyOptions = FingerlyOptions()) async throws(FingerlyError) -> Fingerly {
        try loadBlocking(apiKey: apiKey, endpoint: endpoint, schedule: schedule, consent: consent, options: options)
    }

    /// `load` for callers outside an async context (the CLI's argument checks, tests).
    package static func loadBlocking(apiKey: String? = nil, endpoint: String = "", schedule: ScheduleOptions = ScheduleOptions(),
                                     consent: ConsentState = .granted, options: FingerlyOptions = FingerlyOptions(),
                                     probes: [String: any Probe] = ProbeRegistry.byId,
                                     catalogue: ProbeCatalogue = .embedded) throws(FingerlyError) -> Fingerly {
        func invalid(_ field: String, _ reason: String) -> FingerlyError { .invalidConfiguration(field: field, reason: reason) }
        guard schedule.budgetMs > 0 else { throw invalid("schedule.budgetMs", "must be positive, got \(schedule.budgetMs)") }
        guard schedule.defaultSourceTimeoutMs > 0 else {
            throw invalid("schedule.defaultSourceTimeoutMs", "must be positive, got \(schedule.defaultSourceTimeoutMs)")
        }
        guard schedule.concurrency > 0 else { throw invalid("schedule.concurrency", "must be at least 1, got \(schedule.concurrency)") }
        if let override = schedule.sourceTimeoutOverrideMs, override <= 0 {
            throw invalid("schedule.sourceTimeoutOverrideMs", "must be positive, got \(override)")
        }
        for (field, value, range) in [("schedule.budgetMs", schedule.budgetMs, ScheduleOptions.budgetRangeMs),
                                      ("schedule.defaultSourceTimeoutMs", schedule.defaultSourceTimeoutMs,
                                       ScheduleOptions.timeoutRangeMs),
                                      ("schedule.sourceTimeoutOverrideMs", schedule.sourceTimeoutOverrideMs ?? 1,
                                       ScheduleOptions.timeoutRangeMs),
                                      ("schedule.concurrency", schedule.concurrency, ScheduleOptions.concurrencyRange)]
        where value > range.upperBound {
            throw invalid(field, "must be at most \(range.upperBound), got \(value)")
        }
        guard !schedule.tiers.isEmpty else { throw invalid("schedule.tiers", "needs at least one tier") }
        var key: APIKey?
        if let apiKey {
            switch APIKey.parse(apiKey) {
            case .success(let parsed): key = parsed
            case .failure(let problem): throw invalid("apiKey", problem.reason)
            }
        }
        // Not quoted back: an endpoint with user information carries a password.
        if !endpoint.isEmpty, let problem = endpointProblem(endpoint) { throw invalid("endpoint", problem) }
        guard options.root.hasPrefix("/") else { throw invalid("options.root", "must be an absolute path, got '\(BoundedText.bounded(options.root, limit: 256))'") }
        if let directory = options.stateDirectory, !directory.hasPrefix("/") {
            throw invalid("options.stateDirectory", "must be an absolute path, got '\(BoundedText.bounded(directory, limit: 256))'")
        }
        // A path reaches the kernel as a C string, which ends at the first NUL: "/fixture\0/etc"
        // would read "/fixture" while the caller meant something else.
        var paths = [("options.root", options.root), ("options.stateDirectory", options.stateDirectory ?? "")]
        if case .file(let path) = options.policy { paths.append(("options.policy", path)) }
        if let (field, _) = paths.first(where: { $0.1.utf8.contains(0) }) { throw invalid(field, "must not contain a NUL character") }
        // Before anything is written there, on every run: the first run must not fill a directory
        // that another user may write (the outbox, the device key) and refuse it only the next.
        if let directory = options.stateDirectory ?? StateDirectory.defaultPathForThisProcess(),
           let problem = FingerlyOptions.untrustedStateDirectory(directory) {
            throw invalid("options.stateDirectory", problem)
        }
        var schedule = schedule
        schedule.budgetMs = min(schedule.budgetMs, ScheduleOptions.longestMs)
        schedule.defaultSourceTimeoutMs = min(schedule.defaultSourceTimeoutMs, ScheduleOptions.longestMs)
        schedule.sourceTimeoutOverrideMs = schedule.sourceTimeoutOverrideMs.map { min($0, ScheduleOptions.longestMs) }
        let filter = AttributeFilter(ignored: options.attributesToIgnore)
        let unknown = filter.unknownAttributes(in: catalogue)
        guard unknown.isEmpty else {
            throw invalid("options.attributesToIgnore",
                          "unknown attribute(s) to ignore: \(unknown.map { BoundedText.bounded($0, limit: 128) }.joined(separator: ", ")); `fingerly-identify probes` lists them")
        }
        // A policy named by the caller is read and checked now, so a bad one fails here and not
        // in the middle of a sensitive action; the embedded one is parsed on a thread of its own.
        let given: Policy?
        do {
            switch options.policy {
            case .embedded: given = nil
            case .file(let path): given = try Policy.load(contentsOf: path)
            case .document(let bytes, let name): given = try PolicyLoader(vocabulary: .embedded).load(bytes, source: name)
            }
        } catch {
            throw invalid("options.policy", "invalid policy: \(error)")
        }
        // Decode the embedded tables now, so no identify call pays for it inside its budget.
        _ = DetectionTables.embedded
        let submission = options.submission
        guard (1...10).contains(submission.attempts) else { throw invalid("options.submission.attempts", "must be 1 to 10, got \(submission.attempts)") }
        let longestDeadlineMs = SubmissionOptions.deadlineRangeMs.upperBound
        guard submission.deadlineMs <= longestDeadlineMs else {
            throw invalid("options.submission.deadlineMs", "must be at most \(longestDeadlineMs), got \(submission.deadlineMs)")
        }
        for (field, value) in [("baseDelayMs", submission.baseDelayMs), ("maxDelayMs", submission.maxDelayMs),
                               ("retryAfterCapMs", submission.retryAfterCapMs), ("rateLimitPauseMs", submission.rateLimitPauseMs)] {
            guard (0...ScheduleOptions.longestMs).contains(value) else { throw invalid("options.submission.\(field)", "must be 0 to a day, got \(value)") }
        }
        for (field, value) in [("deadlineMs", submission.deadlineMs), ("attemptTimeoutMs", submission.attemptTimeoutMs),
                               ("outboxItems", submission.outboxItems), ("outboxBytes", submission.outboxBytes),
                               ("outboxMaxAgeSeconds", submission.outboxMaxAgeSeconds)] {
            guard value > 0 else { throw invalid("options.submission.\(field)", "must be positive, got \(value)") }
        }
        // The server keeps an idempotency key for 24 h: a report queued longer could be counted twice.
        guard submission.outboxMaxAgeSeconds < 24 * 3600 else {
            throw invalid("options.submission.outboxMaxAgeSeconds", "must stay below the server's 24 h key lifetime, got \(submission.outboxMaxAgeSeconds)")
        }
        if !submission.pins.isEmpty, let problem = TLSPinCheck.pinsProblem(TLSPinCheck.bare(submission.pins)) { throw invalid("options.submission.pins", problem) }
        if let file = submission.caFile, file.isEmpty { throw invalid("options.submission.caFile", "names no file") }
        guard options.prefetchMaxAgeMs > 0 else { throw invalid("options.prefetchMaxAgeMs", "must be positive, got \(options.prefetchMaxAgeMs)") }
        let instance = Fingerly(apiKey: key, apiKeyText: apiKey, endpoint: endpoint, schedule: schedule, consent: consent, options: options,
                                policy: given, filter: filter, probes: probes, catalogue: catalogue)
        instance.warmUpCallPath()
        instance.startBackgroundWork()
        return instance
    }

    private init(apiKey: APIKey?, apiKeyText: String?, endpoint: String, schedule: ScheduleOptions, consent: ConsentState, options: FingerlyOptions,
                 policy given: Policy?, filter: AttributeFilter, probes: [String: any Probe], catalogue: ProbeCatalogue) {
        self.probes = probes
        self.catalogue = catalogue
        region = apiKey?.region ?? .us
        // "" uses the region's origin; a non-empty endpoint (a self-hosted server, a proxy) replaces it.
        self.endpoint = endpoint.isEmpty ? region.origin : endpoint
        endpointWasGiven = !endpoint.isEmpty
        self.schedule = schedule
        self.options = options
        self.apiKey = apiKey
        self.apiKeyText = apiKey == nil ? nil : apiKeyText
        self.filter = filter
        self.consent = Mutex(consent)
        freeText = options.freeText ?? given?.freeText ?? Policy.embeddedFreeText
        judgement = Prepared {
            let policy = given ?? Policy.embedded()
            let engine = VerdictEngine(policy: policy, catalogue: catalogue)
            let integrity = Set(IntegrityResult.verdictNames.flatMap { policy.signals(of: $0) }.compactMap { engine.owners[$0] })
            return Judgement(policy: policy, engine: engine, integrityProbeIds: integrity)
        }
    }

    /// Changes the consent state for every later call and, when `FingerlyOptions.stateDirectory`
    /// is set, persists it there. Denying deletes every queued report; granting sends them in the
    /// background (with an API key) and starts the prefetch when it is enabled.
    public func setConsent(_ consent: ConsentState) {
        do {
            _ = try applyConsent(consent, flushInBackground: true)
        } catch {
            logger?.log(.error, "consent \(consent.rawValue) applied to this instance but not persisted: \(error)")
        }
    }

    /// The consent state calls run under now.
    public var consentState: ConsentState { consent.withLock { $0 } }

    /// Runs the probes of the selected tiers and returns the report, without verdicts.
    /// - Parameters:
    ///   - tag: the caller's label for this request, carried in the report.
    ///   - tiers: nil for the schedule's tiers.
    /// - Throws: `ConsentError` while consent is not granted; nothing is read then.
    public func collect(tag: String? = nil, tiers: Set<Tier>? = nil) async throws(ConsentError) -> SignalReport {
        try await run(tag: tag, tiers: tiers ?? schedule.tiers, only: nil)
    }

    /// Collects, judges the report with the policy and submits it: the server's answer comes
    /// back as `state: .enriched` with the visitor.
    /// - Parameters:
    ///   - tag: the caller's label for this request, carried in the report.
    ///   - tiers: nil for the schedule's tiers.
    ///   - submit: false to judge here and send nothing (`state` is then `collected`, and
    ///     `request` shows what a submission would send).
    /// - Throws: `ConsentError` while consent is not granted (nothing is read or sent);
    ///   `FingerlyError.invalidConfiguration` (`apiKey`) when submitting without a key;
    ///   `TransportError` when the report was not delivered: `retryable` when it is queued for
    ///   `flush()`. With `SubmissionOptions.localResultOnFailure`, a failure returns the local
    ///   result (`state: .unavailable`) instead.
    public func identify(tag: String? = nil, tiers: Set<Tier>? = nil, submit: Bool = true) async throws -> IdentifyResult {
        guard submit else {
            return judgedWithoutSubmitting(try await collectReusingPrefetch(tag: tag, tiers: tiers ?? schedule.tiers))
        }
        let (result, failure) = try await identifyReportingFailure(tag: tag, tiers: tiers)
        if let failure, !options.submission.localResultOnFailure { throw failure }
        return result
    }

    /// `identify(submit: false)` on the calling thread, for the CLI: a command that never enters
    /// Swift concurrency starts none of its threads, which cost a dry run a millisecond.
    package func identifyWithoutSubmittingBlocking(tag: String? = nil, tiers: Set<Tier>? = nil) throws(ConsentError)
        -> IdentifyResult {
        judgedWithoutSubmitting(try collectReusingPrefetchBlocking(tag: tag, tiers: tiers ?? schedule.tiers))
    }

    private func judgedWithoutSubmitting(_ report: SignalReport) -> IdentifyResult {
        IdentifyResult.judgedHere(state: .collected, report: report, verdicts: Verdicts(engine.evaluate(report)),
                                  policy: policy, request: try? prepareSubmission(report).preview)
    }

    /// `identify(submit: true)` that hands back the failure beside the local result, for the CLI
    /// (which prints the verdicts and then exits with the failure's status).
    package func identifyReportingFailure(tag: String? = nil, tiers: Set<Tier>? = nil) async throws -> (IdentifyResult, TransportError?) {
        try requireSubmittable()
        let report = try await collectReusingPrefetch(tag: tag, tiers: tiers ?? schedule.tiers)
        return try await offCooperativePool { Result { try self.resolveOrSubmitBlocking(report) } }.get()
    }

    /// `identifyReportingFailure` on the calling thread, for the CLI.
    package func identifyReportingFailureBlocking(tag: String? = nil, tiers: Set<Tier>? = nil) throws
        -> (IdentifyResult, TransportError?) {
        try requireSubmittable()
        return try resolveOrSubmitBlocking(try collectReusingPrefetchBlocking(tag: tag, tiers: tiers ?? schedule.tiers))
    }

    private func requireSubmittable() throws {
        // Consent speaks first: a caller whose user has not agreed learns that, not a detail of transport.
        try requireConsent()
        guard apiKey != nil || resolvesLocally else {
            throw FingerlyError.invalidConfiguration(field: "apiKey", reason: "submitting to an endpoint needs an API key; pass one to load, or identify with submit: false")
        }
    }

    private func resolveOrSubmitBlocking(_ report: SignalReport) throws(FingerlyError) -> (IdentifyResult, TransportError?) {
        let verdicts = Verdicts(engine.evaluate(report))
        if resolvesLocally { return (try resolveLocallyBlocking(report, verdicts: verdicts).get(), nil) }
        return submitBlocking(report, verdicts: verdicts)
    }

    /// Runs only the probes that the debugger, tampering, instrumentation and automation rules
    /// read, and judges them. The fast tier (the default) is cheap enough to call again and
    /// again in one process; add `.deferred` for the in-memory-versus-disk code comparison and
    /// the scans of other processes.
    /// - Throws: `ConsentError` while consent is not granted; nothing is read then.
    public func checkIntegrity(tiers: Set<Tier> = [.fast]) async throws(ConsentError) -> IntegrityResult {
        let report = try await run(tag: nil, tiers: tiers, only: integrityProbeIds)
        return IntegrityResult(verdicts: Verdicts(engine.evaluate(report)), report: report)
    }

    func requireConsent() throws(ConsentError) {
        let consent = consentState
        guard consent == .granted else { throw ConsentError(state: consent) }
        // An administrator's refusal for the host binds every application on it; a record that
        // cannot be trusted counts as one.
        switch Self.systemConsent() {
        case .success(nil), .success(.granted?): break
        case .success(let state?): throw ConsentError(state: state)
        case .failure: throw ConsentError(state: .denied)
        }
    }

    /// The one path of every call: consent first, then the collection on a thread of its own.
    func run(tag: String?, tiers: Set<Tier>, only probeIds: Set<String>?, reusing prefetched: Prefetched? = nil) async throws(ConsentError) -> SignalReport {
        let (requestedAt, start) = try beginRun()
        return await withCheckedContinuation { continuation in
            // The coordinator blocks on a semaphore; keep it off the cooperative pool. Its thread
            // is a kept one, as a probe's is: starting one cost more than many a probe takes.
            let collect: @Sendable () -> Void = {
                continuation.resume(returning: self.collectBlocking(tag: tag, tiers: tiers, startedAt: requestedAt,
                                                                    log: self.options.accessLog, only: probeIds, start: start,
                                                                    reusing: prefetched))
            }
            if !ProbeThreads.shared.start(collect) { collect() }
        }
    }

    /// `run` with the coordinator on the calling thread.
    func runBlocking(tag: String?, tiers: Set<Tier>, only probeIds: Set<String>?, reusing prefetched: Prefetched? = nil)
        throws(ConsentError) -> SignalReport {
        let (requestedAt, start) = try beginRun()
        return collectBlocking(tag: tag, tiers: tiers, startedAt: requestedAt, log: options.accessLog, only: probeIds,
                               start: start, reusing: prefetched)
    }

    private func beginRun() throws(ConsentError) -> (requestedAt: Double, start: CollectorStart) {
        try requireConsent()
        // The budget counts from the caller's request, not from when the scheduler got going.
        let requestedAt = monotonicMilliseconds()
        // Before any thread starts: a tracer that then stalls every probe is still named.
        return (requestedAt, CollectorStart.observe(HostFileSystem(root: options.root, log: options.accessLog)))
    }

    /// The hasher of this instance's runs: the API key's, else the installation secret's, else
    /// one per-run key for the life of this instance.
    func identifierHasher() -> IdentifierHasher {
        if let apiKey { return IdentifierHasher(organization: apiKey.organization, freeText: freeText) }
        return localHasher.withLock { cached in
            if let cached { return cached }
            let made: IdentifierHasher
            switch options.stateDirectory ?? StateDirectory.defaultPathForThisProcess() {
            case nil:
                logger?.log(.info, "no state directory can be named; identifiers are keyed per run")
                made = .perRun(freeText: freeText)
            case let directory?:
                switch InstallationSecret.loadOrCreate(in: directory) {
                case .secret(let secret):
                    made = IdentifierHasher(secret: secret, keying: .installationSecret, freeText: freeText)
                case .unavailable(let why):
                    logger?.log(.warning, "installation secret unavailable (\(why)); identifiers are keyed per run")
                    made = .perRun(freeText: freeText)
                }
            }
            cached = made
            return made
        }
    }
}
