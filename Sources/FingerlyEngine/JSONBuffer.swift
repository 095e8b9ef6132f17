import FoundationEssentials
import FingerlyModel

/// JSON written into one buffer, byte for byte as `JSONEncoder.fingerly` writes it: the callers
/// give members in the order sorted keys give. Strings that need escaping and numbers outside
/// the plain decimal form still go through JSONEncoder, so this never decides an escape or a
/// number's spelling (`FastCodingTests` holds the writers built on it to JSONEncoder's bytes).
struct JSONBuffer {
    private(set) var bytes: [UInt8] = []
    /// Whether the object being written has no member yet.
    private var empty = true

    init(capacity: Int) { bytes.reserveCapacity(capacity) }

    // MARK: Containers

    mutating func object(_ members: (inout JSONBuffer) -> Void) {
        bytes.append(UInt8(ascii: "{"))
        let outer = empty
        empty = true
        members(&self)
        empty = outer
        bytes.append(UInt8(ascii: "}"))
    }

    /// A member of the object being written.
    mutating func member(_ name: String, _ value: (inout JSONBuffer) -> Void) {
        if !empty { bytes.append(UInt8(ascii: ",")) }
        empty = false
        string(name)
        bytes.append(UInt8(ascii: ":"))
        value(&self)
    }

    mutating func array<Element>(_ items: [Element], _ element: (inout JSONBuffer, Element) -> Void) {
        bytes.append(UInt8(ascii: "["))
        for (offset, item) in items.enumerated() {
            if offset > 0 { bytes.append(UInt8(ascii: ",")) }
            element(&self, item)
        }
        bytes.append(UInt8(ascii: "]"))
    }

    mutating func strings(_ texts: [String]) { array(texts) { $0.string($1) } }

    // MARK: Scalars

    /// A value already encoded.
    mutating func encoded(_ value: [UInt8]) { bytes.append(contentsOf: value) }

    mutating func literal(_ text: StaticString) {
        bytes.append(contentsOf: UnsafeBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }

    mutating func bool(_ value: Bool) { literal(value ? "true" : "false") }

    mutating func integer(_ value: Int) { bytes.append(contentsOf: String(value).utf8) }

    /// UTF-8 as is, but for a quote, a backslash or a control character: JSONEncoder escapes
    /// those (and writes the string). One pass over the bytes, one copy.
    mutating func string(_ text: String) {
        var text = text
        let written = text.withUTF8 { utf8 -> Bool in
            for byte in utf8 where byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") {
                return false
            }
            bytes.append(UInt8(ascii: "\""))
            bytes.append(contentsOf: utf8)
            bytes.append(UInt8(ascii: "\""))
            return true
        }
        if !written {
            bytes.append(contentsOf: (try? JSONEncoder.fingerly.encode(text)).map(Array.init) ?? Array(#""""#.utf8))
        }
    }

    mutating func stringOrNull(_ text: String?) {
        if let text { string(text) } else { literal("null") }
    }

    /// A Double whose shortest form is plain decimal digits, as JSONEncoder writes it: without
    /// the ".0" of an integral value. Anything else (an exponent) is JSONEncoder's to spell.
    mutating func real(_ value: Double) {
        var text = Array(value.description.utf8)
        let plain = value.isFinite && text.allSatisfy { byte in
            (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9"))
                || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "-")
        }
        guard plain else {
            bytes.append(contentsOf: (try? JSONEncoder.fingerly.encode(value)).map(Array.init) ?? Array("null".utf8))
            return
        }
        if text.count > 2, text.suffix(2).elementsEqual(".0".utf8) { text.removeLast(2) }
        bytes.append(contentsOf: text)
    }

    /// Whole seconds as `.iso8601` writes them; a fraction is JSONEncoder's to write.
    mutating func date(_ value: Date) {
        let seconds = value.timeIntervalSince1970
        guard seconds.rounded(.down) == seconds, let whole = Int64(exactly: seconds) else {
            bytes.append(contentsOf: (try? JSONEncoder.fingerly.encode(value)).map(Array.init) ?? Array("null".utf8))
            return
        }
        string(AnswerWriter.iso8601(whole))
    }

    /// UTF-8 byte order, as JSONEncoder's sorted keys are, without a generic walk of two views.
    static func precedes(_ left: String, _ right: String) -> Bool {
        var left = left, right = right
        return left.withUTF8 { a in
            right.withUTF8 { b in
                for index in 0..<min(a.count, b.count) where a[index] != b[index] { return a[index] < b[index] }
                return a.count < b.count
            }
        }
    }
}
