import Foundation
import Testing
@testable import FingerlyServer

/// identify reads JSON only: anything but one `Content-Type: application/json` (type without case,
/// parameters allowed, a charset of utf-8) is 415 unsupported_media_type, answered from the head.
@Suite(.serialized)
struct ContentTypeTests {
    @Test func identifyTakesApplicationJSONOnly() throws {
        let harness = try ServerHarness()
        let (publicKey, _) = try harness.keys()
        func identify(_ contentTypes: [String]) throws -> RawResponse {
            let headers = harness.identifyHeaders(publicKey).filter { $0.0 != "Content-Type" }
                + contentTypes.map { ("Content-Type", $0) }
            return try harness.client.request("POST", "/v1/identify", headers: headers, body: ServerTests.reportBody)
        }
        for accepted in ["application/json", "Application/JSON", "application/json; charset=utf-8",
                         "application/json;charset=\"UTF-8\"", "application/json ; profile=x"] {
            let answer = try identify([accepted])
            #expect(answer.status == 200, "\(accepted): \(answer.text)")
        }
        for refused in [[], ["text/plain"], ["application/jsonx"], ["application/json; charset=latin1"],
                        ["application/json; charset"], ["application/*"], ["application/json", "application/json"],
                        ["text/plain, application/json"]] {
            let answer = try identify(refused)
            #expect(answer.status == 415, "\(refused): \(answer.status) \(answer.text)")
            #expect(answer.errorCode == "unsupported_media_type")
        }
        // Before the key: nothing about the request is read past its head.
        let anonymous = try harness.client.request("POST", "/v1/identify", headers: [("Content-Type", "text/plain")])
        #expect(anonymous.status == 415)
    }

    /// The body is never waited for: a declared length whose bytes never come still gets its answer.
    @Test func theAnswerComesFromTheHead() throws {
        let harness = try ServerHarness()
        let (publicKey, _) = try harness.keys()
        let descriptor = try harness.client.connect()
        defer { close(descriptor) }
        let head = "POST /v1/identify HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(publicKey)\r\n"
            + "Content-Type: text/plain\r\nIdempotency-Key: \"k\"\r\nContent-Length: 5000\r\n\r\n"
        RawClient.write(descriptor, Array(head.utf8))
        let answer = try RawClient.parse(RawClient.readAll(descriptor))
        #expect(answer.status == 415)
        #expect(answer.errorCode == "unsupported_media_type")
    }

    /// The real client says what it sends.
    @Test func theClientSendsApplicationJSON() throws {
        let state = try SubmissionCLITests.freshState("content-type")
        let run = try runCLI(["--no-submit", "--json", "--root", SubmissionCLITests.fixture, "--tiers", "fast"],
                             environment: SubmissionCLITests.environment(state: state, apiKey: TestKeys.standard))
        try #require(run.status == 0, "\(run.standardError)")
        let output = try #require(JSONSerialization.jsonObject(with: Data(run.standardOutput.utf8)) as? [String: Any])
        let request = try #require(output["request"] as? [String: Any])
        let headers = try #require(request["headers"] as? [[String: Any]])
        let contentTypes = headers.filter { ($0["name"] as? String)?.lowercased() == "content-type" }
            .compactMap { $0["value"] as? String }
        #expect(contentTypes == ["application/json"])
        #expect(ServerRoutes.isJSON(contentTypes))
    }
}
