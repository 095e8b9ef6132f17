import FoundationEssentials

/// A source that failed inside an otherwise successful probe, kept so nothing is lost silently.
public struct SourceIssue: Sendable, Codable, Hashable {
    /// The host path (or signal name) that failed.
    public let path: String
    /// How reading it ended.
    public let status: ProbeStatus
    /// Why, for people.
    public let detail: String

    package init(path: String, status: ProbeStatus, detail: String) {
        self.path = path
        self.status = status
        self.detail = detail
    }
}

extension SourceIssue: CustomStringConvertible {
    /// The path, the status and the detail on one line.
    public var description: String { "\(path): \(status.rawValue) (\(detail))" }
}

/// One probe's entry in the report.
public struct ProbeEntry: Sendable, Codable, Hashable {
    /// The probe's catalogue id.
    public let id: String
    /// The tier it ran in.
    public let tier: Tier
    /// How it ended.
    public let status: ProbeStatus
    /// How long it ran, in milliseconds.
    public let durationMs: Double
    /// Why the probe did not end `ok`, or why it was skipped.
    public let detail: String?
    /// Sources inside the probe that could not be read, with their status.
    public let issues: [SourceIssue]
    /// What it reported, by dotted signal name (`dmi.sys_vendor`).
    public let signals: [String: SignalValue]
    /// Hashed values this probe offered to the stable identifiers.
    public let identityComponents: [IdentityComponent]

    package init(id: String, tier: Tier, status: ProbeStatus, durationMs: Double, detail: String? = nil, issues: [SourceIssue], signals: [String: SignalValue], identityComponents: [IdentityComponent]) {
        self.id = id
        self.tier = tier
        self.status = status
        self.durationMs = durationMs
        self.detail = detail
        self.issues = issues
        self.signals = signals
        self.identityComponents = identityComponents
    }
}

/// Everything collected in one run. This is what a submission sends.
public struct SignalReport: Sendable, Codable, Hashable {
    /// The schema this library writes. 2: the result's `triggers` are objects, `state` is
    /// enriched/local/unavailable/collected, `suspectLevel` has no `none`, `visitorConfidence`
    /// is an integer, an integrity result lists its four verdicts at the top level.
    public static let currentSchemaVersion = 2

    /// The schema the report was written in.
    public let schemaVersion: Int
    /// The library version that collected it.
    public let collectorVersion: String
    /// When the collection ended.
    public let collectedAt: Date
    /// The caller's label for the request.
    public let tag: String?
    /// The root prefix the host was read through; "/" for the live host.
    public let root: String
    /// The tiers that ran.
    public let tiers: [Tier]
    /// The wall-clock budget, in milliseconds.
    public let budgetMs: Int
    /// How long the collection took, in milliseconds.
    public let elapsedMs: Double
    /// Every probe of the catalogue that was asked for, in catalogue order.
    public let probes: [ProbeEntry]
    /// hardwareId and instanceId, derived from the probes' identity components.
    public let identity: HostIdentity
    /// The key behind every hash and fingerprint in this report: identifiers of two reports
    /// can only be compared when both name the same keying (and, short of the API key, come
    /// from one installation).
    public let identifierKeying: IdentifierKeying?
    /// Whether free text that can name a person is in clear or fingerprinted.
    public let freeText: FreeTextHandling?
    /// When the deferred tier's entries were collected ahead of time (`prefetch`) and reused:
    /// how old they were, in milliseconds. nil when every probe ran for this report.
    public let prefetchedAgeMs: Double?

    /// Signals of every probe that produced any, by their dotted names.
    public var signals: [String: SignalValue] {
        var all: [String: SignalValue] = [:]
        for probe in probes { all.merge(probe.signals) { first, _ in first } }
        return all
    }

    package init(schemaVersion: Int, collectorVersion: String, collectedAt: Date, tag: String? = nil, root: String, tiers: [Tier], budgetMs: Int, elapsedMs: Double, probes: [ProbeEntry], identity: HostIdentity, identifierKeying: IdentifierKeying? = nil, freeText: FreeTextHandling? = nil, prefetchedAgeMs: Double? = nil) {
        self.schemaVersion = schemaVersion
        self.collectorVersion = collectorVersion
        self.collectedAt = collectedAt
        self.tag = tag
        self.root = root
        self.tiers = tiers
        self.budgetMs = budgetMs
        self.elapsedMs = elapsedMs
        self.probes = probes
        self.identity = identity
        self.identifierKeying = identifierKeying
        self.freeText = freeText
        self.prefetchedAgeMs = prefetchedAgeMs
    }
}

extension JSONEncoder {
    /// The one encoder configuration used for everything Fingerly prints or sends.
    public static var fingerly: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        return encoder
    }
}

extension JSONDecoder {
    package static var fingerly: JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return decoder
    }
}
