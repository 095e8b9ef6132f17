import FoundationEssentials
import FingerlyModel
import FingerlyPolicy

/// The outcome of `identify`, shaped like the reference SDK's result.
public struct IdentifyResult: Sendable, Codable {
    /// Who answered.
    public enum State: String, Sendable, Codable, Hashable {
        /// A server resolved the visitor and scored the request.
        case enriched
        /// An engine in this process resolved the visitor and scored the request.
        case local
        /// The lookup could not run; verdicts and score are this process's own.
        case unavailable
        /// The caller asked for no submission; verdicts and score are this process's own.
        case collected
    }

    /// This request's id: a server's when one answered, else made here.
    public let requestId: String
    /// The visitor the host resolved to; nil until a server or local engine answers.
    public let visitorId: String?
    /// Whether the visitor was first seen with this request; nil until resolved.
    public let visitorIsNew: Bool?
    /// How sure the resolution is, 0–100; nil until resolved.
    public let visitorConfidence: Int?
    /// Whether the report holds a stable identifier: hardwareId or instanceId.
    public let identifiable: Bool
    /// Whether this answer replays an earlier one for the same request.
    public let duplicate: Bool
    /// Who answered.
    public let state: State
    /// 0–100 from the policy's `suspect` weights; nil when nothing was scored, which is not 0.
    public let suspectScore: Int?
    /// The score's level from the policy's `suspect.levels`; nil when nothing was scored.
    public let suspectLevel: SuspectLevel?
    /// The true verdicts that added to the score.
    public let triggers: [IdentifyTrigger]
    /// Every verdict, one property each.
    public let verdicts: Verdicts
    /// Facts about where the host runs that are not verdicts.
    public let environment: HostEnvironment
    /// The name of the policy that judged the report.
    public let policy: String
    /// What was collected.
    public let report: SignalReport
    /// The request the report was sent as, or in a dry run (`submit: false`) would be sent as:
    /// the exact body, the headers with the API key redacted.
    public let request: SubmissionRequest?

    private enum CodingKeys: String, CodingKey {
        case requestId, visitorId, visitorIsNew, visitorConfidence, identifiable, duplicate, state, suspectScore,
             suspectLevel, triggers, verdicts, environment, policy, report, request
    }

    private init(requestId: String, visitorId: String?, visitorIsNew: Bool?, visitorConfidence: Int?, identifiable: Bool,
                 duplicate: Bool, state: State, suspectScore: Int?, suspectLevel: SuspectLevel?, triggers: [IdentifyTrigger],
                 verdicts: Verdicts, environment: HostEnvironment, policy: String, report: SignalReport,
                 request: SubmissionRequest?) {
        self.requestId = requestId
        self.visitorId = visitorId
        self.visitorIsNew = visitorIsNew
        self.visitorConfidence = visitorConfidence
        self.identifiable = identifiable
        self.duplicate = duplicate
        self.state = state
        self.suspectScore = suspectScore
        self.suspectLevel = suspectLevel
        self.triggers = triggers
        self.verdicts = verdicts
        self.environment = environment
        self.policy = policy
        self.report = report
        self.request = request
    }

    /// Decodes a result and refuses one this library could not have made: a score or a
    /// confidence outside 0–100, or a score without its level (or a level without a score).
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let (score, level) = try container.decodeSuspect(score: .suspectScore, level: .suspectLevel)
        self.init(requestId: try container.decode(String.self, forKey: .requestId),
                  visitorId: try container.decodeIfPresent(String.self, forKey: .visitorId),
                  visitorIsNew: try container.decodeIfPresent(Bool.self, forKey: .visitorIsNew),
                  visitorConfidence: try container.decodePercentage(forKey: .visitorConfidence),
                  identifiable: try container.decode(Bool.self, forKey: .identifiable),
                  duplicate: try container.decode(Bool.self, forKey: .duplicate),
                  state: try container.decode(State.self, forKey: .state),
                  suspectScore: score, suspectLevel: level,
                  triggers: try container.decode([IdentifyTrigger].self, forKey: .triggers),
                  verdicts: try container.decode(Verdicts.self, forKey: .verdicts),
                  environment: try container.decode(HostEnvironment.self, forKey: .environment),
                  policy: try container.decode(String.self, forKey: .policy),
                  report: try container.decode(SignalReport.self, forKey: .report),
                  request: try container.decodeIfPresent(SubmissionRequest.self, forKey: .request))
    }

    /// A result judged in this process with nothing sent or resolved.
    static func judgedHere(state: State, report: SignalReport, verdicts: Verdicts, policy: Policy,
                           request: SubmissionRequest? = nil) -> IdentifyResult {
        let assessment = policy.suspect?.assess(verdicts)
        return IdentifyResult(
            requestId: UUID().uuidString.lowercased(), visitorId: nil, visitorIsNew: nil, visitorConfidence: nil,
            identifiable: report.identity.hardwareId != nil || report.identity.instanceId != nil,
            duplicate: false, state: state, suspectScore: assessment?.score, suspectLevel: assessment?.level,
            triggers: assessment?.triggers ?? [], verdicts: verdicts, environment: HostEnvironment(report, verdicts: verdicts),
            policy: policy.name, report: report, request: request)
    }

    /// A result a server answered: its request id, visitor and score; its verdicts when it
    /// sent them, else this process's own.
    static func enriched(_ answer: IdentifyAnswer, report: SignalReport, localVerdicts: Verdicts, policy: Policy,
                         request: SubmissionRequest) -> IdentifyResult {
        resolved(answer, state: .enriched, report: report, localVerdicts: localVerdicts, policy: policy, request: request)
    }

    /// A result the server (`enriched`) or this process's engine (`local`) resolved.
    static func resolved(_ answer: IdentifyAnswer, state: State, report: SignalReport, localVerdicts: Verdicts, policy: Policy,
                         request: SubmissionRequest?) -> IdentifyResult {
        let merged = localVerdicts.keepingWhatWasSeenHere(over: answer.verdicts)
        return IdentifyResult(
            requestId: answer.requestId, visitorId: answer.visitorId, visitorIsNew: answer.visitorIsNew,
            visitorConfidence: answer.visitorConfidence, identifiable: answer.identifiable, duplicate: answer.duplicate,
            state: state, suspectScore: answer.suspectScore, suspectLevel: answer.suspectLevel,
            triggers: answer.triggers ?? [], verdicts: merged,
            environment: HostEnvironment(report, verdicts: merged),
            policy: answer.policy ?? policy.name, report: report, request: request)
    }
}

/// Where the host runs, beside the verdicts.
public struct HostEnvironment: Sendable, Codable, Hashable {
    /// aws, google, alibaba, rhev…, from firmware strings; also set on a cloud's bare metal.
    public let cloud: String?
    /// A Xen dom0 is the hypervisor's control domain: a host, not a guest.
    public let xenDom0: Bool
    /// A virtual machine whose CPU denies the hypervisor (the CPUID bit cleared) while its vendor leaves, firmware,
    /// devices or modules show one: a guest made to pass for a physical machine.
    public let hardened: Bool
    /// The confidential-computing technology of a virtual machine guest (`tdx`, `sev-snp`, `sev-es`, `sev`), a
    /// detail of `virtualization`'s kind; nil on anything else.
    public let confidential: String?

    /// The reasons of `virtualization` that say the hypervisor was hidden.
    static let hiddenHypervisorReasons: Set<String> = ["hypervisor_hidden", "cpuid_vendor_behind_clear_bit"]

    init(_ report: SignalReport, verdicts: Verdicts) {
        cloud = report.signals["dmi.cloud"]?.description
        xenDom0 = report.signals["virt.xen_dom0"] == .bool(true)
        let virtualization = verdicts[.virtualization]
        hardened = virtualization.value && virtualization.reasons.contains { Self.hiddenHypervisorReasons.contains($0.code) }
        let technology = report.signals["cpu.confidential_kind"] ?? report.signals["cpu.confidential_leaf"]
        confidential = virtualization.value ? technology?.description : nil
    }

    private enum CodingKeys: String, CodingKey { case cloud, xenDom0, hardened, confidential }

    /// A result written before `hardened` and `confidential` existed still reads.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        cloud = try container.decodeIfPresent(String.self, forKey: .cloud)
        xenDom0 = try container.decode(Bool.self, forKey: .xenDom0)
        hardened = try container.decodeIfPresent(Bool.self, forKey: .hardened) ?? false
        confidential = try container.decodeIfPresent(String.self, forKey: .confidential)
    }
}

extension Verdicts {
    /// The server's verdicts, except where this process found evidence the server calls false:
    /// an unauthenticated answer (plain http, an endpoint the host chose) may add findings, never
    /// clear one made here.
    func keepingWhatWasSeenHere(over remote: Verdicts?) -> Verdicts {
        guard let remote else { return self }
        var merged: [VerdictName: Verdict] = [:]
        for name in VerdictName.allCases {
            let theirs = remote[name], ours = self[name]
            merged[name] = ours.value && !theirs.value ? ours : theirs
        }
        return Verdicts(merged)
    }
}
