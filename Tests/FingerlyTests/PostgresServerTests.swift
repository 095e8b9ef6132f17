@testable import FingerlyPostgresStore
@testable import FingerlySQLiteStore
import Foundation
import Testing
@testable import FingerlyEngine
@testable import FingerlyModel
@testable import FingerlyStore

/// Several `fingerly-server` processes on one PostgreSQL database (issue 13): what must hold
/// across processes lives in the database, so these run real processes on a real server.
/// Skipped where the Debian postgresql package is missing (PostgresCluster.unavailableReason); CI installs it.
@Suite(.serialized, .enabled(if: PostgresCluster.isAvailable, "PostgreSQL's server binaries are not installed"))
struct PostgresServerTests {
    /// Unsigned: these tests are about the store, not about signatures.
    private static let limits = ["--rate-limit", "1000000", "--threads", "4", "--allow-unsigned"]

    /// A fresh database on `cluster` with keys for acme and other.
    private static func database(on cluster: PostgresCluster) throws
        -> (url: String, name: String, acme: (publicKey: String, secretKey: String), other: (publicKey: String, secretKey: String)) {
        let name = try cluster.createDatabase()
        let url = cluster.url(database: name)
        let migrated = try runServerCLI(["migrate", "--db", url])
        try #require(migrated.status == 0, "\(migrated.standardError)")
        #expect(migrated.standardOutput == "schema version \(PostgresSchema.latestVersion)\n")
        let acme = try addedKeys(try runServerCLI(["keys", "add", "--org", "acme", "--region", "eu", "--db", url]))
        let other = try addedKeys(try runServerCLI(["keys", "add", "--org", "other", "--db", url]))
        return (url, name, acme, other)
    }

    /// Runs every closure at once on threads of its own (released together), returns their results in order.
    private static func together<T: Sendable>(_ work: [@Sendable () -> T]) -> [T] {
        let results = Guarded([T?](repeating: nil, count: work.count))
        let ready = DispatchSemaphore(value: 0), go = DispatchSemaphore(value: 0), done = DispatchSemaphore(value: 0)
        for (index, body) in work.enumerated() {
            Thread {
                ready.signal()
                go.wait()
                let value = body()
                results.mutate { $0[index] = value }
                done.signal()
            }.start()
        }
        for _ in work { ready.wait() }
        for _ in work { go.signal() }
        for _ in work { done.wait() }
        return results.value.map { $0! }
    }

    private static func answer(_ outcome: ExchangeOutcome) throws -> IdentifyAnswer? {
        guard case .answered(200, let body) = outcome else { return nil }
        return try JSONDecoder.fingerly.decode(IdentifyAnswer.self, from: Data(body))
    }

    @Test func oneIdempotencyKeyOnTwoInstancesAtOnceStoresOneEvent() throws {
        let cluster = try PostgresCluster.shared()
        let db = try Self.database(on: cluster)
        defer { cluster.dropDatabase(db.name) }
        let first = try ServerProcess(database: db.url, arguments: Self.limits)
        let second = try ServerProcess(database: db.url, arguments: Self.limits)
        defer { _ = first.terminate(); _ = second.terminate() }
        let body = ServerTests.reportBody
        let rounds = 20
        var conflicts = 0, replays = 0
        for round in 0..<rounds {
            let request = LoopbackExchange.identifyRequest(publicKey: db.acme.publicKey, idempotencyKey: "same-\(round)", body: body)
            let ports = [first.port, second.port]
            let outcomes = Self.together(ports.map { port in { LoopbackExchange.exchange(port: port, request) } })
            #expect(outcomes.allSatisfy { $0.status == 200 || $0.status == 409 }, "round \(round): \(outcomes.map(\.status))")
            let answers = try outcomes.compactMap(Self.answer)
            #expect(answers.filter { !$0.duplicate }.count == 1, "round \(round): \(outcomes.map(\.status))")
            #expect(Set(answers.map(\.requestId)).count == 1)
            conflicts += outcomes.filter { $0.status == 409 }.count
            replays += answers.filter(\.duplicate).count
        }
        print("same key on two instances: \(rounds) rounds, \(conflicts) answered 409, \(replays) replayed")
        let store = try PostgresStore(url: db.url)
        defer { store.close() }
        #expect(try store.transaction { tx throws(StoreError) in try tx.eventCount(organization: "acme") } == rounds)
    }

    @Test func concurrentFirstReportsOfOneHostMakeOneVisitor() throws {
        let cluster = try PostgresCluster.shared()
        let db = try Self.database(on: cluster)
        defer { cluster.dropDatabase(db.name) }
        let first = try ServerProcess(database: db.url, arguments: Self.limits)
        let second = try ServerProcess(database: db.url, arguments: Self.limits)
        defer { _ = first.terminate(); _ = second.terminate() }
        let body = ServerTests.reportBody
        let publicKey = db.acme.publicKey
        let work: [@Sendable () -> ExchangeOutcome] = (0..<8).map { index in
            let port = index % 2 == 0 ? first.port : second.port
            return { LoopbackExchange.exchange(port: port, LoopbackExchange.identifyRequest(publicKey: publicKey, idempotencyKey: "host-\(index)", body: body)) }
        }
        let answers = try Self.together(work).map(Self.answer)
        #expect(answers.allSatisfy { $0 != nil })
        let visitors = Set(answers.compactMap { $0?.visitorId })
        #expect(visitors.count == 1, "\(visitors)")
        #expect(answers.filter { $0?.visitorIsNew == true }.count == 1)
        let store = try PostgresStore(url: db.url)
        defer { store.close() }
        #expect(try store.transaction { tx throws(StoreError) in try tx.visitors(organization: "acme", limit: 100).count } == 1)
    }

    @Test func anOrganizationsSecretKeyOnOneInstanceCannotReadAnothersEventsStoredThroughTheOther() throws {
        let cluster = try PostgresCluster.shared()
        let db = try Self.database(on: cluster)
        defer { cluster.dropDatabase(db.name) }
        let first = try ServerProcess(database: db.url, arguments: Self.limits)
        let second = try ServerProcess(database: db.url, arguments: Self.limits)
        defer { _ = first.terminate(); _ = second.terminate() }
        let stored = try #require(try Self.answer(LoopbackExchange.exchange(
            port: second.port, LoopbackExchange.identifyRequest(publicKey: db.acme.publicKey, idempotencyKey: "iso-1", body: ServerTests.reportBody))))
        let path = "/v1/events/\(stored.requestId)"
        let foreign = try first.client.request("GET", path, headers: [("Authorization", "Bearer \(db.other.secretKey)")])
        #expect(foreign.status == 404)
        #expect(!foreign.text.contains(stored.visitorId))
        let own = try first.client.request("GET", path, headers: [("Authorization", "Bearer \(db.acme.secretKey)")])
        #expect(own.status == 200)
        #expect(try JSONDecoder.fingerly.decode(StoredEvent.self, from: Data(own.body)).visitorId == stored.visitorId)
    }

    /// `kill -9` of one instance while both take load: every 200 (from either) is stored exactly
    /// once, and the other instance keeps answering 200.
    @Test func killNineOfOneInstanceUnderLoad() throws {
        let cluster = try PostgresCluster.shared()
        let db = try Self.database(on: cluster)
        defer { cluster.dropDatabase(db.name) }
        let victim = try ServerProcess(database: db.url, arguments: Self.limits)
        let survivor = try ServerProcess(database: db.url, arguments: Self.limits)
        defer { _ = survivor.terminate() }
        let body = ServerTests.reportBody
        let total = 300, killAt = 120, workers = 4
        let publicKey = db.acme.publicKey
        let outcomes = Guarded([(port: UInt16, outcome: ExchangeOutcome)?](repeating: nil, count: total))
        let next = Guarded(0)
        let victimPort = victim.port, survivorPort = survivor.port, victimPid = victim.pid
        _ = Self.together((0..<workers).map { _ in {
            while true {
                let index = next.mutate { value in defer { value += 1 }; return value }
                guard index < total else { return }
                if index == killAt { kill(victimPid, SIGKILL) }
                let port = index % 2 == 0 ? victimPort : survivorPort
                let outcome = LoopbackExchange.exchange(
                    port: port, LoopbackExchange.identifyRequest(publicKey: publicKey, idempotencyKey: "load-\(index)", body: body))
                outcomes.mutate { $0[index] = (port, outcome) }
            }
        } })
        var status: Int32 = 0
        while waitpid(victimPid, &status, 0) < 0 && errno == EINTR {}
        #expect((status & 0x7f) == SIGKILL)

        let results = outcomes.value.map { $0! }
        var answered: [Int: String] = [:]
        for (index, result) in results.enumerated() {
            if let answer = try Self.answer(result.outcome) { answered[index] = answer.requestId }
            if result.port == survivorPort {
                #expect(result.outcome.status == 200, "request \(index) to the surviving instance: \(result.outcome)")
            }
        }
        #expect(answered.count >= total / 2)
        let store = try PostgresStore(url: db.url)
        defer { store.close() }
        try store.transaction { tx throws(StoreError) in
            var fromCutOff = 0
            for (index, result) in results.enumerated() {
                let record = try tx.idempotency(organization: "acme", key: "load-\(index)")
                if let requestId = answered[index] {
                    #expect(record?.state == .complete)
                    #expect(try tx.event(requestId: requestId, organization: "acme") != nil)
                } else if record?.state == .complete {
                    #expect(result.port == victimPort)
                    fromCutOff += 1
                }
            }
            // Exactly once: no 200 without its event and no event without a completed key.
            #expect(try tx.eventCount(organization: "acme") == answered.count + fromCutOff)
        }
        // Still serving afterwards.
        #expect(try Self.answer(LoopbackExchange.exchange(
            port: survivorPort, LoopbackExchange.identifyRequest(publicKey: publicKey, idempotencyKey: "after", body: body))) != nil)
    }

    /// PostgreSQL stopped mid-run: 503 with Retry-After and no crash; the real client queues
    /// its report, and after the restart `flush` delivers it exactly once.
    @Test func postgresStoppedMidRunAnswers503ThenTheOutboxDeliversOnce() throws {
        let cluster = try PostgresCluster()
        defer { cluster.destroy() }
        let db = try Self.database(on: cluster)
        let server = try ServerProcess(database: db.url, arguments: Self.limits)
        defer { _ = server.terminate() }
        let endpoint = "http://127.0.0.1:\(server.port)"
        let state = try SubmissionCLITests.freshState("pg-outage")
        let environment = SubmissionCLITests.environment(state: state, apiKey: db.acme.publicKey)
        let before = try runCLI(SubmissionCLITests.identifyArguments(endpoint) + ["--json"], environment: environment)
        #expect(before.status == 0, "\(before.standardError)")

        cluster.stop(immediate: true)
        let down = try server.client.request("POST", "/v1/identify", headers: [("Authorization", "Bearer \(db.acme.publicKey)"),
                                                                               ("Content-Type", "application/json"),
                                                                               ("Idempotency-Key", "\"down-1\"")],
                                              body: ServerTests.reportBody)
        #expect(down.status == 503)
        #expect(down.headers["retry-after"] != nil)
        let health = try server.client.request("GET", "/healthz")
        #expect(health.status == 503)
        #expect(health.headers["retry-after"] != nil)
        let queued = try runCLI(SubmissionCLITests.identifyArguments(endpoint, attempts: 2), environment: environment)
        #expect(queued.status == 75, "\(queued.standardError)")
        #expect(waitpid(server.pid, nil, WNOHANG) == 0, "the server exited while the database was down")

        try cluster.start()
        #expect(try server.client.request("GET", "/healthz").status == 200)
        let flushed = try runCLI(SubmissionCLITests.flushArguments(endpoint), environment: environment)
        #expect(flushed.status == 0, "\(flushed.standardError) \(flushed.standardOutput)")
        let again = try runCLI(SubmissionCLITests.flushArguments(endpoint), environment: environment)
        #expect(again.status == 0)
        let store = try PostgresStore(url: db.url)
        defer { store.close() }
        // The run before the outage and the queued one: nothing lost, nothing twice.
        #expect(try store.transaction { tx throws(StoreError) in try tx.eventCount(organization: "acme") } == 2)
    }
}

/// What only the PostgreSQL backend promises: its migrations across instances and its reconnection.
@Suite(.serialized, .enabled(if: PostgresCluster.isAvailable, "PostgreSQL's server binaries are not installed"))
struct PostgresStoreTests {
    /// A peer frozen mid-transaction (SIGSTOP, a paused VM) keeps its locks: a request waiting
    /// behind them fails as transient (the server's 503) instead of holding a thread for as long
    /// as the peer is frozen, and once the pool is taken, the next request fails the same way.
    @Test func aRequestBehindAFrozenPeersLocksFailsAsTransient() throws {
        var options = PostgresStore.Options()
        options.lockTimeoutMilliseconds = 300
        options.poolSize = 2
        options.acquireTimeoutSeconds = 1
        options.attempts = 1
        let (store, dispose) = try PostgresCluster.shared().makeStore(options: options)
        defer { dispose() }
        try store.transaction { tx throws(StoreError) in
            try tx.putIdempotency(IdempotencyRecord(organization: "acme", key: "k", bodyHash: [1], state: .inFlight, response: nil,
                                                    status: nil, createdAt: 1, updatedAt: 1))
        }
        let frozen = DispatchSemaphore(value: 0), release = DispatchSemaphore(value: 0)
        let holder = Thread {
            _ = try? store.transaction { tx throws(StoreError) in
                _ = try tx.idempotency(organization: "acme", key: "k")   // FOR UPDATE: the row is held
                frozen.signal()
                release.wait()
            }
        }
        holder.start()
        frozen.wait()
        #expect {
            try store.transaction { tx throws(StoreError) in _ = try tx.idempotency(organization: "acme", key: "k") }
        } throws: { ($0 as? StoreError)?.isTransient == true }
        // The second connection is free again: the waiting one gave up on the lock, not on the pool.
        #expect(try store.transaction { tx throws(StoreError) in try tx.eventCount(organization: "acme") } == 0)
        release.signal()
        while !holder.isFinished { usleep(1_000) }
    }

    @Test func instancesMigratingAtOnceApplyEachVersionOnceAndANewerSchemaIsRefused() throws {
        let cluster = try PostgresCluster.shared()
        let name = try cluster.createDatabase()
        defer { cluster.dropDatabase(name) }
        let url = cluster.url(database: name)
        let opened = PostgresServerTestsSupport.openAtOnce(url: url, count: 4)
        #expect(opened.allSatisfy { $0 == nil }, "\(opened)")
        let store = try PostgresStore(url: url)
        defer { store.close() }
        #expect(try store.schemaVersion() == PostgresSchema.latestVersion)
        let newer = PostgresSchema.latestVersion + 1
        let connection = try PostgresConnection(conninfo: url, connectTimeoutSeconds: 5)
        defer { connection.close() }
        try connection.execute("INSERT INTO schema_migrations (version, applied_at) VALUES ($1, 0)", [.integer(newer)])
        #expect(throws: StoreError.self) { _ = try PostgresStore(url: url) }
        let refused = try runServerCLI(["migrate", "--db", url])
        #expect(refused.status == 69)
        #expect(refused.standardError.contains("newer than this build"))
    }

    /// Migration 4 on a database of version 3 with a bound visitor, as in SQLite: each key is
    /// proven at its visitor's first_seen.
    @Test func deviceKeysOfAVersion3DatabaseAreProvenAtTheirVisitorsFirstSeen() throws {
        let cluster = try PostgresCluster.shared()
        let name = try cluster.createDatabase()
        defer { cluster.dropDatabase(name) }
        let url = cluster.url(database: name)
        do {
            let connection = try PostgresConnection(conninfo: url, connectTimeoutSeconds: 5)
            defer { connection.close() }
            try connection.execute(PostgresSchema.createMigrationTable, [])
            for migration in PostgresSchema.migrations where migration.version <= 3 {
                for statement in migration.statements { try connection.execute(statement, []) }
                try connection.execute("INSERT INTO schema_migrations (version, applied_at) VALUES ($1, 0)", [.integer(migration.version)])
            }
            try connection.execute("INSERT INTO organizations (name, suspended, created_at) VALUES ('acme', FALSE, 1)", [])
            try connection.execute("""
                INSERT INTO visitors (id, organization, instance_id, hardware_id, first_seen, last_seen) VALUES ('v1', 'acme', 'i', 'h', 50, 90)
                """, [])
            for key in ["zz", "aa"] {
                try connection.execute("INSERT INTO visitor_device_keys (visitor_id, key_id) VALUES ('v1', $1)", [.text(key)])
            }
        }
        let store = try PostgresStore(url: url)
        defer { store.close() }
        #expect(try store.schemaVersion() == PostgresSchema.latestVersion)
        let visitor = try store.transaction { tx throws(StoreError) in try tx.visitor(id: "v1", organization: "acme") }
        #expect(visitor?.deviceKeys == [DeviceKeyRecord(keyId: "aa", firstProvenAt: 50), DeviceKeyRecord(keyId: "zz", firstProvenAt: 50)])
    }

    @Test func aLostConnectionIsTransientAndTheStoreReconnects() throws {
        let cluster = try PostgresCluster()
        defer { cluster.destroy() }
        let (store, dispose) = try cluster.makeStore()
        defer { dispose() }
        try store.transaction { tx throws(StoreError) in _ = try tx.ensureOrganization(named: "acme", now: 1) }
        cluster.stop(immediate: true)
        do {
            try store.transaction { tx throws(StoreError) in _ = try tx.organization(named: "acme") }
            Issue.record("a transaction succeeded with the database down")
        } catch {
            #expect(error.isTransient, "\(error)")
        }
        try cluster.start()
        do {
            #expect(try store.transaction { tx throws(StoreError) in try tx.organization(named: "acme")?.name } == "acme")
        } catch {
            Issue.record("no reconnection after the restart: \(error)")
        }
    }

    @Test func aURLsPasswordNeverAppearsInAMessage() throws {
        let failed = try runServerCLI(["migrate", "--db", "postgresql://fingerly:s3cret-pw@/nowhere?host=/nonexistent-fingerly"])
        #expect(failed.status == 69)
        #expect(!failed.standardError.contains("s3cret-pw"))
        #expect(failed.standardError.contains("postgresql://fingerly:***@/nowhere"))
    }
}

enum PostgresServerTestsSupport {
    /// Opens `count` stores on `url` at the same moment; each one's error, nil when it opened.
    static func openAtOnce(url: String, count: Int) -> [String?] {
        let results = Guarded([String?](repeating: nil, count: count))
        let group = DispatchGroup()
        for index in 0..<count {
            group.enter()
            Thread {
                do {
                    let store = try PostgresStore(url: url)
                    store.close()
                } catch {
                    results.mutate { $0[index] = "\(error)" }
                }
                group.leave()
            }.start()
        }
        group.wait()
        return results.value
    }
}

/// `fingerly-server migrate` on SQLite: the same command and the same version number as on PostgreSQL.
@Suite struct MigrateCommandTests {
    @Test func migrateAppliesTheSchemaAndPrintsItsVersion() throws {
        let database = try TestPaths.temporaryDirectory("server-migrate") + "/db.sqlite"
        let first = try runServerCLI(["migrate", "--db", database])
        #expect(first.status == 0, "\(first.standardError)")
        #expect(first.standardOutput == "schema version \(SQLiteSchema.latestVersion)\n")
        #expect(SQLiteSchema.latestVersion == PostgresSchema.latestVersion)
        #expect(try runServerCLI(["migrate", "--db=\(database)"]).standardOutput == first.standardOutput)
        #expect(try runServerCLI(["migrate", "--frobnicate"]).status == 64)
    }
}
