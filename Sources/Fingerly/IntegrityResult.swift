import FingerlyModel

/// The runtime integrity verdicts alone, for a check right before a sensitive action.
public struct IntegrityResult: Sendable, Codable {
    /// The verdicts an integrity check decides, in report order.
    public static let verdictNames: [VerdictName] = [.debugger, .tampering, .instrumentation, .automation]

    /// Whether a debugger or tracer is attached.
    public let debugger: Verdict
    /// Whether the process or its libraries were modified.
    public let tampering: Verdict
    /// Whether an instrumentation framework is present.
    public let instrumentation: Verdict
    /// Whether the session is automated.
    public let automation: Verdict
    /// What was collected: only the probes these verdicts read.
    public let report: SignalReport

    init(verdicts: Verdicts, report: SignalReport) {
        debugger = verdicts.debugger
        tampering = verdicts.tampering
        instrumentation = verdicts.instrumentation
        automation = verdicts.automation
        self.report = report
    }

    /// The verdict of that name, when an integrity check decides it.
    public subscript(name: VerdictName) -> Verdict? {
        switch name {
        case .debugger: debugger
        case .tampering: tampering
        case .instrumentation: instrumentation
        case .automation: automation
        case .virtualization, .container, .mitm, .proxy, .farm: nil
        }
    }
}
