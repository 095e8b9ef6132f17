/// One report's request, fixed when the report is accepted for sending: every attempt, and
/// every later flush from the outbox, sends these same body bytes under this same key.
package struct OutgoingRequest: Sendable, Hashable {
    /// The `Idempotency-Key` header: made once per report.
    package let idempotencyKey: String
    /// When the report was accepted for sending, in seconds since the epoch.
    package let createdAt: Int64
    /// The organization whose key the report's identifiers are hashed with; a flush under
    /// another organization's key leaves the item alone.
    package let organization: String
    /// The URL the request is for. A flush through an instance pointed elsewhere leaves the item
    /// alone: a server that stored it but lost its answer would otherwise see it as a second
    /// event at another server, where the idempotency key means nothing.
    package let destination: String
    /// The serialized body, exactly as sent.
    package let body: [UInt8]
    /// Attempts made so far, across processes.
    package var attempts: Int

    package init(idempotencyKey: String, createdAt: Int64, organization: String, destination: String = "", body: [UInt8], attempts: Int = 0) {
        self.idempotencyKey = idempotencyKey
        self.createdAt = createdAt
        self.organization = organization
        self.destination = destination
        self.body = body
        self.attempts = attempts
    }
}
