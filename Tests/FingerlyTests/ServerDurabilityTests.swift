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
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { return nil }
        var timeout = timeval(tv_sec: seconds, tv_usec: 0)
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(descriptor, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard result == 0 else { close(descriptor); return nil }
        return descriptor
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
        let limits = ["--rate-limit", "1000000", "--threads", "4"]
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
        var status: Int32 = 0
        while waitpid(first.pid, &status, 0) < 0 && errno == EINTR {}
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
                let stored = record?.response.flatMap { try? JSONDecoder.fingerly.decode(IdentifyAnswer.self, from: Data($0)) }
                #expect(stored?.requestId == requestId)
                let event = try tx.event(requestId: requestId, organization: "acme")
                #expect(event != nil)
            }
            for index in inFlight + refused {
                guard let record = try tx.idempotency(organization: "acme", key: key(index)), record.state == .complete else { continue }
                #expect(inFlight.contains(index), "a refused request was stored")
                let stored = record.response.flatMap { try? JSONDecoder.fingerly.decode(IdentifyAnswer.self, from: Data($0)) }
                var event: EventRecord?
                if let stored { event = try tx.event(requestId: stored.requestId, organization: "acme") }
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
}

/// Shared state several client threads change in place.
final class Guarded<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: Value
    init(_ value: Value) { stored = value }
    func mutate<Result>(_ change: (inout Value) -> Result) -> Result { lock.withLock { change(&stored) } }
    var value: Value { lock.withLock { stored } }
}
