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
