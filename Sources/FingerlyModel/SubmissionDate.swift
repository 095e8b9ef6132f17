import FoundationEssentials

/// The date-times a submission may carry (docs/openapi.yaml, DateTime): RFC 3339 with an upper-case
/// T, seconds 00–59, an optional fraction, then Z or an offset within ±18:00. Every field is checked
/// against its range (a 30 February is refused, not rolled into March), so the server accepts exactly
/// what the document's pattern and format do.
package enum SubmissionDate {
    /// Largest offset from UTC, in minutes.
    static let offsetLimitMinutes = 18 * 60

    package static func date(_ text: String) -> Date? {
        let bytes = Array(text.utf8)
        guard bytes.count >= 20, bytes[4] == UInt8(ascii: "-"), bytes[7] == UInt8(ascii: "-"),
              bytes[10] == UInt8(ascii: "T"), bytes[13] == UInt8(ascii: ":"), bytes[16] == UInt8(ascii: ":") else {
            return nil
        }
        func number(_ range: Range<Int>) -> Int? {
            var value = 0
            for byte in bytes[range] {
                guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
                value = value * 10 + Int(byte - UInt8(ascii: "0"))
            }
            return value
        }
        guard let year = number(0..<4), let month = number(5..<7), let day = number(8..<10),
              let hour = number(11..<13), let minute = number(14..<16), let second = number(17..<19),
              (1...12).contains(month), (1...daysIn(month: month, year: year)).contains(day),
              hour < 24, minute < 60, second < 60 else { return nil }
        var index = 19
        var fraction = 0.0
        if bytes[index] == UInt8(ascii: ".") {
            index += 1
            var scale = 0.1
            let start = index
            while index < bytes.count, bytes[index] >= UInt8(ascii: "0"), bytes[index] <= UInt8(ascii: "9") {
                fraction += Double(bytes[index] - UInt8(ascii: "0")) * scale
                scale /= 10
                index += 1
            }
            guard index > start else { return nil }
        }
        guard index < bytes.count else { return nil }
        var offsetMinutes = 0
        switch bytes[index] {
        case UInt8(ascii: "Z"):
            guard index + 1 == bytes.count else { return nil }
        case UInt8(ascii: "+"), UInt8(ascii: "-"):
            guard index + 6 == bytes.count, bytes[index + 3] == UInt8(ascii: ":"),
                  let hours = number(index + 1..<index + 3), let minutes = number(index + 4..<index + 6), minutes < 60,
                  hours * 60 + minutes <= offsetLimitMinutes else { return nil }
            offsetMinutes = (bytes[index] == UInt8(ascii: "-") ? -1 : 1) * (hours * 60 + minutes)
        default:
            return nil
        }
        let seconds = daysSince1970(year: year, month: month, day: day) * 86_400 + hour * 3_600 + minute * 60 + second
            - offsetMinutes * 60
        return Date(timeIntervalSince1970: Double(seconds) + fraction)
    }

    static func daysIn(month: Int, year: Int) -> Int {
        let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
        return [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][month - 1]
    }

    /// Days since 1970-01-01 in the proleptic Gregorian calendar, counted from March so that the
    /// leap day ends a year; years 0000–9999.
    static func daysSince1970(year: Int, month: Int, day: Int) -> Int {
        let shiftedYear = month <= 2 ? year - 1 : year
        let era = (shiftedYear >= 0 ? shiftedYear : shiftedYear - 399) / 400
        let yearOfEra = shiftedYear - era * 400
        let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }
}

/// A report's integer member past the signed 64-bit range, which JSONDecoder refuses without
/// naming it.
package struct OutOfRangeInteger: Error, Sendable, Hashable {
    /// `report.budgetMs`.
    package let path: String

    /// The report's integer members outside a probe's signals (SignalValue names its own).
    static let integerPaths = [["report", "schemaVersion"], ["report", "budgetMs"],
                               ["report", "identity", "hardwareIdVersion"], ["report", "identity", "instanceIdVersion"]]

    /// The first integer member of `body` past Int's range (the report's own first, then any
    /// number of the document past it or past a Double's, as `1e400`); nil when none is, or
    /// `body` is not JSON.
    static func find(in body: [UInt8]) -> OutOfRangeInteger? {
        guard let document = try? JSONParser.parse(body) else { return nil }
        for path in integerPaths {
            var value = document
            for name in path {
                guard case .object(let members) = value, let member = members[name] else { value = .null; break }
                value = member
            }
            // The parser's Double rounds the integers next to Int's bounds onto 2^63 and -2^63 (one
            // fits): JSONDecoder failed, so one at a bound is taken as past it.
            if case .number(let number) = value, number.rounded() == number, abs(number) >= 9_223_372_036_854_775_808 {
                return OutOfRangeInteger(path: path.joined(separator: "."))
            }
        }
        return pastRange(in: document, at: "")
    }

    /// A number of `value` that no 64-bit integer or finite Double holds, named by its path.
    static func pastRange(in value: JSONValue, at path: String) -> OutOfRangeInteger? {
        switch value {
        case .number(let number):
            let past = !number.isFinite || (number.rounded() == number && abs(number) >= 9_223_372_036_854_775_808)
            return past ? OutOfRangeInteger(path: path) : nil
        case .array(let items):
            for (index, item) in items.enumerated() {
                if let found = pastRange(in: item, at: "\(path)[\(index)]") { return found }
            }
            return nil
        case .object(let members):
            // Sorted, so the member named does not depend on the dictionary's order.
            for name in members.keys.sorted() {
                if let found = pastRange(in: members[name]!, at: path.isEmpty ? name : "\(path).\(name)") { return found }
            }
            return nil
        case .null, .bool, .string:
            return nil
        }
    }
}

extension JSONDecoder {
    /// `fingerly`'s decoder with dates read as `SubmissionDate` reads them.
    static var submission: JSONDecoder {
        let decoder = JSONDecoder.fingerly
        decoder.dateDecodingStrategy = .custom { decoder in
            let container = try decoder.singleValueContainer()
            let text = try container.decode(String.self)
            guard let date = SubmissionDate.date(text) else {
                throw DecodingError.dataCorruptedError(in: container, debugDescription: "not an RFC 3339 date-time "
                    + "(YYYY-MM-DDTHH:MM:SS, an optional fraction, then Z or an offset within -18:00 and +18:00)")
            }
            return date
        }
        return decoder
    }
}
