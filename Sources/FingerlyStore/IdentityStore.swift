/// Why the store could not do what was asked. `isTransient`: the same call may succeed later
/// (busy, locked, a lost connection); the server answers 503 then, not 500.
package struct StoreError: Error, Sendable, Hashable, CustomStringConvertible {
    package let message: String
    package let isTransient: Bool

    package init(_ message: String, isTransient: Bool = false) {
        self.message = message
        self.isTransient = isTransient
    }

    package var description: String { message }
}

/// An organization and whether it accepts traffic.
package struct OrganizationRecord: Sendable, Hashable {
    package let name: String
    package var suspended: Bool
    package let createdAt: Int64
    /// Bytes of event documents it has stored, as stored (compressed where the backend does),
    /// and the cost of its visitor rows (`StoreLimits.rowBytes`).
    package var storedBytes: Int64
    /// Its own storage quota in bytes, 0 for none; nil: the server's default applies.
    package var storageQuota: Int64?

    package init(name: String, suspended: Bool, createdAt: Int64, storedBytes: Int64 = 0, storageQuota: Int64? = nil) {
        self.name = name
        self.suspended = suspended
        self.createdAt = createdAt
        self.storedBytes = storedBytes
        self.storageQuota = storageQuota
    }
}

/// One key pair of an organization: the public key in clear (it ships in clients), the
/// secret key only as its SHA-256.
package struct KeyRecord: Sendable, Hashable {
    package let publicKey: String
    package let secretKeyHash: [UInt8]
    package let organization: String
    package let environment: String
    package var revoked: Bool
    package let createdAt: Int64

    package init(publicKey: String, secretKeyHash: [UInt8], organization: String, environment: String, revoked: Bool, createdAt: Int64) {
        self.publicKey = publicKey
        self.secretKeyHash = secretKeyHash
        self.organization = organization
        self.environment = environment
        self.revoked = revoked
        self.createdAt = createdAt
    }
}

/// What the store remembers of an idempotency key (scoped per organization).
package struct IdempotencyRecord: Sendable, Hashable {
    package enum State: String, Sendable, Hashable { case inFlight = "in_flight", complete }
    package let organization: String
    package let key: String
    package let bodyHash: [UInt8]
    package var state: State
    /// The stored answer (JSON), once complete.
    package var response: [UInt8]?
    package var status: Int?
    package let createdAt: Int64
    package var updatedAt: Int64

    package init(organization: String, key: String, bodyHash: [UInt8], state: State, response: [UInt8]?, status: Int?,
                 createdAt: Int64, updatedAt: Int64) {
        self.organization = organization
        self.key = key
        self.bodyHash = bodyHash
        self.state = state
        self.response = response
        self.status = status
        self.createdAt = createdAt
        self.updatedAt = updatedAt
    }
}

/// One hashed identity component of a visitor (`IdentityComponent` of the report, flattened).
package struct ComponentRecord: Sendable, Hashable {
    /// `hardware` or `instance`.
    package let scope: String
    package let name: String
    package let hash: String

    package init(scope: String, name: String, hash: String) {
        self.scope = scope
        self.name = name
        self.hash = hash
    }
}

/// A device key a visitor is bound to: its RFC 9421 keyid, and when a request first proved it
/// (a signature by it, or a rotation statement by a key already bound).
package struct DeviceKeyRecord: Sendable, Hashable {
    package let keyId: String
    /// Unix seconds; keys are kept oldest-proven first, and the oldest-proven is the one evicted.
    package let firstProvenAt: Int64

    package init(keyId: String, firstProvenAt: Int64) {
        self.keyId = keyId
        self.firstProvenAt = firstProvenAt
    }
}

/// A visitor of an organization.
package struct VisitorRecord: Sendable, Hashable {
    package let id: String
    package let organization: String
    package var instanceId: String?
    package var hardwareId: String?
    package let firstSeen: Int64
    package var lastSeen: Int64
    package var components: [ComponentRecord]
    /// The device keys this visitor is bound to, oldest-proven first (ties by keyid); none: a
    /// visitor first seen unsigned, which no key ever binds.
    package var deviceKeys: [DeviceKeyRecord]
    /// Bytes of the events stored under this visitor, as stored: one device's share of its
    /// organization's quota. Kept by the store (`insertEvent`, `expireEvents`); `putVisitor` never writes it.
    package var eventBytes: Int64

    package init(id: String, organization: String, instanceId: String?, hardwareId: String?, firstSeen: Int64, lastSeen: Int64,
                 components: [ComponentRecord], deviceKeys: [DeviceKeyRecord], eventBytes: Int64 = 0) {
        self.id = id
        self.organization = organization
        self.instanceId = instanceId
        self.hardwareId = hardwareId
        self.firstSeen = firstSeen
        self.lastSeen = lastSeen
        self.components = components
        self.deviceKeys = deviceKeys
        self.eventBytes = eventBytes
    }

    /// Whether a key proved this visitor: only a signature by one of its keys may join it.
    package var isBound: Bool { !deviceKeys.isEmpty }

    package func isBound(to keyId: String) -> Bool { deviceKeys.contains { $0.keyId == keyId } }
}

/// A stored identify event: what `GET /v1/events/{requestId}` returns.
package struct EventRecord: Sendable, Hashable {
    package let requestId: String
    package let organization: String
    package let visitorId: String
    package let receivedAt: Int64
    /// The whole event as JSON (answer, report, signature facts), written once.
    package let document: [UInt8]

    package init(requestId: String, organization: String, visitorId: String, receivedAt: Int64, document: [UInt8]) {
        self.requestId = requestId
        self.organization = organization
        self.visitorId = visitorId
        self.receivedAt = receivedAt
        self.document = document
    }
}

/// The operations of one transaction. Everything the engine and the server keep (idempotency
/// records, in-flight markers, rate-limit counters) goes through here, so several server
/// processes can share one database: no state may live in one process's memory.
package protocol StoreTransaction {
    // Organizations and keys
    func organization(named name: String) throws(StoreError) -> OrganizationRecord?
    /// Creates the organization unless it exists; returns it either way.
    func ensureOrganization(named name: String, now: Int64) throws(StoreError) -> OrganizationRecord
    func setSuspended(_ suspended: Bool, organization name: String) throws(StoreError) -> Bool
    func insertKey(_ key: KeyRecord) throws(StoreError)
    func key(publicKey: String) throws(StoreError) -> KeyRecord?
    func key(secretKeyHash: [UInt8]) throws(StoreError) -> KeyRecord?
    func revokeKey(publicKey: String) throws(StoreError) -> Bool
    func keys(organization: String?) throws(StoreError) -> [KeyRecord]
    /// Sets the organization's own storage quota (nil: back to the server's default).
    func setStorageQuota(_ bytes: Int64?, organization name: String) throws(StoreError) -> Bool
    /// Bytes of event documents stored, per organization that has any.
    func storedBytes() throws(StoreError) -> [String: Int64]
    /// The organization's identifier secret (stored identifiers are HMACs under it, never sent
    /// to a client). When it has none yet, `candidate` becomes it; the stored one is returned
    /// either way, so two processes racing to make one agree on the first that landed. nil
    /// when the organization does not exist.
    func identifierSecret(organization: String, candidate: [UInt8]) throws(StoreError) -> [UInt8]?
    /// Rewrites the identifiers and component hashes of every visitor of the organization through
    /// `transform`: once, when its identifier secret is made, for the visitors stored before it had
    /// one. Returns how many visitors it rewrote.
    func rekeyVisitors(organization: String, _ transform: (String) -> String) throws(StoreError) -> Int

    // Idempotency
    func idempotency(organization: String, key: String) throws(StoreError) -> IdempotencyRecord?
    /// Inserts, or replaces a record with the same (organization, key).
    func putIdempotency(_ record: IdempotencyRecord) throws(StoreError)
    func deleteIdempotency(organization: String, key: String) throws(StoreError)
    /// Removes records created before `cutoff`; returns how many.
    func expireIdempotency(createdBefore cutoff: Int64) throws(StoreError) -> Int

    // Visitors
    func visitor(id: String, organization: String) throws(StoreError) -> VisitorRecord?
    /// Visitors of the organization with this instanceId, at most `limit`: the one whose hardwareId
    /// equals `hardwareId` first, then those without a hardwareId, then the most recently seen.
    /// Clones of one image share an instanceId, so a farm can hold thousands of them.
    func visitors(instanceId: String, organization: String, preferringHardwareId hardwareId: String?, limit: Int) throws(StoreError) -> [VisitorRecord]
    /// Visitors of the organization holding any of these component hashes, at most `limit`, those
    /// sharing the most hashes first.
    func visitors(sharingAnyOf hashes: [String], organization: String, limit: Int) throws(StoreError) -> [VisitorRecord]
    /// Inserts or replaces the visitor, its components and device keys, and adds what its rows
    /// cost beyond what they cost before (`StoreLimits.rowBytes`) to the organization's
    /// `storedBytes`: visitors count against the quota as events do. `stored` is the same
    /// visitor as read earlier in this transaction, when it was: only the difference from it is
    /// written, without reading the rows again.
    func putVisitor(_ visitor: VisitorRecord, stored: VisitorRecord?) throws(StoreError)
    /// The most recently seen visitor of the organization bound to this device key that carries
    /// no identifier: the visitor a key that claimed another's identity was settled as.
    func unidentifiedVisitor(boundToKey keyId: String, organization: String) throws(StoreError) -> VisitorRecord?
    func visitors(organization: String, limit: Int) throws(StoreError) -> [VisitorRecord]
    /// Holds, until this transaction ends, a lock on one host's identity in the organization
    /// (`key`: its instanceId, else its hardwareId), so that concurrent first reports of one host,
    /// even through different processes, resolve one after the other and make one visitor.
    func lockIdentity(organization: String, key: String) throws(StoreError)
    /// Removes visitors last seen before `cutoff` with their components and device keys
    /// (retention) and takes their rows' cost (`StoreLimits.rowBytes`) off their organizations'
    /// `storedBytes`; returns how many.
    func expireVisitors(lastSeenBefore cutoff: Int64) throws(StoreError) -> Int

    // Events
    /// Stores the event and adds its size as stored to its organization's `storedBytes` and to
    /// its visitor's `eventBytes`.
    func insertEvent(_ event: EventRecord) throws(StoreError)
    func event(requestId: String, organization: String) throws(StoreError) -> EventRecord?
    func eventCount(organization: String?) throws(StoreError) -> Int
    /// Removes events received before `cutoff` (retention) and takes their size off their
    /// organizations' `storedBytes` and their visitors' `eventBytes`; returns how many.
    func expireEvents(receivedBefore cutoff: Int64) throws(StoreError) -> Int

    // Rate limits
    /// Adds one to the counter of `bucket` (a key and a window) and returns the new count.
    func incrementCounter(bucket: String, window: Int64) throws(StoreError) -> Int
    func expireCounters(windowsBefore cutoff: Int64) throws(StoreError) -> Int
}

extension StoreTransaction {
    /// Visitors with this instanceId, at most 64, most recently seen first.
    package func visitors(instanceId: String, organization: String) throws(StoreError) -> [VisitorRecord] {
        try visitors(instanceId: instanceId, organization: organization, preferringHardwareId: nil, limit: 64)
    }

    /// Inserts or replaces the visitor, reading what is stored of it first.
    package func putVisitor(_ visitor: VisitorRecord) throws(StoreError) {
        try putVisitor(visitor, stored: nil)
    }
}

/// A database the engine and the server keep their state in: SQLite here, PostgreSQL next.
package protocol IdentityStore: Sendable {
    /// Runs `body` in one transaction: all of its writes land, or none. Transient conflicts
    /// (busy, serialization) are retried by the store a bounded number of times, running `body`
    /// again: it must have no effect outside the store. Other requests may wait while it runs, so
    /// decoding, scoring and encoding belong outside it.
    func transaction<Result>(_ body: (any StoreTransaction) throws(StoreError) -> Result) throws(StoreError) -> Result

    /// How many transactions each commit carried, where the store groups them (SQLite); nil
    /// where every transaction commits alone.
    var groupCommits: GroupCommitCounts? { get }
}

extension IdentityStore {
    package var groupCommits: GroupCommitCounts? { nil }
}

/// Commits by how many transactions each carried: a histogram over powers of two.
package struct GroupCommitCounts: Sendable, Hashable {
    /// Upper bounds of the buckets; a commit of more than the last is counted in the last.
    package static let bounds = [1, 2, 4, 8, 16, 32]
    /// Commits with at most `bounds[i]` transactions (and more than the bound before).
    package private(set) var commits = [Int](repeating: 0, count: bounds.count)
    /// Transactions carried in all.
    package private(set) var transactions = 0

    package init() {}

    package mutating func add(batchOf size: Int) {
        let bucket = Self.bounds.firstIndex { size <= $0 } ?? Self.bounds.count - 1
        commits[bucket] += 1
        transactions += size
    }
}
