import FoundationEssentials

/// A source that failed inside an otherwise successful probe, kept so nothing is lost silently.
public struct SourceIssue: Sendable, Codable, Hashable {
    public let path: String
    public let status: ProbeStatus
    public let detail: String

    package init(path: String, status: ProbeStatus, detail: String) {
        self.path = path
        self.status = status
        self.detail = detail
    }
}

/// One probe's entry in the report.
public struct ProbeEntry: Sendable, Codable, Hashable {
    public let id: String
    public let tier: Tier
    public let status: ProbeStatus
    public let durationMs: Double
    /// Why the probe did not end `ok`, or why it was skipped.
    public let detail: String?
    /// Sources inside the probe that could not be read, with their status.
    public let issues: [SourceIssue]
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
    public static let currentSchemaVersion = 1

    public let schemaVersion: Int
    public let collectorVersion: String
    public let collectedAt: Date
    public let tag: String?
    /// The root prefix the host was read through; "/" for the live host.
    public let root: String
    public let tiers: [Tier]
    public let budgetMs: Int
    public let elapsedMs: Double
    public let probes: [ProbeEntry]
    /// hardwareId and instanceId, derived from the probes' identity components.
    public let identity: HostIdentity
    /// The key behind every hash and fingerprint in this report: identifiers of two reports
    /// can only be compared when both name the same keying (and, short of the API key, come
    /// from one installation).
    public var identifierKeying: IdentifierKeying?
    /// Whether free text that can name a person is in clear or fingerprinted.
    public var freeText: FreeTextHandling?

    /// Signals of every probe that produced any, by their dotted names.
    public var signals: [String: SignalValue] {
        var all: [String: SignalValue] = [:]
        for probe in probes { all.merge(probe.signals) { first, _ in first } }
        return all
    }

    package init(schemaVersion: Int, collectorVersion: String, collectedAt: Date, tag: String? = nil, root: String, tiers: [Tier], budgetMs: Int, elapsedMs: Double, probes: [ProbeEntry], identity: HostIdentity, identifierKeying: IdentifierKeying? = nil, freeText: FreeTextHandling? = nil) {
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
