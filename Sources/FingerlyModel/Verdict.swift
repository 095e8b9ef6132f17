import FoundationEssentials

/// How sure a verdict is.
public enum Confidence: String, Sendable, Codable, Hashable, Comparable, CaseIterable {
    /// One weak sign, or evidence that was partly missing.
    case low
    /// A clear sign with a known benign cause, or two weak ones.
    case medium
    /// Direct evidence.
    case high

    var rank: Int { Confidence.allCases.firstIndex(of: self)! }
    /// Orders low, medium, high.
    public static func < (lhs: Confidence, rhs: Confidence) -> Bool { lhs.rank < rhs.rank }

    package var raised: Confidence { self == .low ? .medium : .high }
}

/// The verdicts a policy decides, in report order.
public enum VerdictName: String, Sendable, Codable, Hashable, CaseIterable, CodingKeyRepresentable {
    /// Runs in a virtual machine.
    case virtualization
    /// Runs in a container.
    case container
    /// A debugger or tracer is attached.
    case debugger
    /// An instrumentation framework is present.
    case instrumentation
    /// The process or its libraries were modified.
    case tampering
    /// TLS traffic can be intercepted.
    case mitm
    /// Traffic goes through a proxy.
    case proxy
    /// The session is automated.
    case automation
    /// The host looks like one of many identical ones.
    case farm
}

/// One piece of evidence behind a verdict.
public struct Reason: Sendable, Codable, Hashable {
    /// Stable code: the policy rule id.
    public let code: String
    /// The rule's sentence with the values it quotes, escaped and bounded.
    public let message: String
    /// How strong this reason alone is.
    public let confidence: Confidence

    package init(code: String, message: String, confidence: Confidence) {
        self.code = code
        self.message = message
        self.confidence = confidence
    }
}

/// Evidence a verdict could not see because a probe failed or its tier did not run, said rather
/// than hidden.
public struct MissingEvidence: Sendable, Codable, Hashable {
    /// The id of the probe whose evidence is missing.
    public let probe: String
    /// How that probe, or the source it could not read, ended; `skipped` when the probe's tier
    /// was not among the tiers run.
    public let status: ProbeStatus
    /// What could not be seen, for people.
    public let message: String

    package init(probe: String, status: ProbeStatus, message: String) {
        self.probe = probe
        self.status = status
        self.message = message
    }
}

/// A local decision about this host or process.
public struct Verdict: Sendable, Codable, Hashable {
    /// Whether the condition holds.
    public let value: Bool
    /// For a true verdict, how strong the evidence is. For a false one: `medium` when every
    /// probe the rules rely on ran, `low` when some of their evidence was missing.
    public let confidence: Confidence
    /// What was found (`kvm`, `docker`…), when the evidence names it.
    public let kind: String?
    /// The evidence, one reason a rule that fired, in policy order.
    public let reasons: [Reason]
    /// Reasons of rules that fired but were left out to keep the verdict's reasons within
    /// `VerdictEngine.verdictReasonBudget`; nil when none were. The value and confidence
    /// still count every rule that fired.
    public let reasonsOmitted: Int?
    /// Probes whose evidence this verdict could not see.
    public let missingEvidence: [MissingEvidence]

    package init(value: Bool, confidence: Confidence, kind: String?, reasons: [Reason], reasonsOmitted: Int? = nil,
         missingEvidence: [MissingEvidence]) {
        self.value = value
        self.confidence = confidence
        self.kind = kind
        self.reasons = reasons
        self.reasonsOmitted = reasonsOmitted
        self.missingEvidence = missingEvidence
    }
}

/// Every verdict of a full run, one property each. Encoded as a JSON object keyed by verdict name.
public struct Verdicts: Sendable, Hashable, Codable {
    /// Whether this process runs in a virtual machine.
    public let virtualization: Verdict
    /// Whether it runs in a container.
    public let container: Verdict
    /// Whether a debugger or tracer is attached.
    public let debugger: Verdict
    /// Whether an instrumentation framework (Frida, valgrind, a hooking library) is present.
    public let instrumentation: Verdict
    /// Whether the process or its libraries were modified (preloads, interposed symbols, patched code).
    public let tampering: Verdict
    /// Whether TLS traffic can be intercepted (an interception CA, a failed pin).
    public let mitm: Verdict
    /// Whether traffic goes through a proxy.
    public let proxy: Verdict
    /// Whether the session is automated (CI, a virtual display, input injection).
    public let automation: Verdict
    /// Whether the host looks like one of many identical ones (a device farm, a cloned image).
    public let farm: Verdict

    /// Verdicts by name; a name the engine did not decide is false with low confidence, as
    /// nothing was evaluated for it.
    package init(_ byName: [VerdictName: Verdict]) {
        func take(_ name: VerdictName) -> Verdict { byName[name] ?? .undecided }
        virtualization = take(.virtualization)
        container = take(.container)
        debugger = take(.debugger)
        instrumentation = take(.instrumentation)
        tampering = take(.tampering)
        mitm = take(.mitm)
        proxy = take(.proxy)
        automation = take(.automation)
        farm = take(.farm)
    }

    /// The verdict of that name.
    public subscript(name: VerdictName) -> Verdict {
        switch name {
        case .virtualization: virtualization
        case .container: container
        case .debugger: debugger
        case .instrumentation: instrumentation
        case .tampering: tampering
        case .mitm: mitm
        case .proxy: proxy
        case .automation: automation
        case .farm: farm
        }
    }

    /// Every verdict with its name, in report order.
    package var byName: [VerdictName: Verdict] {
        Dictionary(uniqueKeysWithValues: VerdictName.allCases.map { ($0, self[$0]) })
    }

    /// Decodes the object keyed by verdict name; every verdict must be there.
    public init(from decoder: any Decoder) throws {
        let byName = try [VerdictName: Verdict](from: decoder)
        if let missing = VerdictName.allCases.first(where: { byName[$0] == nil }) {
            throw DecodingError.keyNotFound(VerdictNameKey(missing), DecodingError.Context(
                codingPath: decoder.codingPath, debugDescription: "verdict '\(missing.rawValue)' is missing"))
        }
        self.init(byName)
    }

    /// Encodes an object keyed by verdict name.
    public func encode(to encoder: any Encoder) throws {
        try byName.encode(to: encoder)
    }

    private struct VerdictNameKey: CodingKey {
        let stringValue: String
        var intValue: Int? { nil }
        init(_ name: VerdictName) { stringValue = name.rawValue }
        init?(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }
}

extension Verdict {
    /// A verdict nothing was evaluated for.
    package static let undecided = Verdict(value: false, confidence: .low, kind: nil, reasons: [], missingEvidence: [])
}
