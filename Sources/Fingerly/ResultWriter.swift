import FingerlyModel

extension IdentifyResult {
    /// The result as `JSONEncoder.fingerly.encode(self)` writes it, absent members left out:
    /// what `fingerly-identify --json` prints, without JSONEncoder's generic walk of the report
    /// (`HandWrittenJSONTests` holds the two to the same bytes). Nil when JSONEncoder would
    /// refuse the result (a NaN or an infinity in the report).
    package var json: [UInt8]? {
        var out = JSONBuffer(capacity: 2 * (request?.body.utf8.count ?? 8_192) + 8_192)
        out.object {
            $0.member("duplicate") { $0.bool(duplicate) }
            $0.member("environment") { out in
                out.object {
                    if let cloud = environment.cloud { $0.member("cloud") { $0.string(cloud) } }
                    if let confidential = environment.confidential { $0.member("confidential") { $0.string(confidential) } }
                    $0.member("hardened") { $0.bool(environment.hardened) }
                    $0.member("xenDom0") { $0.bool(environment.xenDom0) }
                }
            }
            $0.member("identifiable") { $0.bool(identifiable) }
            $0.member("policy") { $0.string(policy) }
            $0.member("report") { $0.report(report) }
            if let request { $0.member("request") { $0.request(request) } }
            $0.member("requestId") { $0.string(requestId) }
            $0.member("state") { $0.string(state.rawValue) }
            if let suspectLevel { $0.member("suspectLevel") { $0.string(suspectLevel.rawValue) } }
            if let suspectScore { $0.member("suspectScore") { $0.integer(suspectScore) } }
            $0.member("triggers") {
                $0.array(triggers) { out, trigger in
                    out.object {
                        $0.member("confidence") { $0.string(trigger.confidence.rawValue) }
                        $0.member("group") { $0.string(trigger.group) }
                        $0.member("signal") { $0.string(trigger.signal) }
                        $0.member("weight") { $0.integer(trigger.weight) }
                    }
                }
            }
            $0.member("verdicts") { $0.verdicts(verdicts) }
            if let visitorConfidence { $0.member("visitorConfidence") { $0.integer(visitorConfidence) } }
            if let visitorId { $0.member("visitorId") { $0.string(visitorId) } }
            if let visitorIsNew { $0.member("visitorIsNew") { $0.bool(visitorIsNew) } }
        }
        return out.refused ? nil : out.bytes
    }
}

extension JSONBuffer {
    fileprivate mutating func request(_ request: SubmissionRequest) {
        object {
            $0.member("body") { $0.string(request.body) }
            $0.member("headers") {
                $0.array(request.headers) { out, header in
                    out.object {
                        $0.member("name") { $0.string(header.name) }
                        $0.member("value") { $0.string(header.value) }
                    }
                }
            }
            $0.member("idempotencyKey") { $0.string(request.idempotencyKey) }
            $0.member("method") { $0.string(request.method) }
            if let proxy = request.proxy { $0.member("proxy") { $0.string(proxy) } }
            $0.member("url") { $0.string(request.url) }
        }
    }
}
