import Foundation
import Testing
@testable import FingerlyServer
@testable import FingerlyHost
@testable import FingerlyTransport

/// `Content-Digest` is read as an RFC 8941 dictionary: each sha-256 or sha-512 member is checked, other
/// algorithms are ignored, a field with neither is refused, and byte sequences may go unpadded.
@Suite(.serialized)
struct ContentDigestFieldTests {
    static let body = ServerTests.reportBody

    static func base64(_ bytes: [UInt8], padded: Bool = true) -> String {
        let text = StrictBase64.encode(bytes)
        return padded ? text : String(text.prefix { $0 != "=" })
    }

    static func sha512(_ bytes: [UInt8]) throws -> [UInt8] {
        let file = try TestPaths.temporaryDirectory("digest") + "/body"
        try Data(bytes).write(to: URL(fileURLWithPath: file))
        // An independent implementation: OpenSSL's command line.
        let run = try runProcess("/usr/bin/openssl", ["dgst", "-sha512", "-r", file])
        let hex = Array(run.standardOutput.prefix { $0 != " " }.utf8)
        return stride(from: 0, to: hex.count - 1, by: 2).compactMap {
            UInt8(String(decoding: hex[$0...$0 + 1], as: UTF8.self), radix: 16)
        }
    }

    @Test func theDictionaryFormsTheServerReads() throws {
        let sha256 = ContentDigest.sha256(Self.body), sha512 = try Self.sha512(Self.body)
        #expect(sha512.count == 64)
        let good256 = "sha-256=:\(Self.base64(sha256)):", good512 = "sha-512=:\(Self.base64(sha512)):"
        let wrong256 = "sha-256=:\(Self.base64(ContentDigest.sha256([1]))):"
        let checks: [(String, ContentDigest.Check)] = [
            (good256, .matches),
            ("\(good512), \(good256)", .matches),
            (good512, .matches),
            ("md5=:AAAAAAAAAAAAAAAAAAAAAA==:, \(good256)", .matches),
            ("unixsum=7, \(good256);x=1", .matches),
            ("sha-256=:\(Self.base64(sha256, padded: false)):", .matches),
            ("\(good512), \(wrong256)", .mismatch),
            (wrong256, .mismatch),
            ("sha-512=:\(Self.base64(Array(sha512.reversed()))):, \(good256)", .mismatch),
        ]
        for (field, expected) in checks {
            #expect(ContentDigest.check(Array(field.utf8), body: Self.body) == expected, "\(field)")
        }
        let good = "sha-256=:\(Self.base64(sha256)):"
        // RFC 9651 §3's floor for members, and no more: a key given twice is searched among them.
        let members = { (count: Int) in ((0..<count).map { "x\($0)" } + [good]).joined(separator: ",") }
        #expect(ContentDigest.check(Array(members(1023).utf8), body: Self.body) == .matches)
        for refused in [members(1024), "md5=:AAAAAAAAAAAAAAAAAAAAAA==:", "sha-256=:AAAA:", "sha-256=\"text\"",
                        "sha-256=:\(Self.base64(sha256)):,",
                        "garbage", "", "sha-256=:\(Self.base64(sha256).dropLast(2))B=:"] {
            guard case .refused = ContentDigest.check(Array(refused.utf8), body: Self.body) else {
                Issue.record("\(refused) was not refused")
                continue
            }
        }
    }

    @Test func unsignedRequestsAreJudgedTheSameWay() throws {
        let harness = try ServerHarness()
        let (publicKey, _) = try harness.keys()
        func identify(_ digest: String) throws -> RawResponse {
            let headers = harness.identifyHeaders(publicKey) + [("Content-Digest", digest)]
            return try harness.client.request("POST", "/v1/identify", headers: headers, body: Self.body)
        }
        let sha256 = ContentDigest.sha256(Self.body), sha512 = try Self.sha512(Self.body)
        #expect(try identify("sha-512=:\(Self.base64(sha512)):, sha-256=:\(Self.base64(sha256)):").status == 200)
        #expect(try identify("sha-256=:\(Self.base64(sha256, padded: false)):").status == 200)
        #expect(try identify("crc32c=:AAAAAA==:, sha-256=:\(Self.base64(sha256)):").status == 200)
        let zeros = Self.base64(Array(repeating: 0, count: 64))
        let mismatch = try identify("sha-512=:\(zeros):, sha-256=:\(Self.base64(sha256)):")
        #expect(mismatch.status == 400)
        #expect(mismatch.text.contains("does not match"))
        let unknown = try identify("md5=:AAAAAAAAAAAAAAAAAAAAAA==:")
        #expect(unknown.status == 400)
        #expect(unknown.text.contains("no sha-256 or sha-512"))
    }

    /// A signature over a two-algorithm, unpadded field verifies: the base carries the field as sent.
    @Test func theSignatureCoversTheFieldAsSent() throws {
        let harness = try ServerHarness(clock: nil) { $0.allowUnsigned = false }
        let (publicKey, _) = try harness.keys()
        let key = try DeviceKey.ephemeral()
        let sha256 = ContentDigest.sha256(Self.body), sha512 = try Self.sha512(Self.body)
        let digest = "sha-512=:\(Self.base64(sha512, padded: false)):, sha-256=:\(Self.base64(sha256, padded: false)):"
        func signed(_ digest: String, sentDigest: String? = nil, paddedSignature: Bool = false) throws -> RawResponse {
            let idempotency = "\"\(UUID().uuidString.lowercased())\"", created = Int64(Date().timeIntervalSince1970)
            let base = MessageSignature.signatureBase(method: "POST", path: "/v1/identify", contentDigest: digest,
                                                      idempotencyKey: idempotency, created: created, keyID: key.keyID)
            let signature = try key.sign(base)
            let headers = harness.identifyHeaders(publicKey, idempotencyKey: idempotency) + [
                ("Content-Digest", sentDigest ?? digest),
                ("Fingerly-Device-Key", ":\(Self.base64(key.publicKey, padded: false)):"),
                ("Signature-Input", "fingerly=\(MessageSignature.parameters(created: created, keyID: key.keyID))"),
                ("Signature", "fingerly=:\(Self.base64(signature, padded: paddedSignature)):"),
            ]
            return try harness.client.request("POST", "/v1/identify", headers: headers, body: Self.body)
        }
        let accepted = try signed(digest)
        #expect(accepted.status == 200, "\(accepted.text)")
        #expect(try signed(digest, paddedSignature: true).status == 200)
        // The same digests spelled with padding are another base line than the one signed.
        let padded = "sha-512=:\(Self.base64(sha512)):, sha-256=:\(Self.base64(sha256)):"
        let respelled = try signed(digest, sentDigest: padded)
        #expect(respelled.status == 401)
        #expect(respelled.errorCode == "invalid_signature")
        // A signed field whose sha-512 lies is a digest mismatch, whatever its sha-256 says.
        let ones = Self.base64(Array(repeating: 1, count: 64))
        let lying = try signed("sha-512=:\(ones):, sha-256=:\(Self.base64(sha256)):")
        #expect(lying.status == 400)
        let none = try signed("md5=:AAAAAAAAAAAAAAAAAAAAAA==:")
        #expect(none.status == 401)
        #expect(none.errorCode == "invalid_signature")
    }
}
