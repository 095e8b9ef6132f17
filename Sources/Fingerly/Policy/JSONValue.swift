import FoundationEssentials

/// Any JSON document, decoded without a schema so that policy validation can name the exact
/// field that is wrong instead of surfacing a generic decoding error.
enum JSONValue: Sendable, Hashable, Decodable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Double.self) {
            self = .number(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([JSONValue].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: JSONValue].self))
        }
    }

    var typeName: String {
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
    var signalValue: SignalValue? {
        switch self {
        case .bool(let value): return .bool(value)
        case .number(let value): return value.rounded() == value ? .int(Int(value)) : nil
        case .string(let value): return .string(value)
        case .array(let items):
            let strings = items.compactMap { item -> String? in if case .string(let text) = item { text } else { nil } }
            return strings.count == items.count ? .strings(strings) : nil
        case .null, .object: return nil
        }
    }
}
