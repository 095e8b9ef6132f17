/// A typed signal value. Encoded as the bare JSON value so reports stay easy to read.
public enum SignalValue: Sendable, Hashable, Codable, CustomStringConvertible {
    /// A flag.
    case bool(Bool)
    /// A count, size or id.
    case int(Int)
    /// Text, or a keyed hash for identifiers.
    case string(String)
    /// A list of texts.
    case strings([String])

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Int.self) {
            self = .int(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let strings = try? container.decode([String].self) {
            self = .strings(strings)
        } else if let number = try? container.decode(Double.self) {
            // Named here: the generic failure would say only that an array was expected.
            throw DecodingError.dataCorruptedError(in: container, debugDescription: number.rounded() == number
                ? "an integer out of range: a signal's integers are 64-bit "
                    + "(-9223372036854775808 to 9223372036854775807)"
                : "a number with a fraction: a signal is a boolean, an integer, a string or an array of strings")
        } else if container.decodeNil() {
            throw DecodingError.dataCorruptedError(in: container, debugDescription:
                "null: a signal is a boolean, an integer, a string or an array of strings")
        } else {
            // An object, an array of other than strings, or a number no Double holds (1e400).
            throw DecodingError.dataCorruptedError(in: container, debugDescription:
                "not a boolean, a 64-bit integer, a string or an array of strings")
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .bool(let value): try container.encode(value)
        case .int(let value): try container.encode(value)
        case .string(let value): try container.encode(value)
        case .strings(let value): try container.encode(value)
        }
    }

    public var description: String {
        switch self {
        case .bool(let value): return String(value)
        case .int(let value): return String(value)
        case .string(let value): return value
        case .strings(let value): return value.joined(separator: ", ")
        }
    }

    /// The catalogue's name for this value's type.
    var typeName: String {
        switch self {
        case .bool: return "bool"
        case .int: return "int"
        case .string: return "string"
        case .strings: return "strings"
        }
    }
}

/// Which scheduling tier a probe belongs to.
public enum Tier: String, Sendable, Codable, Hashable, CaseIterable, Comparable {
    /// Cheap files and syscalls, always run first.
    case fast
    /// Heavier work that must never delay the fast tier.
    case deferred

    /// The fast tier sorts first.
    public static func < (lhs: Tier, rhs: Tier) -> Bool {
        lhs == .fast && rhs == .deferred
    }
}

/// How a probe run ended.
public enum ProbeStatus: String, Sendable, Codable, Hashable {
    /// `ok`: ran and reported; `absent`: its sources do not exist here; `denied`: a source was
    /// not readable (EACCES, EPERM); `malformed`: a source did not parse; `error`: another failure;
    /// `timeout`: abandoned at its timeout or the budget; `skipped`: not run, by request.
    case ok, absent, denied, malformed, error, timeout, skipped

    /// A status that means evidence existed but could not be read.
    package var hidesEvidence: Bool {
        switch self {
        case .denied, .malformed, .error, .timeout: return true
        case .ok, .absent, .skipped: return false
        }
    }
}
