import FingerlyHost

/// The header fields that sign one attempt of a request (HTTP Message Signatures, RFC 9421).
package struct RequestSignatureFields: Sendable, Hashable {
    /// `Content-Digest`: `sha-256=:…:` (RFC 9530).
    package let contentDigest: String
    /// `Fingerly-Device-Key`: the raw public key as an sf-binary, `:…:`.
    package let deviceKey: String
    /// `Signature-Input`: `fingerly=(…);created=…;keyid="…";alg="ed25519"`.
    package let signatureInput: String
    /// `Signature`: `fingerly=:…:`.
    package let signature: String

    /// Name and value of each field, in the order the wire contract sends them.
    package var headers: [(name: String, value: String)] {
        [("Content-Digest", contentDigest), ("Fingerly-Device-Key", deviceKey),
         ("Signature-Input", signatureInput), ("Signature", signature)]
    }
}

/// A signature that verified: who signed, and when they say they did.
package struct VerifiedSignature: Sendable, Hashable {
    package let keyID: String
    package let publicKey: [UInt8]
    package let created: Int64
}

package enum SigningError: Error, Sendable, Hashable, CustomStringConvertible {
    /// A value that cannot go into a signature base as it is: `component` names it.
    case invalidComponent(String)
    case key(DeviceKeyError)

    package var description: String {
        switch self {
        case .invalidComponent(let component): "cannot sign: \(component) is not a valid value"
        case .key(let error): "cannot sign: \(error)"
        }
    }
}

package enum SignatureVerificationError: Error, Sendable, Hashable, CustomStringConvertible {
    /// A field the signature needs is absent (lowercase name).
    case missingField(String)
    /// A field appears more than once: which one would be meant is ambiguous.
    case duplicateField(String)
    /// A field, or the method or path, is not exactly in the form this signature uses.
    case malformed(field: String, reason: String)
    /// The body is not the one `Content-Digest` names.
    case digestMismatch
    /// `keyid` is not the SHA-256 of the key sent in `Fingerly-Device-Key`.
    case keyIDMismatch
    case createdInFuture(created: Int64, now: Int64)
    case createdTooOld(created: Int64, now: Int64)
    /// The signature is not the device key's over this request.
    case badSignature

    package var description: String {
        switch self {
        case .missingField(let name): "no \(name) field"
        case .duplicateField(let name): "more than one \(name) field"
        case .malformed(let field, let reason): "malformed \(field): \(reason)"
        case .digestMismatch: "the body does not match content-digest"
        case .keyIDMismatch: "keyid is not the SHA-256 of fingerly-device-key"
        case .createdInFuture(let created, let now): "created \(created) is ahead of now (\(now))"
        case .createdTooOld(let created, let now): "created \(created) is too long before now (\(now))"
        case .badSignature: "the signature does not verify"
        }
    }
}

/// The one signature a request carries, label `fingerly`, over `@method`, `@path`,
/// `content-digest` and `idempotency-key`, with `created`, `keyid` and `alg="ed25519"`. Signing
/// and verifying build the signature base in one place, so the two cannot drift apart.
package enum MessageSignature {
    package static let label = "fingerly"
    package static let algorithm = "ed25519"
    package static let coveredComponents = ["@method", "@path", "content-digest", "idempotency-key"]
    /// The covered components as the inner list of `Signature-Input` and `@signature-params` spell it.
    package static let componentList = "(" + coveredComponents.map { "\"\($0)\"" }.joined(separator: " ") + ")"
    /// The largest `created` (and any sf-integer): 15 digits.
    package static let maximumCreated: Int64 = 999_999_999_999_999
    /// No field this signature reads is longer; a longer one is refused unread.
    package static let maximumFieldLength = 512
    static let maximumPathLength = 2048

    /// `@signature-params`, also the `Signature-Input` member's value.
    package static func parameters(created: Int64, keyID: String) -> String {
        "\(componentList);created=\(created);keyid=\"\(keyID)\";alg=\"\(algorithm)\""
    }

    /// The RFC 9421 §2.5 signature base: one `"name": value` line per component, then
    /// `@signature-params`; lines joined by LF, no final LF. The values must already be valid
    /// (see `sign` and `verify`): a line break in one would forge a line of its own.
    package static func signatureBase(method: String, path: String, contentDigest: String, idempotencyKey: String,
                                      created: Int64, keyID: String) -> [UInt8] {
        let values = [method, path, contentDigest, idempotencyKey]
        let lines = zip(coveredComponents, values).map { "\"\($0)\": \($1)" }
            + ["\"@signature-params\": \(parameters(created: created, keyID: keyID))"]
        return Array(lines.joined(separator: "\n").utf8)
    }

    /// Signs one attempt. `idempotencyKey` is the header's whole field value, quotes included.
    package static func sign(method: String, path: String, body: [UInt8], idempotencyKey: String, created: Int64,
                             with key: DeviceKey) throws(SigningError) -> RequestSignatureFields {
        guard isToken(method) else { throw .invalidComponent("@method") }
        guard isAbsolutePath(path) else { throw .invalidComponent("@path") }
        guard isPlainString(idempotencyKey) else { throw .invalidComponent("idempotency-key") }
        guard (0...maximumCreated).contains(created) else { throw .invalidComponent("created") }
        let contentDigest = ContentDigest.fieldValue(for: body)
        let base = signatureBase(method: method, path: path, contentDigest: contentDigest, idempotencyKey: idempotencyKey,
                                 created: created, keyID: key.keyID)
        let signature: [UInt8]
        do { signature = try key.sign(base) } catch { throw .key(error) }
        return RequestSignatureFields(
            contentDigest: contentDigest,
            deviceKey: ":\(StrictBase64.encode(key.publicKey)):",
            signatureInput: "\(label)=\(parameters(created: created, keyID: key.keyID))",
            signature: "\(label)=:\(StrictBase64.encode(signature)):")
    }

    /// Checks a received request's signature. `fields` are the request's header fields as
    /// received (names in any case); `created` must lie within `window` seconds of `now` either
    /// way. Strict on purpose: only this label, this component list and these parameters in
    /// this order, canonical encodings, each field once.
    package static func verify(method: String, path: String, fields: [(name: String, value: String)], body: [UInt8],
                               now: Int64, window: Int64) throws(SignatureVerificationError) -> VerifiedSignature {
        guard isToken(method) else { throw .malformed(field: "@method", reason: "not an HTTP method token") }
        guard isAbsolutePath(path) else { throw .malformed(field: "@path", reason: "not an absolute path without query") }

        var found: [String: [UInt8]] = [:]
        let wanted = ["content-digest", "idempotency-key", "fingerly-device-key", "signature-input", "signature"]
        for field in fields {
            let name = String(decoding: field.name.utf8.map { (65...90).contains($0) ? $0 + 32 : $0 }, as: UTF8.self)
            guard wanted.contains(name) else { continue }
            guard found[name] == nil else { throw .duplicateField(name) }
            guard field.value.utf8.count <= maximumFieldLength else { throw .malformed(field: name, reason: "longer than \(maximumFieldLength) bytes") }
            found[name] = trimmed(Array(field.value.utf8))
        }
        func value(_ name: String) throws(SignatureVerificationError) -> [UInt8] {
            guard let value = found[name] else { throw .missingField(name) }
            return value
        }

        let digestField = try value("content-digest")
        let digest = ContentDigest.check(digestField, body: body)
        if case .refused(let reason) = digest { throw .malformed(field: "content-digest", reason: reason) }
        let idempotencyKey = String(decoding: try value("idempotency-key"), as: UTF8.self)
        if case .failure(let refusal) = IdempotencyKeyField.parse(fieldValue: idempotencyKey) {
            throw .malformed(field: "idempotency-key", reason: refusal.description)
        }
        guard let publicKey = byteSequence(try value("fingerly-device-key"), after: ""), publicKey.count == DeviceKey.publicKeyLength else {
            throw .malformed(field: "fingerly-device-key", reason: "not a 32-byte key in base64")
        }
        guard let signature = byteSequence(try value("signature"), after: "\(label)="), signature.count == DeviceKey.signatureLength else {
            throw .malformed(field: "signature", reason: "not one \(label) member holding a 64-byte signature")
        }
        let (created, keyID) = try parseSignatureInput(try value("signature-input"))

        guard digest == .matches else { throw .digestMismatch }
        guard DeviceKey.keyID(of: publicKey) == keyID else { throw .keyIDMismatch }
        let (offset, overflow) = created.subtractingReportingOverflow(now)
        if overflow || offset > window { throw .createdInFuture(created: created, now: now) }
        if offset < 0 && (offset == Int64.min || -offset > window) { throw .createdTooOld(created: created, now: now) }

        let base = signatureBase(method: method, path: path, contentDigest: String(decoding: digestField, as: UTF8.self),
                                 idempotencyKey: idempotencyKey, created: created, keyID: keyID)
        guard DeviceKey.isValidSignature(signature, of: base, publicKey: publicKey) else { throw .badSignature }
        return VerifiedSignature(keyID: keyID, publicKey: publicKey, created: created)
    }

    /// `created` and `keyid` from `fingerly=("@method" …);created=N;keyid="hex";alg="ed25519"`.
    private static func parseSignatureInput(_ field: [UInt8]) throws(SignatureVerificationError) -> (Int64, String) {
        let head = Array("\(label)=\(componentList);created=".utf8)
        guard field.starts(with: head) else {
            throw .malformed(field: "signature-input", reason: "not one \(label) member covering \(componentList) then created")
        }
        let rest = field.dropFirst(head.count)
        let digits = rest.prefix { (48...57).contains($0) }
        // Canonical sf-integer: what the signer serialized into its base, digit for digit.
        guard (1...15).contains(digits.count), digits.count == 1 || digits.first != UInt8(ascii: "0") else {
            throw .malformed(field: "signature-input", reason: "created is not a canonical non-negative integer")
        }
        let created = digits.reduce(Int64(0)) { $0 * 10 + Int64($1 - 48) }
        let tail = rest.dropFirst(digits.count)
        let keyHead = Array(";keyid=\"".utf8), keyTail = Array("\";alg=\"\(algorithm)\"".utf8)
        guard tail.count == keyHead.count + 64 + keyTail.count, tail.starts(with: keyHead), tail.suffix(keyTail.count).elementsEqual(keyTail) else {
            throw .malformed(field: "signature-input", reason: "parameters are not created, keyid and alg=\"\(algorithm)\" in that order")
        }
        let keyID = tail.dropFirst(keyHead.count).prefix(64)
        guard keyID.allSatisfy({ (48...57).contains($0) || (97...102).contains($0) }) else {
            throw .malformed(field: "signature-input", reason: "keyid is not 64 lowercase hex digits")
        }
        return (created, String(decoding: keyID, as: UTF8.self))
    }

    /// The bytes of `<prefix>:<base64>:`, or nil.
    private static func byteSequence(_ field: [UInt8], after prefix: String) -> [UInt8]? {
        let head = Array(prefix.utf8) + [UInt8(ascii: ":")]
        guard field.count > head.count, field.starts(with: head), field.last == UInt8(ascii: ":") else { return nil }
        return StrictBase64.decode(field[head.count..<field.count - 1], paddingRequired: false)
    }

    /// RFC 9421 §2.1: a field's value without leading and trailing spaces and tabs.
    private static func trimmed(_ bytes: [UInt8]) -> [UInt8] {
        let isSpace = { (byte: UInt8) in byte == 0x20 || byte == 0x09 }
        guard let first = bytes.firstIndex(where: { !isSpace($0) }), let last = bytes.lastIndex(where: { !isSpace($0) }) else { return [] }
        return Array(bytes[first...last])
    }

    /// An HTTP method: an RFC 9110 token of at most 32 characters.
    private static func isToken(_ text: String) -> Bool {
        let special = Array("!#$%&'*+-.^_`|~".utf8)
        return (1...32).contains(text.utf8.count) && text.utf8.allSatisfy { byte in
            (48...57).contains(byte) || (65...90).contains(byte) || (97...122).contains(byte) || special.contains(byte)
        }
    }

    /// `@path`: starts with "/", visible ASCII, no query or fragment (already percent-encoded).
    private static func isAbsolutePath(_ text: String) -> Bool {
        (1...maximumPathLength).contains(text.utf8.count) && text.utf8.first == UInt8(ascii: "/")
            && text.utf8.allSatisfy { (0x21...0x7E).contains($0) && $0 != UInt8(ascii: "?") && $0 != UInt8(ascii: "#") }
    }

    /// A whole `Idempotency-Key` value as a signature base line carries it unchanged: the field's grammar,
    /// with no space or tab around it.
    private static func isPlainString(_ text: String) -> Bool {
        let isSpace = { (byte: UInt8) in byte == 0x20 || byte == 0x09 }
        guard let first = text.utf8.first, let last = text.utf8.last, !isSpace(first), !isSpace(last) else {
            return false
        }
        return IdempotencyKeyField.key(inFieldValue: text) != nil
    }
}

