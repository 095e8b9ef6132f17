import FoundationEssentials
import FingerlyModel

/// The canonical encoding of a report, byte for byte as `JSONEncoder.fingerly` writes it: what
/// the stored event keeps of the report it judged. JSONEncoder took as long again as reading the
/// body (a few hundred members and a sort of every signal map through its generic containers),
/// on every request; this writes the known shape into one buffer, members in the order sorted
/// keys give. Strings that need escaping and numbers outside the plain decimal form still go
/// through JSONEncoder, so this writer never decides an escape or a number's spelling
/// (`FastCodingTests` holds the two to the same bytes).
struct ReportWriter {
    private var bytes: [UInt8] = []
    /// Whether the object being written has no member yet.
    private var empty = true

    static func report(_ report: SignalReport) -> [UInt8] {
        var writer = ReportWriter()
        writer.bytes.reserveCapacity(16_384)
        writer.write(report)
        return writer.bytes
    }

    private mutating func write(_ report: SignalReport) {
        object {
            $0.member("budgetMs") { $0.integer(report.budgetMs) }
            $0.member("collectedAt") { $0.date(report.collectedAt) }
            $0.member("collectorVersion") { $0.string(report.collectorVersion) }
            $0.member("elapsedMs") { $0.real(report.elapsedMs) }
            if let freeText = report.freeText { $0.member("freeText") { $0.string(freeText.rawValue) } }
            if let keying = report.identifierKeying { $0.member("identifierKeying") { $0.string(keying.rawValue) } }
            $0.member("identity") { $0.write(report.identity) }
            if let age = report.prefetchedAgeMs { $0.member("prefetchedAgeMs") { $0.real(age) } }
            $0.member("probes") { $0.array(report.probes) { $0.write($1) } }
            $0.member("root") { $0.string(report.root) }
            $0.member("schemaVersion") { $0.integer(report.schemaVersion) }
            if let tag = report.tag { $0.member("tag") { $0.string(tag) } }
            $0.member("tiers") { $0.array(report.tiers) { $0.string($1.rawValue) } }
        }
    }

    private mutating func write(_ probe: ProbeEntry) {
        object {
            if let detail = probe.detail { $0.member("detail") { $0.string(detail) } }
            $0.member("durationMs") { $0.real(probe.durationMs) }
            $0.member("id") { $0.string(probe.id) }
            $0.member("identityComponents") {
                $0.array(probe.identityComponents) { writer, component in
                    writer.object {
                        $0.member("hash") { $0.string(component.hash) }
                        $0.member("name") { $0.string(component.name) }
                        $0.member("scope") { $0.string(component.scope.rawValue) }
                        $0.member("worldReadable") { $0.literal(component.worldReadable ? "true" : "false") }
                    }
                }
            }
            $0.member("issues") {
                $0.array(probe.issues) { writer, issue in
                    writer.object {
                        $0.member("detail") { $0.string(issue.detail) }
                        $0.member("path") { $0.string(issue.path) }
                        $0.member("status") { $0.string(issue.status.rawValue) }
                    }
                }
            }
            $0.member("signals") { writer in
                let signals = probe.signals.sorted { Self.precedes($0.key, $1.key) }
                writer.object {
                    for (name, value) in signals { $0.member(name) { $0.signal(value) } }
                }
            }
            $0.member("status") { $0.string(probe.status.rawValue) }
            $0.member("tier") { $0.string(probe.tier.rawValue) }
        }
    }

    private mutating func write(_ identity: HostIdentity) {
        object {
            $0.member("hardwareComponents") { $0.strings(identity.hardwareComponents) }
            if let id = identity.hardwareId { $0.member("hardwareId") { $0.string(id) } }
            $0.member("hardwareIdVersion") { $0.integer(identity.hardwareIdVersion) }
            $0.member("instanceComponents") { $0.strings(identity.instanceComponents) }
            if let id = identity.instanceId { $0.member("instanceId") { $0.string(id) } }
            $0.member("instanceIdVersion") { $0.integer(identity.instanceIdVersion) }
            $0.member("rootOnlyEvidence") { $0.strings(identity.rootOnlyEvidence) }
        }
    }

    private mutating func signal(_ value: SignalValue) {
        switch value {
        case .bool(let flag): literal(flag ? "true" : "false")
        case .int(let number): integer(number)
        case .string(let text): string(text)
        case .strings(let texts): strings(texts)
        }
    }

    // MARK: Containers

    private mutating func object(_ members: (inout ReportWriter) -> Void) {
        bytes.append(UInt8(ascii: "{"))
        let outer = empty
        empty = true
        members(&self)
        empty = outer
        bytes.append(UInt8(ascii: "}"))
    }

    /// A member of the object being written; the caller gives them in sorted order.
    private mutating func member(_ name: String, _ value: (inout ReportWriter) -> Void) {
        if !empty { bytes.append(UInt8(ascii: ",")) }
        empty = false
        string(name)
        bytes.append(UInt8(ascii: ":"))
        value(&self)
    }

    private mutating func array<Element>(_ items: [Element], _ element: (inout ReportWriter, Element) -> Void) {
        bytes.append(UInt8(ascii: "["))
        for (offset, item) in items.enumerated() {
            if offset > 0 { bytes.append(UInt8(ascii: ",")) }
            element(&self, item)
        }
        bytes.append(UInt8(ascii: "]"))
    }

    private mutating func strings(_ texts: [String]) { array(texts) { $0.string($1) } }

    // MARK: Scalars

    private mutating func literal(_ text: StaticString) {
        bytes.append(contentsOf: UnsafeBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }

    private mutating func integer(_ value: Int) { bytes.append(contentsOf: String(value).utf8) }

    /// UTF-8 as is, but for a quote, a backslash or a control character: JSONEncoder escapes
    /// those (and this writer leaves the string to it). One pass over the bytes, one copy.
    private mutating func string(_ text: String) {
        var text = text
        let written = text.withUTF8 { utf8 -> Bool in
            for byte in utf8 where byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") {
                return false
            }
            bytes.append(UInt8(ascii: "\""))
            bytes.append(contentsOf: utf8)
            bytes.append(UInt8(ascii: "\""))
            return true
        }
        if !written { bytes.append(contentsOf: AnswerWriter.string(text)) }
    }

    /// UTF-8 byte order, as JSONEncoder's sorted keys are, without a generic walk of two views.
    private static func precedes(_ left: String, _ right: String) -> Bool {
        var left = left, right = right
        return left.withUTF8 { a in
            right.withUTF8 { b in
                for index in 0..<min(a.count, b.count) where a[index] != b[index] { return a[index] < b[index] }
                return a.count < b.count
            }
        }
    }

    /// A Double whose shortest form is plain decimal digits, as JSONEncoder writes it: without
    /// the ".0" of an integral value. Anything else (an exponent) is JSONEncoder's to spell.
    private mutating func real(_ value: Double) {
        var text = Array(value.description.utf8)
        let plain = value.isFinite && text.allSatisfy { byte in
            (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9"))
                || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "-")
        }
        guard plain else {
            bytes.append(contentsOf: (try? JSONEncoder.fingerly.encode(value)).map(Array.init) ?? Array("null".utf8))
            return
        }
        if text.count > 2, text.suffix(2).elementsEqual(".0".utf8) { text.removeLast(2) }
        bytes.append(contentsOf: text)
    }

    /// Whole seconds as `.iso8601` writes them; a fraction is JSONEncoder's to write.
    private mutating func date(_ value: Date) {
        let seconds = value.timeIntervalSince1970
        guard seconds.rounded(.down) == seconds, let whole = Int64(exactly: seconds) else {
            bytes.append(contentsOf: (try? JSONEncoder.fingerly.encode(value)).map(Array.init) ?? Array("null".utf8))
            return
        }
        string(AnswerWriter.iso8601(whole))
    }
}
