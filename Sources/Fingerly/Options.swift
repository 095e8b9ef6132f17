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

    /// - Parameters:
    ///   - budgetMs: the whole collection's wall-clock bound.
    ///   - defaultSourceTimeoutMs: the timeout of a probe whose catalogue entry names none.
    ///   - concurrency: probes running at once.
    ///   - tiers: the tiers run when a call names none.
    ///   - sourceTimeoutOverrideMs: one timeout for every probe, for slow hosts.
    public init(budgetMs: Int = 1200, defaultSourceTimeoutMs: Int = 250, concurrency: Int = 4,
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
    /// TLS endpoints to connect to and check against expected pins (deferred tier, opt-in; the
    /// CLI's `--check-tls`).
    package var tlsPinChecks: [TLSPinCheck] = []

    /// - Parameters:
    ///   - root: the root prefix of every host read; "/" for this host.
    ///   - attributesToIgnore: signals, `prefix.*` patterns or probe ids neither read nor reported.
    ///   - policy: where the verdict rules come from.
    ///   - stateDirectory: the collector's own state directory; nil for the default.
    ///   - freeText: how personal free text is reported; nil for the policy's choice.
    ///   - logger: where diagnostics go.
    public init(root: String = "/", attributesToIgnore: Set<String> = [], policy: PolicySource = .embedded,
                stateDirectory: String? = nil, freeText: FreeTextHandling? = nil, logger: (any FingerlyLogHandler)? = nil) {
        self.root = root
        self.attributesToIgnore = attributesToIgnore
        self.policy = policy
        self.stateDirectory = stateDirectory
        self.freeText = freeText
        self.logger = logger
    }
}
