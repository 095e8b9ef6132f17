import Foundation
import Testing
@testable import FingerlyServer
@testable import FingerlyTransport

/// `fingerly_identify_signatures_total` counts every identify request whose body was read once, in
/// exactly one outcome: its outcomes add up to the identify requests answered.
@Suite(.serialized)
struct SignatureOutcomeMetricsTests {
    static func counters(_ exposition: String, _ name: String) -> [String: Int] {
        var out: [String: Int] = [:]
        for line in exposition.split(separator: "\n") where line.hasPrefix(name + "{") {
            let parts = line.split(separator: " ")
            guard parts.count == 2, let value = Int(parts[1]) else { continue }
            out[String(parts[0].dropFirst(name.count))] = value
        }
        return out
    }

    @Test func everyRequestCountsInExactlyOneOutcome() throws {
        for allowUnsigned in [true, false] {
            let harness = try ServerHarness(clock: nil) { $0.allowUnsigned = allowUnsigned }
            let (publicKey, secretKey) = try harness.keys()
            let key = try DeviceKey.ephemeral()
            let body = ServerTests.reportBody
            let now = Int64(Date().timeIntervalSince1970)
            func headers(_ apiKey: String = publicKey, idempotency: String = "\"\(UUID().uuidString.lowercased())\"",
                         signedAt created: Int64? = nil, signedBody: [UInt8]? = nil) throws -> [(String, String)] {
                var headers = harness.identifyHeaders(apiKey, idempotencyKey: idempotency)
                if let created {
                    headers += try MessageSignature.sign(method: "POST", path: "/v1/identify",
                                                         body: signedBody ?? body, idempotencyKey: idempotency,
                                                         created: created, with: key).headers
                }
                return headers
            }
            let wrongDigest = ("Content-Digest", ContentDigest.fieldValue(for: [1, 2, 3]))
            let zeroSignature = String(repeating: "A", count: 86)
            let cases: [[(String, String)]] = [
                try headers(signedAt: now), try headers(signedAt: now), try headers(signedAt: now - 1000),
                try headers(signedAt: now, signedBody: [1]),
                try headers(signedAt: now).map { $0.0 == "Signature" ? ($0.0, "fingerly=:\(zeroSignature)==:") : $0 },
                try headers(), try headers(), try headers() + [wrongDigest], try headers() + [wrongDigest],
                try headers() + [("Content-Digest", "md5=:AAAAAAAAAAAAAAAAAAAAAA==:")],
                try headers() + [("Fingerly-Key-Rotation", ":AAAA:;sig=:AAAA:")],
                try headers(idempotency: "\"\""), try headers(idempotency: "unquoted"),
                try headers(secretKey), try headers("fly_pk_eu_production_acme_" + String(repeating: "z", count: 32)),
                try headers("not-a-key"), try headers(signedAt: now).filter { $0.0 != "Authorization" },
                try headers(secretKey, signedAt: now), try headers() + [wrongDigest], try headers(signedAt: now),
            ]
            for headers in cases {
                _ = try harness.client.request("POST", "/v1/identify", headers: headers, body: body)
            }
            let exposition = try harness.client.request("GET", "/metrics").text
            let outcomes = Self.counters(exposition, "fingerly_identify_signatures_total")
            let answered = Self.counters(exposition, "fingerly_http_requests_total")
                .filter { $0.key.contains("route=\"identify\"") }
            #expect(outcomes.values.reduce(0, +) == cases.count, "\(outcomes)")
            #expect(answered.values.reduce(0, +) == cases.count, "\(answered)")
            #expect(outcomes["{outcome=\"digest_mismatch\"}", default: 0] >= (allowUnsigned ? 4 : 1), "\(outcomes)")
            #expect(outcomes["{outcome=\"unjudged\"}", default: 0] >= 4, "\(outcomes)")
            #expect(outcomes["{outcome=\"verified\"}", default: 0] == 3, "\(outcomes)")
            #expect(outcomes["{outcome=\"stale\"}"] == 1, "\(outcomes)")
        }
    }
}
