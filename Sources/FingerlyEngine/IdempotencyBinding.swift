/// What an idempotency record holds against a later request with its key: the body and the proof that
/// came with it. A stored answer (a visitorId, a score) is replayed only to the same body under the same
/// device key, or unsigned again; a captured request re-signed by another key gets
/// `idempotency_key_reused` instead of its victim's answer.
///
/// Stored as one SHA-256 in the record's body hash: an unsigned request's is the body's own, as records
/// written before the binding hold; a signed one's covers the body's digest and the keyid.
struct IdempotencyBinding {
    /// What a record made by this request stores.
    let hash: [UInt8]
    /// A key whose rotation statement for the request's key verified: its records are this device's too,
    /// so a report queued before a rotation still gets its answer after it.
    private let rotatedHash: [UInt8]?

    init(body: [UInt8], deviceKeyID: String?, rotatedFrom: String?) {
        let bodyHash = EngineWire.sha256(body)
        hash = Self.hash(bodyHash: bodyHash, deviceKeyID: deviceKeyID)
        rotatedHash = deviceKeyID == nil ? nil : rotatedFrom.map { Self.hash(bodyHash: bodyHash, deviceKeyID: $0) }
    }

    func matches(_ stored: [UInt8]) -> Bool { stored == hash || (rotatedHash != nil && stored == rotatedHash) }

    private static func hash(bodyHash: [UInt8], deviceKeyID: String?) -> [UInt8] {
        guard let deviceKeyID else { return bodyHash }
        // Domain-separated from a body's own hash, which is all an unsigned record holds.
        return EngineWire.sha256(Array("fingerly-idempotency-v1\n".utf8) + bodyHash + Array("\n\(deviceKeyID)".utf8))
    }
}
