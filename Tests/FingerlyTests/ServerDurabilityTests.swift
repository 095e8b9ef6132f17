@testable import FingerlySQLiteStore
import Foundation
import Testing
@testable import FingerlyEngine
@testable import FingerlyModel
@testable import FingerlyStore
@testable import FingerlyTransport

/// What one raw exchange came to.
enum ExchangeOutcome: Equatable {
    /// Never connected: the server was not listening (killed, or not yet restarted).
    case refused
    /// Connected, then the connection ended without a whole answer.
    case closed
    /// Connected, and no byte or close within the client's patience: a hang.
    case timedOut
    case answered(status: Int, body: [UInt8])

    var status: Int? { if case .answered(let status, _) = self { status } else { nil } }
}

/// Loopback exchanges that tell "refused", "closed" and "hung" apart, which RawClient folds
/// into one error.
enum LoopbackExchange {
    static func connect(port: UInt16, receiveTimeout seconds: Int) -> Int32? {
        try? connectToLoopback(port: port, timeoutSeconds: seconds, sendTimeout: true)
    }

    /// Reads until the server closes; a reset after some bytes still counts what came.
    static func finish(_ descriptor: Int32) -> ExchangeOutcome {
        var data: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        var hung = false
        while true {
            let count = recv(descriptor, &buffer, buffer.count, 0)
            if count < 0 && errno == EINTR { continue }
            if count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { hung = true; break }
            if count <= 0 { break }
            data.append(contentsOf: buffer[0..<count])
        }
        if let answer = try? RawClient.parse(data) { return .answered(status: answer.status, body: answer.body) }
        return hung ? .timedOut : .closed
    }

    static func exchange(port: UInt16, _ bytes: [UInt8], receiveTimeout: Int = 20) -> ExchangeOutcome {
        guard let descriptor = connect(port: port, receiveTimeout: receiveTimeout) else { return .refused }
        defer { close(descriptor) }
        RawClient.write(descriptor, bytes)
        return finish(descriptor)
    }

    static func identifyRequest(publicKey: String, idempotencyKey: String, body: [UInt8]) -> [UInt8] {
        let head = "POST /v1/identify HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nAuthorization: Bearer \(publicKey)\r\n"
            + "Content-Type: application/json\r\nIdempotency-Key: \"\(idempotencyKey)\"\r\nContent-Length: \(body.count)\r\n\r\n"
        return Array(head.utf8) + body
    }
}

/// Runs `work(worker)` on `count` threads and waits for all of them.
private func onClientThreads(_ count: Int, _ work: @escaping @Sendable (Int) -> Void) {
    let done = DispatchSemaphore(value: 0)
    for worker in 0..<count {
        let thread = Thread { work(worker); done.signal() }
        thread.stackSize = 1 << 20
        thread.start()
    }
    for _ in 0..<count { done.wait() }
}

func monotonicSeconds() -> Double {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
}

func durabilitySeed(_ variable: String) -> UInt64 {
    if let text = ProcessInfo.processInfo.environment[variable], let seed = UInt64(text) { return seed }
    var generator = SystemRandomNumberGenerator()
    return generator.next()
}

@Suite(.serialized)
struct ServerDurabilityTests {
    /// Acceptance 4: `kill -9` during 1,000 submissions. Every 200 is stored exactly once; what
    /// was in flight is stored at most once; resending every unanswered request with its own key
    /// after the restart ends with exactly 1,000 events.
    @Test func killNineDuringAThousandSubmissions() throws {
        let seed = durabilitySeed("FINGERLY_DURABILITY_SEED")
        print("ServerDurabilityTests.killNine seed \(seed) (FINGERLY_DURABILITY_SEED=\(seed) replays it)")
        var generator = SubmissionCLITests.SeededGenerator(state: seed)
        let total = 1000
        let killAt = Int.random(in: 100..<900, using: &generator)
        let workers = 2 + Int.random(in: 0...2, using: &generator)

        let database = try TestPaths.temporaryDirectory("server-durable") + "/db.sqlite"
        let added = try runServerCLI(["keys", "add", "--org", "acme", "--region", "eu", "--db", database])
        #expect(added.status == 0, "\(added.standardError)")
        let (publicKey, secretKey) = try addedKeys(added)
        let body = ServerTests.reportBody
        try #require(body.count > 100, "no request body from fingerly-identify --request-only")
        let limits = ["--rate-limit", "1000000", "--threads", "4", "--allow-unsigned"]
        let first = try ServerProcess(database: database, arguments: limits)
        let key: @Sendable (Int) -> String = { index in "durable-\(seed)-\(index)" }

        let outcomes = Guarded([ExchangeOutcome?](repeating: nil, count: total))
        let next = Guarded(0)
        let started = monotonicSeconds()
        let port = first.port, pid = first.pid
        onClientThreads(workers) { _ in
            while true {
                let index = next.mutate { value in defer { value += 1 }; return value }
                guard index < total else { return }
                // The kill lands while the other workers' requests are on the wire.
                if index == killAt { kill(pid, SIGKILL) }
                let outcome = LoopbackExchange.exchange(
                    port: port, LoopbackExchange.identifyRequest(publicKey: publicKey, idempotencyKey: key(index), body: body))
                outcomes.mutate { $0[index] = outcome }
            }
        }
        let submitSeconds = monotonicSeconds() - started
        let status = first.waitForExit()
        #expect((status & 0x7f) == SIGKILL, "the server was not killed by SIGKILL: status \(status)")

        let results = outcomes.value.map { $0 ?? .refused }
        var answeredIds: [Int: String] = [:]
        var inFlight: [Int] = [], refused: [Int] = [], otherStatuses: [Int: Int] = [:]
        for (index, outcome) in results.enumerated() {
            switch outcome {
            case .answered(200, let answerBody):
                let answer = try JSONDecoder.fingerly.decode(IdentifyAnswer.self, from: Data(answerBody))
                #expect(!answer.duplicate)
                answeredIds[index] = answer.requestId
            case .answered(let other, _): otherStatuses[other, default: 0] += 1; inFlight.append(index)
            case .closed, .timedOut: inFlight.append(index)
            case .refused: refused.append(index)
            }
        }
        print("killNine: \(workers) workers, kill before request \(killAt), \(answeredIds.count) answered 200, "
              + "\(inFlight.count) cut off in flight, \(refused.count) refused, other statuses \(otherStatuses), "
              + String(format: "%.2f s", submitSeconds))
        #expect(otherStatuses.isEmpty, "answers other than 200 before the kill: \(otherStatuses)")
        #expect(answeredIds.count >= killAt - workers)
        #expect(Set(answeredIds.values).count == answeredIds.count)

        // The database as the killed process left it: each 200 is its idempotency record's
        // answer and a stored event; an in-flight request either completed whole (record and
        // event together) or left no event.
        let afterKill = try SQLiteStore(path: database)
        var completedInFlight = 0
        let storedCount = try afterKill.transaction { tx throws(StoreError) -> Int in
            for (index, requestId) in answeredIds {
                let record = try tx.idempotency(organization: "acme", key: key(index))
                #expect(record?.state == .complete)
                // A completed record names the event its answer is part of.
                let stored = record?.response.map { String(decoding: $0, as: UTF8.self) }
                #expect(stored == requestId)
                let event = try tx.event(requestId: requestId, organization: "acme")
                #expect(event != nil)
            }
            for index in inFlight + refused {
                guard let record = try tx.idempotency(organization: "acme", key: key(index)), record.state == .complete else { continue }
                #expect(inFlight.contains(index), "a refused request was stored")
                let stored = record.response.map { String(decoding: $0, as: UTF8.self) }
                var event: EventRecord?
                if let stored { event = try tx.event(requestId: stored, organization: "acme") }
                #expect(event != nil)
                completedInFlight += 1
            }
            return try tx.eventCount(organization: "acme")
        }
        afterKill.close()
        print("killNine: \(storedCount) events after the kill, \(completedInFlight) of them from requests cut off in flight")
        #expect(storedCount == answeredIds.count + completedInFlight)
        #expect(storedCount <= answeredIds.count + inFlight.count)

        // Restart on the same database.
        let second = try ServerProcess(database: database, arguments: limits)
        let restarted = monotonicSeconds()
        for (_, requestId) in answeredIds {
            let event = try second.client.request("GET", "/v1/events/\(requestId)", headers: [("Authorization", "Bearer \(secretKey)")])
            #expect(event.status == 200, "\(requestId): \(event.text)")
            #expect(try JSONDecoder.fingerly.decode(IdentifyAnswer.self, from: Data(event.body)).requestId == requestId)
        }

        // Resend every request without a 200, same key and body. A marker left by the killed
        // process answers 409 until it ages into a takeover, so those are retried until then.
        var pending = inFlight + refused
        var replayed = 0, stored = 0, conflicts = 0
        var resentIds: [Int: String] = [:]
        let deadline = monotonicSeconds() + Double(IdentityEngine.inFlightTakeoverSeconds) + 20
        while !pending.isEmpty && monotonicSeconds() < deadline {
            var again: [Int] = []
            for index in pending {
                let outcome = LoopbackExchange.exchange(
                    port: second.port, LoopbackExchange.identifyRequest(publicKey: publicKey, idempotencyKey: key(index), body: body))
                switch outcome {
                case .answered(200, let answerBody):
                    let answer = try JSONDecoder.fingerly.decode(IdentifyAnswer.self, from: Data(answerBody))
                    if answer.duplicate { replayed += 1 } else { stored += 1 }
                    resentIds[index] = answer.requestId
                case .answered(409, _):
                    conflicts += 1
                    again.append(index)
                default:
                    Issue.record("resending \(key(index)): \(outcome)")
                }
            }
            pending = again
            if !pending.isEmpty { usleep(1_000_000) }
        }
        #expect(pending.isEmpty, "still 409 after the takeover time: \(pending)")
        #expect(replayed == completedInFlight, "every request stored before the kill replays, nothing else does")
        let allIds = Array(answeredIds.values) + Array(resentIds.values)
        #expect(Set(allIds).count == total)
        #expect(second.terminate() == 0)

        let finalStore = try SQLiteStore(path: database)
        let finalCount = try finalStore.transaction { tx throws(StoreError) -> Int in
            for requestId in allIds {
                let event = try tx.event(requestId: requestId, organization: "acme")
                #expect(event != nil)
            }
            return try tx.eventCount(organization: "acme")
        }
        finalStore.close()
        print("killNine: resent \(inFlight.count + refused.count): \(stored) stored, \(replayed) replayed, \(conflicts) answers 409 "
              + "while a dead marker aged, " + String(format: "%.2f s after the restart", monotonicSeconds() - restarted)
              + "; \(finalCount) events")
        #expect(finalCount == total)
    }

    /// Two Content-Length fields (or two Hosts) are refused: libmicrohttpd framed the body by
    /// the first length and the request went on to a 200.
    @Test func conflictingFramingIsRefused() throws {
        let harness = try ServerHarness()
        let (publicKey, _) = try harness.keys()
        let body = ServerTests.reportBody
        let twoLengths = try harness.client.request("POST", "/v1/identify", headers: harness.identifyHeaders(publicKey)
            + [("Content-Length", String(body.count + 1))], body: body)
        #expect(twoLengths.status == 400)
        #expect(twoLengths.errorCode == "bad_request")
        let twoHosts = try harness.client.request("GET", "/healthz", headers: [("Host", "other")])
        #expect(twoHosts.status == 400)
        #expect(try harness.client.request("POST", "/v1/identify", headers: harness.identifyHeaders(publicKey), body: body).status == 200)
    }

    /// Acceptance 5: 10,000 malformed or random requests against a running server process.
    /// Every answer is a 4xx (a head too large or malformed, or a stalled client, may instead
    /// see the connection closed); nothing hangs, the process lives, and it still serves.
    @Test func tenThousandHostileRequests() throws {
        let seed = durabilitySeed("FINGERLY_ROBUSTNESS_SEED")
        print("ServerDurabilityTests.hostile seed \(seed) (FINGERLY_ROBUSTNESS_SEED=\(seed) replays it)")
        let database = try TestPaths.temporaryDirectory("server-hostile") + "/db.sqlite"
        let (publicKey, secretKey) = try addedKeys(try runServerCLI(["keys", "add", "--org", "acme", "--region", "eu", "--db", database]))
        let body = ServerTests.reportBody
        try #require(body.count > 100, "no request body from fingerly-identify --request-only")
        let connectionTimeout = 2
        let server = try ServerProcess(database: database, arguments: [
            "--rate-limit", "1000000", "--threads", "4", "--connection-timeout", String(connectionTimeout), "--body-limit", "65536",
            // What is judged here is each request's content: the parked slow clients of one address
            // would pass the per-address connection limit (SlowConnectionTests has that).
            "--connections-per-address", "512", "--allow-unsigned"])
        let total = 10_000, workers = 6
        // Each worker draws from its own generator, so a seed replays the same requests.
        let next = Guarded(0)
        let tally = Guarded([String: [String: Int]]())
        let failures = Guarded([String]())
        let parked = Guarded([(descriptor: Int32, hostile: HostileCase, at: Double)]())
        let finishedWorkers = Guarded(0)
        let port = server.port
        let started = monotonicSeconds()

        @Sendable func judge(_ probe: HostileCase, _ outcome: ExchangeOutcome, index: Int) {
            let label: String
            var failure: String?
            let hostile = probe.kind
            switch outcome {
            case .answered(let status, _):
                label = String(status)
                if !(400...499).contains(status) && !probe.alsoAllowed.contains(status) {
                    failure = "answered \(status) to \(String(decoding: probe.bytes.prefix(300), as: UTF8.self).debugDescription)"
                }
            case .closed:
                label = "closed"
                if !probe.mayCloseUnanswered { failure = "closed without an answer" }
            case .timedOut: label = "hung"; failure = "no answer and no close"
            case .refused: label = "refused"; failure = "connection refused: the server is gone"
            }
            tally.mutate { $0[hostile.rawValue, default: [:]][label, default: 0] += 1 }
            if let failure { failures.mutate { $0.append("#\(index) \(hostile.rawValue): \(failure)") } }
        }

        // Parked connections are read once the server's timeout has passed: closed, or an answer.
        let reap: @Sendable () -> Void = {
            while true {
                let now = monotonicSeconds()
                let done = finishedWorkers.value == workers
                let due = parked.mutate { list -> [(descriptor: Int32, hostile: HostileCase, at: Double)] in
                    let ripe = list.filter { done || now - $0.at > Double(connectionTimeout) + 0.5 }
                    list.removeAll { done || now - $0.at > Double(connectionTimeout) + 0.5 }
                    return ripe
                }
                for entry in due {
                    judge(entry.hostile, LoopbackExchange.finish(entry.descriptor), index: -1)
                    close(entry.descriptor)
                }
                if done && parked.value.isEmpty { return }
                usleep(100_000)
            }
        }

        onClientThreads(workers + 1) { worker in
            if worker == workers {
                reap()
                return
            }
            var requests = HostileRequests(publicKey: publicKey, secretKey: secretKey, body: body,
                                           generator: SubmissionCLITests.SeededGenerator(state: seed &+ UInt64(worker)))
            var trickle = SubmissionCLITests.SeededGenerator(state: seed ^ 0x5EED)
            while true {
                let index = next.mutate { value in defer { value += 1 }; return value }
                guard index < total else {
                    finishedWorkers.mutate { $0 += 1 }
                    return
                }
                let hostile = requests.next(index)
                if hostile.kind.holdsConnection {
                    guard let descriptor = LoopbackExchange.connect(port: port, receiveTimeout: 15) else {
                        judge(hostile, .refused, index: index)
                        continue
                    }
                    var offset = 0
                    while offset < hostile.bytes.count {
                        let piece = min(hostile.bytes.count - offset, Int.random(in: 1...200, using: &trickle))
                        RawClient.write(descriptor, Array(hostile.bytes[offset..<offset + piece]))
                        offset += piece
                        if hostile.kind == .slowClient { usleep(5_000) }
                    }
                    parked.mutate { $0.append((descriptor, hostile, monotonicSeconds())) }
                } else {
                    judge(hostile, LoopbackExchange.exchange(port: port, hostile.bytes, receiveTimeout: 15), index: index)
                }
                if index % 2000 == 1999 {
                    let health = LoopbackExchange.exchange(port: port, Array("GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".utf8))
                    if health.status != 200 { failures.mutate { $0.append("healthz after #\(index): \(health)") } }
                }
            }
        }
        let seconds = monotonicSeconds() - started

        let failed = failures.value
        for (kind, counts) in tally.value.sorted(by: { $0.key < $1.key }) {
            print("hostile: \(kind): " + counts.sorted { $0.key < $1.key }.map { "\($0.key)×\($0.value)" }.joined(separator: " "))
        }
        let judged = tally.value.values.reduce(0) { $0 + $1.values.reduce(0, +) }
        print("hostile: \(judged) requests in " + String(format: "%.1f s", seconds) + ", \(failed.count) failures")
        #expect(judged == total)
        #expect(failed.isEmpty, "\(failed.prefix(20))")
        #expect(waitpid(server.pid, nil, WNOHANG) == 0, "the server process died")

        let health = try server.client.request("GET", "/healthz")
        #expect(health.status == 200)
        let valid = try server.client.request("POST", "/v1/identify", headers: [("Authorization", "Bearer \(publicKey)"),
                                                                               ("Content-Type", "application/json"),
                                                                               ("Idempotency-Key", "\"after-the-storm\"")], body: body)
        #expect(valid.status == 200, "\(valid.text)")
        #expect(server.terminate() == 0)
        #expect(!server.standardError.value.contains("fly_"))
    }

}

/// One generated hostile request.
struct HostileCase {
    enum Kind: String, CaseIterable {
        case truncatedJSON, hugeNumbers, deepNesting, wrongTypes, invalidUTF8, randomBody, mutatedBody, oversizedHeader,
             manyHeaders, badRequestLine, badFraming, badCredentials, badEventPath, slowClient

        /// The server may wait for bytes that never come: sent, then parked until its connection timeout.
        var holdsConnection: Bool { self == .badFraming || self == .slowClient }
    }
    let kind: Kind
    let bytes: [UInt8]
    /// Answers besides a 4xx that this very request may rightly get (see where it is made).
    var alsoAllowed: Set<Int> = []
    /// Oversized or malformed heads may be refused by closing the connection without an answer.
    var mayCloseUnanswered: Bool { [.oversizedHeader, .manyHeaders, .badRequestLine, .badFraming, .slowClient].contains(kind) }
}

/// Seeded hostile requests for acceptance 5: small, so 10,000 fit in well under a minute.
struct HostileRequests {
    let publicKey: String
    let secretKey: String
    let body: [UInt8]
    var generator: SubmissionCLITests.SeededGenerator

    init(publicKey: String, secretKey: String, body: [UInt8], generator: SubmissionCLITests.SeededGenerator) {
        self.publicKey = publicKey
        self.secretKey = secretKey
        self.body = body
        self.generator = generator
    }

    private mutating func int(_ range: ClosedRange<Int>) -> Int { Int.random(in: range, using: &generator) }
    private mutating func pick<T>(_ items: [T]) -> T { items[int(0...items.count - 1)] }
    private mutating func randomBytes(_ count: Int) -> [UInt8] { (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) } }

    func identify(_ index: Int, body: [UInt8], extraHeaders: String = "", contentLength: String? = nil,
                  authorization: String? = nil, idempotency: String? = nil) -> [UInt8] {
        var head = "POST /v1/identify HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        head += "Authorization: \(authorization ?? "Bearer " + publicKey)\r\nContent-Type: application/json\r\n"
        head += "Idempotency-Key: \(idempotency ?? "\"hostile-\(index)\"")\r\n"
        head += "Content-Length: \(contentLength ?? String(body.count))\r\n" + extraHeaders + "\r\n"
        return Array(head.utf8) + body
    }

    private func submission(_ report: String, client: String = #"{"proxy":false,"sdk":"fingerly-linux","version":"0.1.0"}"#) -> [UInt8] {
        Array(#"{"client":\#(client),"report":\#(report)}"#.utf8)
    }

    /// The kinds that hold a connection open come a third as often, so the parked ones stay
    /// well under the connection limit.
    static let weightedKinds = HostileCase.Kind.allCases.flatMap { $0.holdsConnection ? [$0] : [$0, $0, $0] }

    mutating func next(_ index: Int) -> HostileCase {
        let kind = pick(Self.weightedKinds)
        alsoAllowed = []
        let bytes = make(kind, index)
        // A random change to a real body may leave a valid submission.
        if kind == .mutatedBody || kind == .hugeNumbers { alsoAllowed.insert(200) }
        return HostileCase(kind: kind, bytes: bytes, alsoAllowed: alsoAllowed)
    }

    private var alsoAllowed: Set<Int> = []

    private mutating func make(_ kind: HostileCase.Kind, _ index: Int) -> [UInt8] {
        switch kind {
        case .truncatedJSON:
            let cut = int(0...body.count - 1)
            return identify(index, body: Array(body.prefix(cut)))
        case .hugeNumbers:
            let huge = pick(["1" + String(repeating: "9", count: int(20...400)), "1e400", "-1e400", "1e-400", "18446744073709551616",
                             "-9223372036854775809", "9223372036854775808", "0." + String(repeating: "0", count: 300) + "1", "1E+999999999",
                             "123456789012345678901234567890.5e308"])
            if Bool.random(using: &generator) {
                return identify(index, body: submission(#"{"schemaVersion":\#(huge),"probes":[]}"#))
            }
            // A number of the real report replaced.
            let digits = body.indices.filter { $0 > 0 && (0x30...0x39).contains(body[$0]) && body[$0 - 1] == UInt8(ascii: ":") }
            guard !digits.isEmpty else { return identify(index, body: submission(huge)) }
            let start = pick(digits)
            var end = start
            while end < body.count, (0x30...0x39).contains(body[end]) || body[end] == UInt8(ascii: ".") { end += 1 }
            return identify(index, body: Array(body[..<start]) + Array(huge.utf8) + Array(body[end...]))
        case .deepNesting:
            let depth = int(50...20_000)
            let open = pick(["[", #"{"a":"#, #"{"report":"#])
            let close = open == "[" ? "]" : "}"
            let balanced = Bool.random(using: &generator)
            let nested = String(repeating: open, count: depth) + "1" + String(repeating: close, count: balanced ? depth : depth / 2)
            return identify(index, body: Bool.random(using: &generator) ? Array(nested.utf8) : submission(nested))
        case .wrongTypes:
            let report = pick(["[]", "null", "1", #""report""#, "true", #"{"schemaVersion":"1"}"#, #"{"schemaVersion":1.5}"#,
                               #"{"schemaVersion":1,"probes":{}}"#, #"{"schemaVersion":1,"probes":[1,2]}"#,
                               #"{"schemaVersion":-1}"#, #"{"schemaVersion":null}"#, "{}"])
            let client = pick([#"{"proxy":false,"sdk":"fingerly-linux","version":"0.1.0"}"#, #""client""#, "[]", "null",
                               #"{"proxy":"no","sdk":1,"version":[]}"#, #"{"proxy":false}"#])
            if int(0...3) == 0 { return identify(index, body: Array(pick(["[]", "null", "0", #""""#, "{}", #"{"client":{}}"#]).utf8)) }
            return identify(index, body: submission(report, client: client))
        case .invalidUTF8:
            let bad = pick([[0xC3, 0x28], [0xFF], [0xFE, 0xFF], [0xC0, 0xAF], [0xE0, 0x80, 0xAF], [0xED, 0xA0, 0x80],
                            [0xF4, 0x90, 0x80, 0x80], [0x80], [0xF0, 0x9F, 0x98]] as [[UInt8]])
            // Inside a string of the real body, where only the encoding is wrong.
            let quotes = body.indices.filter { body[$0] == UInt8(ascii: "\"") }
            let at = quotes.isEmpty ? 0 : pick(quotes) + 1
            return identify(index, body: Array(body[..<min(at, body.count)]) + bad + Array(body[min(at, body.count)...]))
        case .randomBody:
            return identify(index, body: randomBytes(int(1...2048)))
        case .mutatedBody:
            var mutated = body
            for _ in 0..<int(1...8) {
                let at = int(0...mutated.count - 1)
                switch int(0...2) {
                case 0: mutated[at] ^= UInt8(1 << int(0...7))
                case 1: mutated.remove(at: at)
                default: mutated.insert(pick(Array("{}[]\",:0\\".utf8)), at: at)
                }
            }
            return identify(index, body: mutated)
        case .oversizedHeader:
            let size = int(33_000...80_000)
            if Bool.random(using: &generator) {
                return Array("GET /healthz?\(String(repeating: "a", count: size)) HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".utf8)
            }
            return identify(index, body: body, extraHeaders: "X-Padding: \(String(repeating: "b", count: size))\r\n")
        case .manyHeaders:
            let name = pick(["X-Many", "Idempotency-Key", "Authorization", "Signature", "Content-Digest"])
            // Past the head's memory limit when the header itself would be harmless.
            let count = name == "X-Many" ? int(2500...5000) : int(2...3000)
            let headers = (0..<count).map { "\(name): \"v\($0)\"\r\n" }.joined()
            return identify(index, body: body, extraHeaders: headers)
        case .badRequestLine:
            let lines: [String] = ["GET\r\n\r\n", "GET /healthz\r\n\r\n", "GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n",
                                   "GET /healthz HTTP/1.1\r\n\r\n", "\r\n\r\n", " / HTTP/1.1\r\nHost: x\r\n\r\n",
                                   "GET /healthz HTTP/1.1 extra\r\nHost: x\r\n\r\n", "G\u{0}ET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
                                   "GET /v1/events/%00%ff HTTP/1.1\r\nHost: x\r\n\r\n", "POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
                                   "BREW /v1/identify HTTP/1.1\r\nHost: x\r\n\r\n", "GET http://x/nothing HTTP/1.1\r\nHost: x\r\n\r\n",
                                   "get /v1/identify HTTP/1.1\r\nHost: x\r\n\r\n", "GET /v1/identify HTTP/1.1\r\nHost: x\r\n\r\n",
                                   "GET /healthz HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n"]
            if int(0...3) == 0 { return randomBytes(int(1...512)) + Array("\r\n\r\n".utf8) }
            let line = pick(lines)
            // RFC 9110 §15.6.6 names 505 for a version the server does not speak; libmicrohttpd
            // sends it before the application sees the request.
            if line.contains("HTTP/9.9") { alsoAllowed = [505] }
            // libmicrohttpd (0.9.75, not pedantic) serves an HTTP/1.1 request without Host.
            if line == "GET /healthz HTTP/1.1\r\n\r\n" { alsoAllowed = [200] }
            return Array(line.utf8)
        case .badFraming:
            switch int(0...5) {
            case 0: return identify(index, body: body, contentLength: pick(["abc", "-1", "99999999999999999999999", "1e3", " ", "0x10", "+5"]))
            case 1: return identify(index, body: body, extraHeaders: "Content-Length: \(body.count + 1)\r\n")
            case 2: return identify(index, body: body, extraHeaders: "Transfer-Encoding: chunked\r\n")
            case 3:
                var head = "POST /v1/identify HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer \(publicKey)\r\n"
                head += "Idempotency-Key: \"hostile-\(index)\"\r\nTransfer-Encoding: chunked\r\n\r\n"
                let chunk = pick(["zz\r\nabc\r\n0\r\n\r\n", "FFFFFFFFFFFFFFFFFFFF\r\nab\r\n0\r\n\r\n", "-1\r\n\r\n0\r\n\r\n",
                                  "3\r\n{}]\r\n0\r\n\r\n", "2;ext=\"\u{1}\"\r\n{}\r\n0\r\n\r\n"])
                return Array((head + chunk).utf8)
            case 4: return identify(index, body: body, extraHeaders: "Bad Header Without Colon\r\n")
            default:
                // RFC 9112 §5.2 lets a server unfold obs-fold instead of refusing it, and a NUL in
                // a field nobody reads is cut there by libmicrohttpd: a valid body is then a 200.
                alsoAllowed = [200]
                return identify(index, body: body, extraHeaders: "X-Folded: a\r\n  continued\r\nX-Nul: a\u{0}b\r\n")
            }
        case .badCredentials:
            switch int(0...3) {
            case 0:
                let auth = pick(["", "Bearer", "Bearer ", "Basic YTpi", "Bearer \(secretKey)", "Bearer fly_pk_eu_production_acme_" + String(repeating: "z", count: 32),
                                 "Bearer " + String(repeating: "\u{7f}", count: 40), "bearer \(publicKey) extra"])
                return identify(index, body: body, authorization: auth)
            case 1:
                let key = pick(["", "unquoted", #""""#, "\"" + String(repeating: "k", count: 300) + "\"", #""a\qb""#, #""tab\#tkey""#,
                                #""one", "two""#, "\"h\u{e9}\""])
                return identify(index, body: body, idempotency: key)
            case 2:
                let signature = pick(["Signature: sig1=:AAAA:\r\n", "Signature-Input: sig1=(\"@method\");created=1\r\n",
                                      "Fingerly-Device-Key: junk\r\n", "Signature: sig1=:\(String(repeating: "A", count: 600)):\r\nSignature-Input: sig1=()\r\n",
                                      "Signature-Input: sig1=(\"@method\" \"@path\");created=99999999999999999999;keyid=\"x\"\r\nSignature: sig1=:AA==:\r\n"])
                return identify(index, body: body, extraHeaders: signature)
            default:
                return identify(index, body: body, extraHeaders: pick(["Content-Digest: sha-256=:AAAA:\r\n", "Content-Digest: garbage\r\n",
                                                                       "Content-Digest: sha-256=:\(String(repeating: "=", count: 50)):\r\n"]))
            }
        case .badEventPath:
            let path = pick(["/v1/events/", "/v1/events/../../etc/passwd", "/v1/events/" + String(repeating: "r", count: 2000), "/v1/events/%2F%2F",
                             "/v1/events/req_\u{7f}", "/v1/events/req%00", "/v1/events//"])
            let auth = pick(["Bearer \(secretKey)", "Bearer \(publicKey)", "Bearer fly_sk_eu_production_acme_" + String(repeating: "q", count: 40)])
            return Array("GET \(path) HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: \(auth)\r\n\r\n".utf8)
        case .slowClient:
            // Only the start of a request; the sender trickles it and then stalls.
            let whole = identify(index, body: body)
            return Array(whole.prefix(int(1...min(whole.count - 1, 400))))
        }
    }
}

/// Shared state several client threads change in place.
final class Guarded<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: Value
    init(_ value: Value) { stored = value }
    func mutate<Result>(_ change: (inout Value) -> Result) -> Result { lock.withLock { change(&stored) } }
    var value: Value { lock.withLock { stored } }
}
