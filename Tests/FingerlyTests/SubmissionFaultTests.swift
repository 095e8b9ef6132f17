import Foundation
import Testing
@testable import Fingerly
@testable import FingerlyHost
@testable import FingerlyModel
@testable import FingerlyProbes
@testable import FingerlyTransport

/// The issue's fault cases through the library itself: `identify` and `flush` against the fault
/// server over loopback, in process. Every case counts the requests the server read and compares
/// their Idempotency-Key and body bytes; pauses are read from the library's own attempt log, not
/// from the wall clock. The fast tier of a fixture keeps each collection cheap.
@Suite(.serialized) struct SubmissionFaultTests {
    static let fixture = TestPaths.fixture("laptop-baremetal")
    static let answer = #"{"requestId":"req-fault-1","visitorId":"visitor-fault-1","visitorIsNew":true,"visitorConfidence":93,"identifiable":true,"duplicate":false,"suspectScore":null,"suspectLevel":null,"triggers":[]}"#

    static func accepted() -> FaultServer.Reply { .status(200, [("Content-Type", "application/json")], body: answer) }

    static func errorBody(_ code: String) -> String { #"{"error":{"code":"\#(code)","message":"scripted"}}"# }

    /// Small pauses, so a retried case costs milliseconds.
    static func quick(attempts: Int = 3, deadlineMs: Int = 5_000, attemptTimeoutMs: Int = 2_000, retryAfterCapMs: Int = 1_500,
                      rateLimitPauseMs: Int = 200, caFile: String? = nil, pins: [String] = [], localResultOnFailure: Bool = false,
                      outboxItems: Int = 50) -> SubmissionOptions {
        SubmissionOptions(attempts: attempts, baseDelayMs: 20, maxDelayMs: 50, deadlineMs: deadlineMs, attemptTimeoutMs: attemptTimeoutMs,
                          retryAfterCapMs: retryAfterCapMs, rateLimitPauseMs: rateLimitPauseMs, caFile: caFile, pins: pins,
                          localResultOnFailure: localResultOnFailure, outboxItems: outboxItems)
    }

    struct Loaded {
        let fingerly: Fingerly
        let state: String
        let log: LogRecorder
    }

    /// An instance with its own state directory (unless one is given) and an empty proxy
    /// environment (unless one is given): a proxy variable of the machine running the tests must
    /// not carry loopback requests.
    static func load(endpoint: String, state: String? = nil, apiKey: String = TestKeys.standard, consent: ConsentState = .granted,
                     submission: SubmissionOptions = quick(), ignore: Set<String> = [], proxy: [String: String] = [:],
                     frozenClock: Date? = nil, idempotencyKey: String? = nil, accessLog: HostAccessLog? = nil,
                     probes: [String: any Probe] = ProbeRegistry.byId) throws -> Loaded {
        let state = try state ?? TestPaths.temporaryDirectory("fault-state")
        let log = LogRecorder()
        var options = FingerlyOptions(root: fixture, attributesToIgnore: ignore, stateDirectory: state, logger: log, submission: submission)
        options.proxyEnvironment = proxy
        options.frozenClock = frozenClock
        options.fixedIdempotencyKey = idempotencyKey
        options.accessLog = accessLog
        let fingerly = try Fingerly.loadBlocking(apiKey: apiKey, endpoint: endpoint, consent: consent, options: options, probes: probes)
        return Loaded(fingerly: fingerly, state: state, log: log)
    }

    /// The TransportError `identify` throws; a result or another error is a failure of the test.
    static func failure(of loaded: Loaded, sourceLocation: SourceLocation = #_sourceLocation) async throws -> TransportError {
        do {
            let result = try await loaded.fingerly.identify(tiers: [.fast])
            Issue.record("identify returned \(result.state) instead of throwing", sourceLocation: sourceLocation)
            throw CancellationError()
        } catch let error as TransportError {
            return error
        }
    }

    static var keyPattern: Regex<AnyRegexOutput> { try! Regex(#"^"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"$"#) }

    /// `count` requests, all POST /v1/identify, one Idempotency-Key (a quoted lowercase UUID v4;
    /// `key` when given) and one body (`body` when given), byte for byte.
    static func expectSameKeyAndBytes(_ requests: [RecordedRequest], count: Int, key: String? = nil, body: [UInt8]? = nil,
                                      sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(requests.count == count, "the server read \(requests.count) request(s)", sourceLocation: sourceLocation)
        guard let first = requests.first else { return }
        let firstKey = first.header("Idempotency-Key") ?? ""
        #expect(firstKey.wholeMatch(of: keyPattern) != nil, "\(firstKey)", sourceLocation: sourceLocation)
        if let key { #expect(firstKey == "\"\(key)\"", sourceLocation: sourceLocation) }
        if let body { #expect(first.body == body, "the first body is not the expected bytes", sourceLocation: sourceLocation) }
        for request in requests {
            #expect(request.method == "POST" && request.path == "/v1/identify", sourceLocation: sourceLocation)
            #expect(request.header("Idempotency-Key") == firstKey, sourceLocation: sourceLocation)
            #expect(request.body == first.body, "an attempt sent other bytes", sourceLocation: sourceLocation)
        }
    }

    /// The names of the outbox's item files: none when the outbox was never made.
    static func itemFiles(_ state: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: state + "/outbox")) ?? []).filter { $0.hasSuffix(".item") }.sorted()
    }

    static func queued(_ state: String) throws -> [OutgoingRequest] {
        try Outbox.open(directory: state + "/outbox").items()
    }

    static func decodedBody(_ bytes: [UInt8]) throws -> SubmissionBody {
        try JSONDecoder.fingerly.decode(SubmissionBody.self, from: Data(bytes))
    }

    /// A successful identify: the server's request id and visitor, and the preview that names the
    /// exact bytes and key the server read.
    static func expectEnriched(_ result: IdentifyResult, server: FaultServer, requests count: Int,
                               sourceLocation: SourceLocation = #_sourceLocation) throws {
        #expect(result.state == .enriched, sourceLocation: sourceLocation)
        #expect(result.requestId == "req-fault-1" && result.visitorId == "visitor-fault-1", sourceLocation: sourceLocation)
        #expect(result.visitorIsNew == true && result.visitorConfidence == 93, sourceLocation: sourceLocation)
        let request = try #require(result.request, sourceLocation: sourceLocation)
        expectSameKeyAndBytes(server.requests, count: count, key: request.idempotencyKey, body: Array(request.body.utf8),
                              sourceLocation: sourceLocation)
    }

    // MARK: 1, 5, 6, 8: retried, then delivered under the same key

    @Test func fiveHundredThenTwoHundredSendsOneKeyAndOneBodyTwice() async throws {
        let server = try FaultServer([.status(500, body: Self.errorBody("internal")), Self.accepted()])
        let loaded = try Self.load(endpoint: server.url)
        let result = try await loaded.fingerly.identify(tiers: [.fast])
        try Self.expectEnriched(result, server: server, requests: 2)
        let attempts = loaded.log.attempts
        #expect(attempts.map(\.number) == [1, 2])
        #expect(attempts[0].outcome == "HTTP 500 (internal)" && attempts[0].reason == "backoff")
        #expect(attempts[1].outcome == "HTTP 200" && attempts[1].pauseMs == nil)
        // Delivered: nothing is left behind to send again.
        #expect(Self.itemFiles(loaded.state).isEmpty)
    }

    @Test func aConflictWhileTheKeyIsInProgressIsRetriedUnderTheSameKey() async throws {
        let server = try FaultServer([.status(409, body: Self.errorBody("request_in_progress")), Self.accepted()])
        let loaded = try Self.load(endpoint: server.url)
        let result = try await loaded.fingerly.identify(tiers: [.fast])
        try Self.expectEnriched(result, server: server, requests: 2)
        #expect(loaded.log.attempts.map(\.outcome) == ["HTTP 409 (request_in_progress)", "HTTP 200"])
    }

    @Test func aServerSleepingPastTheAttemptTimeoutIsRetried() async throws {
        // The stalled answer would be a valid one: only the timeout makes the second attempt.
        var stalled = Self.accepted()
        stalled.delayMs = 5_000
        let server = try FaultServer([stalled, Self.accepted()])
        let loaded = try Self.load(endpoint: server.url, submission: Self.quick(attemptTimeoutMs: 500))
        let result = try await loaded.fingerly.identify(tiers: [.fast])
        try Self.expectEnriched(result, server: server, requests: 2)
        let attempts = loaded.log.attempts
        #expect(attempts.map(\.outcome) == ["timed out", "HTTP 200"])
        // curl gave up at the timeout, not when the server woke.
        #expect((450...3_000).contains(attempts[0].durationMs), "\(attempts[0].durationMs) ms")
    }

    @Test(arguments: [FaultServer.Fault.resetAfterRequest, .resetMidResponse, .closeWithoutAnswer])
    func aConnectionCutShortIsRetriedUnderTheSameKey(_ fault: FaultServer.Fault) async throws {
        let server = try FaultServer([.fault(fault), Self.accepted()])
        let loaded = try Self.load(endpoint: server.url)
        let result = try await loaded.fingerly.identify(tiers: [.fast])
        try Self.expectEnriched(result, server: server, requests: 2)
        let attempts = loaded.log.attempts
        #expect(attempts.count == 2 && attempts[0].outcome.hasPrefix("network failure"), "\(fault): \(attempts)")
    }

    // MARK: 2, 3: Retry-After and the rate-limit pause

    enum RetryAfterCase: String, CaseIterable, Sendable {
        case oneSecond, secondsAboveTheCap, zero, dateTwoSecondsAhead, dateAnHourAhead, dateInThePast, malformed
    }

    @Test(arguments: RetryAfterCase.allCases)
    func retryAfterIsHonouredAndClamped(_ kind: RetryAfterCase) async throws {
        let now = Int64(time(nil))
        let value: String
        var cap = 200
        let expected: ClosedRange<Int>
        var reason = "retryAfter"
        switch kind {
        case .oneSecond: (value, cap, expected) = ("1", 1_500, 1_000...1_000)
        case .secondsAboveTheCap: (value, expected) = ("120", 200...200)
        case .zero: (value, expected) = ("0", 0...0)
        // A date has whole seconds, and the collection and the first attempt come between
        // writing it and reading it: anything above the backoff's 50 ms is the date obeyed.
        case .dateTwoSecondsAhead: (value, cap, expected) = (TransportTests.httpDate(now + 2), 5_000, 51...2_000)
        case .dateAnHourAhead: (value, expected) = (TransportTests.httpDate(now + 3_600), 200...200)
        case .dateInThePast: (value, expected) = (TransportTests.httpDate(now - 60), 0...0)
        // Ignored: the backoff pause instead, a share of the 20 ms base.
        case .malformed: (value, expected, reason) = ("soon", 0...20, "backoff")
        }
        let server = try FaultServer([.status(503, [("Retry-After", value)], body: Self.errorBody("unavailable")), Self.accepted()])
        let loaded = try Self.load(endpoint: server.url, submission: Self.quick(retryAfterCapMs: cap))
        let started = Date()
        let result = try await loaded.fingerly.identify(tiers: [.fast])
        let elapsedMs = Date().timeIntervalSince(started) * 1000
        try Self.expectEnriched(result, server: server, requests: 2)
        let first = try #require(loaded.log.attempts.first)
        #expect(first.outcome == "HTTP 503 (unavailable)")
        #expect(first.reason == reason, "\(kind) \(value): \(first)")
        let pause = try #require(first.pauseMs, "\(kind): no pause logged")
        #expect(expected.contains(pause), "\(kind) \(value): paused \(pause) ms")
        // The log says what was meant; the wall clock says it was waited for.
        #expect(elapsedMs >= Double(pause), "\(kind): \(elapsedMs) ms in all")
    }

    @Test func aRetryAfterBeyondTheDeadlineQueuesWithoutWaiting() async throws {
        let server = try FaultServer([.status(503, [("Retry-After", "5")]), Self.accepted()])
        let loaded = try Self.load(endpoint: server.url, submission: Self.quick(deadlineMs: 2_000, retryAfterCapMs: 10_000))
        let started = Date()
        let error = try await Self.failure(of: loaded)
        #expect(Date().timeIntervalSince(started) < 4, "waited for a Retry-After past the deadline")
        #expect(error.retryable && error.status == 503 && error.message.contains("the deadline came first"), "\(error)")
        Self.expectSameKeyAndBytes(server.requests, count: 1)
        #expect(loaded.log.attempts.map(\.pauseMs) == [nil])
        let queued = try Self.queued(loaded.state)
        #expect(queued.count == 1 && queued.first?.body == server.requests.first?.body)
    }

    @Test func tooManyRequestsWithoutRetryAfterPausesTheRateLimitPause() async throws {
        let server = try FaultServer([.status(429, body: Self.errorBody("rate_limited")), Self.accepted()])
        let loaded = try Self.load(endpoint: server.url, submission: Self.quick(rateLimitPauseMs: 200))
        let started = Date()
        let result = try await loaded.fingerly.identify(tiers: [.fast])
        try Self.expectEnriched(result, server: server, requests: 2)
        let first = try #require(loaded.log.attempts.first)
        #expect(first.outcome == "HTTP 429 (rate_limited)" && first.pauseMs == 200 && first.reason == "rateLimited", "\(first)")
        #expect(Date().timeIntervalSince(started) >= 0.2)
    }

    // MARK: 4: never retried, never queued

    @Test(arguments: [(400, "bad_request"), (401, "invalid_key"), (402, "organization_not_accepting"), (403, "forbidden"),
                      (413, "payload_too_large"), (422, "idempotency_key_reused")])
    func aRejectedStatusIsSentOnceAndNotQueued(_ status: Int, _ code: String) async throws {
        let server = try FaultServer([.status(status, body: Self.errorBody(code)), Self.accepted()])
        let loaded = try Self.load(endpoint: server.url)
        let error = try await Self.failure(of: loaded)
        #expect(error.status == status && error.code == code && !error.retryable, "\(error)")
        Self.expectSameKeyAndBytes(server.requests, count: 1)
        #expect(loaded.log.attempts.count == 1)
        #expect(Self.itemFiles(loaded.state).isEmpty)
    }

    // MARK: 7: a closed port, then a flush

    @Test func aClosedPortQueuesTheReportAndALaterFlushSendsTheSameKeyAndBytes() async throws {
        let closed = try ClosedPort()
        let server = try FaultServer([Self.accepted()])
        let state = try TestPaths.temporaryDirectory("fault-closed-port")
        // Loaded before anything is queued: a load finding queued reports flushes them on a
        // thread of its own, and this test wants the explicit flush to be the one that sends.
        let later = try Self.load(endpoint: server.url, state: state)
        let first = try Self.load(endpoint: closed.url, state: state)
        let error = try await Self.failure(of: first)
        #expect(error.retryable && error.code == "network" && error.status == nil, "\(error)")
        #expect(error.message.contains("queued"), "\(error.message)")
        #expect(first.log.attempts.count == 3 && first.log.attempts.allSatisfy { $0.outcome.hasPrefix("network failure") })

        let queued = try Self.queued(state)
        try #require(queued.count == 1)
        let item = queued[0]
        #expect(item.attempts == 3 && item.organization == "acme")
        #expect(Self.itemFiles(state) == [OutboxItemFormat.fileName(forKey: item.idempotencyKey)])
        // The queued bytes are the submission body of this report.
        let body = try Self.decodedBody(item.body)
        #expect(body.client.sdk == "fingerly-linux" && !body.client.proxy && body.report.root == Self.fixture)
        #expect(server.requests.isEmpty)

        let flushed = try await later.fingerly.flush()
        #expect(flushed.delivered == 1 && flushed.dropped == 0 && flushed.remaining == 0 && flushed.lastError == nil, "\(flushed)")
        Self.expectSameKeyAndBytes(server.requests, count: 1, key: item.idempotencyKey, body: item.body)
        #expect(Self.itemFiles(state).isEmpty)
        // Nothing is left for another flush to send twice.
        let again = try await later.fingerly.flush()
        #expect(again.delivered == 0 && again.remaining == 0)
        #expect(server.requests.count == 1)
    }

    @Test func aLocalResultOnFailureShowsTheRequestThatWasQueued() async throws {
        let closed = try ClosedPort()
        let loaded = try Self.load(endpoint: closed.url, submission: Self.quick(attempts: 2, localResultOnFailure: true))
        let result = try await loaded.fingerly.identify(tiers: [.fast])
        #expect(result.state == .unavailable && result.visitorId == nil)
        let request = try #require(result.request)
        let queued = try Self.queued(loaded.state)
        #expect(queued.map(\.idempotencyKey) == [request.idempotencyKey])
        #expect(queued.first?.body == Array(request.body.utf8) && queued.first?.attempts == 2)
    }

    /// What a flush makes of each answer: a retried status keeps the item (one more attempt
    /// counted) and names the server's code; a rejection of the report drops it and counts the
    /// drop; a rejection of the key keeps it for a good key.
    @Test(arguments: [(503, "unavailable", true), (422, "idempotency_key_reused", false), (401, "invalid_key", true)])
    func aFlushThatIsNotAcceptedSaysWhatTheServerSaid(_ status: Int, _ code: String, _ kept: Bool) async throws {
        let closed = try ClosedPort()
        let server = try FaultServer([.status(status, body: Self.errorBody(code)), Self.accepted()])
        let state = try TestPaths.temporaryDirectory("fault-flush-answer")
        let later = try Self.load(endpoint: server.url, state: state, submission: Self.quick(attempts: 1))
        let first = try Self.load(endpoint: closed.url, state: state, submission: Self.quick(attempts: 1))
        _ = try await Self.failure(of: first)
        let item = try #require(try Self.queued(state).first)
        #expect(item.attempts == 1)

        let flushed = try await later.fingerly.flush()
        Self.expectSameKeyAndBytes(server.requests, count: 1, key: item.idempotencyKey, body: item.body)
        #expect(flushed.delivered == 0 && flushed.remaining == (kept ? 1 : 0) && flushed.dropped == (kept ? 0 : 1), "\(flushed)")
        let error = try #require(flushed.lastError)
        #expect(error.status == status && error.code == code && error.retryable == (status == 503), "\(error)")
        let left = try Self.queued(state)
        #expect(left.map(\.idempotencyKey) == (kept ? [item.idempotencyKey] : []))
        if kept { #expect(left.first?.body == item.body && left.first?.attempts == 2) }
        #expect(try Outbox.open(directory: state + "/outbox").dropCounts() == OutboxDropCounts(rejected: kept ? 0 : 1))
    }

    @Test func aReportQueuedForOneOrganizationIsNeverSentUnderAnothersKey() async throws {
        let closed = try ClosedPort()
        let server = try FaultServer([Self.accepted()])
        let state = try TestPaths.temporaryDirectory("fault-organization")
        let other = try Self.load(endpoint: server.url, state: state, apiKey: TestKeys.key(org: "globex"))
        let own = try Self.load(endpoint: server.url, state: state, apiKey: TestKeys.key(org: "acme", random: "rotatedKey0123456789"))
        let first = try Self.load(endpoint: closed.url, state: state, submission: Self.quick(attempts: 1))
        _ = try await Self.failure(of: first)
        let item = try #require(try Self.queued(state).first)

        let elsewhere = try await other.fingerly.flush()
        #expect(elsewhere.delivered == 0 && elsewhere.remaining == 1 && elsewhere.lastError == nil, "\(elsewhere)")
        #expect(server.requests.isEmpty)
        // Another key of the same organization (a rotated one) may send it.
        let flushed = try await own.fingerly.flush()
        #expect(flushed.delivered == 1 && flushed.remaining == 0, "\(flushed)")
        Self.expectSameKeyAndBytes(server.requests, count: 1, key: item.idempotencyKey, body: item.body)
        #expect(server.requests.first?.header("Authorization") == "Bearer \(TestKeys.key(org: "acme", random: "rotatedKey0123456789"))")
    }

    // MARK: 11: the outbox's caps

    @Test func pastTheItemCapTheOldestAreEvictedAndCounted() async throws {
        let closed = try ClosedPort()
        let state = try TestPaths.temporaryDirectory("fault-caps")
        let keys = (1...5).map { String(format: "00000000-0000-4000-8000-%012d", $0) }
        // One instance per report, each a second later than the one before: the age orders the outbox.
        let start = Date(timeIntervalSince1970: TimeInterval(Int64(time(nil)) - 600))
        // All loaded before the first is queued, so no load starts a flush of its own.
        let instances = try keys.enumerated().map { index, key in
            try Self.load(endpoint: closed.url, state: state, submission: Self.quick(attempts: 1, outboxItems: 3),
                          frozenClock: start.addingTimeInterval(TimeInterval(index)), idempotencyKey: key)
        }
        for instance in instances {
            let error = try await Self.failure(of: instance)
            #expect(error.retryable && error.code == "network", "\(error)")
            #expect(instance.log.attempts.count == 1)
        }
        let outbox = try Outbox.open(directory: state + "/outbox", limits: OutboxLimits(maxItems: 3))
        let kept = try outbox.items()
        #expect(kept.map(\.idempotencyKey) == Array(keys[2...]))
        #expect(kept.map(\.createdAt) == (2...4).map { Int64(start.timeIntervalSince1970) + $0 })
        #expect(Self.itemFiles(state).count == 3)
        #expect(outbox.dropCounts() == OutboxDropCounts(evicted: 2))
        #expect(instances[3].log.messages(.warning).contains("outbox caps: 1 evicted, 0 expired"))
        #expect(instances[4].log.messages(.warning).contains("outbox caps: 1 evicted, 0 expired"))
    }

    // MARK: 15: ignored attributes

    @Test func ignoredAttributesAreInNoCapturedBodyAndInNoQueuedItem() async throws {
        // A plain run says what the ignored attributes would have carried.
        let plain = try Self.load(endpoint: "http://127.0.0.1:9")
        let plainReport = try await plain.fingerly.identify(tiers: [.fast], submit: false).report
        let ignored = plainReport.signals.keys.filter { $0.hasPrefix("dmi.") || $0.hasPrefix("machine.") }.sorted()
        try #require(!ignored.isEmpty, "the fixture's fast tier carries no dmi.* or machine.* signal")
        let plainBody = try #require(try await plain.fingerly.identify(tiers: [.fast], submit: false).request?.body)
        for name in ignored { #expect(plainBody.contains("\"\(name)\""), "\(name) is not in the plain body") }
        // Values distinctive enough to look for as bytes (short ones could occur anywhere).
        let values = ignored.compactMap { plainReport.signals[$0]?.string }.filter { $0.count >= 8 }
        for value in values { #expect(plainBody.contains(value)) }

        // Attempts 1 and a 503: the body the server read is the body queued on disk.
        let server = try FaultServer([.status(503)])
        let loaded = try Self.load(endpoint: server.url, submission: Self.quick(attempts: 1), ignore: ["dmi.*", "machine-identity"])
        let error = try await Self.failure(of: loaded)
        #expect(error.retryable && error.status == 503)
        Self.expectSameKeyAndBytes(server.requests, count: 1)
        let files = Self.itemFiles(loaded.state)
        try #require(files.count == 1)
        let onDisk = try [UInt8](Data(contentsOf: URL(fileURLWithPath: loaded.state + "/outbox/" + files[0])))
        let sent = try #require(server.requests.first).body
        let report = try Self.decodedBody(sent).report
        #expect(report.signals.keys.allSatisfy { !$0.hasPrefix("dmi.") && !$0.hasPrefix("machine.") }, "\(report.signals.keys.sorted())")
        #expect(report.probes.filter { ["dmi", "machine-identity"].contains($0.id) }.allSatisfy { $0.status == .skipped })
        for bytes in [sent, onDisk] {
            let text = String(decoding: bytes, as: UTF8.self)
            for name in ignored { #expect(!text.contains("\"\(name)\""), "\(name) went out or to disk") }
            for value in values { #expect(!text.contains(value), "a value of an ignored attribute went out or to disk") }
        }
        #expect(try Self.queued(loaded.state).first?.body == sent)
    }

    // MARK: 16: the signature, checked by openssl and by the verifier

    @Test func everyAttemptsSignatureVerifiesWithTheSentKeyAndATamperedBodyFails() async throws {
        let server = try FaultServer([.status(500), Self.accepted()])
        let loaded = try Self.load(endpoint: server.url)
        let result = try await loaded.fingerly.identify(tiers: [.fast])
        try Self.expectEnriched(result, server: server, requests: 2)
        let deviceKey = try DeviceKey.loadOrCreate(in: loaded.state)
        let now = Int64(time(nil))
        for request in server.requests {
            // Everything comes off the wire, as a server would have it; the base is built here by
            // hand from wire.md, not by the library's own code.
            let keyField = try #require(request.header("Fingerly-Device-Key"))
            let publicKey = try #require(Data(base64Encoded: String(keyField.dropFirst().dropLast())).map { [UInt8]($0) })
            #expect(keyField.hasPrefix(":") && keyField.hasSuffix(":") && publicKey == deviceKey.publicKey)
            let signatureField = try #require(request.header("Signature"))
            try #require(signatureField.hasPrefix("fingerly=:") && signatureField.hasSuffix(":"))
            let signature = try #require(Data(base64Encoded: String(signatureField.dropFirst("fingerly=:".count).dropLast())).map { [UInt8]($0) })
            let input = try #require(request.header("Signature-Input"))
            try #require(input.hasPrefix("fingerly="))
            let parameters = String(input.dropFirst("fingerly=".count))
            #expect(parameters.hasPrefix(#"("@method" "@path" "content-digest" "idempotency-key");created="#))
            #expect(parameters.hasSuffix(#";keyid="\#(deviceKey.keyID)";alg="ed25519""#))
            let digest = try #require(request.header("Content-Digest"))
            #expect(digest == "sha-256=:\(try Self.opensslSHA256(request.body)):")
            let key = try #require(request.header("Idempotency-Key"))
            func base(digest: String) -> [UInt8] {
                Array(["\"@method\": POST", "\"@path\": \(request.path)", "\"content-digest\": \(digest)",
                       "\"idempotency-key\": \(key)", "\"@signature-params\": \(parameters)"].joined(separator: "\n").utf8)
            }
            #expect(try SigningTests.opensslVerifies(publicKey: publicKey, base: base(digest: digest), signature: signature))
            let verified = try MessageSignature.verify(method: request.method, path: request.path, fields: request.headers,
                                                       body: request.body, now: now, window: 300)
            #expect(verified.keyID == deviceKey.keyID && verified.publicKey == deviceKey.publicKey)
            #expect(abs(verified.created - now) <= 60)

            // One byte of the body changed, the digest made to match it: the signature covers neither.
            var tampered = request.body
            let index = try #require(tampered.lastIndex(of: UInt8(ascii: "0")) ?? tampered.lastIndex(of: UInt8(ascii: "e")))
            tampered[index] = tampered[index] == UInt8(ascii: "0") ? UInt8(ascii: "1") : UInt8(ascii: "a")
            let tamperedDigest = "sha-256=:\(try Self.opensslSHA256(tampered)):"
            #expect(tamperedDigest != digest)
            #expect(try !SigningTests.opensslVerifies(publicKey: publicKey, base: base(digest: tamperedDigest), signature: signature))
            #expect(throws: SignatureVerificationError.digestMismatch) {
                try MessageSignature.verify(method: request.method, path: request.path, fields: request.headers, body: tampered,
                                            now: now, window: 300)
            }
            let forged = request.headers.map { $0.name == "Content-Digest" ? ($0.name, tamperedDigest) : $0 }
            #expect(throws: SignatureVerificationError.badSignature) {
                try MessageSignature.verify(method: request.method, path: request.path, fields: forged, body: tampered, now: now, window: 300)
            }
        }
    }

    /// base64 of SHA-256, as openssl computes it.
    static func opensslSHA256(_ bytes: [UInt8]) throws -> String {
        let directory = try TestPaths.temporaryDirectory("digest")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try Data(bytes).write(to: URL(fileURLWithPath: directory + "/body"))
        let run = try runShell(#"openssl dgst -sha256 -binary "$1" | openssl base64 -A"#, directory + "/body")
        try #require(run.status == 0, "\(run.standardError)")
        return run.standardOutput.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    // MARK: 17: a wrong pin over TLS

    static func barePin(_ pki: TestPKI, _ name: String) throws -> String {
        String(try pki.pin(name).trimmingCharacters(in: .whitespacesAndNewlines).dropFirst("sha256/".count))
    }

    @Test(.enabled(if: TransportTests.tlsAvailable, "openssl or bash is missing"))
    func aWrongPinIsOneAttemptNothingQueuedAndMitmEvidence() async throws {
        let pki = try TestPKI.shared.get()
        let server = try TLSTestServer(pki, leaf: "genuine-leaf", extra: ["genuine-ca"])
        // The proxy sees every connection, so it counts them.
        let proxy = try ConnectProxy()
        let endpoint = "https://127.0.0.1:\(server.port)"
        // The CA file trusts the server: only the pins can fail.
        let submission = Self.quick(caFile: pki.path("genuine-ca.crt"),
                                    pins: [try Self.barePin(pki, "interceptor-leaf"), try Self.barePin(pki, "interceptor-ca")])
        let loaded = try Self.load(endpoint: endpoint, submission: submission, proxy: ["https_proxy": proxy.url])
        let error = try await Self.failure(of: loaded)
        #expect(error.code == "pin_mismatch" && !error.retryable && error.status == nil, "\(error)")
        #expect(proxy.connectTargets == ["127.0.0.1:\(server.port)"])
        #expect(loaded.log.attempts.count == 1)
        #expect(Self.itemFiles(loaded.state).isEmpty)

        var local = submission
        local.localResultOnFailure = true
        let judged = try Self.load(endpoint: endpoint, submission: local, proxy: ["https_proxy": proxy.url])
        let result = try await judged.fingerly.identify(tiers: [.fast])
        #expect(result.state == .unavailable && result.visitorId == nil)
        #expect(result.verdicts.mitm.value && !result.verdicts.mitm.reasons.isEmpty, "\(result.verdicts.mitm)")
        let mismatches = try result.probe("tls-pin-check").signals["tls.pin_mismatches"]?.strings
        #expect(mismatches == ["\(endpoint)/v1/identify: the API origin's key matched none of the submission pins"])
        #expect(result.verdicts.mitm.reasons.contains { $0.message.contains("127.0.0.1") }, "\(result.verdicts.mitm.reasons)")
        #expect(proxy.connectTargets.count == 2 && judged.log.attempts.count == 1)
        #expect(Self.itemFiles(judged.state).isEmpty)
    }

    @Test(.enabled(if: TransportTests.tlsAvailable, "openssl or bash is missing"))
    func aSubmissionPinMayCarryTheSha256PrefixAsDocumented() throws {
        let pki = try TestPKI.shared.get()
        let prefixed = try pki.pin("genuine-ca").trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(prefixed.hasPrefix("sha256/"))
        // SubmissionOptions.pins: "base64, optionally `sha256/`-prefixed".
        _ = try Self.load(endpoint: "https://127.0.0.1:9", submission: Self.quick(pins: [prefixed]))
    }

    // MARK: 18: a CONNECT proxy

    @Test func throughAConnectProxyTheReportIsDeliveredAndSaysSo() async throws {
        let server = try FaultServer([Self.accepted()])
        let proxy = try ConnectProxy()
        let loaded = try Self.load(endpoint: server.url, proxy: ["http_proxy": proxy.url])
        let result = try await loaded.fingerly.identify(tiers: [.fast])
        try Self.expectEnriched(result, server: server, requests: 1)
        #expect(proxy.connectTargets == ["127.0.0.1:\(server.port)"] && proxy.refusedRequests.isEmpty)
        let sent = try #require(server.requests.first).body
        #expect(proxy.bytesRelayedToOrigin > sent.count)
        #expect(try Self.decodedBody(sent).client.proxy)
        #expect(result.request?.proxy == "http://127.0.0.1:\(proxy.port)")
        #expect(loaded.log.messages(.info).contains { $0.contains("via proxy http://127.0.0.1:\(proxy.port)") })
    }

    // MARK: the audit: the dry run's body is the body sent

    @Test func theDryRunsBodyIsByteForByteTheBodyTheServerRead() async throws {
        let server = try FaultServer([Self.accepted()])
        let state = try TestPaths.temporaryDirectory("fault-audit")
        let clock = Date(timeIntervalSince1970: 1_767_225_600)
        let key = "3f1c2b4a-5d6e-4f70-8a9b-0c1d2e3f4a5b"
        let dry = try Self.load(endpoint: server.url, state: state, frozenClock: clock, idempotencyKey: key)
        let preview = try #require(try await dry.fingerly.identify(tiers: [.fast], submit: false).request)
        #expect(server.requests.isEmpty)
        let wet = try Self.load(endpoint: server.url, state: state, frozenClock: clock, idempotencyKey: key)
        let result = try await wet.fingerly.identify(tiers: [.fast])
        #expect(result.state == .enriched)
        Self.expectSameKeyAndBytes(server.requests, count: 1, key: key, body: Array(preview.body.utf8))
        #expect(result.request == preview)
        // The headers in the order the preview lists them; the values it shows are those sent,
        // but for the redacted key and the fields made per attempt.
        let sent = server.requests[0].headers.filter { !["Host", "Content-Length"].contains($0.name) }
        #expect(sent.map(\.name) == preview.headers.map(\.name), "\(sent.map(\.name))")
        for (header, shown) in zip(sent, preview.headers) {
            switch header.name {
            case "Authorization": #expect(header.value == "Bearer \(TestKeys.standard)" && shown.value == Fingerly.redactedKey)
            case "Fingerly-Device-Key", "Signature-Input", "Signature": #expect(shown.value == Fingerly.signedAtSending)
            default: #expect(header.value == shown.value, "\(header.name)")
            }
        }
        #expect(preview.url == server.url + "/v1/identify" && preview.method == "POST" && preview.proxy == nil)
    }

    // MARK: 14 (library half): nothing before consent

    @Test func withConsentPendingNoProbeRunsAndNothingIsSentOrWritten() async throws {
        let calls = Counter()
        let spies = ProbeRegistry.byId.mapValues { CountingProbe(inner: $0, calls: calls) as any Probe }
        let reads = HostAccessLog()
        let server = try FaultServer([Self.accepted()])
        let loaded = try Self.load(endpoint: server.url, consent: .pending, accessLog: reads, probes: spies)
        let fingerly = loaded.fingerly
        await #expect(throws: ConsentError(state: .pending)) { try await fingerly.identify(tiers: [.fast]) }
        await #expect(throws: ConsentError(state: .pending)) { try await fingerly.identify(tiers: [.fast], submit: false) }
        await #expect(throws: ConsentError(state: .pending)) { try await fingerly.checkIntegrity() }
        await #expect(throws: ConsentError(state: .pending)) { try await fingerly.flush() }
        #expect(reads.recorded.isEmpty, "read before consent: \(reads.recorded.prefix(5))")
        // Not every probe reads through the host layer (CPUID, ptrace): none ran at all.
        #expect(calls.value == 0, "a probe ran before consent")
        #expect(server.requests.isEmpty)
        #expect(try FileManager.default.contentsOfDirectory(atPath: loaded.state).isEmpty, "the state directory was written")

        // The log and the spies do see a collection once consent is granted: their silence above
        // meant something.
        fingerly.setConsent(.granted)
        let result = try await fingerly.identify(tiers: [.fast])
        try Self.expectEnriched(result, server: server, requests: 1)
        #expect(calls.value > 0 && !reads.recorded.isEmpty)
    }

    // MARK: helpers

    /// Every message the library logs, in order.
    final class LogRecorder: FingerlyLogHandler, @unchecked Sendable {
        private let lock = NSLock()
        private var stored: [(LogLevel, String)] = []

        func log(_ level: LogLevel, _ message: String) { lock.withLock { stored.append((level, message)) } }

        func messages(_ level: LogLevel) -> [String] { lock.withLock { stored.filter { $0.0 == level }.map(\.1) } }

        /// One line of `deliver`'s attempt log: "request K: attempt N of M: OUTCOME after D ms[; next in P ms (REASON)][ via proxy X]".
        struct Attempt: Sendable, CustomStringConvertible {
            let number: Int
            let outcome: String
            let durationMs: Int
            let pauseMs: Int?
            let reason: String?
            var description: String { "#\(number) \(outcome) \(durationMs) ms, pause \(pauseMs.map(String.init) ?? "-") \(reason ?? "")" }
        }

        static var attemptLine: Regex<AnyRegexOutput> {
            try! Regex(#"^request [0-9a-f-]+: attempt ([0-9]+) of [0-9]+: (.*) after ([0-9]+) ms(; next in ([0-9]+) ms \(([A-Za-z]+)\))?( via proxy .*)?$"#)
        }

        var attempts: [Attempt] {
            messages(.info).compactMap { line in
                guard let match = line.wholeMatch(of: Self.attemptLine) else { return nil }
                func text(_ index: Int) -> String? { match.output[index].substring.map(String.init) }
                return Attempt(number: Int(text(1) ?? "") ?? -1, outcome: text(2) ?? "", durationMs: Int(text(3) ?? "") ?? -1,
                               pauseMs: text(5).flatMap { Int($0) }, reason: text(6))
            }
        }
    }

    /// A probe that counts its runs and then runs the real one.
    struct CountingProbe: Probe {
        let inner: any Probe
        let calls: Counter
        var id: String { inner.id }

        func collect(into context: ProbeContext) throws(ProbeFailure) {
            calls.add()
            try inner.collect(into: context)
        }
    }

    final class Counter: @unchecked Sendable {
        private let lock = NSLock()
        private var count = 0
        func add() { lock.withLock { count += 1 } }
        var value: Int { lock.withLock { count } }
    }

    /// A loopback port bound and never listened on: connections are refused, and no other test can
    /// take the port while this holds it.
    final class ClosedPort {
        let descriptor: Int32
        let port: Int

        init() throws {
            let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let bound = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, length) == 0 && getsockname(descriptor, $0, &length) == 0 }
            }
            guard descriptor >= 0, bound else {
                if descriptor >= 0 { close(descriptor) }
                throw POSIXError(.EADDRINUSE)
            }
            self.descriptor = descriptor
            port = Int(UInt16(bigEndian: address.sin_port))
        }

        var url: String { "http://127.0.0.1:\(port)" }

        deinit { close(descriptor) }
    }
}
