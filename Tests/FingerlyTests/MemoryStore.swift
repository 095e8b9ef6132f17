import Foundation
@testable import FingerlyStore

/// An IdentityStore in memory, one transaction at a time, for the HTTP layer's tests: a
/// transaction that throws leaves nothing behind. `failing` makes every transaction fail, as
/// a database gone away would.
final class MemoryStore: IdentityStore, @unchecked Sendable {
    fileprivate struct State {
        var organizations: [String: OrganizationRecord] = [:]
        var keys: [String: KeyRecord] = [:]
        var idempotency: [String: IdempotencyRecord] = [:]
        var visitors: [String: VisitorRecord] = [:]
        var events: [String: EventRecord] = [:]
        var counters: [String: (window: Int64, count: Int)] = [:]
    }

    private let lock = NSLock()
    private var state = State()
    private var failure: StoreError?

    func fail(with error: StoreError?) { lock.withLock { failure = error } }

    func transaction<Result>(_ body: (any StoreTransaction) throws(StoreError) -> Result) throws(StoreError) -> Result {
        lock.lock()
        defer { lock.unlock() }
        if let failure { throw failure }
        let transaction = MemoryTransaction(state: state)
        let result = try body(transaction)
        state = transaction.state
        return result
    }
}

private final class MemoryTransaction: StoreTransaction {
    var state: MemoryStore.State
    init(state: MemoryStore.State) { self.state = state }

    func organization(named name: String) -> OrganizationRecord? { state.organizations[name] }
    func ensureOrganization(named name: String, now: Int64) -> OrganizationRecord {
        if let existing = state.organizations[name] { return existing }
        let record = OrganizationRecord(name: name, suspended: false, createdAt: now)
        state.organizations[name] = record
        return record
    }
    func setSuspended(_ suspended: Bool, organization name: String) -> Bool {
        guard state.organizations[name] != nil else { return false }
        state.organizations[name]?.suspended = suspended
        return true
    }
    func insertKey(_ key: KeyRecord) { state.keys[key.publicKey] = key }
    func key(publicKey: String) -> KeyRecord? { state.keys[publicKey] }
    func key(secretKeyHash: [UInt8]) -> KeyRecord? { state.keys.values.first { $0.secretKeyHash == secretKeyHash } }
    func revokeKey(publicKey: String) -> Bool {
        guard state.keys[publicKey] != nil else { return false }
        state.keys[publicKey]?.revoked = true
        return true
    }
    func keys(organization: String?) -> [KeyRecord] { state.keys.values.filter { organization == nil || $0.organization == organization } }
    func idempotency(organization: String, key: String) -> IdempotencyRecord? { state.idempotency[organization + "\u{0}" + key] }
    func putIdempotency(_ record: IdempotencyRecord) { state.idempotency[record.organization + "\u{0}" + record.key] = record }
    func deleteIdempotency(organization: String, key: String) { state.idempotency[organization + "\u{0}" + key] = nil }
    func expireIdempotency(createdBefore cutoff: Int64) -> Int {
        let old = state.idempotency.filter { $0.value.createdAt < cutoff }.keys
        for key in old { state.idempotency[key] = nil }
        return old.count
    }
    func visitor(id: String, organization: String) -> VisitorRecord? { state.visitors[id].flatMap { $0.organization == organization ? $0 : nil } }
    func visitors(instanceId: String, organization: String) -> [VisitorRecord] {
        state.visitors.values.filter { $0.organization == organization && $0.instanceId == instanceId }
    }
    func visitors(sharingAnyOf hashes: [String], organization: String, limit: Int) -> [VisitorRecord] {
        Array(state.visitors.values.filter { $0.organization == organization && $0.components.contains { hashes.contains($0.hash) } }.prefix(limit))
    }
    func putVisitor(_ visitor: VisitorRecord) { state.visitors[visitor.id] = visitor }
    func visitors(organization: String, limit: Int) -> [VisitorRecord] {
        Array(state.visitors.values.filter { $0.organization == organization }.prefix(limit))
    }
    func insertEvent(_ event: EventRecord) { state.events[event.requestId] = event }
    func event(requestId: String, organization: String) -> EventRecord? {
        state.events[requestId].flatMap { $0.organization == organization ? $0 : nil }
    }
    func eventCount(organization: String?) -> Int { state.events.values.filter { organization == nil || $0.organization == organization }.count }
    func expireEvents(receivedBefore cutoff: Int64) -> Int {
        let old = state.events.filter { $0.value.receivedAt < cutoff }.keys
        for key in old { state.events[key] = nil }
        return old.count
    }
    func incrementCounter(bucket: String, window: Int64) -> Int {
        let current = state.counters[bucket]
        let count = current?.window == window ? (current?.count ?? 0) + 1 : 1
        state.counters[bucket] = (window, count)
        return count
    }
    func expireCounters(windowsBefore cutoff: Int64) -> Int {
        let old = state.counters.filter { $0.value.window < cutoff }.keys
        for key in old { state.counters[key] = nil }
        return old.count
    }
}
