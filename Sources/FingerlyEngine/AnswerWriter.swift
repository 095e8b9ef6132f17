import FoundationEssentials
import FingerlyModel

/// Writes an identify answer and its stored event from parts, byte for byte as
/// `JSONEncoder.fingerly` would write them (sorted members, no escaped slashes, ISO 8601 times).
///
/// Both are written inside the store's transaction, which every other request of the process
/// waits for: JSONEncoder took a fifth of the server's time there (`bench/server`, perf). The
/// verdicts, the bulk of an answer, are encoded before the transaction and spliced in; strings
/// that need escaping still go through JSONEncoder, so this writer never decides an escape.
struct AnswerWriter {
    /// The policy's name as a JSON value, encoded once.
    private let policy: [UInt8]?

    init(policyName: String?) {
        policy = policyName.map(Self.string)
    }

    /// Verdict names in the order sorted keys give.
    private static let sortedVerdictNames = VerdictName.allCases.sorted {
        JSONBuffer.precedes($0.rawValue, $1.rawValue)
    }

    /// The verdicts as a JSON value, as `Verdicts.encode(to:)` writes them.
    static func verdicts(_ verdicts: Verdicts) -> [UInt8] {
        var out = JSONBuffer(capacity: 4_096)
        out.object { out in
            for name in sortedVerdictNames { out.member(name.rawValue) { $0.verdict(verdicts[name]) } }
        }
        return out.bytes
    }

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
        if let event { out.member("receivedAt") { $0.string(Self.iso8601(event.receivedAt)) } }
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

    /// A JSON string: printable ASCII without a quote or backslash as is, anything else as
    /// JSONEncoder escapes it.
    static func string(_ text: String) -> [UInt8] {
        var out = JSONBuffer(capacity: text.utf8.count + 2)
        out.string(text)
        return out.bytes
    }

    /// `YYYY-MM-DDTHH:MM:SSZ` for Unix seconds, as `.iso8601` writes a whole second; outside
    /// years 1970–9999 JSONEncoder writes it.
    static func iso8601(_ seconds: Int64) -> String {
        guard seconds >= 0, seconds < 253_402_300_800 else {
            let encoded = (try? JSONEncoder.fingerly.encode(EngineWire.timestamp(seconds))).map(Array.init) ?? []
            return String(decoding: encoded.dropFirst().dropLast(), as: UTF8.self)
        }
        let days = seconds / 86_400
        let secondOfDay = seconds % 86_400
        // Civil date from days since 1970-01-01, years counted from March so the leap day ends one.
        let shifted = days + 719_468
        let era = shifted / 146_097
        let dayOfEra = shifted - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1_460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthIndex = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * monthIndex + 2) / 5 + 1
        let month = monthIndex < 10 ? monthIndex + 3 : monthIndex - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        func pad(_ value: Int64, _ width: Int) -> String {
            let text = String(value)
            return String(repeating: "0", count: max(0, width - text.count)) + text
        }
        return "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2))T\(pad(secondOfDay / 3_600, 2)):"
            + "\(pad(secondOfDay % 3_600 / 60, 2)):\(pad(secondOfDay % 60, 2))Z"
    }
}

extension JSONBuffer {
    /// One verdict, as synthesized encoding writes it: absent optionals left out.
    fileprivate mutating func verdict(_ verdict: Verdict) {
        object {
            $0.member("confidence") { $0.string(verdict.confidence.rawValue) }
            if let kind = verdict.kind { $0.member("kind") { $0.string(kind) } }
            $0.member("missingEvidence") {
                $0.array(verdict.missingEvidence) { out, missing in
                    out.object {
                        $0.member("message") { $0.string(missing.message) }
                        $0.member("probe") { $0.string(missing.probe) }
                        $0.member("status") { $0.string(missing.status.rawValue) }
                    }
                }
            }
            $0.member("reasons") {
                $0.array(verdict.reasons) { out, reason in
                    out.object {
                        $0.member("code") { $0.string(reason.code) }
                        $0.member("confidence") { $0.string(reason.confidence.rawValue) }
                        $0.member("message") { $0.string(reason.message) }
                    }
                }
            }
            if let omitted = verdict.reasonsOmitted { $0.member("reasonsOmitted") { $0.integer(omitted) } }
            $0.member("value") { $0.bool(verdict.value) }
        }
    }
}
