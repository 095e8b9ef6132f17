import FoundationEssentials

/// JSON written into one buffer, byte for byte as `JSONEncoder.fingerly` writes it: the callers
/// give members in the order sorted keys give. JSONEncoder's generic walk and the type metadata
/// it instantiates were half of a CLI run's instructions; the few rules its output follows for
/// strings, numbers and ISO 8601 times are written out here (`HandWrittenJSONTests` holds them to
/// JSONEncoder's bytes).
package struct JSONBuffer {
    package private(set) var bytes: [UInt8] = []
    /// Whether a value was written that JSONEncoder refuses to encode (NaN, an infinity), as
    /// `null`: the caller that must refuse it as JSONEncoder did asks JSONEncoder why.
    package private(set) var refused = false
    /// Whether the object being written has no member yet.
    private var empty = true

    package init(capacity: Int) { bytes.reserveCapacity(capacity) }

    // MARK: Containers

    package mutating func object(_ members: (inout JSONBuffer) -> Void) {
        bytes.append(UInt8(ascii: "{"))
        let outer = empty
        empty = true
        members(&self)
        empty = outer
        bytes.append(UInt8(ascii: "}"))
    }

    /// A member of the object being written.
    package mutating func member(_ name: String, _ value: (inout JSONBuffer) -> Void) {
        if !empty { bytes.append(UInt8(ascii: ",")) }
        empty = false
        string(name)
        bytes.append(UInt8(ascii: ":"))
        value(&self)
    }

    package mutating func array<Element>(_ items: [Element], _ element: (inout JSONBuffer, Element) -> Void) {
        bytes.append(UInt8(ascii: "["))
        // Indices, not enumerated(): an enumerated sequence of each element type is one more
        // generic-metadata lookup per start.
        for index in items.indices {
            if index > 0 { bytes.append(UInt8(ascii: ",")) }
            element(&self, items[index])
        }
        bytes.append(UInt8(ascii: "]"))
    }

    package mutating func strings(_ texts: [String]) { array(texts) { $0.string($1) } }

    // MARK: Scalars

    /// A value already encoded.
    package mutating func encoded(_ value: [UInt8]) { bytes.append(contentsOf: value) }

    package mutating func literal(_ text: StaticString) {
        bytes.append(contentsOf: UnsafeBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }

    package mutating func bool(_ value: Bool) { literal(value ? "true" : "false") }

    package mutating func integer(_ value: Int) { bytes.append(contentsOf: String(value).utf8) }

    /// UTF-8 as is (a slash, DEL, U+2028 and U+2029 too) but for what JSONEncoder escapes: a
    /// quote, a backslash, and the control characters, five of them by their short forms and the
    /// others as `\u00xx` in lower-case hex. Runs that need no escape are copied whole.
    package mutating func string(_ text: String) {
        var text = text
        text.withUTF8 { utf8 in
            bytes.append(UInt8(ascii: "\""))
            var runStart = 0
            for index in 0..<utf8.count {
                let byte = utf8[index]
                guard byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") else { continue }
                if runStart < index { bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[runStart..<index])) }
                runStart = index + 1
                bytes.append(UInt8(ascii: "\\"))
                switch byte {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"): bytes.append(byte)
                case 0x08: bytes.append(UInt8(ascii: "b"))
                case 0x09: bytes.append(UInt8(ascii: "t"))
                case 0x0A: bytes.append(UInt8(ascii: "n"))
                case 0x0C: bytes.append(UInt8(ascii: "f"))
                case 0x0D: bytes.append(UInt8(ascii: "r"))
                default:
                    let hex: StaticString = "0123456789abcdef"
                    bytes.append(contentsOf: [UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"),
                                              hex.utf8Start[Int(byte >> 4)], hex.utf8Start[Int(byte & 0x0F)]])
                }
            }
            if runStart < utf8.count { bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[runStart...])) }
            bytes.append(UInt8(ascii: "\""))
        }
    }

    package mutating func stringOrNull(_ text: String?) {
        if let text { string(text) } else { literal("null") }
    }

    /// The shortest form, Swift's `description`, as JSONEncoder writes it: an integral value
    /// without its ".0", an exponent as `1e+16` or `5e-324`. JSONEncoder refuses NaN and the
    /// infinities; those are written as `null` and marked `refused`.
    package mutating func real(_ value: Double) {
        guard value.isFinite else { return fallBack(value) }
        var text = value.description
        if text.hasSuffix(".0") { text.removeLast(2) }
        bytes.append(contentsOf: text.utf8)
    }

    /// `.iso8601` as JSONEncoder writes it: the second the time falls in, the fraction dropped
    /// (counted, as `Date` keeps it, from 2001, so a time a rounding away from the next second
    /// is still in it).
    package mutating func date(_ value: Date) {
        let unixSeconds = value.timeIntervalSinceReferenceDate.rounded(.down)
            + Date.timeIntervalBetween1970AndReferenceDate
        guard unixSeconds >= 0, unixSeconds < Self.firstSecondOfYear10000 else { return fallBack(value) }
        string(Self.iso8601(Int64(unixSeconds)))
    }

    /// A value whose spelling is left to JSONEncoder; `null`, marked `refused`, when it refuses it.
    private mutating func fallBack(_ value: some Encodable) {
        if let encoded = try? JSONEncoder.fingerly.encode(value) {
            bytes.append(contentsOf: encoded)
        } else {
            refused = true
            literal("null")
        }
    }

    private static let firstSecondOfYear10000: Double = 253_402_300_800

    /// `YYYY-MM-DDTHH:MM:SSZ` for Unix seconds, as `.iso8601` writes a whole second; outside
    /// years 1970–9999 (where its calendar and year width are not this one's) JSONEncoder writes it.
    package static func iso8601(_ seconds: Int64) -> String {
        guard seconds >= 0, Double(seconds) < firstSecondOfYear10000 else {
            let time = Date(timeIntervalSince1970: Double(seconds))
            let encoded = (try? JSONEncoder.fingerly.encode(time)).map(Array.init) ?? []
            return String(decoding: encoded.dropFirst().dropLast(), as: UTF8.self)
        }
        let days = seconds / 86_400
        let secondOfDay = seconds % 86_400
        // Civil date from days since 1970-01-01, years counted from March so the leap day ends one.
        let shifted = days + 719_468
        let era = shifted / 146_097
        let dayOfEra = shifted - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1_460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthIndex = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * monthIndex + 2) / 5 + 1
        let month = monthIndex < 10 ? monthIndex + 3 : monthIndex - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        var text: [UInt8] = []
        text.reserveCapacity(20)
        func digits(_ value: Int64, _ width: Int) {
            var divisor: Int64 = 1
            for _ in 1..<width { divisor *= 10 }
            while divisor > 0 {
                text.append(UInt8(ascii: "0") + UInt8(value / divisor % 10))
                divisor /= 10
            }
        }
        digits(year, 4); text.append(UInt8(ascii: "-")); digits(month, 2); text.append(UInt8(ascii: "-"))
        digits(day, 2); text.append(UInt8(ascii: "T")); digits(secondOfDay / 3_600, 2); text.append(UInt8(ascii: ":"))
        digits(secondOfDay % 3_600 / 60, 2); text.append(UInt8(ascii: ":")); digits(secondOfDay % 60, 2)
        text.append(UInt8(ascii: "Z"))
        return String(decoding: text, as: UTF8.self)
    }

    /// UTF-8 byte order, as JSONEncoder's sorted keys are, without a generic walk of two views.
    package static func precedes(_ left: String, _ right: String) -> Bool {
        var left = left, right = right
        return left.withUTF8 { a in
            right.withUTF8 { b in
                for index in 0..<min(a.count, b.count) where a[index] != b[index] { return a[index] < b[index] }
                return a.count < b.count
            }
        }
    }
}
