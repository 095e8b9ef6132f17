import Foundation
import Testing
@testable import FingerlyServer
@testable import FingerlyTransport

/// What docs/api.md says of a replay: a signed request's age is checked before its idempotency key, so a
/// captured request replayed byte for byte gets the stored answer within the freshness window of its
/// `created` and 401 stale_signature past it; re-signed attempts get the stored answer for 24 hours.
@Suite(.serialized)
struct ReplayWindowTests {
    static func duplicate(_ response: RawResponse) throws -> Bool {
        try #require(response.status == 200, "\(response.status) \(response.text)")
        let answer = try #require(JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any])
        return answer["duplicate"] as? Bool == true
    }

    @Test func aReplayIsAnsweredByItsAgeThenByItsKey() throws {
        let start = Int64(Date().timeIntervalSince1970)
        let now = Locked<Int64>(start)
        let harness = try ServerHarness(clock: { now.value }) { $0.allowUnsigned = false }
        let (publicKey, _) = try harness.keys()
        let key = try DeviceKey.ephemeral()
        let idempotency = "\"\(UUID().uuidString.lowercased())\"", body = ServerTests.reportBody
        func signedAt(_ created: Int64) throws -> [(String, String)] {
            harness.identifyHeaders(publicKey, idempotencyKey: idempotency)
                + (try MessageSignature.sign(method: "POST", path: "/v1/identify", body: body,
                                             idempotencyKey: idempotency, created: created, with: key)).headers
        }
        func send(_ headers: [(String, String)]) throws -> RawResponse {
            try harness.client.request("POST", "/v1/identify", headers: headers, body: body)
        }
        let captured = try signedAt(start)
        let first = try send(captured)
        #expect(try !Self.duplicate(first))

        // Within the window of its created: the stored answer, the same requestId.
        now.set(start + 300)
        let replayed = try send(captured)
        #expect(try Self.duplicate(replayed))
        let requestId = { (response: RawResponse) in
            (try? JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any])?["requestId"] as? String
        }
        #expect(requestId(replayed) == requestId(first))

        // Past it: refused for its age; the key is never reached.
        now.set(start + 301)
        let stale = try send(captured)
        #expect(stale.status == 401)
        #expect(stale.errorCode == "stale_signature")

        // The genuine client signs every attempt afresh: its retry gets the stored answer for 24 hours.
        now.set(start + 86_399)
        #expect(try Self.duplicate(send(try signedAt(start + 86_399))))
        // After them the key is forgotten: the same report is a new request.
        now.set(start + 86_401)
        let later = try send(try signedAt(start + 86_401))
        #expect(try !Self.duplicate(later))
        #expect(requestId(later) != requestId(first))
    }
}
