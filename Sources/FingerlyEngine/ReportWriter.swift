import FoundationEssentials
import FingerlyModel

/// The canonical encoding of a report, byte for byte as `JSONEncoder.fingerly` writes it: what
/// the stored event keeps of the report it judged. JSONEncoder took as long again as reading the
/// body (a few hundred members and a sort of every signal map through its generic containers),
/// on every request; this writes the known shape directly. Strings that need escaping and
/// numbers outside the plain decimal form still go through JSONEncoder, so this writer never
/// decides an escape or a number's spelling (`FastCodingTests` holds the two to the same bytes).
enum ReportWriter {
    private typealias Members = [(name: String, value: [UInt8])]

    static func report(_ report: SignalReport) -> [UInt8] {
        var members: Members = [
            ("budgetMs", integer(report.budgetMs)),
            ("collectedAt", date(report.collectedAt)),
            ("collectorVersion", AnswerWriter.string(report.collectorVersion)),
            ("elapsedMs", real(report.elapsedMs)),
            ("identity", identity(report.identity)),
            ("probes", array(report.probes.map(probe))),
            ("root", AnswerWriter.string(report.root)),
            ("schemaVersion", integer(report.schemaVersion)),
            ("tiers", array(report.tiers.map { AnswerWriter.string($0.rawValue) })),
        ]
        if let tag = report.tag { members.append(("tag", AnswerWriter.string(tag))) }
        if let keying = report.identifierKeying {
            members.append(("identifierKeying", AnswerWriter.string(keying.rawValue)))
        }
        if let freeText = report.freeText { members.append(("freeText", AnswerWriter.string(freeText.rawValue))) }
        if let age = report.prefetchedAgeMs { members.append(("prefetchedAgeMs", real(age))) }
        return object(members)
    }

    private static func probe(_ probe: ProbeEntry) -> [UInt8] {
        var members: Members = [
            ("durationMs", real(probe.durationMs)),
            ("id", AnswerWriter.string(probe.id)),
            ("identityComponents", array(probe.identityComponents.map { component in
                object([("hash", AnswerWriter.string(component.hash)), ("name", AnswerWriter.string(component.name)),
                        ("scope", AnswerWriter.string(component.scope.rawValue)),
                        ("worldReadable", Array(String(component.worldReadable).utf8))])
            })),
            ("issues", array(probe.issues.map { issue in
                object([("detail", AnswerWriter.string(issue.detail)), ("path", AnswerWriter.string(issue.path)),
                        ("status", AnswerWriter.string(issue.status.rawValue))])
            })),
            ("signals", object(probe.signals.map { name, value in (name, signal(value)) })),
            ("status", AnswerWriter.string(probe.status.rawValue)),
            ("tier", AnswerWriter.string(probe.tier.rawValue)),
        ]
        if let detail = probe.detail { members.append(("detail", AnswerWriter.string(detail))) }
        return object(members)
    }

    private static func identity(_ identity: HostIdentity) -> [UInt8] {
        var members: Members = [
            ("hardwareComponents", strings(identity.hardwareComponents)),
            ("hardwareIdVersion", integer(identity.hardwareIdVersion)),
            ("instanceComponents", strings(identity.instanceComponents)),
            ("instanceIdVersion", integer(identity.instanceIdVersion)),
            ("rootOnlyEvidence", strings(identity.rootOnlyEvidence)),
        ]
        if let id = identity.hardwareId { members.append(("hardwareId", AnswerWriter.string(id))) }
        if let id = identity.instanceId { members.append(("instanceId", AnswerWriter.string(id))) }
        return object(members)
    }

    private static func signal(_ value: SignalValue) -> [UInt8] {
        switch value {
        case .bool(let flag): Array(String(flag).utf8)
        case .int(let number): integer(number)
        case .string(let text): AnswerWriter.string(text)
        case .strings(let texts): strings(texts)
        }
    }

    private static func integer(_ value: Int) -> [UInt8] { Array(String(value).utf8) }

    /// A Double whose shortest form is plain decimal digits, as JSONEncoder writes it: without
    /// a ".0" of an integral value. Anything else (an exponent) is JSONEncoder's to spell.
    private static func real(_ value: Double) -> [UInt8] {
        var text = Array(value.description.utf8)
        let plain = value.isFinite && text.allSatisfy { byte in
            (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")) || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "-")
        }
        guard plain else { return (try? JSONEncoder.fingerly.encode(value)).map(Array.init) ?? Array("null".utf8) }
        if text.count > 2, text.suffix(2).elementsEqual(".0".utf8) { text.removeLast(2) }
        return text
    }

    /// Whole seconds as `.iso8601` writes them; a fraction is JSONEncoder's to write.
    private static func date(_ value: Date) -> [UInt8] {
        let seconds = value.timeIntervalSince1970
        guard seconds.rounded(.down) == seconds, let whole = Int64(exactly: seconds) else {
            return (try? JSONEncoder.fingerly.encode(value)).map(Array.init) ?? Array("null".utf8)
        }
        return AnswerWriter.string(AnswerWriter.iso8601(whole))
    }

    private static func strings(_ texts: [String]) -> [UInt8] { array(texts.map(AnswerWriter.string)) }

    private static func object(_ unsorted: Members) -> [UInt8] {
        let members = unsorted.sorted { $0.name.utf8.lexicographicallyPrecedes($1.name.utf8) }
        var bytes: [UInt8] = [UInt8(ascii: "{")]
        for (offset, member) in members.enumerated() {
            if offset > 0 { bytes.append(UInt8(ascii: ",")) }
            bytes += AnswerWriter.string(member.name)
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
}
