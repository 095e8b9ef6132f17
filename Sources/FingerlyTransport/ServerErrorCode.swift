/// The machine-readable `code` of an error body `{"error":{"code":"…","message":"…"}}`, found by a
/// small bounded scan: this target does not know the model's JSON reader, and needs one field.
package enum ServerErrorCode {
    /// Only the start of a body is looked at; an error body is a few hundred bytes.
    static let scannedPrefix = 16384
    static let maximumDepth = 16
    static let maximumCodeLength = 64

    /// nil unless the body is such an object (other members anywhere are skipped) and the code is
    /// 1…64 characters of `a-z`, `0-9` and `_`.
    package static func parse(_ body: [UInt8]) -> String? {
        var scanner = Scanner(bytes: body.prefix(scannedPrefix))
        return scanner.topLevel()
    }

    private struct Scanner {
        let bytes: ArraySlice<UInt8>
        var index: Int

        init(bytes: ArraySlice<UInt8>) {
            self.bytes = bytes
            index = bytes.startIndex
        }

        mutating func topLevel() -> String? {
            var code: String?
            let parsed = object { key, scanner in
                if key == "error", scanner.peek() == UInt8(ascii: "{") {
                    var inner: String?
                    guard scanner.object(depth: 1, { innerKey, innerScanner in
                        if innerKey == "code", innerScanner.peek() == UInt8(ascii: "\"") {
                            guard let value = innerScanner.string(limit: maximumCodeLength + 1) else { return false }
                            inner = value
                            return true
                        }
                        return innerScanner.skipValue(depth: 2)
                    }) else { return false }
                    code = inner
                    return true
                }
                return scanner.skipValue(depth: 1)
            }
            guard parsed, let code, (1...maximumCodeLength).contains(code.utf8.count),
                  code.utf8.allSatisfy({ (0x61...0x7A).contains($0) || (0x30...0x39).contains($0) || $0 == 0x5F }) else { return nil }
            return code
        }

        mutating func skipBlanks() {
            while index < bytes.endIndex, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[index]) { index += 1 }
        }

        mutating func peek() -> UInt8? {
            skipBlanks()
            return index < bytes.endIndex ? bytes[index] : nil
        }

        mutating func consume(_ byte: UInt8) -> Bool {
            guard peek() == byte else { return false }
            index += 1
            return true
        }

        /// Calls `member` with the scanner positioned at each member's value; it must consume it.
        mutating func object(depth: Int = 0, _ member: (String, inout Scanner) -> Bool) -> Bool {
            guard depth < maximumDepth, consume(UInt8(ascii: "{")) else { return false }
            if consume(UInt8(ascii: "}")) { return true }
            while true {
                guard peek() == UInt8(ascii: "\""), let key = string(limit: 64) ?? skippedString(),
                      consume(UInt8(ascii: ":")), member(key, &self) else { return false }
                if consume(UInt8(ascii: ",")) { continue }
                return consume(UInt8(ascii: "}"))
            }
        }

        /// A key too long to be one we look for: skipped, and reported as an empty name.
        mutating func skippedString() -> String? {
            skipString() ? "" : nil
        }

        /// The string at the cursor with its escapes kept as written; nil past `limit` bytes (the
        /// cursor is then left at the string's start) or when unterminated.
        mutating func string(limit: Int) -> String? {
            let start = index
            guard consume(UInt8(ascii: "\"")) else { return nil }
            var text: [UInt8] = []
            while index < bytes.endIndex {
                let byte = bytes[index]
                index += 1
                if byte == UInt8(ascii: "\"") { return String(decoding: text, as: UTF8.self) }
                if byte == UInt8(ascii: "\\") || byte < 0x20 || text.count >= limit {
                    index = start
                    return nil
                }
                text.append(byte)
            }
            index = start
            return nil
        }

        mutating func skipString() -> Bool {
            guard consume(UInt8(ascii: "\"")) else { return false }
            while index < bytes.endIndex {
                let byte = bytes[index]
                index += 1
                if byte == UInt8(ascii: "\"") { return true }
                if byte == UInt8(ascii: "\\") { index += 1 }
            }
            return false
        }

        mutating func skipValue(depth: Int) -> Bool {
            guard depth < maximumDepth, let first = peek() else { return false }
            switch first {
            case UInt8(ascii: "\""):
                return skipString()
            case UInt8(ascii: "{"):
                return object(depth: depth) { _, scanner in scanner.skipValue(depth: depth + 1) }
            case UInt8(ascii: "["):
                index += 1
                if consume(UInt8(ascii: "]")) { return true }
                while true {
                    guard skipValue(depth: depth + 1) else { return false }
                    if consume(UInt8(ascii: ",")) { continue }
                    return consume(UInt8(ascii: "]"))
                }
            default:
                // A number or a literal: everything up to the next delimiter.
                let start = index
                while index < bytes.endIndex, !",}] \t\r\n".utf8.contains(bytes[index]) { index += 1 }
                return index > start
            }
        }
    }
}
