import FingerlyModel

/// Writes an identify answer and its stored event from parts, byte for byte as
/// `JSONEncoder.fingerly` would write them (sorted members, no escaped slashes, ISO 8601 times).
///
/// Both are written inside the store's transaction, which every other request of the process
/// waits for: JSONEncoder took a fifth of the server's time there (`bench/server`, perf). The
/// verdicts, the bulk of an answer, are encoded before the transaction and spliced in.
struct AnswerWriter {
    /// The policy's name as a JSON value, encoded once.
    private let policy: [UInt8]?

    init(policyName: String?) {
        policy = policyName.map(Self.string)
    }

    /// The verdicts as a JSON value, as `Verdicts.encode(to:)` writes them.
    static func verdicts(_ verdicts: Verdicts) -> [UInt8] { ReportWriter.verdicts(verdicts) }

    /// The answer as `JSONEncoder.fingerly.encode(answer)` writes it, absent members left out.
    func answer(_ answer: IdentifyAnswer, verdicts: [UInt8]?) -> [UInt8] {
        var out = JSONBuffer(capacity: (verdicts?.count ?? 0) + 512)
        out.object { write(answer, verdicts: verdicts, event: nil, into: &$0) }
        return out.bytes
    }

    /// What only the stored event has.
    private struct EventMembers {
        let receivedAt: Int64
        let tag: String?
        let signature: StoredEvent.Signature
    }

    /// The stored event, the report (already encoded) as its last member: absent members are
    /// written as null (docs/api.md lists them "or null").
    func event(_ answer: IdentifyAnswer, verdicts: [UInt8]?, receivedAt: Int64, tag: String?,
               signature: StoredEvent.Signature, report: [UInt8]) -> [UInt8] {
        var out = JSONBuffer(capacity: (verdicts?.count ?? 0) + report.count + 768)
        out.object {
            let members = EventMembers(receivedAt: receivedAt, tag: tag, signature: signature)
            write(answer, verdicts: verdicts, event: members, into: &$0)
            $0.member("report") { $0.encoded(report) }
        }
        return out.bytes
    }

    /// The members of an answer, and of an event when `event` is given, in sorted order.
    private func write(_ answer: IdentifyAnswer, verdicts: [UInt8]?, event: EventMembers?, into out: inout JSONBuffer) {
        let nulls = event != nil
        func optional(_ name: String, _ present: Bool, absent: StaticString = "null",
                      _ value: (inout JSONBuffer) -> Void) {
            if present {
                out.member(name, value)
            } else if nulls {
                out.member(name) { $0.literal(absent) }
            }
        }
        out.member("duplicate") { $0.bool(answer.duplicate) }
        out.member("identifiable") { $0.bool(answer.identifiable) }
        optional("policy", answer.policy != nil) { out in
            if let policy { out.encoded(policy) } else if let name = answer.policy { out.string(name) }
        }
        if let event { out.member("receivedAt") { $0.string(JSONBuffer.iso8601(event.receivedAt)) } }
        out.member("requestId") { $0.string(answer.requestId) }
        if let event {
            out.member("signature") { out in
                out.object {
                    $0.member("keyId") { $0.stringOrNull(event.signature.keyId) }
                    $0.member("verified") { $0.bool(event.signature.verified) }
                }
            }
        }
        optional("suspectLevel", answer.suspectLevel != nil) { $0.string(answer.suspectLevel?.rawValue ?? "") }
        optional("suspectScore", answer.suspectScore != nil) { $0.integer(answer.suspectScore ?? 0) }
        if let event { out.member("tag") { $0.stringOrNull(event.tag) } }
        optional("triggers", answer.triggers != nil, absent: "[]") { out in
            out.array(answer.triggers ?? []) { out, trigger in
                out.object {
                    $0.member("confidence") { $0.string(trigger.confidence.rawValue) }
                    $0.member("group") { $0.string(trigger.group) }
                    $0.member("signal") { $0.string(trigger.signal) }
                    $0.member("weight") { $0.integer(trigger.weight) }
                }
            }
        }
        optional("verdicts", answer.verdicts != nil && verdicts != nil) { $0.encoded(verdicts ?? []) }
        out.member("visitorConfidence") { $0.integer(answer.visitorConfidence) }
        out.member("visitorId") { $0.string(answer.visitorId) }
        out.member("visitorIsNew") { $0.bool(answer.visitorIsNew) }
    }

    /// A JSON string, as JSONEncoder escapes it.
    static func string(_ text: String) -> [UInt8] {
        var out = JSONBuffer(capacity: text.utf8.count + 2)
        out.string(text)
        return out.bytes
    }
}
