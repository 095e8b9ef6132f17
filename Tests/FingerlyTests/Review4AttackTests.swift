import Foundation
import Glibc
import Testing
@testable import Fingerly
@testable import FingerlyHost
@testable import FingerlyModel
@testable import FingerlyTransport

/// Defects found by the hostile review of issue 11 (submission). Each test asserts the behaviour
/// the issue, wire.md or the README promises, so it fails on the tree it was written against and
/// passes once the defect is fixed.
@Suite(.serialized) struct Review4AttackTests {
    /// A valid 200 answer of `POST /v1/identify`.
    static let answer = #"{"requestId":"r1","visitorId":"v1","visitorIsNew":false,"visitorConfidence":90,"identifiable":true,"duplicate":false,"suspectScore":null,"suspectLevel":null}"#

    static func options(_ directory: String, root: String = TestPaths.fixture("kvm-qemu"),
                        attempts: Int = 1) -> FingerlyOptions {
        var options = FingerlyOptions(root: root, stateDirectory: directory,
                                      submission: SubmissionOptions(attempts: attempts, baseDelayMs: 0, localResultOnFailure: true))
        options.flushInBackground = false
        return options
    }

    static func queuedItems(_ directory: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: directory + "/outbox")) ?? []).filter { $0.hasSuffix(".item") }
    }

    static func item(_ number: Int) -> OutgoingRequest {
        OutgoingRequest(idempotencyKey: UUID().uuidString.lowercased(), createdAt: Int64(time(nil)) - 60 + Int64(number),
                        organization: "acme", body: Array(#"{"client":{},"report":{}}"#.utf8))
    }

    /// Waits (bounded) until `condition` holds; the caller then asserts on the state, not on time.
    static func waitUntil(_ limitMs: Int = 15_000, _ condition: () -> Bool) {
        var waited = 0
        while !condition() && waited < limitMs {
            usleep(10_000)
            waited += 10
        }
    }

    // MARK: Consent

    /// "Until consent is granted … nothing is sent." A flush in progress keeps sending every queued
    /// report after `setConsent(.denied)`: nothing between items looks at consent, and the purge
    /// waits (blocking `setConsent`'s caller, possibly the main thread) for the outbox lock the
    /// flush holds until it has sent everything.
    @Test func denyingConsentDuringAFlushStopsItAndDoesNotWaitForIt() throws {
        let directory = try TestPaths.temporaryDirectory("r4-deny-flush")
        let server = try GatedServer(status: 200, body: Self.answer)
        defer { server.stop() }
        let fingerly = try Fingerly.loadBlocking(apiKey: TestKeys.standard, endpoint: server.url, consent: .granted,
                                                 options: Self.options(directory))
        for number in 0..<2 { try #require(fingerly.enqueue(Self.item(number)) == nil) }
        let flushed = Locked<FlushResult?>(nil)
        Thread { flushed.set(fingerly.flushBlocking()) }.start()
        Self.waitUntil { server.requests.count == 1 }
        try #require(server.requests.count == 1)

        let denied = Locked(false)
        Thread {
            fingerly.setConsent(.denied)
            denied.set(true)
        }.start()
        // The server still holds its answer: a denial that does not wait for the network returns now.
        Self.waitUntil(5_000) { denied.value }
        let deniedWhileTheAnswerWasHeld = denied.value
        server.release()
        Self.waitUntil { flushed.value != nil && denied.value }

        #expect(deniedWhileTheAnswerWasHeld, "setConsent(.denied) blocked until the flush's exchange ended")
        #expect(server.requests.count == 1, "\(server.requests.count - 1) queued report(s) sent after consent was denied")
        #expect(Self.queuedItems(directory).isEmpty)
    }

    /// A report whose last attempt is still out when the user denies consent is queued after the
    /// denial's purge (and sent by the next flush once anything grants consent again): "denying
    /// purges the outbox" does not hold for it.
    @Test func aReportInFlightWhenConsentIsDeniedIsNotQueuedAfterThePurge() async throws {
        let directory = try TestPaths.temporaryDirectory("r4-deny-inflight")
        let server = try GatedServer(status: 503, body: "")
        defer { server.stop() }
        let fingerly = try Fingerly.loadBlocking(apiKey: TestKeys.standard, endpoint: server.url, consent: .granted,
                                                 options: Self.options(directory))
        let submission = Task { try await fingerly.identifyReportingFailure(tiers: [.fast]) }
        for _ in 0..<1500 where server.requests.isEmpty { try await Task.sleep(nanoseconds: 10_000_000) }
        try #require(server.requests.count == 1)
        fingerly.setConsent(.denied)
        server.release()
        _ = try await submission.value
        #expect(Self.queuedItems(directory).isEmpty, "the withdrawn report was queued after the denial purged the outbox")
    }

    /// When the consent record cannot be written (a full disk, a planted directory), `setConsent(.denied)`
    /// throws inside applyConsent before the purge: the queued reports the user refused stay, and the
    /// next grant (or the next load with `.granted`) sends them.
    @Test func denyingConsentPurgesEvenWhenTheRecordCannotBeWritten() throws {
        let directory = try TestPaths.temporaryDirectory("r4-deny-unwritable")
        let fingerly = try Fingerly.loadBlocking(apiKey: TestKeys.standard, endpoint: "http://127.0.0.1:1", consent: .granted,
                                                 options: Self.options(directory))
        try #require(fingerly.enqueue(Self.item(0)) == nil)
        // rename(2) of the new record over a directory fails: the record cannot be written.
        try FileManager.default.createDirectory(atPath: directory + "/consent", withIntermediateDirectories: false)
        fingerly.setConsent(.denied)
        #expect(fingerly.consentState == .denied)
        #expect(Self.queuedItems(directory).isEmpty, "denied, yet the queued report stays for the next flush")
    }

    /// ExitCode's own documentation (and the README's 74 row: "the state directory cannot be
    /// changed") vs. `consent denied` on a state directory it may not write: StateError falls to
    /// the default branch, 70 "internal error".
    @Test func aConsentThatCannotBeRecordedExitsWithTheIOErrorStatus() throws {
        let scratch = try TestPaths.temporaryDirectory("r4-consent-exit")
        // Under a regular file: the directory cannot be made. (One that others may write is
        // refused before, as a configuration to fix: exit 78, StateDirectoryTrustTests.)
        try DeviceFixtures.write("not a directory", to: scratch + "/file")
        let directory = scratch + "/file/state"
        let output = try runCLI(["consent", "denied", "--state-dir", directory])
        #expect(output.status == 74, "exit \(output.status): \(output.standardError)")
    }

    // MARK: Never lose an accepted report

    /// A 503 whose body (or header block) is over the 1 MiB response cap becomes
    /// `.failed(.responseTooLarge)`: not retried, not queued, exit 76. A proxy's or load
    /// balancer's large error page, or a hostile network, loses the report.
    @Test func aRetryableAnswerTooLargeToReadLeavesTheReportQueued() async throws {
        let directory = try TestPaths.temporaryDirectory("r4-big-503")
        let server = try FaultServer([.status(503, body: String(repeating: "x", count: 1_100_000))])
        defer { server.stop() }
        let fingerly = try Fingerly.loadBlocking(apiKey: TestKeys.standard, endpoint: server.url, consent: .granted,
                                                 options: Self.options(directory))
        let (_, failure) = try await fingerly.identifyReportingFailure(tiers: [.fast])
        #expect(failure?.retryable == true, "\(String(describing: failure))")
        #expect(Self.queuedItems(directory).count == 1, "the report was neither delivered nor queued")
    }

    /// flush drops an item on every status `Delivery` does not retry: 3xx (a captive portal, a
    /// redirecting load balancer), 404 (a wrong --endpoint prefix), 405, 501… and then exits 0
    /// because nothing is left. README: "a 400/413/422 drops the one refused"; only those blame
    /// the report.
    @Test(arguments: [404, 302, 405, 501])
    func aFlushKeepsItemsOnAStatusThatDoesNotBlameTheReport(status: Int) throws {
        let directory = try TestPaths.temporaryDirectory("r4-flush-\(status)")
        let server = try FaultServer([.status(status, [(name: "Location", value: "http://portal.example/")],
                                              body: #"{"error":{"code":"not_found","message":"no"}}"#)])
        defer { server.stop() }
        let fingerly = try Fingerly.loadBlocking(apiKey: TestKeys.standard, endpoint: server.url, consent: .granted,
                                                 options: Self.options(directory))
        try #require(fingerly.enqueue(Self.item(0)) == nil)
        let result = fingerly.flushBlocking()
        #expect(server.requests.count == 1)
        #expect(result.dropped == 0 && result.remaining == 1, "HTTP \(status): \(result)")
    }

    /// Queued items record the URL they were meant for. The lead's choice: the configured address
    /// wins (an operator moving to another endpoint keeps the queue rather than stranding it),
    /// and the move is logged with both addresses, since a report the first server stored but never
    /// answered becomes an event at the second too.
    @Test func aQueuedReportGoesToTheConfiguredAddressAndTheMoveIsLogged() async throws {
        let directory = try TestPaths.temporaryDirectory("r4-flush-origin")
        let first = try Fingerly.loadBlocking(apiKey: TestKeys.standard, endpoint: "http://127.0.0.1:1", consent: .granted,
                                              options: Self.options(directory))
        let (_, failure) = try await first.identifyReportingFailure(tiers: [.fast])
        try #require(failure?.retryable == true)
        try #require(Self.queuedItems(directory).count == 1)

        let other = try FaultServer([.status(200, body: Self.answer)])
        defer { other.stop() }
        let log = RecordingLog()
        var options = Self.options(directory)
        options.logger = log
        let second = try Fingerly.loadBlocking(apiKey: TestKeys.key(region: "eu"), endpoint: other.url, consent: .granted,
                                               options: options)
        let result = second.flushBlocking()
        #expect(other.requests.count == 1 && result.delivered == 1 && result.remaining == 0)
        #expect(log.messages.contains { $0.contains("queued for http://127.0.0.1:1/v1/identify, sent to \(other.url)/v1/identify") },
                "\(log.messages)")
    }

    // MARK: Signature

    /// wire.md: "@path" is the target URI's path. The endpoint check accepts dot segments; curl
    /// removes them before sending (no CURLOPT_PATH_AS_IS) while the signature covers the
    /// unnormalized path, so no server can verify the request. Refusing such an endpoint at load
    /// is a fix too.
    @Test func theSignatureCoversThePathThatIsSent() throws {
        let directory = try TestPaths.temporaryDirectory("r4-dot-path")
        let server = try FaultServer([.status(200, body: Self.answer)])
        defer { server.stop() }
        // Refusing such an endpoint at load is a fix too.
        guard let fingerly = try? Fingerly.loadBlocking(apiKey: TestKeys.standard, endpoint: server.url + "/a/../fingerly",
                                                        consent: .granted, options: Self.options(directory)) else { return }
        try #require(fingerly.enqueue(Self.item(0)) == nil)
        _ = fingerly.flushBlocking()
        let request = try #require(server.requests.first)
        do {
            _ = try MessageSignature.verify(method: request.method, path: request.path, fields: request.headers, body: request.body,
                                            now: Int64(time(nil)), window: 300)
        } catch {
            Issue.record("the signature does not verify against the path sent, \(request.path): \(error)")
        }
    }

    // MARK: Hostile answers

    /// The server's (unauthenticated) answer replaces every local verdict: an endpoint the host
    /// chooses (FINGERLY_ENDPOINT, plain http allowed) answers "all clear" and a debugger this
    /// process saw itself disappears from `verdicts`, from the human report and from `--fail-on`.
    /// Local evidence should not be cleared by a remote answer (the server may add, not remove).
    @Test func aServerAnswerDoesNotClearWhatThisProcessSawItself() async throws {
        let directory = try TestPaths.temporaryDirectory("r4-clean-verdicts")
        let clean = VerdictName.allCases.map { #""\#($0.rawValue)":{"confidence":"high","missingEvidence":[],"reasons":[],"value":false}"# }
            .joined(separator: ",")
        let body = String(Self.answer.dropLast()) + #","verdicts":{"# + clean + "}}"
        let server = try FaultServer([.status(200, body: body)])
        defer { server.stop() }
        let fingerly = try Fingerly.loadBlocking(apiKey: TestKeys.standard, endpoint: server.url, consent: .granted,
                                                 options: Self.options(directory))
        let local = try await fingerly.identify(tiers: [.fast], submit: false)
        try #require(local.verdicts.debugger.value, "the fixture's TracerPid makes a local debugger verdict")
        let (result, failure) = try await fingerly.identifyReportingFailure(tiers: [.fast])
        try #require(failure == nil && result.state == .enriched)
        #expect(result.verdicts.debugger.value, "the server's answer cleared the local debugger verdict")
    }
}

/// One request per connection; every answer is held until `release()` (or 20 s), so a test can act
/// while a request is on the wire.
final class GatedServer: Sendable {
    private let lock = NSCondition()
    private let state = Locked<(requests: [RecordedRequest], open: Bool)>(([], false))
    private let server: LoopbackServer

    init(status: Int, body: String) throws {
        let lock = lock
        let state = state
        server = try LoopbackServer { client, core in
            guard let request = FaultServer.readRequest(client) else { return }
            lock.withLock { state.set((state.value.requests + [request], state.value.open)) }
            let until = Date(timeIntervalSinceNow: 20)
            lock.lock()
            while !state.value.open, !core.isStopping, lock.wait(until: until) {}
            lock.unlock()
            if core.isStopping { return }
            let head = "HTTP/1.1 \(status) Held\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n"
            SocketIO.sendAll(client, Array(head.utf8) + Array(body.utf8))
        }
    }

    var url: String { "http://127.0.0.1:\(server.port)" }
    var requests: [RecordedRequest] { lock.withLock { state.value.requests } }

    func release() {
        lock.withLock {
            state.set((state.value.requests, true))
            lock.broadcast()
        }
    }

    func stop() {
        release()
        server.stop()
    }
}

/// "`fingerly-identify consent granted|pending|denied` sets it machine-wide (an administrator can
/// forbid collection on a host)": root's record binds a user whose own state directory says
/// nothing, and lifting it lets the user run again.
@Suite(.serialized) struct SystemConsentTests {
    @Test(.enabled(if: geteuid() == 0, "needs root: records the host's consent, then runs as nobody"))
    func anAdministratorsDenialBindsEveryUserOfTheHost() throws {
        let system = "/etc/fingerly/consent", rootRecord = "/var/lib/fingerly/consent"
        let hadSystem = FileManager.default.fileExists(atPath: system)
        try #require(!hadSystem, "a consent record of this machine's own is there; not touching it")
        defer {
            unlink(system)
            unlink(rootRecord)
        }
        let asRoot = ["FINGERLY_STATE_DIR", "STATE_DIRECTORY", "FINGERLY_API_KEY"]
        let denied = try runProcess(TestPaths.cli, ["consent", "denied"], removing: asRoot)
        #expect(denied.status == 0, "\(denied.standardError)")
        #expect(denied.standardOutput.contains("every user"))
        var info = stat()
        #expect(stat(system, &info) == 0 && info.st_mode & 0o777 == 0o644 && info.st_uid == 0)

        let asNobody = ["/usr/bin/setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", TestPaths.cli,
                        "--no-submit", "--tiers", "fast", "--root", TestPaths.fixture("laptop-baremetal")]
        let refused = try runProcess(asNobody[0], Array(asNobody.dropFirst()), removing: asRoot)
        #expect(refused.status == 77, "\(refused.standardError)")
        #expect(refused.standardError.contains("administrator"))
        #expect(refused.standardOutput.isEmpty)

        let granted = try runProcess(TestPaths.cli, ["consent", "granted"], removing: asRoot)
        #expect(granted.status == 0, "\(granted.standardError)")
        let allowed = try runProcess(asNobody[0], Array(asNobody.dropFirst()), removing: asRoot)
        #expect(allowed.status == 0, "\(allowed.standardError)")
    }
}

final class RecordingLog: FingerlyLogHandler, @unchecked Sendable {
    private let lock = NSLock()
    private var stored: [String] = []
    func log(_ level: LogLevel, _ message: String) { lock.withLock { stored.append(message) } }
    var messages: [String] { lock.withLock { stored } }
}
