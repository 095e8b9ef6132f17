import FoundationEssentials
import FingerlyHost
import FingerlyModel
import FingerlyProbes

/// How the scheduler spends its time.
public struct ScheduleOptions: Sendable, Hashable {
    /// Hard wall-clock bound for a whole collection, in milliseconds.
    public var budgetMs: Int
    /// Probes running at once.
    public var concurrency: Int
    /// Timeout for a probe whose catalogue entry names none, in milliseconds.
    public var defaultSourceTimeoutMs: Int
    /// The tiers `identify` and `collect` run when the call names none.
    public var tiers: Set<Tier>
    /// When set, every probe gets this timeout instead of its catalogue entry's: for slow or
    /// instrumented hosts (valgrind, emulation) where the catalogue's figures are too tight.
    public var sourceTimeoutOverrideMs: Int?

    /// Budgets and timeouts above a day are clamped to it: nobody waits that long, and the
    /// scheduler's deadline arithmetic stays far from overflow.
    static let longestMs = 86_400_000
    /// What `load` accepts, in every binding and in `fingerly-identify`'s flags alike: a caller
    /// before a sensitive action waits minutes at most, and more probes at once than this only
    /// contend for the same few files.
    package static let budgetRangeMs = 1...600_000
    package static let timeoutRangeMs = 1...600_000
    package static let concurrencyRange = 1...64

    /// Probes running at once unless the caller says otherwise: one more than the CPUs this process may run on
    /// (a probe waiting on a child or a socket leaves the others theirs), from 2 to 4. More threads than that
    /// only take turns on the CPUs, and every turn costs: on two CPUs, four took a sixth longer than three.
    public static let defaultConcurrency = min(4, max(2, usableProcessorCount() + 1))

    /// - Parameters:
    ///   - budgetMs: the whole collection's wall-clock bound.
    ///   - defaultSourceTimeoutMs: the timeout of a probe whose catalogue entry names none.
    ///   - concurrency: probes running at once (`defaultConcurrency` unless given).
    ///   - tiers: the tiers run when a call names none.
    ///   - sourceTimeoutOverrideMs: one timeout for every probe, for slow hosts.
    public init(budgetMs: Int = 1200, defaultSourceTimeoutMs: Int = 250, concurrency: Int = defaultConcurrency,
                tiers: Set<Tier> = Set(Tier.allCases), sourceTimeoutOverrideMs: Int? = nil) {
        self.budgetMs = budgetMs
        self.concurrency = concurrency
        self.defaultSourceTimeoutMs = defaultSourceTimeoutMs
        self.tiers = tiers
        self.sourceTimeoutOverrideMs = sourceTimeoutOverrideMs
    }
}

/// Where the verdict rules come from.
public enum PolicySource: Sendable, Hashable {
    /// `policies/default.json`, compiled into the library.
    case embedded
    /// A policy file, read and validated when the instance loads.
    case file(path: String)
    /// A policy document already in memory; `name` is how errors refer to it.
    case document(bytes: [UInt8], name: String)
}

/// How reports are sent: attempts, pauses, the overall deadline, trust in the API origin, and
/// what becomes of a report no attempt delivered.
public struct SubmissionOptions: Sendable, Hashable {
    /// Attempts in all, the first included (1–10).
    public var attempts: Int
    /// The first backoff pause's upper bound; each later one doubles it (full jitter: the pause
    /// is a random share of it).
    public var baseDelayMs: Int
    /// No backoff pause is longer.
    public var maxDelayMs: Int
    /// No attempt starts, and none runs, past this many milliseconds after the first began.
    public var deadlineMs: Int
    /// One attempt's own timeout, cut to what is left of the deadline.
    public var attemptTimeoutMs: Int
    /// A server's `Retry-After` is obeyed up to this long.
    public var retryAfterCapMs: Int
    /// The pause after a 429 without `Retry-After`.
    public var rateLimitPauseMs: Int
    /// A PEM file of CA certificates to trust instead of the system's, for a self-hosted server.
    public var caFile: String?
    /// SPKI SHA-256 pins (base64, optionally `sha256/`-prefixed) of the API origin's own (leaf)
    /// key, which is the only one libcurl compares; empty:
    /// no pinning. A mismatch is never retried and is mitm evidence.
    public var pins: [String]
    /// On a failure, return the locally judged result (`state: .unavailable`, no visitor)
    /// instead of throwing the `TransportError`; a retryable failure is still queued.
    public var localResultOnFailure: Bool
    /// The outbox keeps at most this many reports; the oldest is evicted first.
    public var outboxItems: Int
    /// The outbox's reports together stay under this many bytes.
    public var outboxBytes: Int
    /// A queued report older than this is dropped: it must stay below the server's 24 h
    /// idempotency-key lifetime, or a late resend could be counted twice.
    public var outboxMaxAgeSeconds: Int

    /// The longest overall deadline `load` accepts, as `--deadline-ms` does.
    package static let deadlineRangeMs = 1...600_000

    /// - Parameters: see the properties; the defaults are the reference SDK's figures.
    public init(attempts: Int = 3, baseDelayMs: Int = 500, maxDelayMs: Int = 8_000, deadlineMs: Int = 20_000,
                attemptTimeoutMs: Int = 10_000, retryAfterCapMs: Int = 10_000, rateLimitPauseMs: Int = 1_000,
                caFile: String? = nil, pins: [String] = [], localResultOnFailure: Bool = false,
                outboxItems: Int = 50, outboxBytes: Int = 8 * 1024 * 1024, outboxMaxAgeSeconds: Int = 23 * 3600) {
        self.attempts = attempts
        self.baseDelayMs = baseDelayMs
        self.maxDelayMs = maxDelayMs
        self.deadlineMs = deadlineMs
        self.attemptTimeoutMs = attemptTimeoutMs
        self.retryAfterCapMs = retryAfterCapMs
        self.rateLimitPauseMs = rateLimitPauseMs
        self.caFile = caFile
        self.pins = pins
        self.localResultOnFailure = localResultOnFailure
        self.outboxItems = outboxItems
        self.outboxBytes = outboxBytes
        self.outboxMaxAgeSeconds = outboxMaxAgeSeconds
    }
}

/// What to collect and how to judge it, beside the key and the schedule.
public struct FingerlyOptions: Sendable {
    /// Root prefix for every host read: "/" for this host, or a fixture, container root or image.
    public var root: String
    /// Signal names, `prefix.*` patterns or probe ids that are neither read nor reported.
    public var attributesToIgnore: Set<String>
    /// The verdict rules.
    public var policy: PolicySource
    /// The collector's own state directory on the real host (never under `root`), where the
    /// secret that keys identifiers without an API key is kept. nil: `$STATE_DIRECTORY`, else
    /// /var/lib/fingerly for root, else `$XDG_STATE_HOME/fingerly` or ~/.local/state/fingerly.
    /// When it cannot be used, identifiers are keyed per run.
    public var stateDirectory: String?
    /// What becomes of free text that can name a person. nil: the policy's `privacy.freeText`.
    public var freeText: FreeTextHandling?
    /// Where the library's diagnostics go; nothing is logged when nil.
    public var logger: (any FingerlyLogHandler)?
    /// How reports are sent and kept until delivered.
    public var submission: SubmissionOptions
    /// Start the deferred tier in the background once consent is granted, so a later `identify`
    /// can reuse it.
    public var prefetch: Bool
    /// A prefetched deferred tier older than this is collected again.
    public var prefetchMaxAgeMs: Int
    /// TLS endpoints to connect to and check against expected pins (deferred tier, opt-in; the
    /// CLI's `--check-tls`).
    package var tlsPinChecks: [TLSPinCheck] = []
    /// Tests only: fixes the report's clock (collectedAt, every duration 0) and the
    /// idempotency key, so two runs over one fixture give the same bytes.
    package var frozenClock: Date?
    package var fixedIdempotencyKey: String?
    /// Send queued reports in the background when the instance loads and when consent is
    /// granted. The CLI turns it off: a process about to exit flushes in the foreground.
    package var flushInBackground = true
    /// Tests only: records every host path the collection reads, so a test can prove none was.
    package var accessLog: HostAccessLog?
    /// Tests only: the environment the proxy is chosen from, instead of this process's.
    package var proxyEnvironment: [String: String]?

    /// - Parameters:
    ///   - root: the root prefix of every host read; "/" for this host.
    ///   - attributesToIgnore: signals, `prefix.*` patterns or probe ids neither read nor reported.
    ///   - policy: where the verdict rules come from.
    ///   - stateDirectory: the collector's own state directory; nil for the default.
    ///   - freeText: how personal free text is reported; nil for the policy's choice.
    ///   - logger: where diagnostics go.
    ///   - submission: attempts, pauses, trust in the API origin, the outbox's caps.
    ///   - prefetch: collect the deferred tier in the background once consent is granted.
    ///   - prefetchMaxAgeMs: how old a prefetched deferred tier may be and still be reused.
    public init(root: String = "/", attributesToIgnore: Set<String> = [], policy: PolicySource = .embedded,
                stateDirectory: String? = nil, freeText: FreeTextHandling? = nil, logger: (any FingerlyLogHandler)? = nil,
                submission: SubmissionOptions = SubmissionOptions(), prefetch: Bool = false, prefetchMaxAgeMs: Int = 60_000) {
        self.root = root
        self.attributesToIgnore = attributesToIgnore
        self.policy = policy
        self.stateDirectory = stateDirectory
        self.freeText = freeText
        self.logger = logger
        self.submission = submission
        self.prefetch = prefetch
        self.prefetchMaxAgeMs = prefetchMaxAgeMs
    }
}
