import FoundationEssentials
import FingerlyModel

/// A request as it goes on the wire, for people to audit: `fingerly-identify --no-submit --json`
/// shows it, and a submission sends exactly this body.
public struct SubmissionRequest: Sendable, Codable, Hashable {
    /// One header field.
    public struct Header: Sendable, Codable, Hashable {
        /// The field name, as sent.
        public let name: String
        /// The value; the API key's is redacted, the signature's is named but made per attempt.
        public let value: String
    }

    /// Always POST.
    public let method: String
    /// The identify URL: the region's origin or the configured endpoint, then `/v1/identify`.
    public let url: String
    /// The headers in the order they are sent.
    public let headers: [Header]
    /// The body, byte for byte (it is UTF-8 JSON).
    public let body: String
    /// The `Idempotency-Key` of this report: every attempt and every later flush uses it.
    public let idempotencyKey: String
    /// The proxy that carries the request (credentials removed); nil for a direct connection.
    public let proxy: String?
}

/// What the body says about the client beside the report.
struct ClientInfo: Codable, Hashable {
    /// Whether a proxy carries this submission (the environment named one for the origin).
    let proxy: Bool
    let sdk: String
    let version: String
}

/// The body of `POST /v1/identify` (docs/api.md).
struct SubmissionBody: Codable {
    let client: ClientInfo
    let report: SignalReport
}

/// The 200 answer of `POST /v1/identify` (docs/api.md); refused when a field is out of range,
/// since a hostile network may answer anything.
struct ServerAnswer: Decodable {
    let requestId: String
    let visitorId: String
    let visitorIsNew: Bool
    let visitorConfidence: Int
    let identifiable: Bool
    let duplicate: Bool
    let suspectScore: Int?
    let suspectLevel: SuspectLevel?
    let triggers: [IdentifyTrigger]?
    let verdicts: Verdicts?
    let policy: String?

    private enum CodingKeys: String, CodingKey {
        case requestId, visitorId, visitorIsNew, visitorConfidence, identifiable, duplicate, suspectScore, suspectLevel,
             triggers, verdicts, policy
    }

    init(from decoder: any Decoder) throws {
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
