import FoundationEssentials

/// How suspicious the verdicts make this request, from the policy's weights.
public enum SuspectLevel: String, Sendable, Codable, Hashable {
    case none, low, medium, high
}

/// The outcome of `identify`. Visitor fields are the server's answer and stay nil until a
/// report has been submitted.
public struct IdentifyResult: Sendable, Codable {
    public enum State: String, Sendable, Codable {
        /// Collected and judged locally; nothing was sent.
        case collected
        case submitted
    }

    public let requestId: String
    public let visitorId: String?
    public let visitorIsNew: Bool?
    public let visitorConfidence: Double?
    /// Whether the report holds a stable identifier: hardwareId or instanceId.
    public let identifiable: Bool
    public let duplicate: Bool?
    public let state: State
    public let suspectScore: Int
    public let suspectLevel: SuspectLevel
    /// `verdict:code` for every rule that fired.
    public let triggers: [String]
    public let verdicts: [VerdictName: Verdict]
    /// Facts about where the host runs that are not verdicts.
    public let environment: HostEnvironment
    public let policy: String
    public let report: SignalReport

    static func local(report: SignalReport, verdicts: [VerdictName: Verdict], policy: Policy) -> IdentifyResult {
        var score = 0.0
        var triggers: [String] = []
        for name in VerdictName.allCases {
            guard let verdict = verdicts[name], verdict.value else { continue }
            score += Double(policy.suspectWeights[name] ?? 0) * (policy.confidenceFactors[verdict.confidence] ?? 1)
            triggers += verdict.reasons.map { "\(name.rawValue):\($0.code)" }
        }
        let suspectScore = min(100, Int(score.rounded()))
        let level: SuspectLevel = switch suspectScore {
        case 0: .none
        case 1..<30: .low
        case 30..<60: .medium
        default: .high
        }
        return IdentifyResult(
            requestId: UUID().uuidString.lowercased(), visitorId: nil, visitorIsNew: nil, visitorConfidence: nil,
            identifiable: report.identity.hardwareId != nil || report.identity.instanceId != nil,
            duplicate: nil, state: .collected, suspectScore: suspectScore, suspectLevel: level,
            triggers: triggers, verdicts: verdicts,
            environment: HostEnvironment(cloud: report.signals["dmi.cloud"]?.description,
                                         xenDom0: report.signals["virt.xen_dom0"] == .bool(true)),
            policy: policy.name, report: report)
    }
}

/// Where the host runs, beside the verdicts.
public struct HostEnvironment: Sendable, Codable, Hashable {
    /// aws, google, alibaba, rhev…, from firmware strings; also set on a cloud's bare metal.
    public let cloud: String?
    /// A Xen dom0 is the hypervisor's control domain: a host, not a guest.
    public let xenDom0: Bool
}
