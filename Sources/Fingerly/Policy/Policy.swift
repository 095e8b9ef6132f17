#if canImport(Glibc)
import Glibc
#endif
import FoundationEssentials

/// How sure a verdict is.
public enum Confidence: String, Sendable, Codable, Hashable, Comparable, CaseIterable {
    case low, medium, high

    var rank: Int { Confidence.allCases.firstIndex(of: self)! }
    public static func < (lhs: Confidence, rhs: Confidence) -> Bool { lhs.rank < rhs.rank }

    var raised: Confidence { self == .low ? .medium : .high }
}

/// The verdicts a policy decides, in report order.
public enum VerdictName: String, Sendable, Codable, Hashable, CaseIterable, CodingKeyRepresentable {
    case virtualization, container, debugger, instrumentation, tampering, mitm, proxy, automation, farm
}

/// A parsed, validated verdict policy (`policies/default.json` or `--policy FILE`).
public struct Policy: Sendable {
    public static let supportedVersion = 1

    struct Condition: Sendable {
        enum Test: Sendable {
            case equals(SignalValue)
            case notEquals(SignalValue)
            case oneOf([SignalValue])
            case present(Bool)
            case contains(String)
            case containsAny([String])
            case inTable([String])
            case greaterThan(Int)
            case lessThan(Int)
        }
        let signal: String
        let test: Test
    }

    struct Rule: Sendable {
        let id: String
        let conditions: [Condition]
        let confidence: Confidence
        let kind: String?
        let kindFrom: String?
        let reason: String
        /// Weak evidence: fires only beside a rule of medium or higher confidence, and never
        /// counts toward corroboration.
        let corroboratesOnly: Bool
    }

    struct VerdictRules: Sendable {
        let corroborate: Bool
        let rules: [Rule]
    }

    public let name: String
    public let source: String
    let verdicts: [VerdictName: VerdictRules]
    let suspectWeights: [VerdictName: Int]
    let confidenceFactors: [Confidence: Double]

    /// Every signal any rule reads, for the verdict it belongs to.
    func signals(of verdict: VerdictName) -> [String] {
        var names: [String] = []
        for rule in verdicts[verdict]?.rules ?? [] {
            for name in rule.conditions.map(\.signal) + (rule.kindFrom.map { [$0] } ?? []) where !names.contains(name) {
                names.append(name)
            }
        }
        return names
    }

    /// The policy compiled into the binary.
    public static func embedded() -> Policy {
        do {
            return try PolicyLoader(catalogue: .embedded, tables: .embedded)
                .load(Data(PackageResources.default_policy_json), source: "policies/default.json (embedded)")
        } catch {
            fatalError("the embedded policy is invalid: \(error)")
        }
    }

    /// Loads and validates a policy file.
    public static func load(contentsOf path: String) throws(PolicyError) -> Policy {
        let bytes: [UInt8]
        do {
            bytes = try HostFileSystem().read(path.hasPrefix("/") ? path : currentDirectory() + "/" + path, limit: 4 * 1024 * 1024)
        } catch {
            throw PolicyError(file: path, location: nil, field: nil, message: "cannot read: \(error.failure.rawValue) (\(error.detail))")
        }
        return try PolicyLoader(catalogue: .embedded, tables: .embedded).load(Data(bytes), source: path)
    }
}

/// A policy that cannot be used, naming the file, the rule and the field.
public struct PolicyError: Error, Sendable, Hashable, CustomStringConvertible {
    public let file: String
    /// e.g. "verdict 'debugger', rule 2 ('tracer_pid')".
    public let location: String?
    public let field: String?
    public let message: String

    public var description: String {
        var text = file
        if let location { text += ": " + location }
        if let field { text += ": field '\(field)'" }
        return text + ": " + message
    }
}

private func currentDirectory() -> String {
    var buffer = [CChar](repeating: 0, count: 4096)
    guard getcwd(&buffer, buffer.count) != nil else { return "." }
    return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}
