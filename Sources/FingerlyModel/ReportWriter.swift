import FoundationEssentials

/// The canonical encoding of a report, byte for byte as `JSONEncoder.fingerly` writes it: what
/// the stored event keeps of the report it judged, and what a client sends. JSONEncoder took as
/// long again as reading the body on the server (a few hundred members and a sort of every signal
/// map through its generic containers), and half of a CLI run's instructions; this writes the
/// known shape into one buffer, members in the order sorted keys give (`HandWrittenJSONTests` and
/// `FastCodingTests` hold it to JSONEncoder's bytes).
package enum ReportWriter {
    package static func report(_ report: SignalReport) -> [UInt8] {
        var writer = JSONBuffer(capacity: 16_384)
        writer.report(report)
        return writer.bytes
    }

    /// The body of `POST /v1/identify`, as `JSONEncoder.fingerly.encode(body)` writes it; nil
    /// when JSONEncoder would refuse the report (a NaN or an infinity).
    package static func submission(_ body: SubmissionBody) -> [UInt8]? {
        var writer = JSONBuffer(capacity: 16_384)
        writer.object {
            $0.member("client") { out in
                out.object {
                    $0.member("proxy") { $0.bool(body.client.proxy) }
                    $0.member("sdk") { $0.string(body.client.sdk) }
                    $0.member("version") { $0.string(body.client.version) }
                }
            }
            $0.member("report") { $0.report(body.report) }
        }
        return writer.refused ? nil : writer.bytes
    }

    /// Verdict names in the order sorted keys give.
    fileprivate static let sortedVerdictNames = VerdictName.allCases.sorted {
        JSONBuffer.precedes($0.rawValue, $1.rawValue)
    }

    /// The verdicts as a JSON value, as `Verdicts.encode(to:)` writes them.
    package static func verdicts(_ verdicts: Verdicts) -> [UInt8] {
        var out = JSONBuffer(capacity: 4_096)
        out.verdicts(verdicts)
        return out.bytes
    }
}

extension JSONBuffer {
    package mutating func report(_ report: SignalReport) {
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

    /// An object keyed by verdict name, as `Verdicts.encode(to:)` writes it.
    package mutating func verdicts(_ verdicts: Verdicts) {
        object { out in
            for name in ReportWriter.sortedVerdictNames { out.member(name.rawValue) { $0.verdict(verdicts[name]) } }
        }
    }

    /// One verdict, as synthesized encoding writes it: absent optionals left out.
    private mutating func verdict(_ verdict: Verdict) {
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

    fileprivate mutating func signal(_ value: SignalValue) {
        switch value {
        case .bool(let flag): bool(flag)
        case .int(let number): integer(number)
        case .string(let text): string(text)
        case .strings(let texts): strings(texts)
        }
    }
}
