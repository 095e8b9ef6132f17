/// Any JSON document, parsed without a schema so that policy validation can name the exact
/// field that is wrong instead of surfacing a generic decoding error.
package enum JSONValue: Sendable, Hashable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    package var typeName: String {
        switch self {
        case .null: return "null"
        case .bool: return "a boolean"
        case .number: return "a number"
        case .string: return "a string"
        case .array: return "an array"
        case .object: return "an object"
        }
    }

    /// The value as a signal value, for comparisons; nil for null, objects and mixed arrays.
    package var signalValue: SignalValue? {
        switch self {
        case .bool(let value): return .bool(value)
        case .number(let value): return Int(exactly: value).map { .int($0) }
        case .string(let value): return .string(value)
        case .array(let items):
            let strings = items.compactMap { item -> String? in if case .string(let text) = item { text } else { nil } }
            return strings.count == items.count ? .strings(strings) : nil
        case .null, .object: return nil
        }
    }
}

/// A small RFC 8259 parser into `JSONValue`. Decoding an untyped document through Codable
/// costs a thrown error per failed type guess; this runs on every start, for the policy.
package struct JSONParser {
    package struct SyntaxError: Error, CustomStringConvertible {
        let offset: Int
        let message: String
        package var description: String { "\(message) at byte \(offset)" }
    }

    private let bytes: [UInt8]
    private var index = 0
    private var depth = 0

    package static func parse(_ data: [UInt8]) throws(SyntaxError) -> JSONValue {
        var parser = JSONParser(bytes: data)
        let value = try parser.value()
        parser.skipWhitespace()
        guard parser.index == data.count else { throw SyntaxError(offset: parser.index, message: "unexpected text after the document") }
        return value
    }

    private init(bytes: [UInt8]) { self.bytes = bytes }

    private mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    private func fail(_ message: String) -> SyntaxError { SyntaxError(offset: index, message: message) }

    private mutating func value() throws(SyntaxError) -> JSONValue {
        skipWhitespace()
        guard index < bytes.count else { throw fail("unexpected end of input") }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try object()
        case UInt8(ascii: "["): return try array()
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "t"): try literal("true"); return .bool(true)
        case UInt8(ascii: "f"): try literal("false"); return .bool(false)
        case UInt8(ascii: "n"): try literal("null"); return .null
        default: return .number(try number())
        }
    }

    private mutating func literal(_ word: String) throws(SyntaxError) {
        let expected = Array(word.utf8)
        guard index + expected.count <= bytes.count, Array(bytes[index..<index + expected.count]) == expected else {
            throw fail("expected a value")
        }
        index += expected.count
    }

    private mutating func nested<T>(_ body: (inout JSONParser) throws(SyntaxError) -> T) throws(SyntaxError) -> T {
        depth += 1
        guard depth <= 128 else { throw fail("nested too deeply") }
        defer { depth -= 1 }
        return try body(&self)
    }

    private mutating func object() throws(SyntaxError) -> JSONValue {
        try nested { (parser: inout JSONParser) throws(SyntaxError) -> JSONValue in
            parser.index += 1
            var members: [String: JSONValue] = [:]
            parser.skipWhitespace()
            if parser.index < parser.bytes.count, parser.bytes[parser.index] == UInt8(ascii: "}") { parser.index += 1; return .object(members) }
            while true {
                parser.skipWhitespace()
                guard parser.index < parser.bytes.count, parser.bytes[parser.index] == UInt8(ascii: "\"") else { throw parser.fail("expected a member name") }
                let key = try parser.string()
                parser.skipWhitespace()
                guard parser.index < parser.bytes.count, parser.bytes[parser.index] == UInt8(ascii: ":") else { throw parser.fail("expected ':'") }
                parser.index += 1
                members[key] = try parser.value()
                parser.skipWhitespace()
                guard parser.index < parser.bytes.count else { throw parser.fail("unterminated object") }
                if parser.bytes[parser.index] == UInt8(ascii: ",") { parser.index += 1; continue }
                if parser.bytes[parser.index] == UInt8(ascii: "}") { parser.index += 1; return .object(members) }
                throw parser.fail("expected ',' or '}'")
            }
        }
    }

    private mutating func array() throws(SyntaxError) -> JSONValue {
        try nested { (parser: inout JSONParser) throws(SyntaxError) -> JSONValue in
            parser.index += 1
            var items: [JSONValue] = []
            parser.skipWhitespace()
            if parser.index < parser.bytes.count, parser.bytes[parser.index] == UInt8(ascii: "]") { parser.index += 1; return .array(items) }
            while true {
                items.append(try parser.value())
                parser.skipWhitespace()
                guard parser.index < parser.bytes.count else { throw parser.fail("unterminated array") }
                if parser.bytes[parser.index] == UInt8(ascii: ",") { parser.index += 1; continue }
                if parser.bytes[parser.index] == UInt8(ascii: "]") { parser.index += 1; return .array(items) }
                throw parser.fail("expected ',' or ']'")
            }
        }
    }

    private mutating func string() throws(SyntaxError) -> String {
        index += 1
        var run = index
        var text = ""
        func flush(_ parser: JSONParser, upTo end: Int) {
            text += String(decoding: parser.bytes[run..<end], as: UTF8.self)
        }
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                flush(self, upTo: index)
                index += 1
                return text
            }
            if byte < 0x20 { throw fail("control character in a string") }
            if byte == UInt8(ascii: "\\") {
                flush(self, upTo: index)
                index += 1
                guard index < bytes.count else { break }
                switch bytes[index] {
                case UInt8(ascii: "\""): text += "\""
                case UInt8(ascii: "\\"): text += "\\"
                case UInt8(ascii: "/"): text += "/"
                case UInt8(ascii: "b"): text += "\u{08}"
                case UInt8(ascii: "f"): text += "\u{0C}"
                case UInt8(ascii: "n"): text += "\n"
                case UInt8(ascii: "r"): text += "\r"
                case UInt8(ascii: "t"): text += "\t"
                case UInt8(ascii: "u"):
                    var code = try hex4()
                    if (0xD800..<0xDC00).contains(code), index + 2 < bytes.count, bytes[index + 1] == UInt8(ascii: "\\"), bytes[index + 2] == UInt8(ascii: "u") {
                        index += 2
                        let low = try hex4()
                        guard (0xDC00..<0xE000).contains(low) else { throw fail("invalid surrogate pair") }
                        code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                    }
                    guard let scalar = Unicode.Scalar(code) else { throw fail("invalid \\u escape") }
                    text.unicodeScalars.append(scalar)
                default: throw fail("invalid escape")
                }
                index += 1
                run = index
                continue
            }
            index += 1
        }
        throw fail("unterminated string")
    }

    /// Exactly four hex digits: a sign or a space is not one (UInt32(_:radix:) takes "+041").
    private mutating func hex4() throws(SyntaxError) -> UInt32 {
        guard index + 4 < bytes.count else { throw fail("invalid \\u escape") }
        var code: UInt32 = 0
        for byte in bytes[(index + 1)...(index + 4)] {
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw fail("invalid \\u escape")
            }
            code = code << 4 | UInt32(digit)
        }
        index += 4
        return code
    }

    /// Longest number text converted: a policy needs small numbers, and the conversion of
    /// megabytes of digits is slow for no purpose.
    static let numberLengthLimit = 64

    /// RFC 8259 numbers only (`-? int frac? exp?`): Double(_:) alone would also take "+1",
    /// ".5", "1." and "01".
    private mutating func number() throws(SyntaxError) -> Double {
        let start = index
        func digits() -> Int {
            let first = index
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
            return index - first
        }
        func next(_ characters: String) -> Bool {
            guard index < bytes.count, characters.utf8.contains(bytes[index]) else { return false }
            index += 1
            return true
        }
        _ = next("-")
        let integerStart = index
        let integerDigits = digits()
        var valid = integerDigits > 0 && !(integerDigits > 1 && bytes[integerStart] == UInt8(ascii: "0"))
        if valid, next(".") { valid = digits() > 0 }
        if valid, next("eE") {
            _ = next("+-")
            valid = digits() > 0
        }
        guard valid else {
            index = start
            throw fail("expected a value")
        }
        guard index - start <= Self.numberLengthLimit else {
            index = start
            throw fail("number longer than \(Self.numberLengthLimit) characters")
        }
        guard let value = Double(String(decoding: bytes[start..<index], as: UTF8.self)) else {
            index = start
            throw fail("expected a value")
        }
        return value
    }
}
