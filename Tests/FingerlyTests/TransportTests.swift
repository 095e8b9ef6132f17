import Foundation
import Testing
@testable import FingerlyTransport

/// The delivery loop against the fault server over loopback. Pauses are recorded by an injected
/// sleeper that does not sleep, and the random draw is the top of its range, so every pause is exact.
@Suite(.serialized) struct TransportTests {
    static let body = Array(#"{"client":{"proxy":false},"report":{"signals":{"a":1}}}"#.utf8)
    static let key = "\"0b7f5c9e-3d1a-4c8e-9f2b-6a5d4e3c2b1a\""
    static let secret = "Bearer fly_pk_eu_production_acme42_SECRETSECRET"

    /// Attempt n's headers: the Authorization and key never change, the per-attempt field does.
    static func headers(_ attempt: Int) -> [HTTPHeader] {
        [HTTPHeader("Authorization", secret), HTTPHeader("Content-Type", "application/json"),
         HTTPHeader("Idempotency-Key", key), HTTPHeader("X-Attempt", String(attempt))]
    }

    final class Sleeps: @unchecked Sendable {
        private let lock = NSLock()
        private var stored: [Int] = []
        func record(_ milliseconds: Int) { lock.withLock { stored.append(milliseconds) } }
        var all: [Int] { lock.withLock { stored } }
    }

    static func delivery(_ policy: RetryPolicy = RetryPolicy(), sleeps: Sleeps, now: Int64 = 1_750_000_000) -> Delivery {
        Delivery(policy: policy, random: { $0 }, sleep: { sleeps.record($0) }, wallClockSeconds: { now })
    }

    static func deliver(_ server: FaultServer, _ policy: RetryPolicy = RetryPolicy(), sleeps: Sleeps = Sleeps(),
                        environment: [String: String] = [:], now: Int64 = 1_750_000_000) -> DeliveryReport {
        delivery(policy, sleeps: sleeps, now: now).deliver(url: server.url + "/v1/identify", body: body, environment: environment,
                                                           headers: headers)
    }

    /// Every request the server saw carried the same body bytes and key, and attempt n's own header.
    static func expectSameBytesAndKey(_ requests: [RecordedRequest], sourceLocation: SourceLocation = #_sourceLocation) {
        for (index, request) in requests.enumerated() {
            #expect(request.method == "POST" && request.path == "/v1/identify", sourceLocation: sourceLocation)
            #expect(request.body == body, sourceLocation: sourceLocation)
            #expect(request.header("Idempotency-Key") == key, sourceLocation: sourceLocation)
            #expect(request.header("X-Attempt") == String(index + 1), sourceLocation: sourceLocation)
        }
    }

    // MARK: acceptance 1, 5: retried statuses

    @Test func fiveHundredThenTwoHundredSendsTheSameBytesTwice() throws {
        let server = try FaultServer([.status(500, body: #"{"error":{"code":"internal","message":"boom"}}"#),
                                      .status(200, [("Content-Type", "application/json")], body: #"{"requestId":"r1"}"#)])
        let sleeps = Sleeps()
        let report = Self.deliver(server, sleeps: sleeps)
        guard case .delivered(let response) = report.outcome else {
            Issue.record("not delivered: \(report.outcome)")
            return
        }
        #expect(response.status == 200 && response.body == Array(#"{"requestId":"r1"}"#.utf8))
        #expect(response.header("Content-Type") == "application/json")
        #expect(response.headers.allSatisfy { $0.name == $0.name.lowercased() })
        #expect(server.requests.count == 2)
        Self.expectSameBytesAndKey(server.requests)
        // The caller's headers arrive in the caller's order, ahead of nothing but curl's Host.
        let names = server.requests[0].headers.map(\.name).filter { !["Host", "Content-Length"].contains($0) }
        // Nothing of curl's own (Accept: */*, a form Content-Type, Expect) is added.
        #expect(names == ["Authorization", "Content-Type", "Idempotency-Key", "X-Attempt"], "\(names)")
        #expect(report.attempts.map(\.outcome) == [.response(status: 500, code: "internal"), .response(status: 200, code: nil)])
        #expect(report.attempts.map(\.pauseMs) == [500, nil] && sleeps.all == [500])
        #expect(!report.carriedByProxy && report.proxy == nil)
    }

    @Test(arguments: [408, 409, 429, 500, 502, 503, 504, 599])
    func aRetriedStatusIsRetriedUnderTheSameKey(_ status: Int) throws {
        let server = try FaultServer([.status(status), .status(status), .status(status)])
        let report = Self.deliver(server)
        #expect(server.requests.count == 3)
        Self.expectSameBytesAndKey(server.requests)
        #expect(report.outcome == .exhausted(last: .response(status: status, code: nil), stoppedBy: .attempts))
        #expect(report.isRetryable)
    }

    @Test func aConflictWhileTheKeyIsInProgressIsRetriedThenDelivered() throws {
        let server = try FaultServer([.status(409, body: #"{"error":{"code":"request_in_progress","message":"wait"}}"#), .status(200)])
        let report = Self.deliver(server)
        guard case .delivered = report.outcome else { Issue.record("\(report.outcome)"); return }
        #expect(server.requests.count == 2)
        Self.expectSameBytesAndKey(server.requests)
        #expect(report.attempts[0].outcome == .response(status: 409, code: "request_in_progress"))
    }

    // MARK: acceptance 2, 3: Retry-After

    static let now: Int64 = 1_750_000_000
    static func httpDate(_ epoch: Int64) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter.string(from: Date(timeIntervalSince1970: TimeInterval(epoch)))
    }

    @Test(arguments: [
        ("7", 7000, PauseReason.retryAfter),
        ("0", 0, .retryAfter),
        ("120", 10_000, .retryAfter),            // clamped to retryAfterCapMs
        (TransportTests.httpDate(TransportTests.now + 4), 4000, .retryAfter),
        (TransportTests.httpDate(TransportTests.now + 3600), 10_000, .retryAfter),
        (TransportTests.httpDate(TransportTests.now - 60), 0, .retryAfter),     // a date in the past: at once
        ("soon", 500, .backoff),                 // malformed: ignored, the backoff pause instead
        ("-1", 500, .backoff),
    ])
    func retryAfterIsHonouredAndClamped(_ value: String, _ expectedPause: Int, _ reason: PauseReason) throws {
        let server = try FaultServer([.status(503, [("Retry-After", value)]), .status(200)])
        let sleeps = Sleeps()
        let report = Self.deliver(server, sleeps: sleeps, now: Self.now)
        guard case .delivered = report.outcome else { Issue.record("\(report.outcome)"); return }
        #expect(server.requests.count == 2)
        #expect(report.attempts[0].pauseMs == expectedPause && report.attempts[0].pauseReason == reason, "\(value)")
        #expect(sleeps.all == (expectedPause > 0 ? [expectedPause] : []))
    }

    @Test func tooManyRequestsWithoutRetryAfterPausesTheDefault() throws {
        let server = try FaultServer([.status(429), .status(429, [("Retry-After", "2")]), .status(200)])
        var policy = RetryPolicy()
        policy.rateLimitPauseMs = 1234
        let sleeps = Sleeps()
        let report = Self.deliver(server, policy, sleeps: sleeps)
        guard case .delivered = report.outcome else { Issue.record("\(report.outcome)"); return }
        #expect(server.requests.count == 3)
        #expect(report.attempts.map(\.pauseReason) == [.rateLimited, .retryAfter, nil])
        #expect(sleeps.all == [1234, 2000])
    }

    @Test func aRetryAfterBeyondTheDeadlineEndsTheDeliveryWithoutWaiting() throws {
        let server = try FaultServer([.status(503, [("Retry-After", "8")]), .status(200)])
        var policy = RetryPolicy()
        policy.deadlineMs = 5000
        let sleeps = Sleeps()
        let report = Self.deliver(server, policy, sleeps: sleeps)
        #expect(report.outcome == .exhausted(last: .response(status: 503, code: nil), stoppedBy: .deadline))
        #expect(server.requests.count == 1 && sleeps.all.isEmpty)
        #expect(report.attempts.map(\.pauseMs) == [nil])
    }

    // MARK: acceptance 4: never retried

    @Test(arguments: [(400, "bad_request"), (401, "invalid_key"), (402, "organization_not_accepting"), (403, "forbidden"),
                      (413, "payload_too_large"), (422, "idempotency_key_reused"), (404, "not_found"), (501, "x"), (505, "y"), (302, "z")])
    func aRejectedStatusIsSentExactlyOnce(_ status: Int, _ code: String) throws {
        let body = #"{"error":{"code":"\#(code)","message":"no"}}"#
        let server = try FaultServer([.status(status, body: body), .status(200)])
        let sleeps = Sleeps()
        let report = Self.deliver(server, sleeps: sleeps)
        #expect(server.requests.count == 1)
        #expect(report.outcome == .rejected(status: status, code: code, body: Array(body.utf8)))
        #expect(!report.isRetryable && sleeps.all.isEmpty)
    }

    // MARK: acceptance 6, 7, 8: the network

    @Test func aServerSleepingPastTheAttemptTimeoutIsRetried() throws {
        let server = try FaultServer([.status(200, delayMs: 30_000), .status(200)])
        var policy = RetryPolicy()
        // Long enough for a loaded machine to answer the second attempt in time; the first waits 30 s.
        policy.attemptTimeoutMs = 1500
        let report = Self.deliver(server, policy)
        guard case .delivered = report.outcome else { Issue.record("\(report.outcome)"); return }
        #expect(report.attempts.map(\.outcome).first == .failure(.timedOut))
        #expect(server.requests.count == 2)
        Self.expectSameBytesAndKey(server.requests)
    }

    @Test func aClosedPortFailsRetryablyAfterEveryAttempt() throws {
        // Bound and never listening: connections are refused, and no other test can take the port meanwhile.
        let held = try HeldLoopbackPort()
        defer { withExtendedLifetime(held) {} }
        let sleeps = Sleeps()
        let report = Self.delivery(sleeps: sleeps).deliver(url: "http://127.0.0.1:\(held.port)/v1/identify",
                                                           body: Self.body, environment: [:], headers: Self.headers)
        guard case .exhausted(.failure(.network(let detail)), .attempts) = report.outcome else {
            Issue.record("\(report.outcome)")
            return
        }
        #expect(detail.contains("curl 7"), "\(detail)")
        #expect(report.attempts.count == 3 && report.isRetryable)
        #expect(sleeps.all == [500, 1000])
    }

    @Test(arguments: [FaultServer.Fault.resetAfterRequest, .resetMidResponse, .closeWithoutAnswer])
    func aConnectionCutShortIsRetried(_ fault: FaultServer.Fault) throws {
        let server = try FaultServer([.fault(fault), .status(200, body: "ok")])
        let report = Self.deliver(server)
        guard case .delivered(let response) = report.outcome else { Issue.record("\(fault): \(report.outcome)"); return }
        #expect(response.body == Array("ok".utf8))
        guard case .failure(.network) = report.attempts[0].outcome else { Issue.record("\(report.attempts[0])"); return }
        #expect(server.requests.count == 2)
        Self.expectSameBytesAndKey(server.requests)
    }

    /// An answer over the cap is not read, and says nothing of whether the report was stored (a
    /// proxy's error page, a hostile network): it is retried under the same key, never lost.
    @Test func aResponseOverOneMebibyteIsNotReadAndIsRetried() throws {
        let limit = HTTPClient.maximumResponseBytes
        let server = try FaultServer([FaultServer.Reply(status: 503, body: [UInt8](repeating: 0x61, count: limit + 1)),
                                      FaultServer.Reply(status: 200, body: [UInt8](repeating: 0x62, count: limit))])
        let report = Self.deliver(server)
        guard case .delivered(let response) = report.outcome else { Issue.record("\(report.outcome)"); return }
        #expect(response.body.count == limit, "exactly the limit is read whole")
        #expect(report.attempts.first?.outcome == .failure(.responseTooLarge))
        #expect(server.requests.count == 2)
        Self.expectSameBytesAndKey(server.requests)
    }

    @Test(arguments: [
        [HTTPHeader("X-Bad", "a\r\nX-Injected: 1")],
        [HTTPHeader("Bad Name", "v")],
        [HTTPHeader("", "v")],
    ])
    func aHeaderCurlWouldSplitIsNeverSent(_ headers: [HTTPHeader]) throws {
        let server = try FaultServer([.status(200)])
        let result = HTTPClient.perform(HTTPRequest(url: server.url + "/", method: "POST", headers: headers, body: Self.body),
                                        settings: AttemptSettings())
        guard case .failure(.invalidRequest(let detail)) = result else { Issue.record("\(result)"); return }
        #expect(!detail.contains("\r") && !detail.contains("X-Injected"))
        #expect(server.requests.isEmpty)
    }

    @Test func theAuthorizationValueAppearsInNoOutcomeOrError() throws {
        let server = try FaultServer([.fault(.resetAfterRequest), .status(401, body: #"{"error":{"code":"invalid_key"}}"#)])
        let report = Self.deliver(server)
        #expect(!"\(report)".contains("SECRETSECRET"))
        let bad = HTTPClient.perform(HTTPRequest(url: server.url, method: "GET", headers: [HTTPHeader("Authorization", Self.secret + "\n")],
                                                 body: []), settings: AttemptSettings())
        #expect(!"\(bad)".contains("SECRETSECRET") && "\(bad)".contains("Authorization"))
    }

    @Test(arguments: ["ftp://127.0.0.1/", "127.0.0.1/v1", "http:// 127.0.0.1/", "http://127.0.0.1:0/", "file:///etc/passwd"])
    func aURLThatIsNotHTTPIsRefusedBeforeAnyAttempt(_ url: String) {
        let report = Self.delivery(sleeps: Sleeps()).deliver(url: url, body: Self.body, environment: [:], headers: Self.headers)
        guard case .failed(.invalidRequest) = report.outcome else { Issue.record("\(url): \(report.outcome)"); return }
        #expect(report.attempts.isEmpty)
    }

    // MARK: the deadline and the per-attempt timeout, on an injected clock

    @Test func thePerAttemptTimeoutShrinksToWhatIsLeftOfTheDeadline() {
        final class Clock: @unchecked Sendable {
            let lock = NSLock()
            var now = 0.0
            var timeouts: [Int] = []
        }
        let clock = Clock()
        let delivery = Delivery(
            policy: RetryPolicy(), random: { $0 },
            sleep: { milliseconds in clock.lock.withLock { clock.now += Double(milliseconds) } },
            monotonicMs: { clock.lock.withLock { clock.now } },
            perform: { _, settings in
                clock.lock.withLock {
                    clock.timeouts.append(settings.timeoutMs)
                    clock.now += 6000
                }
                return .failure(.timedOut)
            })
        let report = delivery.deliver(url: "https://api.example/v1/identify", body: Self.body, environment: [:], headers: Self.headers)
        // 20 s deadline: 6 s, pause 0.5 s, 6 s, pause 1 s; 6.5 s are left for the third.
        #expect(clock.timeouts == [10_000, 10_000, 6_500])
        #expect(report.outcome == .exhausted(last: .failure(.timedOut), stoppedBy: .attempts))
    }

    @Test func noAttemptStartsAfterTheDeadline() {
        final class Counter: @unchecked Sendable {
            let lock = NSLock()
            var now = 0.0
            var attempts = 0
        }
        let counter = Counter()
        var policy = RetryPolicy()
        policy.attempts = 10
        policy.deadlineMs = 3000
        let delivery = Delivery(
            policy: policy, random: { _ in 0 }, sleep: { _ in },
            monotonicMs: { counter.lock.withLock { counter.now } },
            perform: { _, settings in
                counter.lock.withLock {
                    counter.attempts += 1
                    counter.now += Double(settings.timeoutMs)
                }
                return .failure(.network("refused"))
            })
        let report = delivery.deliver(url: "http://api.example/", body: [], environment: [:], headers: { _ in [] })
        #expect(counter.attempts == 1)
        #expect(report.outcome == .exhausted(last: .failure(.network("refused")), stoppedBy: .deadline))
    }

    @Test func theBackoffCeilingDoublesUpToTheMaximumWithoutOverflow() {
        let delivery = Delivery()
        #expect((1...7).map { delivery.backoffCeiling(after: $0) } == [500, 1000, 2000, 4000, 8000, 8000, 8000])
        var policy = RetryPolicy()
        policy.baseDelayMs = Int.max
        policy.maxDelayMs = Int.max
        #expect(Delivery(policy: policy).backoffCeiling(after: 70) == Int.max)
        policy.baseDelayMs = -5
        #expect(Delivery(policy: policy).backoffCeiling(after: 3) == 0)
    }

    // MARK: acceptance 18: a CONNECT proxy

    @Test func throughAConnectProxyTheRequestIsDeliveredAndTheProxySawIt() throws {
        let server = try FaultServer([.status(503), .status(200, body: "ok")])
        let proxy = try ConnectProxy()
        let report = Self.deliver(server, environment: ["http_proxy": proxy.url, "NO_PROXY": "example.org"])
        guard case .delivered = report.outcome else { Issue.record("\(report.outcome)"); return }
        #expect(report.carriedByProxy && report.proxy?.port == proxy.port && report.proxy?.variable == "http_proxy")
        // One tunnel per attempt (a fresh handle each time), always CONNECT, never a forwarded request.
        #expect(proxy.connectTargets == ["127.0.0.1:\(server.port)", "127.0.0.1:\(server.port)"])
        #expect(proxy.refusedRequests.isEmpty)
        #expect(proxy.bytesRelayedToOrigin > 2 * Self.body.count)
        #expect(server.requests.count == 2)
        Self.expectSameBytesAndKey(server.requests)
    }

    @Test func noProxyKeepsTheRequestOffTheProxy() throws {
        let server = try FaultServer([.status(200)])
        let proxy = try ConnectProxy()
        let report = Self.deliver(server, environment: ["http_proxy": proxy.url, "no_proxy": "localhost, 127.0.0.1"])
        guard case .delivered = report.outcome else { Issue.record("\(report.outcome)"); return }
        #expect(!report.carriedByProxy)
        #expect(proxy.connectTargets.isEmpty && server.requests.count == 1)
    }

    @Test func anUnusableProxySendsNothingRatherThanGoingDirect() throws {
        let server = try FaultServer([.status(200)])
        let report = Self.deliver(server, environment: ["ALL_PROXY": "ftp://proxy.corp:21"])
        #expect(report.outcome == .failed(.invalidRequest("ALL_PROXY is not a usable proxy URL")))
        #expect(server.requests.isEmpty && report.attempts.isEmpty)
    }

    @Test func aProxyThatRefusesTheTunnelIsRetriedLikeANetworkFailure() throws {
        let proxy = try ConnectProxy()
        // The proxy only tunnels to loopback: elsewhere it answers 502, which may pass.
        let report = Self.delivery(sleeps: Sleeps()).deliver(url: "http://192.0.2.1/v1/identify", body: Self.body,
                                                             environment: ["http_proxy": proxy.url], headers: Self.headers)
        guard case .exhausted(.failure(.proxyRefused(let endpoint, status: 502)), .attempts) = report.outcome else {
            Issue.record("\(report.outcome)")
            return
        }
        #expect(endpoint.description == proxy.url && endpoint.variable == "http_proxy")
        #expect(proxy.connectTargets == ["192.0.2.1:80", "192.0.2.1:80", "192.0.2.1:80"])
    }

    // MARK: acceptance 17: TLS verification and pins

    static let tlsAvailable = FileManager.default.isExecutableFile(atPath: "/usr/bin/openssl")
        && FileManager.default.isExecutableFile(atPath: "/bin/bash")

    static func pin(_ pki: TestPKI, _ name: String) throws -> String {
        try pki.pin(name).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    @Test(.enabled(if: TransportTests.tlsAvailable, "openssl or bash is missing"))
    func aWrongPinFailsOnceWithoutRetry() throws {
        let pki = try TestPKI.shared.get()
        let server = try TLSTestServer(pki, leaf: "genuine-leaf", extra: ["genuine-ca"])
        let proxy = try ConnectProxy()
        let sleeps = Sleeps()
        let report = Self.delivery(sleeps: sleeps).deliver(
            url: "https://127.0.0.1:\(server.port)/", method: "GET", body: [], environment: ["https_proxy": proxy.url],
            caFile: pki.path("genuine-ca.crt"), pins: [try Self.pin(pki, "interceptor-leaf"), try Self.pin(pki, "interceptor-ca")],
            headers: Self.headers)
        #expect(report.outcome == .failed(.pinMismatch))
        #expect(report.attempts.count == 1 && sleeps.all.isEmpty && !report.isRetryable)
        // The proxy carries every connection: exactly one was made.
        #expect(proxy.connectTargets == ["127.0.0.1:\(server.port)"])
    }

    @Test(.enabled(if: TransportTests.tlsAvailable, "openssl or bash is missing"))
    func theLeafPinAndCAFileAreDelivered() throws {
        let pki = try TestPKI.shared.get()
        let server = try TLSTestServer(pki, leaf: "genuine-leaf", extra: ["genuine-ca"])
        func deliver(_ pins: [String]) -> DeliveryReport {
            Self.delivery(sleeps: Sleeps()).deliver(url: "https://127.0.0.1:\(server.port)/", method: "GET", body: [], environment: [:],
                                                    caFile: pki.path("genuine-ca.crt"), pins: pins, headers: { _ in [] })
        }
        let report = deliver([try Self.pin(pki, "interceptor-leaf"), try Self.pin(pki, "genuine-leaf")])
        guard case .delivered(let response) = report.outcome else { Issue.record("\(report.outcome)"); return }
        #expect(response.status == 200)
        // curl compares the pins with the leaf's key alone: the genuine CA's key is no match.
        #expect(deliver([try Self.pin(pki, "genuine-ca")]).outcome == .failed(.pinMismatch))
    }

    @Test(.enabled(if: TransportTests.tlsAvailable, "openssl or bash is missing"))
    func anUntrustedCertificateFailsVerificationOnceWithoutRetry() throws {
        let pki = try TestPKI.shared.get()
        let server = try TLSTestServer(pki, leaf: "interceptor-leaf", extra: ["interceptor-ca"])
        let report = Self.delivery(sleeps: Sleeps()).deliver(
            url: "https://127.0.0.1:\(server.port)/", method: "GET", body: [], environment: [:],
            caFile: pki.path("genuine-ca.crt"), headers: { _ in [] })
        guard case .failed(.tlsVerification) = report.outcome else { Issue.record("\(report.outcome)"); return }
        #expect(report.attempts.count == 1)
    }

    @Test func aDigestStartingWithASlashKeepsItUnderEitherPrefix() {
        // The CLI writes pins as "sha256/<base64>", curl as "sha256//<base64>"; base64 may itself start with '/'.
        let digest = "/" + String(repeating: "A", count: 42) + "="
        #expect(HTTPClient.bareDigest("sha256/" + digest) == digest)
        #expect(HTTPClient.bareDigest("sha256//" + digest) == digest)
        #expect(HTTPClient.bareDigest(digest) == digest)
        #expect(HTTPClient.isPin("sha256/" + digest) && HTTPClient.isPin("sha256//" + digest))
    }

    @Test(arguments: ["AAAA", "sha256//" + String(repeating: "A", count: 43) + "=;sha256//x", String(repeating: "A", count: 44)])
    func aPinThatIsNotADigestIsRefusedBeforeSending(_ pin: String) {
        let result = HTTPClient.perform(HTTPRequest(url: "https://127.0.0.1:1/", method: "GET", headers: [], body: []),
                                        settings: AttemptSettings(pins: [pin]))
        guard case .failure(.invalidRequest) = result else { Issue.record("\(pin): \(result)"); return }
    }
}

// MARK: parsers

@Suite struct ProxyResolutionTests {
    static func decide(_ url: String, _ environment: [String: String]) -> ProxyDecision {
        ProxyResolution.decide(for: RequestTarget(url: url)!, environment: environment)
    }

    @Test func theSchemePicksTheVariable() {
        let environment = ["https_proxy": "http://secure.proxy:3128", "http_proxy": "plain.proxy:8080", "ALL_PROXY": "socks5h://all.proxy"]
        #expect(Self.decide("https://api.example/v1", environment).endpoint?.description == "http://secure.proxy:3128")
        #expect(Self.decide("http://api.example/v1", environment).endpoint?.description == "http://plain.proxy:8080")
        #expect(Self.decide("https://api.example/v1", ["ALL_PROXY": "socks5h://all.proxy"]).endpoint?.description == "socks5h://all.proxy:1080")
        // The lower-case name wins, as in curl; an empty value counts as unset.
        #expect(Self.decide("https://a.example", ["https_proxy": "http://lower:1", "HTTPS_PROXY": "http://upper:2"]).endpoint?.host == "lower")
        #expect(Self.decide("https://a.example", ["https_proxy": "", "HTTPS_PROXY": "http://upper:2"]).endpoint?.host == "upper")
        #expect(Self.decide("https://a.example", [:]) == .direct)
    }

    @Test func upperCaseHTTPProxyIsNotRead() {
        // A CGI program gets a request's "Proxy:" header as HTTP_PROXY.
        #expect(Self.decide("http://api.example/", ["HTTP_PROXY": "http://attacker:80"]) == .direct)
        #expect(Self.decide("http://api.example/", ["HTTP_PROXY": "http://attacker:80", "ALL_PROXY": "http://all:1"]).endpoint?.host == "all")
    }

    @Test func defaultPortsAndCredentials() {
        let endpoint = Self.decide("https://api.example/", ["HTTPS_PROXY": "http://bob:s3cret@Proxy.Corp/"]).endpoint
        #expect(endpoint?.port == 1080 && endpoint?.host == "proxy.corp" && endpoint?.variable == "HTTPS_PROXY")
        #expect(endpoint?.description == "http://proxy.corp:1080")
        #expect(endpoint?.curlValue == "http://bob:s3cret@proxy.corp:1080")
        #expect(Self.decide("https://api.example/", ["HTTPS_PROXY": "https://p.example"]).endpoint?.port == 443)
        #expect(Self.decide("https://api.example/", ["HTTPS_PROXY": "[::1]:3128"]).endpoint?.description == "http://[::1]:3128")
    }

    @Test(arguments: ["ftp://proxy:21", "http://a b:1", "http://host:99999", "http://host:0", "http://[::1", "http://[nothex]:1",
                      "http://host/path", "http://host:80x", "http://", "http://ho\u{7}st:1", String(repeating: "a", count: 5000)])
    func anUnusableProxyIsSaidSo(_ value: String) {
        #expect(Self.decide("https://api.example/", ["HTTPS_PROXY": value]) == .unusable(variable: "HTTPS_PROXY"), "\(value)")
    }

    @Test(arguments: [
        ("https://api.example.com/", "*", true),
        ("https://api.example.com/", "example.com", true),
        ("https://example.com/", ".example.com", true),
        ("https://API.Example.COM./", "example.com", true),
        ("https://badexample.com/", "example.com", false),
        ("https://api.example.com/", "other.org,  example.com ", true),
        ("https://api.example.com/", "other.org example.com", true),
        ("https://api.example.com:8443/", "example.com:8443", true),
        ("https://api.example.com/", "example.com:8443", false),
        ("https://127.0.0.1:9/", "127.0.0.1", true),
        ("https://127.0.0.10/", "127.0.0.1", false),
        ("https://[::1]/", "::1", true),
        ("https://[0:0::1]:443/", "[::1]:443", true),
        ("https://[::1]:444/", "[::1]:443", false),
        ("https://10.1.2.3/", "10.0.0.0/8", false),          // CIDR is not supported
        ("https://api.example.com/", "", false),
        ("https://api.example.com/", ",,,", false),
        ("https://api.example.com/", ".", false),
    ])
    func noProxyExemptsAHost(_ url: String, _ noProxy: String, _ exempt: Bool) {
        let decision = Self.decide(url, ["HTTPS_PROXY": "http://proxy:3128", "NO_PROXY": noProxy])
        #expect((decision == .direct) == exempt, "\(url) with NO_PROXY=\(noProxy)")
    }

    @Test func aHostileNoProxyIsBounded() {
        let huge = Array(repeating: "x.example", count: 100_000).joined(separator: ",")
        #expect(Self.decide("https://x.example/", ["HTTPS_PROXY": "http://p:1", "NO_PROXY": huge]).endpoint != nil)
        let many = Array(repeating: "a", count: 2000).joined(separator: ",") + ",x.example"
        // Past the 1024th entry nothing is read.
        #expect(Self.decide("https://x.example/", ["HTTPS_PROXY": "http://p:1", "NO_PROXY": many]).endpoint != nil)
        #expect(Self.decide("https://x.example/", ["HTTPS_PROXY": "http://p:1", "no_proxy": "a,x.example"]) == .direct)
    }
}

@Suite struct RetryAfterTests {
    /// Sun, 06 Nov 1994 08:49:37 GMT, RFC 9110's example.
    static let example: Int64 = 784_111_777

    @Test(arguments: [
        ("120", 120_000 as Int64?), ("0", 0), (" 5\t", 5000), ("007", 7000),
        ("99999999999999999999999999999999", RetryAfter.maximumSeconds * 1000),
        ("", nil), ("  ", nil), ("-1", nil), ("+3", nil), ("1.5", nil), ("1e3", nil), ("3 4", nil), ("٣", nil),
        (String(repeating: "1", count: 65), nil),
    ])
    func deltaSeconds(_ value: String, _ expected: Int64?) {
        #expect(RetryAfter.delayMilliseconds(value, now: 0) == expected, "\(value)")
    }

    @Test(arguments: ["Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994"])
    func theThreeDateForms(_ value: String) {
        #expect(RetryAfter.delayMilliseconds(value, now: Self.example - 10) == 10_000, "\(value)")
        #expect(RetryAfter.delayMilliseconds(value, now: Self.example + 10) == 0, "\(value)")
    }

    @Test(arguments: [
        "Sun, 31 Feb 1994 08:49:37 GMT", "Sun, 06 Nov 1994 24:00:00 GMT", "Sun, 06 Nov 1994 08:60:00 GMT",
        "Sun, 06 Nov 1994 08:49:37 gmt", "Sun, 06 Nov 1994 08:49:37 UTC", "Sun, 6 Nov 1994 08:49:37 GMT",
        "Sun,  06 Nov 1994 08:49:37 GMT", "Xyz, 06 Nov 1994 08:49:37 GMT", "Sun, 06 Nox 1994 08:49:37 GMT",
        "Sun, 06 Nov 0000 08:49:37 GMT", "Sunday, 06-Nov-1994 08:49:37 GMT", "Sun Nov 6 08:49:37 1994",
        "Sun Nov   6 08:49:37 1994", "Sun Nov  16 08:49:37 1994", "Sun, 06 Nov 1994 08:49:37 GMT extra",
        "Sun, 06 Nov 1994 8:49:37 GMT", "Sun, 06 Nov 1994 08:49:37", ", 06 Nov 1994 08:49:37 GMT",
    ])
    func malformedDatesAreNil(_ value: String) {
        #expect(RetryAfter.delayMilliseconds(value, now: 0) == nil, "\(value)")
    }

    @Test func aLeapDayAndALeapSecondAreDates() {
        #expect(RetryAfter.delayMilliseconds("Thu, 29 Feb 2024 00:00:00 GMT", now: 1_709_164_800 - 1) == 1000)
        #expect(RetryAfter.delayMilliseconds("Sat, 31 Dec 2016 23:59:60 GMT", now: 1_483_228_800 - 1) == 1000)
        #expect(RetryAfter.delayMilliseconds("Fri, 29 Feb 2023 00:00:00 GMT", now: 0) == nil)
    }

    @Test func aTwoDigitYearMoreThanFiftyYearsAheadIsInThePast() {
        let now: Int64 = 1_735_689_600  // 2025-01-01
        // 2030 is five years ahead: a date in the future.
        #expect(RetryAfter.delayMilliseconds("Tuesday, 01-Jan-30 00:00:00 GMT", now: now) == (1_893_456_000 - now) * 1000)
        // 2080 would be 55 years ahead: 1980, in the past.
        #expect(RetryAfter.delayMilliseconds("Tuesday, 01-Jan-80 00:00:00 GMT", now: now) == 0)
    }

    @Test func extremeClocksDoNotTrap() {
        for now in [Int64.min, -1, Int64.max] {
            for value in ["Fri, 31 Dec 9999 23:59:59 GMT", "Mon, 01 Jan 0001 00:00:00 GMT", "Tuesday, 01-Jan-30 00:00:00 GMT",
                          "Mon Jan  1 00:00:00 0001", "9223372036854775807"] {
                _ = RetryAfter.delayMilliseconds(value, now: now)
            }
        }
        #expect(RetryAfter.delayMilliseconds("Sun, 06 Nov 1994 08:49:37 GMT", now: Int64.max) == 0)
    }
}

@Suite struct ServerErrorCodeTests {
    @Test(arguments: [
        (#"{"error":{"code":"invalid_key","message":"The key is wrong"}}"#, "invalid_key" as String?),
        (#" { "error" : { "message" : "a \"quoted\" } text", "code" : "rate_limited" } } "#, "rate_limited"),
        (#"{"meta":{"a":[1,2.5e3,{"b":null}],"t":true},"error":{"code":"internal"},"x":"y"}"#, "internal"),
        (#"{"error":{"code":"Invalid_Key"}}"#, nil),
        (#"{"error":{"code":""}}"#, nil),
        (#"{"error":{"code":"a\u0062"}}"#, nil),
        (#"{"error":{"code":42}}"#, nil),
        (#"{"error":"invalid_key"}"#, nil),
        (#"{"code":"invalid_key"}"#, nil),
        (#"{"error":{"code":"invalid_key""#, nil),
        (#"{"error":{"code":"invalid_key"}"#, nil),
        (#"["error"]"#, nil),
        ("", nil),
        ("<html>502 Bad Gateway</html>", nil),
    ])
    func theCodeIsFound(_ body: String, _ expected: String?) {
        #expect(ServerErrorCode.parse(Array(body.utf8)) == expected, "\(body)")
    }

    @Test func hostileBodiesAreBounded() {
        let deep = String(repeating: "[", count: 100_000)
        #expect(ServerErrorCode.parse(Array((#"{"x":"# + deep).utf8)) == nil)
        let long = #"{"error":{"code":""# + String(repeating: "a", count: 65) + #""}}"#
        #expect(ServerErrorCode.parse(Array(long.utf8)) == nil)
        let padded = #"{"pad":""# + String(repeating: " ", count: 20_000) + #"","error":{"code":"late"}}"#
        #expect(ServerErrorCode.parse(Array(padded.utf8)) == nil)
        #expect(ServerErrorCode.parse([0xFF, 0xFE, 0x7B]) == nil)
    }
}
