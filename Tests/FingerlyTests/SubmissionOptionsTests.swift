import Foundation
import Testing
@testable import Fingerly
@testable import FingerlyHost
@testable import FingerlyModel

/// What `load` refuses in `SubmissionOptions`, where a request goes, and the early collection.
@Suite(.serialized) struct SubmissionOptionsTests {
    private func loadField(_ submission: SubmissionOptions, prefetchMaxAgeMs: Int = 60_000) -> String? {
        do {
            _ = try Fingerly.loadBlocking(apiKey: TestKeys.standard,
                                          options: FingerlyOptions(submission: submission, prefetchMaxAgeMs: prefetchMaxAgeMs))
            return nil
        } catch {
            guard case .invalidConfiguration(let field, _) = error else { return "\(error)" }
            return field
        }
    }

    @Test func unusableSubmissionOptionsFailAtLoadNamingTheField() {
        #expect(loadField(SubmissionOptions(attempts: 0)) == "options.submission.attempts")
        #expect(loadField(SubmissionOptions(attempts: 11)) == "options.submission.attempts")
        #expect(loadField(SubmissionOptions(baseDelayMs: -1)) == "options.submission.baseDelayMs")
        #expect(loadField(SubmissionOptions(deadlineMs: 0)) == "options.submission.deadlineMs")
        #expect(loadField(SubmissionOptions(outboxItems: 0)) == "options.submission.outboxItems")
        // A queued report must be sent while the server still remembers its key (24 h).
        #expect(loadField(SubmissionOptions(outboxMaxAgeSeconds: 24 * 3600)) == "options.submission.outboxMaxAgeSeconds")
        #expect(loadField(SubmissionOptions(pins: ["not-a-pin"])) == "options.submission.pins")
        #expect(loadField(SubmissionOptions(caFile: "")) == "options.submission.caFile")
        #expect(loadField(SubmissionOptions(), prefetchMaxAgeMs: 0) == "options.prefetchMaxAgeMs")
        #expect(loadField(SubmissionOptions(attempts: 10, baseDelayMs: 0)) == nil)
    }

    @Test func theIdentifyURLKeepsAnEndpointsPathPrefix() {
        let plain = APIAddress(endpoint: "https://eu.api.fingerly.io")
        #expect(plain.identifyURL == "https://eu.api.fingerly.io/v1/identify")
        #expect(plain.identifyPath == "/v1/identify")
        let proxied = APIAddress(endpoint: "https://shop.example.com:8443/fingerly/")
        #expect(proxied.identifyURL == "https://shop.example.com:8443/fingerly/v1/identify")
        #expect(proxied.identifyPath == "/fingerly/v1/identify")
    }

    @Test func aTransportErrorRoundTripsThroughJSON() throws {
        let error = TransportError(message: "the organization is not accepting traffic", status: 402, retryable: false,
                                   code: "organization_not_accepting")
        let decoded = try JSONDecoder.fingerly.decode(TransportError.self, from: JSONEncoder.fingerly.encode(error))
        #expect(decoded == error)
    }

    @Test func theDryRunNamesTheRequestWithoutTheKey() async throws {
        let key = TestKeys.key(region: "eu")
        let fingerly = try Fingerly.loadBlocking(apiKey: key, options: FingerlyOptions(root: TestPaths.fixture("laptop-baremetal")))
        let result = try await fingerly.identify(tiers: [.fast], submit: false)
        let request = try #require(result.request)
        #expect(request.method == "POST" && request.url == "https://eu.api.fingerly.io/v1/identify")
        #expect(request.headers.map(\.name) == ["Authorization", "Content-Type", "Accept", "User-Agent", "Idempotency-Key",
                                                "Content-Digest", "Fingerly-Device-Key", "Signature-Input", "Signature"])
        #expect(request.headers.first { $0.name == "Idempotency-Key" }?.value == "\"\(request.idempotencyKey)\"")
        #expect(!String(decoding: try JSONEncoder.fingerly.encode(result), as: UTF8.self).contains(key))
        // The body is the report inside {client, report}, exactly as the result carries it.
        let body = try JSONDecoder.fingerly.decode(SubmissionBody.self, from: Data(request.body.utf8))
        // Dates go out in whole seconds (ISO 8601), so the report is compared as it is encoded.
        #expect(try JSONEncoder.fingerly.encode(body.report) == JSONEncoder.fingerly.encode(result.report))
        #expect(body.client == ClientInfo(proxy: false, sdk: "fingerly-linux", version: Fingerly.version))
    }

    @Test func aPrefetchedDeferredTierIsReusedWhileYoungAndItsAgeIsReported() async throws {
        var options = FingerlyOptions(root: TestPaths.fixture("laptop-baremetal"), prefetch: true, prefetchMaxAgeMs: 600_000)
        options.stateDirectory = try TestPaths.temporaryDirectory("prefetch")
        let fingerly = try Fingerly.loadBlocking(apiKey: TestKeys.standard, consent: .granted, options: options)
        // The prefetch runs on a thread of its own from load; wait for it (bounded).
        for _ in 0..<200 where fingerly.prefetched.withLock({ $0 }) == nil { try await Task.sleep(for: .milliseconds(25)) }
        let prefetched = try #require(fingerly.prefetched.withLock { $0 })
        let result = try await fingerly.identify(submit: false)
        let age = try #require(result.report.prefetchedAgeMs)
        #expect(age >= 0)
        // Every deferred entry is the prefetched one; the fast tier ran for this call.
        let deferred = result.report.probes.filter { $0.tier == .deferred && prefetched.ids.contains($0.id) }
        #expect(deferred == prefetched.entries.filter { entry in deferred.contains { $0.id == entry.id } })
        #expect(deferred.count == prefetched.entries.count)
        #expect(result.report.probes.contains { $0.tier == .fast && $0.status == .ok })
    }

    @Test func aStalePrefetchIsCollectedAgainAndNothingIsPrefetchedWithoutConsent() async throws {
        var options = FingerlyOptions(root: TestPaths.fixture("laptop-baremetal"), prefetch: true, prefetchMaxAgeMs: 1)
        options.stateDirectory = try TestPaths.temporaryDirectory("prefetch-stale")
        let log = HostAccessLog()
        options.accessLog = log
        let pending = try Fingerly.loadBlocking(apiKey: TestKeys.standard, consent: .pending, options: options)
        try await Task.sleep(for: .milliseconds(200))
        #expect(pending.prefetched.withLock { $0 } == nil)
        #expect(log.recorded.isEmpty)
        pending.setConsent(.granted)
        for _ in 0..<200 where pending.prefetched.withLock({ $0 }) == nil { try await Task.sleep(for: .milliseconds(25)) }
        #expect(pending.prefetched.withLock { $0 } != nil)
        try await Task.sleep(for: .milliseconds(20))
        let result = try await pending.identify(submit: false)
        #expect(result.report.prefetchedAgeMs == nil)
    }
}

/// A write past the process's file-size limit raises SIGXFSZ, whose default action kills the
/// process: an application that never heard of it must get a "not queued" error instead.
@Suite(.serialized) struct FileSizeLimitTests {
    @Test func aQueueWritePastTheFileSizeLimitFailsCleanlyAndTheProcessLives() async throws {
        let closed = try SubmissionFaultTests.ClosedPort()
        let state = try TestPaths.temporaryDirectory("fsize")
        let fingerly = try Fingerly.loadBlocking(
            apiKey: TestKeys.standard, endpoint: closed.url,
            options: FingerlyOptions(root: TestPaths.fixture("laptop-baremetal"), stateDirectory: state,
                                     submission: SubmissionOptions(attempts: 1, deadlineMs: 2_000)))
        // The default disposition, as in an application that never touched it.
        let previous = signal(SIGXFSZ, SIG_DFL)
        var old = rlimit()
        getrlimit(Int32(RLIMIT_FSIZE.rawValue), &old)
        var small = rlimit(rlim_cur: 512, rlim_max: old.rlim_max)
        setrlimit(Int32(RLIMIT_FSIZE.rawValue), &small)
        var failure: TransportError?
        do {
            _ = try await fingerly.identify(tiers: [Tier.fast])
        } catch let error as TransportError {
            failure = error
        }
        setrlimit(Int32(RLIMIT_FSIZE.rawValue), &old)
        signal(SIGXFSZ, previous)
        let error = try #require(failure)
        #expect(error.retryable && error.code == TransportError.notQueuedCode, "\(error)")
        #expect(error.message.contains("could not be queued"))
        let items = try FileManager.default.contentsOfDirectory(atPath: state + "/outbox").filter { $0.hasSuffix(".item") }
        #expect(items.isEmpty)
    }
}
