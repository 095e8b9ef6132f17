import FoundationEssentials
import FingerlyHost
import FingerlyModel
import FingerlyStore

extension EngineAnswer {
    /// An error answer in the wire contract's form (docs/api.md, Errors).
    package static func error(_ status: Int, _ code: String, _ message: String) -> EngineAnswer {
        let body = (try? JSONEncoder.fingerly.encode(WireError(code: code, message: BoundedText.bounded(message, limit: 512))))
            .map(Array.init) ?? Array(#"{"error":{"code":"internal","message":"The error could not be encoded."}}"#.utf8)
        return EngineAnswer(status: status, body: body, code: code)
    }

    static func badRequest(_ message: String) -> EngineAnswer { .error(400, "bad_request", message) }
    static let notFound = EngineAnswer.error(404, "not_found", "No event with this requestId for this organization.")
    static let inProgress = EngineAnswer.error(409, "request_in_progress", "A request with this idempotency key is still being processed.")
    static let keyReused = EngineAnswer.error(422, "idempotency_key_reused",
                                              "This idempotency key was used with a different body or another device key.")

    /// A store failure: 503 when the same call may succeed later, else 500. The store's own
    /// message stays in the server's log, never in an answer.
    static func storeFailure(_ error: StoreError) -> EngineAnswer {
        error.isTransient ? .error(503, "unavailable", "The store is busy; retry later.")
                          : .error(500, "internal", "The server failed to store the request.")
    }
}

enum EngineWire {
    /// SHA-256 of the body: what an idempotency record remembers it by.
    static func sha256(_ bytes: [UInt8]) -> [UInt8] { SHA256.hash(bytes) }

    private static let crockford = Array("0123456789ABCDEFGHJKMNPQRSTVWXYZ".utf8)

    /// A random, URL-safe id: the prefix and 128 bits in Crockford base32 (26 characters).
    static func mintId(prefix: String) -> String {
        encodeId(prefix: prefix, randomBytes(16))
    }

    /// An id that sorts by the time it was minted: 48 bits of milliseconds since 1970, then
    /// 80 random bits, in Crockford base32, whose alphabet is in ASCII order. The events
    /// index takes each new requestId next to the last one, in a page the previous request
    /// already wrote, instead of in a random page of a large index (a page per request more
    /// for the WAL, the checkpoint and its fsync; `bench/server`).
    static func mintTimeOrderedId(prefix: String, unixMilliseconds: Int64) -> String {
        let milliseconds = UInt64(clamping: max(0, unixMilliseconds)) & 0xFFFF_FFFF_FFFF
        let time = (0..<6).map { UInt8(truncatingIfNeeded: milliseconds >> (8 * (5 - $0))) }
        return encodeId(prefix: prefix, time + randomBytes(10))
    }

    private static func encodeId(prefix: String, _ bytes: [UInt8]) -> String {
        var text = Array(prefix.utf8)
        var buffer = 0, bits = 0
        for byte in bytes {
            buffer = (buffer << 8) | Int(byte)
            bits += 8
            while bits >= 5 {
                bits -= 5
                text.append(crockford[(buffer >> bits) & 31])
            }
            buffer &= (1 << bits) - 1
        }
        if bits > 0 { text.append(crockford[(buffer << (5 - bits)) & 31]) }
        return String(decoding: text, as: UTF8.self)
    }

    /// The failing field of a decoding error, as `report.probes[3].status`.
    static func fieldPath(_ error: DecodingError) -> String {
        let context: DecodingError.Context
        var path: [any CodingKey]
        switch error {
        case .typeMismatch(_, let c), .valueNotFound(_, let c), .dataCorrupted(let c):
            context = c
            path = c.codingPath
        case .keyNotFound(let key, let c):
            context = c
            path = c.codingPath + [key]
        @unknown default:
            return ""
        }
        _ = context
        var text = ""
        for key in path.prefix(32) {
            if let index = key.intValue, key.stringValue.isEmpty || key.stringValue == "Index \(index)" {
                text += "[\(index)]"
            } else {
                text += (text.isEmpty ? "" : ".") + BoundedText.bounded(key.stringValue, limit: 64)
            }
        }
        return BoundedText.bounded(text, limit: 256)
    }

    static func decodingMessage(_ error: DecodingError) -> String {
        let field = fieldPath(error)
        switch error {
        case .dataCorrupted(let context) where context.codingPath.isEmpty:
            return "The body is not valid JSON."
        case _ where field.isEmpty:
            return "The body must be a JSON object with the members client and report."
        case .keyNotFound:
            return "Field '\(field)' is missing."
        case .typeMismatch(let type, _):
            return "Field '\(field)' has the wrong type (expected \(type))."
        case .valueNotFound(let type, _):
            return "Field '\(field)' is null (expected \(type))."
        case .dataCorrupted(let context):
            return "Field '\(field)' is invalid: \(BoundedText.bounded(context.debugDescription, limit: 160))"
        @unknown default:
            return "The body is not a valid submission."
        }
    }

    /// ISO 8601 in UTC, whole seconds, as the rest of the wire writes dates.
    static func timestamp(_ seconds: Int64) -> Date {
        Date(timeIntervalSince1970: Double(seconds))
    }
}
