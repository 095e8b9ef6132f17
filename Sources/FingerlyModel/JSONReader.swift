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

/// A strict RFC 8259 parser into `JSONValue`. Decoding an untyped document through Codable
/// costs a thrown error per failed type guess; this runs on every start, for the policy.
///
/// Strict where RFC 8259 leaves room, because a policy that two readers would understand
/// differently must not load: a duplicate member, invalid UTF-8 or an unpaired surrogate
/// is an error, not a last-one-wins or a replacement character.
package struct JSONParser {
    package struct SyntaxError: Error, Sendable, Hashable, CustomStringConvertible {
        /// The failing value, e.g. `$.verdicts.debugger.rules[2].when`: for a duplicate member the
        /// member itself, for a malformed object or array between its values the container.
        package let path: String
        /// Byte offset of the failing token in the document.
        package let offset: Int
        package let message: String
        package var description: String { "\(message) at \(path), byte \(offset)" }
    }

    /// Deepest nesting of arrays and objects; the parser recurses once per level.
    static let depthLimit = 128
    /// Longest rendered path in an error: a path may repeat keys of any length at every level.
    static let pathByteLimit = 256
    /// Longest member name a path quotes, in Unicode scalars.
    static let pathKeyScalarLimit = 32

    private enum PathComponent {
        case member(String)
        case element(Int)
    }

    private let bytes: [UInt8]
    private var index = 0
    private var depth = 0
    /// Where the value being read sits; rendered to text only when an error is thrown.
    private var path: [PathComponent] = []

    package static func parse(_ data: [UInt8]) throws(SyntaxError) -> JSONValue {
        var parser = JSONParser(bytes: data)
        let value = try parser.value()
        parser.skipWhitespace()
        guard parser.index == data.count else { throw parser.fail("unexpected text after the document") }
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

    private func fail(_ message: String, at offset: Int? = nil) -> SyntaxError {
        SyntaxError(path: Self.render(path), offset: offset ?? index, message: message)
    }

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

    /// Whether the byte at the index would continue a number or a literal: "0x10", "1-2" and
    /// "truex" are one bad token, not a good one followed by garbage in the container.
    private var atTokenContinuation: Bool { index < bytes.count && Self.continuesToken(bytes[index]) }

    /// A byte that may not follow a number or a literal (shared with `SubmissionReader`).
    static func continuesToken(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
             UInt8(ascii: "."), UInt8(ascii: "+"), UInt8(ascii: "-"):
            return true
        default: return false
        }
    }

    private mutating func literal(_ word: String) throws(SyntaxError) {
        let expected = Array(word.utf8)
        let start = index
        guard index + expected.count <= bytes.count, bytes[index..<index + expected.count].elementsEqual(expected) else {
            throw fail("expected a value")
        }
        index += expected.count
        guard !atTokenContinuation else { throw fail("expected a value", at: start) }
    }

    private mutating func nested<T>(_ body: (inout JSONParser) throws(SyntaxError) -> T) throws(SyntaxError) -> T {
        depth += 1
        guard depth <= Self.depthLimit else { throw fail("nested too deeply") }
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
                let keyOffset = parser.index
                let key = try parser.string()
                parser.path.append(.member(key))
                // Swift's String equality is canonical equivalence, so the dictionary would merge
                // "\u00e9" and "e\u0301", which RFC 8259 reads as two names: refused as well.
                if let earlier = members.index(forKey: key) {
                    let message = members.keys[earlier].utf8.elementsEqual(key.utf8)
                        ? "duplicate member name"
                        : "member name canonically equivalent to an earlier one (a duplicate for this reader)"
                    throw parser.fail(message, at: keyOffset)
                }
                parser.skipWhitespace()
                guard parser.index < parser.bytes.count, parser.bytes[parser.index] == UInt8(ascii: ":") else { throw parser.fail("expected ':'") }
                parser.index += 1
                members[key] = try parser.value()
                parser.path.removeLast()
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
                parser.path.append(.element(items.count))
                items.append(try parser.value())
                parser.path.removeLast()
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
        // Every byte of a run was checked as UTF-8 before the flush, so decoding repairs nothing.
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
            if byte >= 0x80 {
                index += try utf8SequenceLength()
                continue
            }
            if byte == UInt8(ascii: "\\") {
                flush(self, upTo: index)
                let escapeOffset = index
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
                    if (0xDC00..<0xE000).contains(code) { throw fail("unpaired low surrogate escape", at: escapeOffset) }
                    if (0xD800..<0xDC00).contains(code) {
                        guard index + 2 < bytes.count, bytes[index + 1] == UInt8(ascii: "\\"), bytes[index + 2] == UInt8(ascii: "u") else {
                            throw fail("unpaired high surrogate escape", at: escapeOffset)
                        }
                        index += 2
                        let low = try hex4()
                        guard (0xDC00..<0xE000).contains(low) else { throw fail("unpaired high surrogate escape", at: escapeOffset) }
                        code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                    }
                    guard let scalar = Unicode.Scalar(code) else { throw fail("invalid \\u escape", at: escapeOffset) }
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

    /// Length of the well-formed UTF-8 sequence at the index (Unicode table 3-7), which starts
    /// with a byte of 0x80 or more: no overlong forms, no encoded surrogates, nothing past U+10FFFF.
    private func utf8SequenceLength() throws(SyntaxError) -> Int {
        let lead = bytes[index]
        let length: Int
        var secondRange: ClosedRange<UInt8> = 0x80...0xBF
        switch lead {
        case 0xC2...0xDF: length = 2
        case 0xE0: length = 3; secondRange = 0xA0...0xBF
        case 0xE1...0xEC, 0xEE...0xEF: length = 3
        case 0xED: length = 3; secondRange = 0x80...0x9F
        case 0xF0: length = 4; secondRange = 0x90...0xBF
        case 0xF1...0xF3: length = 4
        case 0xF4: length = 4; secondRange = 0x80...0x8F
        case 0x80...0xBF: throw fail("invalid UTF-8: continuation byte without a lead byte")
        case 0xC0, 0xC1: throw fail("invalid UTF-8: overlong encoding")
        default: throw fail("invalid UTF-8: byte 0x\(String(lead, radix: 16, uppercase: true)) never occurs in UTF-8")
        }
        guard index + 1 < bytes.count, (0x80...0xBF).contains(bytes[index + 1]) else { throw fail("invalid UTF-8: truncated sequence") }
        guard secondRange.contains(bytes[index + 1]) else {
            switch lead {
            case 0xED: throw fail("invalid UTF-8: encoded surrogate")
            case 0xF4: throw fail("invalid UTF-8: beyond U+10FFFF")
            default: throw fail("invalid UTF-8: overlong encoding")
            }
        }
        for offset in 2..<length {
            guard index + offset < bytes.count, (0x80...0xBF).contains(bytes[index + offset]) else {
                throw fail("invalid UTF-8: truncated sequence")
            }
        }
        return length
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
        let signed = next("-")
        let integerStart = index
        let integerDigits = digits()
        var valid = integerDigits > 0 && !(integerDigits > 1 && bytes[integerStart] == UInt8(ascii: "0"))
        if valid, next(".") { valid = digits() > 0 }
        if valid, next("eE") {
            _ = next("+-")
            valid = digits() > 0
        }
        if valid, atTokenContinuation { valid = false }
        guard valid else {
            let looksNumeric = signed || integerDigits > 0
            index = start
            throw fail(looksNumeric ? "invalid number" : "expected a value")
        }
        guard index - start <= Self.numberLengthLimit else {
            index = start
            throw fail("number longer than \(Self.numberLengthLimit) characters")
        }
        guard let value = Double(String(decoding: bytes[start..<index], as: UTF8.self)) else {
            index = start
            throw fail("invalid number")
        }
        return value
    }

    /// `$.name` for plain names, `$["any name"]` (JSON-escaped, non-ASCII too, so the text is safe
    /// on a terminal) for the rest, `[n]` for elements. A long path keeps its two ends.
    private static func render(_ path: [PathComponent]) -> String {
        let parts = path.map { component -> String in
            switch component {
            case .element(let position): return "[\(position)]"
            case .member(let name): return renderMember(name)
            }
        }
        let total = parts.reduce(1) { $0 + $1.utf8.count }
        guard total > pathByteLimit else { return "$" + parts.joined() }
        let half = (pathByteLimit - "$…".utf8.count) / 2
        var headCount = 0
        var headBytes = 0
        while headCount < parts.count, headBytes + parts[headCount].utf8.count <= half {
            headBytes += parts[headCount].utf8.count
            headCount += 1
        }
        var tailStart = parts.count
        var tailBytes = 0
        while tailStart > headCount, tailBytes + parts[tailStart - 1].utf8.count <= half {
            tailBytes += parts[tailStart - 1].utf8.count
            tailStart -= 1
        }
        return "$" + parts[..<headCount].joined() + "…" + parts[tailStart...].joined()
    }

    private static func renderMember(_ name: String) -> String {
        func isNameScalar(_ scalar: Unicode.Scalar) -> Bool {
            scalar == "_" || ("a"..."z").contains(scalar) || ("A"..."Z").contains(scalar) || ("0"..."9").contains(scalar)
        }
        let scalars = name.unicodeScalars
        let isPlain = scalars.prefix(pathKeyScalarLimit + 1).count <= pathKeyScalarLimit
            && (scalars.first.map { !("0"..."9").contains($0) } ?? false)
            && scalars.allSatisfy(isNameScalar)
        if isPlain { return "." + name }
        var quoted = "[\""
        var count = 0
        for scalar in scalars {
            if count == pathKeyScalarLimit { quoted += "…"; break }
            count += 1
            switch scalar {
            case "\"": quoted += "\\\""
            case "\\": quoted += "\\\\"
            case " "..."~": quoted.unicodeScalars.append(scalar)
            default:
                for unit in String(scalar).utf16 {
                    let hex = String(unit, radix: 16, uppercase: true)
                    quoted += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                }
            }
        }
        return quoted + "\"]"
    }
}
