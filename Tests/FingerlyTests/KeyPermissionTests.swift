import Foundation
import Testing
@testable import FingerlyServer
@testable import FingerlyStore

/// A real key used where it is not allowed is 403 forbidden on either route; a key the server does not
/// hold (unknown, revoked, malformed) is 401 invalid_key. Both count against the source address.
@Suite(.serialized)
struct KeyPermissionTests {
    @Test func aSecretKeyCannotSubmitAndAPublicKeyCannotRead() throws {
        let harness = try ServerHarness()
        let (publicKey, secretKey) = try harness.keys()
        func identify(_ key: String) throws -> RawResponse {
            try harness.client.request("POST", "/v1/identify", headers: harness.identifyHeaders(key),
                                       body: ServerTests.reportBody)
        }
        func read(_ key: String) throws -> RawResponse {
            try harness.client.request("GET", "/v1/events/req_1", headers: [("Authorization", "Bearer \(key)")])
        }
        let secretOnIdentify = try identify(secretKey)
        #expect(secretOnIdentify.status == 403)
        #expect(secretOnIdentify.errorCode == "forbidden")
        #expect(secretOnIdentify.text.contains("secret key cannot submit"))
        let publicOnEvents = try read(publicKey)
        #expect(publicOnEvents.status == 403)
        #expect(publicOnEvents.errorCode == "forbidden")

        // Keys of the right form the server does not hold are not "valid but forbidden".
        let unknownSecret = "fly_sk_eu_production_acme_" + String(repeating: "q", count: 32)
        let unknownPublic = "fly_pk_eu_production_acme_" + String(repeating: "q", count: 32)
        #expect(try identify(unknownSecret).errorCode == "invalid_key")
        #expect(try identify(unknownSecret).status == 401)
        #expect(try read(unknownPublic).errorCode == "invalid_key")
        // Another organization's name on a real secret is not that secret.
        #expect(try identify(secretKey.replacingOccurrences(of: "_acme_", with: "_other_")).status == 401)

        // The right key still works on its own route.
        #expect(try identify(publicKey).status == 200)
        #expect(try read(secretKey).status == 404)

        _ = try harness.store.transaction { tx throws(StoreError) in try tx.revokeKey(publicKey: publicKey) }
        #expect(try identify(secretKey).errorCode == "invalid_key")
        #expect(try read(publicKey).errorCode == "invalid_key")
    }

    @Test func forbiddenKeysCountAsFailedAuthentications() throws {
        let harness = try ServerHarness(clock: { 1_767_225_600 }) { $0.failureLimit = 3 }
        let (_, secretKey) = try harness.keys()
        var codes: [String?] = []
        for _ in 0..<5 {
            codes.append(try harness.client.request("POST", "/v1/identify", headers: harness.identifyHeaders(secretKey),
                                                    body: ServerTests.reportBody).errorCode)
        }
        #expect(codes.prefix(3).allSatisfy { $0 == "forbidden" })
        #expect(codes.last == "too_many_failures")
    }
}
