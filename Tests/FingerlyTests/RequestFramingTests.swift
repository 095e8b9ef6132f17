import Foundation
import Testing
@testable import FingerlyServer

/// What the server does with requests it cannot frame or that stop arriving (docs/api.md, after the
/// error table): framing it cannot read is a 4xx, never a 5xx; a request that stalls past the
/// connection timeout is closed without a byte.
@Suite(.serialized)
struct RequestFramingTests {
    /// Everything the server sent, and whether it closed the connection (rather than the read timing out).
    static func readUntilClosed(_ descriptor: Int32) -> (bytes: [UInt8], closed: Bool) {
        var data: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = recv(descriptor, &buffer, buffer.count, 0)
            if count < 0 && errno == EINTR { continue }
            if count < 0 { return (data, errno == ECONNRESET) }
            if count == 0 { return (data, true) }
            data.append(contentsOf: buffer[0..<count])
        }
    }

    static func identifyHead(_ publicKey: String, _ extra: String) -> String {
        "POST /v1/identify HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(publicKey)\r\n"
            + "Content-Type: application/json\r\nIdempotency-Key: \"k\"\r\n" + extra + "\r\n"
    }

    @Test func framingErrorsAre4xx() throws {
        let harness = try ServerHarness()
        let (publicKey, _) = try harness.keys()
        let chunked = Self.identifyHead(publicKey, "Transfer-Encoding: chunked\r\n")
        let extension64K = "5;" + String(repeating: "a", count: 65_536) + "\r\nhello\r\n0\r\n\r\n"
        let long = String(repeating: "a", count: 70_000)
        let requests: [(String, String, Set<Int>)] = [
            ("a 64 KB chunk extension", chunked + extension64K, [411]),
            ("a bad chunk size", chunked + "zz\r\nhello\r\n0\r\n\r\n", [411]),
            ("a chunk size past any integer", chunked + "ffffffffffffffffffffff\r\nhello\r\n0\r\n\r\n", [411]),
            ("chunked and a length",
             Self.identifyHead(publicKey, "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n")
                + "5\r\nhello\r\n0\r\n\r\n",
             [400, 411]),
            ("an unknown transfer coding", Self.identifyHead(publicKey, "Transfer-Encoding: gzip\r\n"),
             [400, 411, 501]),
            ("a header past the limit", Self.identifyHead(publicKey, "X-Long: " + long + "\r\n"), [431]),
            ("a target past the limit", "GET /" + long + " HTTP/1.1\r\nHost: x\r\n\r\n", [414, 431]),
            ("a length that is not a number", Self.identifyHead(publicKey, "Content-Length: abc\r\n"), [400]),
            ("a chunked GET with a 64 KB extension",
             "GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + extension64K,
             [200, 400, 413, 431]),
        ]
        for (what, bytes, allowed) in requests {
            let descriptor = try harness.client.connect()
            defer { close(descriptor) }
            RawClient.write(descriptor, Array(bytes.utf8))
            let (answer, _) = Self.readUntilClosed(descriptor)
            let response = try? RawClient.parse(answer)
            #expect(response.map { allowed.contains($0.status) } == true,
                    "\(what): \(String(decoding: answer.prefix(200), as: UTF8.self))")
        }
        // The well-formed request on the same server still works.
        #expect(try harness.client.request("POST", "/v1/identify", headers: harness.identifyHeaders(publicKey),
                                           body: ServerTests.reportBody).status == 200)
    }

    @Test func aStalledRequestIsClosedWithoutAnAnswer() throws {
        let harness = try ServerHarness(clock: nil) { $0.connectionTimeout = 1 }
        let (publicKey, _) = try harness.keys()
        let stalls = [
            ("a body", Self.identifyHead(publicKey, "Content-Length: 100\r\n") + "{\"client\":"),
            ("a head", "POST /v1/identify HTTP/1.1\r\nHost: x\r\nContent-Ty"),
        ]
        for (what, bytes) in stalls {
            let descriptor = try harness.client.connect()
            defer { close(descriptor) }
            RawClient.write(descriptor, Array(bytes.utf8))
            let (answer, closed) = Self.readUntilClosed(descriptor)
            #expect(closed, "\(what): the server kept the connection")
            #expect(answer.isEmpty, "\(what): \(String(decoding: answer, as: UTF8.self))")
        }
        let metrics = try harness.client.request("GET", "/metrics").text
        #expect(metrics.contains("fingerly_http_requests_aborted_total 1"), "\(metrics)")
    }
}
