/// The grammar of the `Idempotency-Key` field, for the signature that covers it and the server that keys its
/// answers by it: one definition, so a value one of them takes is never one the other refuses (a key a
/// signature verified under and the server then refused skipped every limit on the way).
///
/// An RFC 8941 sf-string without escapes: `"`, 1 to `maximumLength` printable ASCII characters other
/// than `"` and `\`, `"`; spaces and tabs around it are not part of it (RFC 9110 §5.5).
package enum IdempotencyKeyField {
    /// The client's keys are 36-byte UUIDs; the server stores the key as it comes.
    package static let maximumLength = 255

    /// The key inside a field's value, without its quotes; nil when the value is not in the form above.
    package static func key(inFieldValue value: String) -> String? {
        var bytes = Substring(value).utf8[...]
        while let first = bytes.first, first == 0x20 || first == 0x09 { bytes = bytes.dropFirst() }
        while let last = bytes.last, last == 0x20 || last == 0x09 { bytes = bytes.dropLast() }
        guard (3...maximumLength + 2).contains(bytes.count), bytes.first == UInt8(ascii: "\""),
              bytes.last == UInt8(ascii: "\"") else { return nil }
        let inner = bytes.dropFirst().dropLast()
        let quote = UInt8(ascii: "\""), backslash = UInt8(ascii: "\\")
        guard inner.allSatisfy({ (0x20...0x7E).contains($0) && $0 != quote && $0 != backslash }) else { return nil }
        return String(decoding: inner, as: UTF8.self)
    }
}
