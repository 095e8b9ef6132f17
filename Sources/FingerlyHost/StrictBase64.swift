/// Base64 (RFC 4648 §4, with padding) as RFC 8941 byte sequences carry it. Decoding accepts only
/// the canonical form: one byte sequence has one spelling, so a verifier never accepts a header
/// the signer did not write.
package enum StrictBase64 {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    package static func encode(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count + 2) / 3 * 4)
        var index = 0
        while index < bytes.count {
            let remaining = bytes.count - index
            let first = UInt32(bytes[index])
            let second = remaining > 1 ? UInt32(bytes[index + 1]) : 0
            let third = remaining > 2 ? UInt32(bytes[index + 2]) : 0
            let group = first << 16 | second << 8 | third
            out.append(alphabet[Int(group >> 18 & 63)])
            out.append(alphabet[Int(group >> 12 & 63)])
            out.append(remaining > 1 ? alphabet[Int(group >> 6 & 63)] : UInt8(ascii: "="))
            out.append(remaining > 2 ? alphabet[Int(group & 63)] : UInt8(ascii: "="))
            index += 3
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The bytes `text` encodes, or nil when it is not canonical padded base64. `paddingRequired`
    /// false takes the same text without its trailing "=" too (RFC 8941 §4.2.7 asks parsers of
    /// byte sequences to): a signature covers the field as sent, so that spelling is what was signed.
    package static func decode<Text: Collection<UInt8>>(_ text: Text, paddingRequired: Bool = true) -> [UInt8]? {
        var digits = Array(text)
        if !paddingRequired && digits.count % 4 != 0 && digits.last != UInt8(ascii: "=") {
            digits += Array(repeating: UInt8(ascii: "="), count: 4 - digits.count % 4)
        }
        guard digits.count % 4 == 0 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(digits.count / 4 * 3)
        var index = 0
        while index < digits.count {
            let isLast = index + 4 == digits.count
            var values: [UInt32] = []
            var padding = 0
            for digit in digits[index..<index + 4] {
                if digit == UInt8(ascii: "=") {
                    padding += 1
                    continue
                }
                // A digit after padding, or padding anywhere but the end.
                guard padding == 0, let value = value(of: digit) else { return nil }
                values.append(value)
            }
            guard padding == 0 || (isLast && padding <= 2) else { return nil }
            var group: UInt32 = 0
            for value in values { group = group << 6 | value }
            group <<= UInt32(6 * padding)
            // The bits below the last whole byte must be zero, else two spellings decode alike.
            switch padding {
            case 0:
                out += [UInt8(group >> 16 & 0xFF), UInt8(group >> 8 & 0xFF), UInt8(group & 0xFF)]
            case 1:
                guard group & 0xFF == 0 else { return nil }
                out += [UInt8(group >> 16 & 0xFF), UInt8(group >> 8 & 0xFF)]
            default:
                guard group & 0xFFFF == 0 else { return nil }
                out.append(UInt8(group >> 16 & 0xFF))
            }
            index += 4
        }
        return out
    }

    private static func value(of digit: UInt8) -> UInt32? {
        switch digit {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"): UInt32(digit - UInt8(ascii: "A"))
        case UInt8(ascii: "a")...UInt8(ascii: "z"): UInt32(digit - UInt8(ascii: "a")) + 26
        case UInt8(ascii: "0")...UInt8(ascii: "9"): UInt32(digit - UInt8(ascii: "0")) + 52
        case UInt8(ascii: "+"): 62
        case UInt8(ascii: "/"): 63
        default: nil
        }
    }
}
