import FoundationEssentials
import FingerlyModel

/// The canonical encoding of a report, byte for byte as `JSONEncoder.fingerly` writes it: what
/// the stored event keeps of the report it judged. JSONEncoder took as long again as reading the
/// body (a few hundred members and a sort of every signal map through its generic containers),
/// on every request; this writes the known shape into one buffer, members in the order sorted
/// keys give. Strings that need escaping and numbers outside the plain decimal form still go
/// through JSONEncoder, so this writer never decides an escape or a number's spelling
/// (`FastCodingTests` holds the two to the same bytes).
enum ReportWriter {
    static func report(_ report: SignalReport) -> [UInt8] {
        var writer = JSONBuffer(capacity: 16_384)
        writer.write(report)
        return writer.bytes
    }
}

extension JSONBuffer {
    fileprivate mutating func write(_ report: SignalReport) {
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

    fileprivate mutating func write(_ probe: ProbeEntry) {
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
                        $0.member("worldReadable") { $0.bool(component.worldReadable) }
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
                let signals = probe.signals.sorted { JSONBuffer.precedes($0.key, $1.key) }
                writer.object {
                    for (name, value) in signals { $0.member(name) { $0.signal(value) } }
                }
            }
            $0.member("status") { $0.string(probe.status.rawValue) }
            $0.member("tier") { $0.string(probe.tier.rawValue) }
        }
    }

    fileprivate mutating func write(_ identity: HostIdentity) {
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

    fileprivate mutating func signal(_ value: SignalValue) {
        switch value {
        case .bool(let flag): bool(flag)
        case .int(let number): integer(number)
        case .string(let text): string(text)
        case .strings(let texts): strings(texts)
        }
    }
}
