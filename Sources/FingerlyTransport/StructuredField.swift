import FingerlyHost

/// The RFC 8941 (Structured Field Values) grammar for the fields the wire contract reads: an item
/// (`Idempotency-Key`) and a dictionary (`Content-Digest`). Every construct is parsed, so a value a
/// conforming sender may write (parameters, inner lists, unpadded byte sequences) is never refused
/// for its form; what a field then requires of the parsed value is its reader's business.
///
/// Bounded by its input: one pass, no recursion past an inner list's items, no number past 15 digits,
/// and at most the members and parameters RFC 9651 §3 asks a parser to take, so a key given twice
/// (looked up among those before it) costs a bounded search.
package enum StructuredField {
    static let maximumMembers = 1024
    static let maximumParameters = 256

    package enum BareItem: Sendable, Hashable {
        case integer(Int64)
        /// A decimal, kept as its text: no reader here computes with one.
        case decimal(String)
        case string(String)
        case token(String)
        case byteSequence([UInt8])
        case boolean(Bool)
    }

    package struct Item: Sendable {
        package var value: BareItem
        package var parameters: [(key: String, value: BareItem)]
    }

    /// A dictionary member's value: an item, or an inner list (which no reader here uses).
    package enum MemberValue: Sendable {
        case item(Item)
        case innerList([Item])
    }

    /// A whole field value as an item (RFC 8941 §4.2), nil when it is not one.
    package static func item<Bytes: Collection<UInt8>>(_ field: Bytes) -> Item? {
        var scanner = Scanner(Array(field))
        scanner.skipSpaces()
        guard let item = scanner.item() else { return nil }
        scanner.skipSpaces()
        return scanner.atEnd ? item : nil
    }

    /// A whole field value as a dictionary (RFC 8941 §4.2.2), members in order; a key given twice
    /// keeps its last value in its first place, as the RFC says. nil when it is not one.
    package static func dictionary<Bytes: Collection<UInt8>>(_ field: Bytes) -> [(key: String, value: MemberValue)]? {
        var scanner = Scanner(Array(field))
        var members: [(key: String, value: MemberValue)] = []
        scanner.skipSpaces()
        while !scanner.atEnd {
            guard let key = scanner.key() else { return nil }
            let value: MemberValue
            if scanner.consume(UInt8(ascii: "=")) {
                guard let member = scanner.itemOrInnerList() else { return nil }
                value = member
            } else {
                guard let parameters = scanner.parameters() else { return nil }
                value = .item(Item(value: .boolean(true), parameters: parameters))
            }
            if let index = members.firstIndex(where: { $0.key == key }) {
                members[index].value = value
            } else {
                guard members.count < StructuredField.maximumMembers else { return nil }
                members.append((key, value))
            }
            scanner.skipWhitespace()
            if scanner.atEnd { break }
            guard scanner.consume(UInt8(ascii: ",")) else { return nil }
            scanner.skipWhitespace()
            // A trailing comma.
            if scanner.atEnd { return nil }
        }
        return members
    }

    private struct Scanner {
        let bytes: [UInt8]
        var index = 0

        init(_ bytes: [UInt8]) { self.bytes = bytes }

        var atEnd: Bool { index == bytes.count }
        var next: UInt8? { atEnd ? nil : bytes[index] }

        mutating func consume(_ byte: UInt8) -> Bool {
            guard next == byte else { return false }
            index += 1
            return true
        }

        mutating func skipSpaces() { while next == 0x20 { index += 1 } }
        /// OWS: spaces and tabs, between dictionary members.
        mutating func skipWhitespace() { while next == 0x20 || next == 0x09 { index += 1 } }

        mutating func itemOrInnerList() -> MemberValue? {
            guard consume(UInt8(ascii: "(")) else { return item().map(MemberValue.item) }
            var items: [Item] = []
            while true {
                skipSpaces()
                if consume(UInt8(ascii: ")")) { break }
                guard let item = item() else { return nil }
                items.append(item)
                // Items of an inner list are separated by at least one space.
                guard next == 0x20 || next == UInt8(ascii: ")") else { return nil }
            }
            guard parameters() != nil else { return nil }
            return .innerList(items)
        }

        mutating func item() -> Item? {
            guard let value = bareItem(), let parameters = parameters() else { return nil }
            return Item(value: value, parameters: parameters)
        }

        mutating func parameters() -> [(key: String, value: BareItem)]? {
            var parameters: [(key: String, value: BareItem)] = []
            while consume(UInt8(ascii: ";")) {
                skipSpaces()
                guard let key = key() else { return nil }
                var value = BareItem.boolean(true)
                if consume(UInt8(ascii: "=")) {
                    guard let given = bareItem() else { return nil }
                    value = given
                }
                if let index = parameters.firstIndex(where: { $0.key == key }) {
                    parameters[index].value = value
                } else {
                    guard parameters.count < StructuredField.maximumParameters else { return nil }
                    parameters.append((key, value))
                }
            }
            return parameters
        }

        /// `( lcalpha / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" )`.
        mutating func key() -> String? {
            guard let first = next, isLowercaseLetter(first) || first == UInt8(ascii: "*") else { return nil }
            let start = index
            let special = Array("_-.*".utf8)
            while let byte = next, isLowercaseLetter(byte) || isDigit(byte) || special.contains(byte) { index += 1 }
            return String(decoding: bytes[start..<index], as: UTF8.self)
        }

        mutating func bareItem() -> BareItem? {
            guard let first = next else { return nil }
            switch first {
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return number()
            case UInt8(ascii: "\""): return string().map(BareItem.string)
            case UInt8(ascii: ":"): return byteSequence().map(BareItem.byteSequence)
            case UInt8(ascii: "?"):
                index += 1
                if consume(UInt8(ascii: "1")) { return .boolean(true) }
                if consume(UInt8(ascii: "0")) { return .boolean(false) }
                return nil
            case _ where isLetter(first) || first == UInt8(ascii: "*"): return token()
            default: return nil
            }
        }

        /// RFC 8941 §4.2.4: at most 15 integer digits; a decimal has at most 12 before its point and 1 to 3 after.
        mutating func number() -> BareItem? {
            let start = index
            let negative = consume(UInt8(ascii: "-"))
            var integerDigits = 0
            while let byte = next, isDigit(byte) {
                integerDigits += 1
                index += 1
                if integerDigits > 15 { return nil }
            }
            guard integerDigits > 0 else { return nil }
            guard consume(UInt8(ascii: ".")) else {
                var value: Int64 = 0
                for byte in bytes[(negative ? start + 1 : start)..<index] { value = value * 10 + Int64(byte - 48) }
                return .integer(negative ? -value : value)
            }
            guard integerDigits <= 12 else { return nil }
            var fractionDigits = 0
            while let byte = next, isDigit(byte) {
                fractionDigits += 1
                index += 1
                if fractionDigits > 3 { return nil }
            }
            guard fractionDigits > 0 else { return nil }
            return .decimal(String(decoding: bytes[start..<index], as: UTF8.self))
        }

        /// `DQUOTE *( unescaped / "\" ( DQUOTE / "\" ) ) DQUOTE`, unescaped being visible ASCII and space.
        mutating func string() -> String? {
            guard consume(UInt8(ascii: "\"")) else { return nil }
            var out: [UInt8] = []
            while let byte = next {
                index += 1
                switch byte {
                case UInt8(ascii: "\\"):
                    guard let escaped = next, escaped == UInt8(ascii: "\"") || escaped == UInt8(ascii: "\\") else {
                        return nil
                    }
                    index += 1
                    out.append(escaped)
                case UInt8(ascii: "\""):
                    return String(decoding: out, as: UTF8.self)
                case 0x20...0x7E:
                    out.append(byte)
                default:
                    return nil
                }
            }
            return nil
        }

        /// `( ALPHA / "*" ) *( tchar / ":" / "/" )`.
        mutating func token() -> BareItem? {
            let start = index
            index += 1
            let special = Array("!#$%&'*+-.^_`|~:/".utf8)
            while let byte = next, isLetter(byte) || isDigit(byte) || special.contains(byte) { index += 1 }
            return .token(String(decoding: bytes[start..<index], as: UTF8.self))
        }

        /// `":" *( base64 ) ":"`, "=" padding optional as §4.2.7 asks of parsers.
        mutating func byteSequence() -> [UInt8]? {
            guard consume(UInt8(ascii: ":")) else { return nil }
            let start = index
            while let byte = next, byte != UInt8(ascii: ":") { index += 1 }
            guard consume(UInt8(ascii: ":")) else { return nil }
            return StrictBase64.decode(bytes[start..<index - 1], paddingRequired: false)
        }

        private func isDigit(_ byte: UInt8) -> Bool { (48...57).contains(byte) }
        private func isLowercaseLetter(_ byte: UInt8) -> Bool { (97...122).contains(byte) }
        private func isLetter(_ byte: UInt8) -> Bool { (65...90).contains(byte) || (97...122).contains(byte) }
    }
}
