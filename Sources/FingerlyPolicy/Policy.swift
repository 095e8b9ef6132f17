import FingerlyModel

/// A parsed, validated verdict policy (`policies/default.json` or `--policy FILE`).
package struct Policy: Sendable, Equatable {
    package static let supportedVersion = 1

    struct Condition: Sendable, Equatable {
        enum Test: Sendable, Equatable {
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

    struct Rule: Sendable, Equatable {
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

    struct VerdictRules: Sendable, Equatable {
        let corroborate: Bool
        let rules: [Rule]
    }

    package let name: String
    package let source: String
    let verdicts: [VerdictName: VerdictRules]
    /// How verdicts become a suspect score; nil when the policy scores nothing.
    package let suspect: SuspectScoring?
    /// The policy's `privacy.freeText`.
    package let freeText: FreeTextHandling
    private let signalsByVerdict: [VerdictName: [String]]

    init(name: String, source: String, verdicts: [VerdictName: VerdictRules], suspect: SuspectScoring?, freeText: FreeTextHandling = .fingerprint) {
        self.freeText = freeText
        self.name = name
        self.source = source
        self.verdicts = verdicts
        self.suspect = suspect
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
    package func signals(of verdict: VerdictName) -> [String] { signalsByVerdict[verdict] ?? [] }

    // The default policy itself, `compiledDefault`, is in CompiledDefaultPolicy.swift, generated
    // from policies/default.json: parsing and validating it at every start cost about 10 M instructions.
    package static let embeddedSource = "policies/default.json (embedded)"
    /// What the embedded policy's `privacy.freeText` says, known without parsing the policy on
    /// the first collection's critical path (parsing it there cost 0.6 ms of a 17 ms fast-tier
    /// run). `PrivacyTests.theEmbeddedPolicyFingerprintsFreeText` checks it against the file.
    package static let embeddedFreeText = FreeTextHandling.fingerprint
}

/// A policy that cannot be used, naming the file, the rule and the field.
package struct PolicyError: Error, Sendable, Hashable, CustomStringConvertible {
    package let file: String
    /// e.g. "verdict 'debugger', rule 2 ('tracer_pid')".
    package let location: String?
    package let field: String?
    package let message: String

    /// Every part may quote the policy or its file name: control characters are escaped
    /// (ESC as `\u001B`, CR as `\r`) and each part is cut short, so an error printed to a
    /// terminal shows the text rather than obeying it.
    package init(file: String, location: String?, field: String?, message: String) {
        self.file = BoundedText.bounded(file, limit: Self.fileNameByteLimit)
        self.location = location.map { BoundedText.bounded($0, limit: Self.partByteLimit) }
        self.field = field.map { BoundedText.bounded($0, limit: Self.partByteLimit) }
        self.message = BoundedText.bounded(message, limit: Self.partByteLimit)
    }

    private static let fileNameByteLimit = 4096
    private static let partByteLimit = 1024

    package var description: String {
        var text = file
        if let location { text += ": " + location }
        if let field { text += ": field '\(field)'" }
        return text + ": " + message
    }
}
