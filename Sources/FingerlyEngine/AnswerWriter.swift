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

    /// The verdicts as a JSON value, as `Verdicts.encode(to:)` writes them.
    static func verdicts(_ verdicts: Verdicts) -> [UInt8] {
        var members: [(name: String, value: [UInt8])] = VerdictName.allCases.map { name in
            (name.rawValue, verdict(verdicts[name]))
        }
        members.sort { $0.name.utf8.lexicographicallyPrecedes($1.name.utf8) }
        return object(members)
    }

    private static func verdict(_ verdict: Verdict) -> [UInt8] {
        // Already in sorted order; absent optionals left out as synthesized encoding does.
        var members: [(name: String, value: [UInt8])] = [("confidence", string(verdict.confidence.rawValue))]
        if let kind = verdict.kind { members.append(("kind", string(kind))) }
        members.append(("missingEvidence", array(verdict.missingEvidence.map { missing in
            object([("message", string(missing.message)), ("probe", string(missing.probe)), ("status", string(missing.status.rawValue))])
        })))
        members.append(("reasons", array(verdict.reasons.map { reason in
            object([("code", string(reason.code)), ("confidence", string(reason.confidence.rawValue)), ("message", string(reason.message))])
        })))
        if let omitted = verdict.reasonsOmitted { members.append(("reasonsOmitted", Array(String(omitted).utf8))) }
        members.append(("value", Array(String(verdict.value).utf8)))
        return object(members)
    }

    /// The answer as `JSONEncoder.fingerly.encode(answer)` writes it, absent members left out.
    func answer(_ answer: IdentifyAnswer, verdicts: [UInt8]?) -> [UInt8] {
        var members: [(name: String, value: [UInt8])] = common(answer, verdicts: verdicts, nulls: false)
        members.sort { $0.name.utf8.lexicographicallyPrecedes($1.name.utf8) }
        return Self.object(members)
    }

    /// The stored event without its report, which the caller splices in as the last member:
    /// absent members are written as null (docs/api.md lists them "or null").
    func event(_ answer: IdentifyAnswer, verdicts: [UInt8]?, receivedAt: Int64, tag: String?,
               signature: StoredEvent.Signature, report: [UInt8]) -> [UInt8] {
        var members = common(answer, verdicts: verdicts, nulls: true)
        members.append(("receivedAt", Self.string(Self.iso8601(receivedAt))))
        members.append(("tag", tag.map(Self.string) ?? Array("null".utf8)))
        members.append(("signature", Self.object([("keyId", signature.keyId.map(Self.string) ?? Array("null".utf8)),
                                                  ("verified", Array(String(signature.verified).utf8))])))
        members.sort { $0.name.utf8.lexicographicallyPrecedes($1.name.utf8) }
        members.append(("report", report))
        return Self.object(members)
    }

    private func common(_ answer: IdentifyAnswer, verdicts: [UInt8]?, nulls: Bool) -> [(name: String, value: [UInt8])] {
        var members: [(name: String, value: [UInt8])] = [
            ("duplicate", Array(String(answer.duplicate).utf8)),
            ("identifiable", Array(String(answer.identifiable).utf8)),
            ("requestId", Self.string(answer.requestId)),
            ("visitorConfidence", Array(String(answer.visitorConfidence).utf8)),
            ("visitorId", Self.string(answer.visitorId)),
            ("visitorIsNew", Array(String(answer.visitorIsNew).utf8)),
        ]
        let triggers = answer.triggers.map { list in
            Self.array(list.map { trigger in
                Self.object([("confidence", Self.string(trigger.confidence.rawValue)), ("group", Self.string(trigger.group)),
                             ("signal", Self.string(trigger.signal)), ("weight", Array(String(trigger.weight).utf8))])
            })
        }
        let optional: [(String, [UInt8]?)] = [
            ("policy", answer.policy == nil ? nil : policy ?? answer.policy.map(Self.string)),
            ("suspectLevel", answer.suspectLevel.map { Self.string($0.rawValue) }),
            ("suspectScore", answer.suspectScore.map { Array(String($0).utf8) }),
            ("triggers", triggers),
            ("verdicts", answer.verdicts == nil ? nil : verdicts),
        ]
        for (name, value) in optional {
            if let value {
                members.append((name, value))
            } else if nulls {
                members.append((name, Array((name == "triggers" ? "[]" : "null").utf8)))
            }
        }
        return members
    }

    private static func object(_ members: [(name: String, value: [UInt8])]) -> [UInt8] {
        var bytes: [UInt8] = [UInt8(ascii: "{")]
        for (offset, member) in members.enumerated() {
            if offset > 0 { bytes.append(UInt8(ascii: ",")) }
            bytes += string(member.name)
            bytes.append(UInt8(ascii: ":"))
            bytes += member.value
        }
        bytes.append(UInt8(ascii: "}"))
        return bytes
    }

    private static func array(_ items: [[UInt8]]) -> [UInt8] {
        var bytes: [UInt8] = [UInt8(ascii: "[")]
        for (offset, item) in items.enumerated() {
            if offset > 0 { bytes.append(UInt8(ascii: ",")) }
            bytes += item
        }
        bytes.append(UInt8(ascii: "]"))
        return bytes
    }

    /// A JSON string: printable ASCII without a quote or backslash as is, anything else as
    /// JSONEncoder escapes it.
    static func string(_ text: String) -> [UInt8] {
        let plain = text.utf8.allSatisfy { $0 >= 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "\"") && $0 != UInt8(ascii: "\\") }
        if plain { return [UInt8(ascii: "\"")] + Array(text.utf8) + [UInt8(ascii: "\"")] }
        return (try? JSONEncoder.fingerly.encode(text)).map(Array.init) ?? Array(#""""#.utf8)
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
