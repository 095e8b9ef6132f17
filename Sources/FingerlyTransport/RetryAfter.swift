/// The `Retry-After` field (RFC 9110 §10.2.3): delta-seconds, or an HTTP-date in any of the three
/// forms a recipient must accept (§5.6.7): IMF-fixdate, the obsolete RFC 850 form and asctime.
package enum RetryAfter {
    /// Longer than any valid form with generous blanks: refused before it is looked at.
    static let maximumLength = 64
    /// Saturation point of delta-seconds: far beyond any cap a caller would apply.
    static let maximumSeconds: Int64 = 1 << 40

    /// The pause the field asks for in milliseconds, from `now` (seconds since the epoch); 0 for a
    /// date in the past; nil when the value is none of the forms.
    package static func delayMilliseconds(_ value: String, now: Int64) -> Int64? {
        guard value.utf8.count <= maximumLength else { return nil }
        let bytes = Array(value.utf8.drop { $0 == 0x20 || $0 == 0x09 }.reversed().drop { $0 == 0x20 || $0 == 0x09 }.reversed())
        guard let first = bytes.first else { return nil }
        if isDigit(first) {
            guard bytes.allSatisfy(isDigit) else { return nil }
            var seconds: Int64 = 0
            for byte in bytes {
                seconds = min(maximumSeconds, seconds * 10 + Int64(byte - 0x30))
            }
            return seconds * 1000
        }
        guard let date = HTTPDate.parse(bytes, now: now) else { return nil }
        // Both sides are bounded (years 1…9999, and a sane clock), so no subtraction here can overflow.
        guard date > now else { return 0 }
        let seconds = date.subtractingReportingOverflow(now)
        guard !seconds.overflow else { return nil }
        return min(maximumSeconds, seconds.partialValue) * 1000
    }

    static func isDigit(_ byte: UInt8) -> Bool { (0x30...0x39).contains(byte) }
}

/// An HTTP-date as seconds since the epoch.
enum HTTPDate {
    static let shortDays = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
    static let longDays = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
    static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    static func parse(_ bytes: [UInt8], now: Int64) -> Int64? {
        let text = String(decoding: bytes, as: UTF8.self)
        guard bytes.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) else { return nil }
        if let comma = text.firstIndex(of: ",") {
            let day = text[..<comma]
            let rest = text[text.index(after: comma)...]
            if shortDays.contains(String(day)) { return imfFixdate(rest) }
            if longDays.contains(String(day)) { return rfc850(rest, now: now) }
            return nil
        }
        return asctime(text)
    }

    /// ` 06 Nov 1994 08:49:37 GMT`
    private static func imfFixdate(_ rest: Substring) -> Int64? {
        let parts = rest.split(separator: " ", omittingEmptySubsequences: false)
        guard parts.count == 6, parts[0].isEmpty, parts[5] == "GMT",
              let day = number(parts[1], digits: 2), let month = months.firstIndex(of: String(parts[2])),
              let year = number(parts[3], digits: 4), let time = timeOfDay(parts[4]) else { return nil }
        return epochSeconds(year: year, month: month + 1, day: day, time: time)
    }

    /// ` 06-Nov-94 08:49:37 GMT`; the two-digit year is read as RFC 9110 says: one that would fall more
    /// than 50 years in the future is the latest past year with those last two digits.
    private static func rfc850(_ rest: Substring, now: Int64) -> Int64? {
        let parts = rest.split(separator: " ", omittingEmptySubsequences: false)
        guard parts.count == 4, parts[0].isEmpty, parts[3] == "GMT" else { return nil }
        let date = parts[1].split(separator: "-", omittingEmptySubsequences: false)
        guard date.count == 3, let day = number(date[0], digits: 2), let month = months.firstIndex(of: String(date[1])),
              let shortYear = number(date[2], digits: 2), let time = timeOfDay(parts[2]) else { return nil }
        let currentYear = civilYear(epochSeconds: now)
        var year = currentYear - currentYear % 100 + shortYear
        if year > currentYear + 50 { year -= 100 }
        if year < currentYear - 50 { year += 100 }
        return epochSeconds(year: year, month: month + 1, day: day, time: time)
    }

    /// `Sun Nov  6 08:49:37 1994` (a one-digit day is padded with a blank).
    private static func asctime(_ text: String) -> Int64? {
        let parts = text.split(separator: " ", omittingEmptySubsequences: true)
        guard parts.count == 5, shortDays.contains(String(parts[0])), let month = months.firstIndex(of: String(parts[1])),
              (1...2).contains(parts[2].utf8.count), let day = number(parts[2], digits: parts[2].utf8.count),
              let time = timeOfDay(parts[3]), let year = number(parts[4], digits: 4) else { return nil }
        // Only the one blank of padding is allowed: "Nov  6" but not "Nov   6" nor "Nov  16".
        let expected = "\(parts[0]) \(parts[1]) \(day < 10 ? " " : "")\(parts[2]) \(parts[3]) \(parts[4])"
        guard expected == text else { return nil }
        return epochSeconds(year: year, month: month + 1, day: day, time: time)
    }

    private static func number(_ text: Substring, digits: Int) -> Int? {
        guard text.utf8.count == digits, text.utf8.allSatisfy(RetryAfter.isDigit) else { return nil }
        return text.utf8.reduce(0) { $0 * 10 + Int($1 - 0x30) }
    }

    private static func timeOfDay(_ text: Substring) -> Int? {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        // Second 60: a leap second, which the grammar allows.
        guard parts.count == 3, let hour = number(parts[0], digits: 2), let minute = number(parts[1], digits: 2),
              let second = number(parts[2], digits: 2), hour < 24, minute < 60, second <= 60 else { return nil }
        return hour * 3600 + minute * 60 + second
    }

    private static func isLeap(_ year: Int) -> Bool { year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) }

    static func epochSeconds(year: Int, month: Int, day: Int, time: Int) -> Int64? {
        let lengths = [31, isLeap(year) ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
        guard (1...9999).contains(year), (1...12).contains(month), day >= 1, day <= lengths[month - 1] else { return nil }
        return Int64(daysFromCivil(year: year, month: month, day: day)) * 86400 + Int64(time)
    }

    /// Days since 1970-01-01 in the proleptic Gregorian calendar (Howard Hinnant's algorithm).
    private static func daysFromCivil(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146097 + dayOfEra - 719468
    }

    /// The Gregorian year of an instant, for reading two-digit years; clamped to a range where the
    /// arithmetic is trivially safe.
    private static func civilYear(epochSeconds: Int64) -> Int {
        let days = Int(max(-100_000_000, min(100_000_000, epochSeconds / 86400))) + 719468
        let era = (days >= 0 ? days : days - 146096) / 146097
        let dayOfEra = days - era * 146097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36524 - dayOfEra / 146096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthIndex = (5 * dayOfYear + 2) / 153
        return yearOfEra + era * 400 + (monthIndex >= 10 ? 1 : 0)
    }
}
