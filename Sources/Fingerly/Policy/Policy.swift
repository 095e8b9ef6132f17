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
        let template: ReasonTemplate
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
    /// The policy's `privacy.freeText`.
    public let freeText: FreeTextHandling
    private let signalsByVerdict: [VerdictName: [String]]

    init(name: String, source: String, verdicts: [VerdictName: VerdictRules], suspectWeights: [VerdictName: Int],
         confidenceFactors: [Confidence: Double], freeText: FreeTextHandling = .fingerprint) {
        self.freeText = freeText
        self.name = name
        self.source = source
        self.verdicts = verdicts
        self.suspectWeights = suspectWeights
        self.confidenceFactors = confidenceFactors
        // Once, with a set: every evaluation asks, and a policy may hold tens of thousands of rules.
        signalsByVerdict = verdicts.mapValues { verdict in
            var names: [String] = []
            var seen: Set<String> = []
            for rule in verdict.rules {
                for name in rule.conditions.map(\.signal) + (rule.kindFrom.map { [$0] } ?? []) where seen.insert(name).inserted {
                    names.append(name)
                }
            }
            return names
        }
    }

    /// Every signal any rule reads, for the verdict it belongs to, in policy order.
    func signals(of verdict: VerdictName) -> [String] { signalsByVerdict[verdict] ?? [] }

    /// The policy compiled into the binary.
    public static func embedded() -> Policy {
        do {
            return try PolicyLoader(catalogue: .embedded, tables: .embedded)
                .load(Data(PackageResources.default_policy_json), source: "policies/default.json (embedded)")
        } catch {
            fatalError("the embedded policy is invalid: \(error)")
        }
    }

    /// Largest policy file read; a larger one is refused, never cut short.
    public static let fileSizeLimit = 4 * 1024 * 1024

    /// Loads and validates a policy file.
    public static func load(contentsOf path: String) throws(PolicyError) -> Policy {
        let bytes = try readRegularFile(path, limit: fileSizeLimit)
        return try PolicyLoader(catalogue: .embedded, tables: .embedded).load(Data(bytes), source: path)
    }

    /// Reads a whole regular file of at most `limit` bytes. The path is the operator's, not
    /// the measured host's, so it is opened as given (relative to the working directory);
    /// O_NONBLOCK keeps a FIFO without a writer from holding open(2) forever, and the type is
    /// checked on the descriptor that is then read, so nothing can be swapped in between.
    static func readRegularFile(_ path: String, limit: Int) throws(PolicyError) -> [UInt8] {
        func failure(_ message: String) -> PolicyError { PolicyError(file: path, location: nil, field: nil, message: message) }
        func unreadable(_ error: SystemError) -> PolicyError {
            failure("cannot read: \(HostReadError(path: path, systemError: error).failure.rawValue) (\(error))")
        }
        let fd: Int32
        switch retryingOnInterrupt({ open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC) }) {
        case .success(let descriptor): fd = descriptor
        case .failure(let error): throw unreadable(error)
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw unreadable(.current) }
        guard (info.st_mode & S_IFMT) == S_IFREG else { throw failure("not a regular file (\(fileKind(info.st_mode)))") }
        guard info.st_size <= limit else { throw failure("\(info.st_size) bytes, larger than the limit of \(limit) bytes") }

        // One byte past the limit tells a file that grew since fstat from one that fits.
        var bytes: [UInt8] = []
        bytes.reserveCapacity(Int(info.st_size))
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while bytes.count <= limit {
            let wanted = min(chunk.count, limit + 1 - bytes.count)
            let result = chunk.withUnsafeMutableBytes { buffer in
                retryingOnInterrupt { Glibc.read(fd, buffer.baseAddress, wanted) }
            }
            switch result {
            case .success(0): return bytes
            case .success(let count): bytes.append(contentsOf: chunk[0..<count])
            case .failure(let error): throw unreadable(error)
            }
        }
        throw failure("larger than the limit of \(limit) bytes")
    }

    private static func fileKind(_ mode: mode_t) -> String {
        switch mode & S_IFMT {
        case S_IFIFO: return "a FIFO"
        case S_IFCHR: return "a character device"
        case S_IFBLK: return "a block device"
        case S_IFDIR: return "a directory"
        case S_IFSOCK: return "a socket"
        default: return "of type \(String(mode & S_IFMT, radix: 8))"
        }
    }
}

/// A policy that cannot be used, naming the file, the rule and the field.
public struct PolicyError: Error, Sendable, Hashable, CustomStringConvertible {
    public let file: String
    /// e.g. "verdict 'debugger', rule 2 ('tracer_pid')".
    public let location: String?
    public let field: String?
    public let message: String

    /// Every part may quote the policy or its file name: control characters are escaped
    /// (ESC as `\u001B`, CR as `\r`) and each part is cut short, so an error printed to a
    /// terminal shows the text rather than obeying it.
    init(file: String, location: String?, field: String?, message: String) {
        self.file = BoundedText.bounded(file, limit: Self.fileNameByteLimit)
        self.location = location.map { BoundedText.bounded($0, limit: Self.partByteLimit) }
        self.field = field.map { BoundedText.bounded($0, limit: Self.partByteLimit) }
        self.message = BoundedText.bounded(message, limit: Self.partByteLimit)
    }

    private static let fileNameByteLimit = 4096
    private static let partByteLimit = 1024

    public var description: String {
        var text = file
        if let location { text += ": " + location }
        if let field { text += ": field '\(field)'" }
        return text + ": " + message
    }
}
