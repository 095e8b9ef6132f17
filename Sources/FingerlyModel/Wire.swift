import FoundationEssentials

// The wire contract's bodies (docs/api.md), shared by the client that sends them and the
// server and local engine that answer.

/// What the body says about the client beside the report.
package struct ClientInfo: Codable, Hashable, Sendable {
    /// Whether a proxy carries this submission (the environment named one for the origin).
    package let proxy: Bool
    package let sdk: String
    package let version: String

    package init(proxy: Bool, sdk: String, version: String) {
        self.proxy = proxy
        self.sdk = sdk
        self.version = version
    }
}

/// The body of `POST /v1/identify` (docs/api.md).
package struct SubmissionBody: Codable, Sendable {
    package let client: ClientInfo
    package let report: SignalReport

    package init(client: ClientInfo, report: SignalReport) {
        self.client = client
        self.report = report
    }
}

/// The 200 answer of `POST /v1/identify` (docs/api.md): the server encodes it, the client
/// decodes it and refuses one with a field out of range, since a hostile network may answer
/// anything.
package struct IdentifyAnswer: Codable, Sendable {
    package let requestId: String
    package let visitorId: String
    package let visitorIsNew: Bool
    package let visitorConfidence: Int
    package let identifiable: Bool
    package var duplicate: Bool
    package let suspectScore: Int?
    package let suspectLevel: SuspectLevel?
    package let triggers: [IdentifyTrigger]?
    package let verdicts: Verdicts?
    package let policy: String?

    package init(requestId: String, visitorId: String, visitorIsNew: Bool, visitorConfidence: Int, identifiable: Bool,
                 duplicate: Bool, suspectScore: Int?, suspectLevel: SuspectLevel?, triggers: [IdentifyTrigger]?,
                 verdicts: Verdicts?, policy: String?) {
        self.requestId = requestId
        self.visitorId = visitorId
        self.visitorIsNew = visitorIsNew
        self.visitorConfidence = visitorConfidence
        self.identifiable = identifiable
        self.duplicate = duplicate
        self.suspectScore = suspectScore
        self.suspectLevel = suspectLevel
        self.triggers = triggers
        self.verdicts = verdicts
        self.policy = policy
    }

    private enum CodingKeys: String, CodingKey {
        case requestId, visitorId, visitorIsNew, visitorConfidence, identifiable, duplicate, suspectScore, suspectLevel,
             triggers, verdicts, policy
    }

    package init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        func text(_ key: CodingKeys) throws -> String {
            let value = try container.decode(String.self, forKey: key)
            guard !value.isEmpty, value.utf8.count <= 128 else {
                throw DecodingError.dataCorruptedError(forKey: key, in: container, debugDescription: "empty or longer than 128 bytes")
            }
            return value
        }
        requestId = try text(.requestId)
        visitorId = try text(.visitorId)
        visitorIsNew = try container.decode(Bool.self, forKey: .visitorIsNew)
        guard let confidence = try container.decodePercentage(forKey: .visitorConfidence) else {
            throw DecodingError.keyNotFound(CodingKeys.visitorConfidence, .init(codingPath: [], debugDescription: "visitorConfidence is required"))
        }
        visitorConfidence = confidence
        identifiable = try container.decode(Bool.self, forKey: .identifiable)
        duplicate = try container.decode(Bool.self, forKey: .duplicate)
        (suspectScore, suspectLevel) = try container.decodeSuspect(score: .suspectScore, level: .suspectLevel)
        triggers = try container.decodeIfPresent([IdentifyTrigger].self, forKey: .triggers)
        verdicts = try container.decodeIfPresent(Verdicts.self, forKey: .verdicts)
        policy = try container.decodeIfPresent(String.self, forKey: .policy).map { BoundedText.bounded($0, limit: 128) }
    }
}

/// An error answer: `{"error":{"code":…,"message":…}}`.
package struct WireError: Codable, Sendable, Hashable {
    package struct Detail: Codable, Sendable, Hashable {
        package let code: String
        package let message: String
    }
    package let error: Detail

    package init(code: String, message: String) { error = Detail(code: code, message: message) }
}

extension KeyedDecodingContainer {
    /// An integer 0–100, or nil when absent; anything else is refused, since a result that
    /// carries one was made by a hostile or broken peer.
    package func decodePercentage(forKey key: Key) throws -> Int? {
        guard let value = try decodeIfPresent(Int.self, forKey: key) else { return nil }
        guard (0...100).contains(value) else {
            throw DecodingError.dataCorruptedError(forKey: key, in: self, debugDescription: "\(value) is outside 0–100")
        }
        return value
    }

    /// A suspect score and its level: both present, or neither.
    package func decodeSuspect(score: Key, level: Key) throws -> (Int?, SuspectLevel?) {
        let value = try decodePercentage(forKey: score)
        let named = try decodeIfPresent(SuspectLevel.self, forKey: level)
        guard (value == nil) == (named == nil) else {
            throw DecodingError.dataCorruptedError(forKey: level, in: self,
                                                   debugDescription: "a suspect score and its level come together or not at all")
        }
        return (value, named)
    }
}
