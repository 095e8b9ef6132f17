@testable import FingerlySQLiteStore
import Foundation
import Synchronization
import Testing
@testable import FingerlyStore

/// A store backend the contract cases run against.
enum StoreBackend: String, CaseIterable, CustomTestStringConvertible, Sendable {
    case sqlite
    case postgres

    /// PostgreSQL only where its server can be started (PostgresCluster.unavailableReason):
    /// CI installs it, so there every case runs on both.
    static var allCases: [StoreBackend] { PostgresCluster.isAvailable ? [.sqlite, .postgres] : [.sqlite] }

    var testDescription: String { rawValue }

    /// A fresh, empty store and what removes it.
    func make() throws -> (store: any IdentityStore, dispose: () -> Void) {
        switch self {
        case .sqlite:
            let directory = try TestPaths.temporaryDirectory("store")
            let store = try SQLiteStore(path: directory + "/fingerly.db")
            return (store, {
                store.close()
                try? FileManager.default.removeItem(atPath: directory)
            })
        case .postgres:
            let (store, dispose) = try PostgresCluster.shared().makeStore()
            return (store, dispose)
        }
    }
}

/// Runs `body(index)` on `count` threads of their own at once and waits for all.
private func onThreads(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) {
    let group = DispatchGroup()
    for index in 0..<count {
        group.enter()
        let thread = Thread {
            body(index)
            group.leave()
        }
        thread.start()
    }
    group.wait()
}

private func visitor(_ id: String, organization: String = "acme", instanceId: String? = nil, hardwareId: String? = nil,
                     hashes: [String] = [], deviceKeys: [String] = [], lastSeen: Int64 = 100) -> VisitorRecord {
    VisitorRecord(id: id, organization: organization, instanceId: instanceId, hardwareId: hardwareId, firstSeen: 1, lastSeen: lastSeen,
                  components: hashes.map { ComponentRecord(scope: "hardware", name: "disk", hash: $0) },
                  deviceKeys: deviceKeys.enumerated().map { DeviceKeyRecord(keyId: $0.element, firstProvenAt: 10 + Int64($0.offset)) })
}

private func idempotency(_ key: String, organization: String = "acme", body: [UInt8] = [1, 2, 3], createdAt: Int64 = 100,
                         state: IdempotencyRecord.State = .inFlight, response: [UInt8]? = nil, status: Int? = nil) -> IdempotencyRecord {
    IdempotencyRecord(organization: organization, key: key, bodyHash: body, state: state, response: response, status: status,
                      createdAt: createdAt, updatedAt: createdAt)
}

private struct Deliberate: Error {}

/// What every backend must do: written against `any IdentityStore` only.
@Suite(.serialized) struct StoreContractTests {
    @Test(arguments: StoreBackend.allCases) func organizationsAndKeys(backend: StoreBackend) throws {
        let (store, dispose) = try backend.make()
        defer { dispose() }
        let secret = Array(repeating: UInt8(7), count: 32)
        try store.transaction { tx throws(StoreError) in
            let created = try tx.ensureOrganization(named: "acme", now: 10)
            #expect(created == OrganizationRecord(name: "acme", suspended: false, createdAt: 10))
            // A second call finds it and changes nothing.
            #expect(try tx.ensureOrganization(named: "acme", now: 99).createdAt == 10)
            _ = try tx.ensureOrganization(named: "other", now: 11)
            try tx.insertKey(KeyRecord(publicKey: "fly_pk_a", secretKeyHash: secret, organization: "acme", environment: "production",
                                       revoked: false, createdAt: 12))
            try tx.insertKey(KeyRecord(publicKey: "fly_pk_b", secretKeyHash: [9], organization: "other", environment: "test",
                                       revoked: false, createdAt: 13))
        }
        try store.transaction { tx throws(StoreError) in
            #expect(try tx.key(publicKey: "fly_pk_a")?.secretKeyHash == secret)
            #expect(try tx.key(secretKeyHash: secret)?.publicKey == "fly_pk_a")
            #expect(try tx.key(secretKeyHash: [1]) == nil)
            #expect(try tx.keys(organization: "acme").map(\.publicKey) == ["fly_pk_a"])
            #expect(try tx.keys(organization: nil).count == 2)
            #expect(try tx.setSuspended(true, organization: "acme"))
            #expect(try !tx.setSuspended(true, organization: "nobody"))
            #expect(try tx.organization(named: "acme")?.suspended == true)
            #expect(try tx.revokeKey(publicKey: "fly_pk_a"))
            #expect(try !tx.revokeKey(publicKey: "fly_pk_missing"))
            #expect(try tx.key(publicKey: "fly_pk_a")?.revoked == true)
        }
        // The same public key twice, and one secret hash under two keys, are refused.
        #expect(throws: StoreError.self) {
            try store.transaction { tx throws(StoreError) in
                try tx.insertKey(KeyRecord(publicKey: "fly_pk_a", secretKeyHash: [4], organization: "acme", environment: "production",
                                           revoked: false, createdAt: 14))
            }
        }
        #expect(throws: StoreError.self) {
            try store.transaction { tx throws(StoreError) in
                try tx.insertKey(KeyRecord(publicKey: "fly_pk_c", secretKeyHash: secret, organization: "acme", environment: "production",
                                           revoked: false, createdAt: 14))
            }
        }
    }

    @Test(arguments: StoreBackend.allCases) func idempotencyRecords(backend: StoreBackend) throws {
        let (store, dispose) = try backend.make()
        defer { dispose() }
        try store.transaction { tx throws(StoreError) in
            #expect(try tx.idempotency(organization: "acme", key: "k1") == nil)
            try tx.putIdempotency(idempotency("k1", createdAt: 100))
            try tx.putIdempotency(idempotency("k1", organization: "other", body: [9], createdAt: 100))
            try tx.putIdempotency(idempotency("k2", createdAt: 500))
        }
        try store.transaction { tx throws(StoreError) in
            #expect(try tx.idempotency(organization: "acme", key: "k1") == idempotency("k1", createdAt: 100))
            // Scoped per organization: the same key elsewhere is another record.
            #expect(try tx.idempotency(organization: "other", key: "k1")?.bodyHash == [9])
            let complete = idempotency("k1", createdAt: 100, state: .complete, response: Array("{\"ok\":true}".utf8), status: 200)
            try tx.putIdempotency(complete)
            #expect(try tx.idempotency(organization: "acme", key: "k1") == complete)
            // An empty response is kept as empty, not as absent.
            try tx.putIdempotency(idempotency("k3", createdAt: 100, state: .complete, response: [], status: 204))
            #expect(try tx.idempotency(organization: "acme", key: "k3")?.response == [])
            try tx.deleteIdempotency(organization: "acme", key: "k3")
            #expect(try tx.idempotency(organization: "acme", key: "k3") == nil)
        }
        let expired = try store.transaction { tx throws(StoreError) in try tx.expireIdempotency(createdBefore: 200) }
        #expect(expired == 2)
        try store.transaction { tx throws(StoreError) in
            #expect(try tx.idempotency(organization: "acme", key: "k1") == nil)
            #expect(try tx.idempotency(organization: "other", key: "k1") == nil)
            #expect(try tx.idempotency(organization: "acme", key: "k2") != nil)
        }
    }

    @Test(arguments: StoreBackend.allCases) func visitorsByIdInstanceAndComponents(backend: StoreBackend) throws {
        let (store, dispose) = try backend.make()
        defer { dispose() }
        let first = visitor("v1", instanceId: "i1", hardwareId: "h1", hashes: ["a", "b", "c"], deviceKeys: ["dk2", "dk1"])
        try store.transaction { tx throws(StoreError) in
            try tx.putVisitor(first)
            try tx.putVisitor(visitor("v2", instanceId: "i1", hardwareId: "h2", hashes: ["a"], lastSeen: 300))
            try tx.putVisitor(visitor("v3", instanceId: "i1", hashes: ["a", "b"], lastSeen: 200))
            // Another organization holding the very same hashes and instance id.
            try tx.putVisitor(visitor("x1", organization: "other", instanceId: "i1", hardwareId: "h1", hashes: ["a", "b", "c"]))
        }
        try store.transaction { tx throws(StoreError) in
            // Keys come back oldest-proven first, whatever their ids' order.
            #expect(try tx.visitor(id: "v1", organization: "acme") == first)
            #expect(try tx.visitor(id: "v1", organization: "acme")?.deviceKeys.map(\.keyId) == ["dk2", "dk1"])
            #expect(try tx.visitor(id: "v1", organization: "other") == nil)
            #expect(try tx.visitor(id: "x1", organization: "acme") == nil)

            // The consistent hardwareId first, then the one without, then the most recent.
            let byInstance = try tx.visitors(instanceId: "i1", organization: "acme", preferringHardwareId: "h1", limit: 10).map(\.id)
            #expect(byInstance == ["v1", "v3", "v2"])
            #expect(try tx.visitors(instanceId: "i1", organization: "acme", preferringHardwareId: "h2", limit: 1).map(\.id) == ["v2"])
            #expect(try tx.visitors(instanceId: "i1", organization: "acme").count == 3)
            #expect(try tx.visitors(instanceId: "i9", organization: "acme").isEmpty)

            // Most shared hashes first; never another organization's visitor; the limit holds.
            let sharing = try tx.visitors(sharingAnyOf: ["a", "b", "c", "zz"], organization: "acme", limit: 10).map(\.id)
            #expect(sharing == ["v1", "v3", "v2"])
            #expect(try tx.visitors(sharingAnyOf: ["a", "b", "c"], organization: "acme", limit: 2).map(\.id) == ["v1", "v3"])
            #expect(try tx.visitors(sharingAnyOf: ["a", "b", "c"], organization: "other", limit: 10).map(\.id) == ["x1"])
            #expect(try tx.visitors(sharingAnyOf: ["zz"], organization: "acme", limit: 10).isEmpty)
            #expect(try tx.visitors(sharingAnyOf: [], organization: "acme", limit: 10).isEmpty)
            #expect(try tx.visitors(sharingAnyOf: ["a"], organization: "acme", limit: 0).isEmpty)

            #expect(try tx.visitors(organization: "acme", limit: 2).map(\.id) == ["v2", "v3"])
        }
        // Replacing a visitor replaces its components and device keys.
        try store.transaction { tx throws(StoreError) in
            var moved = first
            moved.components = [ComponentRecord(scope: "instance", name: "machine-id", hash: "m")]
            moved.deviceKeys = [DeviceKeyRecord(keyId: "dk3", firstProvenAt: 900)]
            moved.lastSeen = 900
            try tx.putVisitor(moved)
            #expect(try tx.visitor(id: "v1", organization: "acme") == moved)
            #expect(try tx.visitors(sharingAnyOf: ["c"], organization: "acme", limit: 10).isEmpty)
            #expect(try tx.visitors(sharingAnyOf: ["m"], organization: "acme", limit: 10).map(\.id) == ["v1"])
        }
        // A visitor id of another organization is never taken over.
        #expect(throws: StoreError.self) {
            try store.transaction { tx throws(StoreError) in try tx.putVisitor(visitor("x1", hashes: ["q"])) }
        }
        try store.transaction { tx throws(StoreError) in
            #expect(try tx.visitor(id: "x1", organization: "other")?.components.map(\.hash) == ["a", "b", "c"])
        }
    }

    @Test(arguments: StoreBackend.allCases) func eventsAreScopedAndWrittenOnce(backend: StoreBackend) throws {
        let (store, dispose) = try backend.make()
        defer { dispose() }
        let document = Array("{\"requestId\":\"r1\"}".utf8)
        try store.transaction { tx throws(StoreError) in
            try tx.insertEvent(EventRecord(requestId: "r1", organization: "acme", visitorId: "v1", receivedAt: 100, document: document))
            try tx.insertEvent(EventRecord(requestId: "r2", organization: "other", visitorId: "x1", receivedAt: 300, document: [1]))
        }
        try store.transaction { tx throws(StoreError) in
            #expect(try tx.event(requestId: "r1", organization: "acme")?.document == document)
            #expect(try tx.event(requestId: "r1", organization: "other") == nil)
            #expect(try tx.event(requestId: "r2", organization: "acme") == nil)
            #expect(try tx.eventCount(organization: "acme") == 1)
            #expect(try tx.eventCount(organization: nil) == 2)
        }
        #expect(throws: StoreError.self) {
            try store.transaction { tx throws(StoreError) in
                try tx.insertEvent(EventRecord(requestId: "r1", organization: "acme", visitorId: "v9", receivedAt: 200, document: [2]))
            }
        }
        #expect(try store.transaction { tx throws(StoreError) in try tx.event(requestId: "r1", organization: "acme")?.visitorId } == "v1")
        #expect(try store.transaction { tx throws(StoreError) in try tx.expireEvents(receivedBefore: 200) } == 1)
        #expect(try store.transaction { tx throws(StoreError) in try tx.eventCount(organization: nil) } == 1)
    }

    /// Every way `putVisitor` writes a visitor's row leaves the same rows and the same quota cost:
    /// made new (its components inserted a few rows a statement), seen again, its identifiers
    /// changed, and removed by a sweep between the read and the write (made again).
    @Test(arguments: StoreBackend.allCases) func everyWayOfWritingAVisitorLeavesTheSameRowsAndCost(backend: StoreBackend) throws {
        let (store, dispose) = try backend.make()
        defer { dispose() }
        func cost(_ visitor: VisitorRecord) -> Int64 {
            StoreLimits.rowBytes(visitors: 1, components: Int64(visitor.components.count), keys: Int64(visitor.deviceKeys.count))
        }
        func stored() throws -> (VisitorRecord?, Int64) {
            try store.transaction { tx throws(StoreError) in
                (try tx.visitor(id: "v1", organization: "acme"), try tx.organization(named: "acme")?.storedBytes ?? -1)
            }
        }
        try store.transaction { tx throws(StoreError) in _ = try tx.ensureOrganization(named: "acme", now: 1) }
        // 19 components: two full statements of eight and one of three.
        let made = visitor("v1", instanceId: "i1", hardwareId: "h1", hashes: (10..<29).map { "hash-\($0)" }, deviceKeys: ["dk1"])
        try store.transaction { tx throws(StoreError) in try tx.putVisitor(made, stored: nil) }
        #expect(try stored() == (made, cost(made)))

        var seen = made
        seen.lastSeen = 500
        try store.transaction { tx throws(StoreError) in try tx.putVisitor(seen, stored: try tx.visitor(id: "v1", organization: "acme")) }
        #expect(try stored() == (seen, cost(seen)))

        var moved = seen
        moved.instanceId = "i2"
        moved.hardwareId = nil
        moved.components.removeLast(4)
        try store.transaction { tx throws(StoreError) in try tx.putVisitor(moved, stored: try tx.visitor(id: "v1", organization: "acme")) }
        #expect(try stored() == (moved, cost(moved)))
        #expect(try store.transaction { tx throws(StoreError) in try tx.visitors(instanceId: "i1", organization: "acme") }.isEmpty)

        // Read, then gone before the write: it is made again, and costs what a new visitor costs.
        let read = try store.transaction { tx throws(StoreError) in try tx.visitor(id: "v1", organization: "acme") }
        #expect(try store.transaction { tx throws(StoreError) in try tx.expireVisitors(lastSeenBefore: 1_000) } == 1)
        #expect(try stored() == (nil, 0))
        var back = moved
        back.lastSeen = 2_000
        try store.transaction { tx throws(StoreError) in try tx.putVisitor(back, stored: read) }
        #expect(try stored() == (back, cost(back)))

        // Written unread, an existing visitor is rewritten in place, not counted twice.
        try store.transaction { tx throws(StoreError) in try tx.putVisitor(back, stored: nil) }
        #expect(try stored() == (back, cost(back)))
    }

    /// Sweeps take their rows a batch at a time (`SQLTransaction.sweepBatch`); what the rows cost
    /// comes off the organizations and the visitors' shares in every batch, to the byte.
    @Test(arguments: StoreBackend.allCases) func sweepsOfMoreThanABatchTakeTheirCostWithThem(backend: StoreBackend) throws {
        let (store, dispose) = try backend.make()
        defer { dispose() }
        let events = Int(SQLTransaction<SQLiteConnection>.sweepBatch) * 2 + 37
        let visitors = (0..<3).map { visitor("v\($0)", organization: $0 == 2 ? "other" : "acme", hashes: ["a\($0)", "b\($0)"]) }
        try store.transaction { tx throws(StoreError) in
            for record in visitors {
                _ = try tx.ensureOrganization(named: record.organization, now: 1)
                try tx.putVisitor(record, stored: nil)
            }
            for index in 0..<events {
                let owner = visitors[index % 3]
                try tx.insertEvent(EventRecord(requestId: "r\(index)", organization: owner.organization, visitorId: owner.id,
                                               receivedAt: Int64(index % 2 == 0 ? 10 : 5_000), document: Array(repeating: UInt8(index % 251), count: 40)))
            }
        }
        let old = (0..<events).filter { $0 % 2 == 0 }.count
        #expect(try store.transaction { tx throws(StoreError) in try tx.expireEvents(receivedBefore: 100) } == old)
        let (shares, bytes) = try store.transaction { tx throws(StoreError) in
            (try visitors.map { (v) throws(StoreError) in try tx.visitor(id: v.id, organization: v.organization)?.eventBytes ?? -1 },
             try tx.storedBytes())
        }
        let rows = visitors.map { _ in StoreLimits.rowBytes(visitors: 1, components: 2, keys: 0) }
        #expect(bytes["acme"] == rows[0] + rows[1] + shares[0] + shares[1])
        #expect(bytes["other"] == rows[2] + shares[2])
        #expect(try store.transaction { tx throws(StoreError) in try tx.eventCount(organization: nil) } == events - old)
        #expect(try store.transaction { tx throws(StoreError) in try tx.expireEvents(receivedBefore: .max) } == events - old)
        #expect(try store.transaction { tx throws(StoreError) in try tx.expireVisitors(lastSeenBefore: .max) } == 3)
        let left = try store.transaction { tx throws(StoreError) in try tx.storedBytes() }
        #expect(left.values.allSatisfy { $0 == 0 }, "\(left)")

        try store.transaction { tx throws(StoreError) in
            for index in 0..<events {
                try tx.putIdempotency(idempotency("k\(index)", createdAt: Int64(index)))
                _ = try tx.incrementCounter(bucket: "b\(index % 7)", window: Int64(index))
            }
        }
        #expect(try store.transaction { tx throws(StoreError) in try tx.expireIdempotency(createdBefore: .max) } == events)
        #expect(try store.transaction { tx throws(StoreError) in try tx.expireCounters(windowsBefore: .max) } == events)
    }

    /// A large document and answer come back byte for byte, whether the backend compresses
    /// them (SQLite) or leaves that to the database (PostgreSQL).
    @Test(arguments: StoreBackend.allCases) func largeDocumentsAndAnswersComeBackWhole(backend: StoreBackend) throws {
        let (store, dispose) = try backend.make()
        defer { dispose() }
        let document = Array((0..<600).map { "{\"probe\":\"p\($0)\",\"value\":\($0 &* 7919 % 1000)}," }.joined().utf8)
        let answer = Array(document.prefix(2_000))
        try store.transaction { tx throws(StoreError) in
            try tx.insertEvent(EventRecord(requestId: "big", organization: "acme", visitorId: "v", receivedAt: 1, document: document))
            try tx.putIdempotency(idempotency("big", state: .complete, response: answer, status: 200))
        }
        let read = try store.transaction { tx throws(StoreError) in
            (try tx.event(requestId: "big", organization: "acme")?.document, try tx.idempotency(organization: "acme", key: "big")?.response)
        }
        #expect(read.0 == document)
        #expect(read.1 == answer)
    }

    @Test(arguments: StoreBackend.allCases) func countersCountEveryIncrementAcrossThreads(backend: StoreBackend) throws {
        let (store, dispose) = try backend.make()
        defer { dispose() }
        try store.transaction { tx throws(StoreError) in
            #expect(try tx.incrementCounter(bucket: "key:a", window: 60) == 1)
            #expect(try tx.incrementCounter(bucket: "key:a", window: 60) == 2)
            #expect(try tx.incrementCounter(bucket: "key:a", window: 120) == 1)
            #expect(try tx.incrementCounter(bucket: "key:b", window: 60) == 1)
        }
        let perThread = 200
        let failures = Mutex<[String]>([])
        onThreads(2) { _ in
            for _ in 0..<perThread {
                do {
                    _ = try store.transaction { tx throws(StoreError) in try tx.incrementCounter(bucket: "key:c", window: 60) }
                } catch {
                    failures.withLock { $0.append("\(error)") }
                }
            }
        }
        #expect(failures.withLock { $0 }.isEmpty)
        #expect(try store.transaction { tx throws(StoreError) in try tx.incrementCounter(bucket: "key:c", window: 60) } == 2 * perThread + 1)
        #expect(try store.transaction { tx throws(StoreError) in try tx.expireCounters(windowsBefore: 120) } == 3)
        #expect(try store.transaction { tx throws(StoreError) in try tx.incrementCounter(bucket: "key:a", window: 120) } == 2)
    }

    @Test(arguments: StoreBackend.allCases) func aTransactionThatThrowsLeavesNothing(backend: StoreBackend) throws {
        let (store, dispose) = try backend.make()
        defer { dispose() }
        #expect(throws: StoreError("deliberate")) {
            try store.transaction { tx throws(StoreError) in
                _ = try tx.ensureOrganization(named: "acme", now: 1)
                try tx.putIdempotency(idempotency("k1"))
                try tx.putVisitor(visitor("v1", instanceId: "i1", hashes: ["a"]))
                try tx.insertEvent(EventRecord(requestId: "r1", organization: "acme", visitorId: "v1", receivedAt: 1, document: [1]))
                _ = try tx.incrementCounter(bucket: "b", window: 1)
                throw StoreError("deliberate")
            }
        }
        try store.transaction { tx throws(StoreError) in
            #expect(try tx.organization(named: "acme") == nil)
            #expect(try tx.idempotency(organization: "acme", key: "k1") == nil)
            #expect(try tx.visitor(id: "v1", organization: "acme") == nil)
            #expect(try tx.visitors(sharingAnyOf: ["a"], organization: "acme", limit: 5).isEmpty)
            #expect(try tx.eventCount(organization: nil) == 0)
            #expect(try tx.incrementCounter(bucket: "b", window: 1) == 1)
        }
    }

    /// Read, then write what was read plus one: two threads doing it must serialize, or
    /// increments get lost.
    @Test(arguments: StoreBackend.allCases) func concurrentTransactionsLoseNoWrites(backend: StoreBackend) throws {
        let (store, dispose) = try backend.make()
        defer { dispose() }
        try store.transaction { tx throws(StoreError) in try tx.putIdempotency(idempotency("shared", status: 0)) }
        let perThread = 150
        let failures = Mutex<[String]>([])
        onThreads(2) { thread in
            for round in 0..<perThread {
                do {
                    try store.transaction { tx throws(StoreError) in
                        guard var record = try tx.idempotency(organization: "acme", key: "shared") else { throw StoreError("missing") }
                        record.status = (record.status ?? 0) + 1
                        try tx.putIdempotency(record)
                        try tx.insertEvent(EventRecord(requestId: "t\(thread)-\(round)", organization: "acme", visitorId: "v",
                                                       receivedAt: 1, document: [UInt8(thread)]))
                    }
                } catch {
                    failures.withLock { $0.append("\(error)") }
                }
            }
        }
        #expect(failures.withLock { $0 }.isEmpty)
        try store.transaction { tx throws(StoreError) in
            #expect(try tx.idempotency(organization: "acme", key: "shared")?.status == 2 * perThread)
            #expect(try tx.eventCount(organization: "acme") == 2 * perThread)
        }
    }
}

/// What only the SQLite backend promises: its file, its migrations, its locks.
@Suite(.serialized) struct SQLiteStoreTests {
    private static func directory() throws -> String { try TestPaths.temporaryDirectory("sqlite-store") }

    @Test func theFileIsTheOwnersAloneAndItsDirectoryMustExist() throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/fingerly.db"
        let store = try SQLiteStore(path: path)
        try store.transaction { tx throws(StoreError) in _ = try tx.ensureOrganization(named: "acme", now: 1) }
        for file in [path, path + "-wal", path + "-shm"] {
            let attributes = try FileManager.default.attributesOfItem(atPath: file)
            #expect((attributes[.posixPermissions] as? Int) == 0o600, "\(file)")
        }
        store.close()
        #expect(throws: StoreError.self) { try SQLiteStore(path: directory + "/missing/fingerly.db") }
        #expect(!FileManager.default.fileExists(atPath: directory + "/missing"))
        // A link in place of the database is not followed.
        try FileManager.default.createSymbolicLink(atPath: directory + "/link.db", withDestinationPath: path)
        #expect(throws: StoreError.self) { try SQLiteStore(path: directory + "/link.db") }
    }

    @Test func migrationsApplyOnceAndSurviveReopening() throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/fingerly.db"
        let store = try SQLiteStore(path: path)
        #expect(try store.schemaVersion() == SQLiteSchema.latestVersion)
        let applied = try store.appliedMigrations()
        #expect(applied.map(\.version) == SQLiteSchema.migrations.map(\.version))
        try store.transaction { tx throws(StoreError) in _ = try tx.ensureOrganization(named: "acme", now: 1) }
        store.close()

        let reopened = try SQLiteStore(path: path)
        defer { reopened.close() }
        let again = try reopened.appliedMigrations()
        #expect(again.map(\.version) == applied.map(\.version))
        #expect(again.map(\.appliedAt) == applied.map(\.appliedAt))
        #expect(try reopened.transaction { tx throws(StoreError) in try tx.organization(named: "acme") } != nil)
    }

    /// Migration 4 on a database of version 3 with bound visitors: each key's first-proven time is
    /// its visitor's first_seen (all the old schema knew), and the organization has no secret yet.
    @Test func deviceKeysOfAVersion3DatabaseAreProvenAtTheirVisitorsFirstSeen() throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/fingerly.db"
        do {
            let raw = try SQLiteConnection(path: path, busyTimeoutMilliseconds: 100, checkpointOnClose: true)
            try raw.execute(SQLiteSchema.createMigrationTable, [])
            for migration in SQLiteSchema.migrations where migration.version <= 3 {
                for statement in migration.statements { try raw.execute(statement, []) }
                try raw.execute("INSERT INTO schema_migrations (version, applied_at) VALUES (?1, 0)", [.integer(migration.version)])
            }
            try raw.execute("INSERT INTO organizations (name, suspended, created_at) VALUES ('acme', 0, 1)", [])
            try raw.execute("INSERT INTO visitors (id, organization, instance_id, hardware_id, first_seen, last_seen) VALUES ('v1', 'acme', 'i', 'h', 50, 90)", [])
            for key in ["zz", "aa"] {
                try raw.execute("INSERT INTO visitor_device_keys (visitor_id, key_id) VALUES ('v1', ?1)", [.text(key)])
            }
            raw.close()
        }
        let store = try SQLiteStore(path: path)
        defer { store.close() }
        #expect(try store.schemaVersion() == SQLiteSchema.latestVersion)
        let visitor = try store.transaction { tx throws(StoreError) in try tx.visitor(id: "v1", organization: "acme") }
        #expect(visitor?.deviceKeys == [DeviceKeyRecord(keyId: "aa", firstProvenAt: 50), DeviceKeyRecord(keyId: "zz", firstProvenAt: 50)])
        let secret = try store.transaction { tx throws(StoreError) in try tx.identifierSecret(organization: "acme", candidate: [7]) }
        #expect(secret == [7])
    }

    @Test func aDatabaseFromANewerBuildIsRefused() throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/fingerly.db"
        try SQLiteStore(path: path).close()
        let newer = SQLiteSchema.latestVersion + 1
        do {
            let raw = try SQLiteConnection(path: path, busyTimeoutMilliseconds: 100, checkpointOnClose: true)
            try raw.execute("INSERT INTO schema_migrations (version, applied_at) VALUES (?1, 0)", [.integer(newer)])
            raw.close()
        }
        do {
            _ = try SQLiteStore(path: path)
            Issue.record("a newer database was opened")
        } catch {
            #expect(!error.isTransient)
            #expect(error.message.contains("schema version \(newer)"), "\(error)")
            #expect(error.message.contains("newer than this build"), "\(error)")
        }
    }

    @Test func aCommitSurvivesClosingWithoutACheckpoint() throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/fingerly.db"
        var options = SQLiteStore.Options()
        options.checkpointOnClose = false
        let store = try SQLiteStore(path: path, options: options)
        let document = Array(repeating: UInt8(ascii: "x"), count: 4_096)
        try store.transaction { tx throws(StoreError) in
            try tx.insertEvent(EventRecord(requestId: "r1", organization: "acme", visitorId: "v1", receivedAt: 1, document: document))
        }
        store.close()
        // The commit is in the WAL alone, as after a crash between commit and checkpoint.
        let walSize = try #require(try FileManager.default.attributesOfItem(atPath: path + "-wal")[.size] as? Int)
        #expect(walSize > document.count)

        let reopened = try SQLiteStore(path: path)
        defer { reopened.close() }
        #expect(try reopened.transaction { tx throws(StoreError) in try tx.event(requestId: "r1", organization: "acme")?.document } == document)
    }

    /// The server's store merges its WAL from a thread of its own; under writes without a pause
    /// the writer finishes the merge, so the WAL starts over instead of growing without bound.
    @Test func backgroundCheckpointsKeepTheWALBoundedAndLoseNothing() throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/fingerly.db"
        var options = SQLiteStore.Options()
        options.backgroundCheckpoints = true
        let store = try SQLiteStore(path: path, options: options)
        let document = (0..<13_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let writes = 3_000
        for index in 0..<writes {
            try store.transaction { tx throws(StoreError) in
                try tx.insertEvent(EventRecord(requestId: "r\(index)", organization: "acme", visitorId: "v", receivedAt: Int64(index),
                                               document: document))
            }
        }
        let checkpointer = try #require(store.checkpointer)
        #expect(checkpointer.counts.completed > 0)
        #expect(checkpointer.counts.failed == 0)
        // 3,000 writes of four pages and more would make a WAL past 48 MB without restarts. Past the
        // restart threshold the writer merges once the thread has caught up, and past the hard
        // limit whether or not it has: the limit and one transaction's pages bound the file.
        let walBytes = try #require(try FileManager.default.attributesOfItem(atPath: path + "-wal")[.size] as? Int)
        #expect(walBytes < (Int(SQLiteCheckpointer.hardLimitPages) + 64) * 4_096)
        #expect(walBytes < writes * document.count)
        store.close()
        #expect(!FileManager.default.fileExists(atPath: path + "-wal"))

        let reopened = try SQLiteStore(path: path)
        defer { reopened.close() }
        #expect(try reopened.transaction { tx throws(StoreError) in try tx.eventCount(organization: "acme") } == writes)
        #expect(try reopened.transaction { tx throws(StoreError) in try tx.event(requestId: "r\(writes - 1)", organization: "acme")?.document }
                == document)
    }

    @Test func anotherProcesssLockIsWaitedForThenReportedAsTransient() throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/fingerly.db"
        var options = SQLiteStore.Options()
        options.busyTimeoutMilliseconds = 20
        options.attempts = 3
        options.retryPauseMilliseconds = 1
        let store = try SQLiteStore(path: path, options: options)
        defer { store.close() }
        let other = try SQLiteConnection(path: path, busyTimeoutMilliseconds: 20, checkpointOnClose: true)
        try other.execute("BEGIN IMMEDIATE", [])
        do {
            try store.transaction { tx throws(StoreError) in _ = try tx.incrementCounter(bucket: "b", window: 1) }
            Issue.record("a locked database gave no error")
        } catch {
            #expect(error.isTransient, "\(error)")
        }
        try other.execute("COMMIT", [])
        other.close()
        #expect(try store.transaction { tx throws(StoreError) in try tx.incrementCounter(bucket: "b", window: 1) } == 1)
    }

    @Test func misuseFailsInsteadOfDeadlockingOrWritingOutsideATransaction() throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try SQLiteStore(path: directory + "/fingerly.db")
        #expect(throws: StoreError.self) {
            try store.transaction { _ throws(StoreError) in
                try store.transaction { tx throws(StoreError) in _ = try tx.incrementCounter(bucket: "b", window: 1) }
            }
        }
        let escaped = try store.transaction { tx throws(StoreError) in tx }
        #expect(throws: StoreError.self) { _ = try escaped.incrementCounter(bucket: "b", window: 1) }
        #expect(throws: StoreError.self) {
            try store.transaction { tx throws(StoreError) in
                _ = try tx.visitors(sharingAnyOf: (0...StoreLimits.maximumLookupHashes).map(String.init), organization: "acme", limit: 5)
            }
        }
        store.close()
        #expect(throws: StoreError.self) { try store.transaction { tx throws(StoreError) in try tx.eventCount(organization: nil) } }
    }

    /// Transactions that queue behind a running one commit together, each in a savepoint of
    /// one transaction: the one that throws undoes only its own writes and gets its own error,
    /// one that opens a transaction inside its own is refused, and the rest are stored.
    @Test func groupedTransactionsSucceedOrFailEachOnItsOwn() throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try SQLiteStore(path: directory + "/fingerly.db")
        defer { store.close() }
        @Sendable func insert(_ tx: any StoreTransaction, _ id: String) throws(StoreError) {
            try tx.insertEvent(EventRecord(requestId: id, organization: "acme", visitorId: "v", receivedAt: 1, document: Array(id.utf8)))
        }
        let leaderInside = DispatchSemaphore(value: 0)
        let releaseLeader = DispatchSemaphore(value: 0)
        let outcomes = Mutex<[Int: String]>([:])
        let queued = 6
        onThreads(queued + 2) { thread in
            if thread == queued + 1 {
                // Releases the first batch once the others all wait for the next (or gives up
                // after 20 s, and the batch size below fails).
                leaderInside.wait()
                leaderInside.signal()
                for _ in 0..<2_000 where store.groupCounts.waiting < queued { usleep(10_000) }
                releaseLeader.signal()
                return
            }
            if thread == 0 {
                // Holds the only batch open until every other thread's transaction waits behind it.
                try? store.transaction { tx throws(StoreError) in
                    leaderInside.signal()
                    releaseLeader.wait()
                    try insert(tx, "first")
                }
                return
            }
            leaderInside.wait()
            leaderInside.signal()
            let outcome: String
            do throws(StoreError) {
                outcome = try store.transaction { tx throws(StoreError) -> String in
                    try insert(tx, "t\(thread)")
                    if thread == 3 { throw StoreError("deliberate \(thread)") }
                    if thread == 5 { try store.transaction { inner throws(StoreError) in try insert(inner, "nested") } }
                    return "stored \(thread)"
                }
            } catch {
                outcome = error.message
            }
            outcomes.withLock { $0[thread] = outcome }
        }
        #expect(outcomes.withLock { $0 } == [1: "stored 1", 2: "stored 2", 3: "deliberate 3", 4: "stored 4",
                                             5: "a store transaction was started inside another on the same thread", 6: "stored 6"])
        #expect(store.groupCounts.largestBatch == queued)
        // Two commits: the first transaction alone, then the four of the six that stored something
        // (thread 3 threw, thread 5 nested), counted in the bucket of up to four.
        let commits = try #require(store.groupCommits)
        #expect(commits.commits == [1, 0, 1, 0, 0, 0])
        #expect(commits.transactions == 5)
        let stored = try store.transaction { tx throws(StoreError) in
            var found: [String] = []
            for id in ["first", "t1", "t2", "t3", "t4", "t5", "t6", "nested"] where try tx.event(requestId: id, organization: "acme") != nil {
                found.append(id)
            }
            return found
        }
        #expect(stored == ["first", "t1", "t2", "t4", "t6"])
    }

    /// Not a timed assertion: prints what one identify's store work costs on this machine, for a
    /// returning visitor (components unchanged) and for a new one (every row written).
    @Test func identifyTransactionsPerSecond() throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try SQLiteStore(path: directory + "/fingerly.db")
        defer { store.close() }
        let document = (0..<20_480).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        @Sendable func identify(_ index: Int, visitor number: Int) throws(StoreError) {
            let components = (0..<10).map {
                ComponentRecord(scope: $0 < 6 ? "hardware" : "instance", name: "c\($0)", hash: "hash-\(number)-\($0)")
            }
            try store.transaction { tx throws(StoreError) in
                let key = "idem-\(index)"
                if try tx.idempotency(organization: "acme", key: key) == nil {
                    try tx.putIdempotency(idempotency(key, body: Array(repeating: 1, count: 32), createdAt: Int64(index), state: .complete,
                                                      response: Array(repeating: 2, count: 600), status: 200))
                }
                let known = try tx.visitors(instanceId: "instance-\(number)", organization: "acme", preferringHardwareId: "hw-\(number)", limit: 8)
                var record = known.first ?? VisitorRecord(id: "visitor-\(number)", organization: "acme", instanceId: "instance-\(number)",
                                                          hardwareId: "hw-\(number)", firstSeen: Int64(index), lastSeen: Int64(index),
                                                          components: [], deviceKeys: [DeviceKeyRecord(keyId: "dk-\(number)", firstProvenAt: Int64(index))])
                record.lastSeen = Int64(index)
                record.components = components
                try tx.putVisitor(record)
                try tx.insertEvent(EventRecord(requestId: "request-\(index)", organization: "acme", visitorId: record.id,
                                               receivedAt: Int64(index), document: document))
            }
        }
        // CPU time as well as wall time: on a shared machine the wall clock measures the neighbours too.
        func processCPUSeconds() -> Double {
            var now = timespec()
            clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now)
            return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
        }
        var cpuMicroseconds: [Int] = []
        func rate(_ count: Int, threads: Int, visitor: @escaping @Sendable (Int) -> Int, offset: Int) -> Double {
            let failures = Mutex<Int>(0)
            let cpuStart = processCPUSeconds()
            defer { cpuMicroseconds.append(Int((processCPUSeconds() - cpuStart) * 1e6) / count) }
            let start = Date()
            onThreads(threads) { thread in
                for round in 0..<(count / threads) {
                    let index = offset + thread * count + round
                    do { try identify(index, visitor: visitor(index)) } catch { failures.withLock { $0 += 1 } }
                }
            }
            let elapsed = Date().timeIntervalSince(start)
            #expect(failures.withLock { $0 } == 0)
            return Double(count / threads * threads) / elapsed
        }
        let count = 2_000
        _ = rate(500, threads: 1, visitor: { $0 % 500 }, offset: 0)
        let returning = rate(count, threads: 1, visitor: { $0 % 500 }, offset: 10_000)
        let returningTwo = rate(count, threads: 2, visitor: { $0 % 500 }, offset: 20_000)
        let new = rate(count, threads: 1, visitor: { $0 }, offset: 30_000)
        #expect(try store.transaction { tx throws(StoreError) in try tx.eventCount(organization: "acme") } == 500 + 3 * count)
        print("SQLiteStore identify transaction (idempotency read+write, visitor by instance id, visitor put with 10 components, "
              + "20 KB event): returning visitor \(Int(returning)) tx/s on one thread, \(Int(returningTwo)) tx/s from two threads; "
              + "new visitor \(Int(new)) tx/s; CPU per transaction \(cpuMicroseconds.dropFirst().map { "\($0) µs" }.joined(separator: ", "))")
    }
}
