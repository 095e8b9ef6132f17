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
        func percentage(_ key: CodingKeys) throws -> Int? {
            guard let value = try container.decodeIfPresent(Int.self, forKey: key) else { return nil }
            guard (0...100).contains(value) else {
                throw DecodingError.dataCorruptedError(forKey: key, in: container, debugDescription: "\(value) is outside 0–100")
            }
            return value
        }
        requestId = try text(.requestId)
        visitorId = try text(.visitorId)
        visitorIsNew = try container.decode(Bool.self, forKey: .visitorIsNew)
        guard let confidence = try percentage(.visitorConfidence) else {
            throw DecodingError.keyNotFound(CodingKeys.visitorConfidence, .init(codingPath: [], debugDescription: "visitorConfidence is required"))
        }
        visitorConfidence = confidence
        identifiable = try container.decode(Bool.self, forKey: .identifiable)
        duplicate = try container.decode(Bool.self, forKey: .duplicate)
        suspectScore = try percentage(.suspectScore)
        suspectLevel = try container.decodeIfPresent(SuspectLevel.self, forKey: .suspectLevel)
        guard (suspectScore == nil) == (suspectLevel == nil) else {
            throw DecodingError.dataCorruptedError(forKey: .suspectLevel, in: container,
                                                   debugDescription: "a suspect score and its level come together or not at all")
        }
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
