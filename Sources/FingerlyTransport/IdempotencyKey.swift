/// The grammar of the `Idempotency-Key` field, for the signature that covers it and the server that keys its
/// answers by it: one definition, so a value one of them takes is never one the other refuses (a key a
/// signature verified under and the server then refused skipped every limit on the way).
///
/// An RFC 8941 item whose value is an sf-string (draft-ietf-httpapi-idempotency-key-header): any string
/// of 1 to `maximumLength` characters once unescaped (`\"` and `\\` are one character each). The key is
/// opaque: `"ABC"` and `"abc"` are two keys, and a space is a character like any other. Parameters
/// (`"…";a=1`) are parsed and ignored, as RFC 8941 expects of parameters a field does not define: they
/// are not part of the key, though a signature covers them as sent. Spaces and tabs around the value
/// are not part of it (RFC 9110 §5.5).
package enum IdempotencyKeyField {
    /// The client's keys are 36-byte lowercase UUIDs; the server stores the key as it comes.
    package static let maximumLength = 255
    /// The whole field, parameters and spaces included: what the signature takes of any field it reads.
    package static let maximumFieldLength = 512

    /// Why a field value is not a key, for the answer that refuses it.
    package enum Refusal: Error, Sendable, Hashable, CustomStringConvertible {
        case notAString
        case empty
        case tooLong
        case fieldTooLong

        package var description: String {
            switch self {
            case .notAString: "Idempotency-Key is not a Structured Fields string (\"…\")"
            case .empty: "Idempotency-Key is an empty string"
            case .tooLong: "Idempotency-Key is longer than \(maximumLength) characters"
            case .fieldTooLong: "Idempotency-Key's field is longer than \(maximumFieldLength) bytes"
            }
        }
    }

    /// The key inside a field's value, unquoted and unescaped, without its parameters.
    package static func parse(fieldValue value: String) -> Result<String, Refusal> {
        if value.utf8.count > maximumFieldLength { return .failure(.fieldTooLong) }
        guard let item = StructuredField.item(trimmingTabs(Substring(value).utf8)),
              case .string(let key) = item.value else { return .failure(.notAString) }
        if key.isEmpty { return .failure(.empty) }
        if key.utf8.count > maximumLength { return .failure(.tooLong) }
        return .success(key)
    }

    /// The key inside a field's value; nil when the value is not in the form above.
    package static func key(inFieldValue value: String) -> String? {
        try? parse(fieldValue: value).get()
    }

    private static func trimmingTabs(_ bytes: Substring.UTF8View) -> Substring.UTF8View.SubSequence {
        var bytes = bytes[...]
        while let first = bytes.first, first == 0x20 || first == 0x09 { bytes = bytes.dropFirst() }
        while let last = bytes.last, last == 0x20 || last == 0x09 { bytes = bytes.dropLast() }
        return bytes
    }
}
