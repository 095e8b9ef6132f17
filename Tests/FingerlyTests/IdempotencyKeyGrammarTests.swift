import Foundation
import Testing
@testable import FingerlyServer
@testable import FingerlyTransport

/// `Idempotency-Key` is an RFC 8941 sf-string of 1 to 255 characters, parameters parsed and ignored, read
/// by one grammar in the signature verifier and the server (docs/api.md, Idempotency).
@Suite(.serialized)
struct IdempotencyKeyGrammarTests {
    static let uuid = "3f0c2b9e-8d4a-4c1f-9b7e-2a6d5e8f1c40"

    @Test func theGrammarTakesEveryStringAndRefusesTheRest() {
        let accepted: [(String, String)] = [
            ("\"\(Self.uuid)\"", Self.uuid),
            ("\"\(Self.uuid.uppercased())\"", Self.uuid.uppercased()),
            ("\"abc\"", "abc"),
            ("\"a b\"", "a b"),
            (#""a\"b""#, #"a"b"#),
            (#""back\\slash""#, #"back\slash"#),
            ("\"\(Self.uuid)\";a=1", Self.uuid),
            ("\"\(Self.uuid)\";a=1;b;c=\"x\";d=:AAE:;e=?0;f=-1.5;g=tok/en", Self.uuid),
            (" \t\"k\"\t ", "k"),
            ("\"" + String(repeating: "k", count: 255) + "\"", String(repeating: "k", count: 255)),
        ]
        let manyParameters = "\"k\"" + (0..<100).map { ";p\($0)" }.joined()
        for (field, key) in accepted + [(manyParameters, "k")] {
            #expect(IdempotencyKeyField.key(inFieldValue: field) == key, "\(field)")
        }
        let refused: [(String, IdempotencyKeyField.Refusal)] = [
            ("\"\"", .empty),
            ("abc", .notAString),
            ("\"abc", .notAString),
            ("\"tab\tkey\"", .notAString),
            (#""bad\escape""#, .notAString),
            ("\"h\u{e9}\"", .notAString),
            ("\"one\", \"two\"", .notAString),
            ("\"k\";A=1", .notAString),
            ("\"k\";a=", .notAString),
            ("\"k\" x", .notAString),
            ("?1", .notAString),
            ("\"" + String(repeating: "k", count: 256) + "\"", .tooLong),
            // At most 512 bytes in all, whatever the parameters, as every field the signature reads.
            ("\"k\"" + (0..<257).map { ";p\($0)" }.joined(), .fieldTooLong),
            ("\"k\";" + String(repeating: "p", count: 509), .fieldTooLong),
        ]
        for (field, refusal) in refused {
            #expect(IdempotencyKeyField.parse(fieldValue: field) == .failure(refusal), "\(field)")
        }
    }

    @Test func theServerKeysAnswersByTheStringAlone() throws {
        let harness = try ServerHarness()
        let (publicKey, _) = try harness.keys()
        func identify(_ field: String) throws -> RawResponse {
            let headers = harness.identifyHeaders(publicKey, idempotencyKey: field)
            return try harness.client.request("POST", "/v1/identify", headers: headers, body: ServerTests.reportBody)
        }
        func duplicate(_ response: RawResponse) throws -> Bool {
            try #require(response.status == 200, "\(response.status) \(response.text)")
            let answer = try #require(JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any])
            return answer["duplicate"] as? Bool == true
        }
        #expect(try !duplicate(identify("\"\(Self.uuid)\"")))
        // The parameters are not part of the key: this is the same key again.
        #expect(try duplicate(identify("\"\(Self.uuid)\";a=1")))
        // Opaque: the upper-case spelling is another key.
        #expect(try !duplicate(identify("\"\(Self.uuid.uppercased())\"")))
        #expect(try !duplicate(identify("\"abc\"")))
        #expect(try !duplicate(identify("\"a b\"")))
        #expect(try duplicate(identify("\"a b\";x")))
        #expect(try !duplicate(identify(#""a\"b""#)))

        for (field, says) in [("\"\"", "Idempotency-Key is an empty string"),
                              ("abc", "is not a Structured Fields string"),
                              ("\"" + String(repeating: "k", count: 256) + "\"", "longer than 255 characters")] {
            let refused = try identify(field)
            #expect(refused.status == 400, "\(field)")
            #expect(refused.errorCode == "bad_request")
            #expect(refused.text.contains(says), "\(refused.text)")
        }
        let twice = try harness.client.request("POST", "/v1/identify",
                                               headers: harness.identifyHeaders(publicKey)
                                                   + [("Idempotency-Key", "\"b\"")],
                                               body: ServerTests.reportBody)
        #expect(twice.status == 400)
        #expect(twice.text.contains("more than once"))
    }

    /// The signature covers the field as sent, parameters included; the server keys by the string.
    @Test func aSignatureCoversTheParametersAsSent() throws {
        let harness = try ServerHarness(clock: nil) { $0.allowUnsigned = false }
        let (publicKey, _) = try harness.keys()
        let signer = try DeviceKey.ephemeral()
        let field = "\"\(UUID().uuidString.lowercased())\";v=2"
        let body = ServerTests.reportBody
        let signature = try MessageSignature.sign(method: "POST", path: "/v1/identify", body: body,
                                                  idempotencyKey: field, created: Int64(Date().timeIntervalSince1970),
                                                  with: signer)
        let headers = harness.identifyHeaders(publicKey, idempotencyKey: field) + signature.headers
        let signed = try harness.client.request("POST", "/v1/identify", headers: headers, body: body)
        #expect(signed.status == 200, "\(signed.text)")
        // The same key without its parameter is another base line: the signature no longer verifies.
        let stripped = field.split(separator: ";")[0]
        let movedHeaders = harness.identifyHeaders(publicKey, idempotencyKey: String(stripped)) + signature.headers
        let moved = try harness.client.request("POST", "/v1/identify", headers: movedHeaders, body: body)
        #expect(moved.status == 401)
        #expect(moved.errorCode == "invalid_signature")
    }
}
