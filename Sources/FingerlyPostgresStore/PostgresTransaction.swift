import FingerlyStore


/// The operations of one PostgreSQL transaction; valid only inside the closure it was handed to.
///
/// READ COMMITTED with row locks where a read decides a write (PostgresStore says why):
/// an idempotency record is read FOR UPDATE, and a key read as absent is then INSERTed without
/// ON CONFLICT, so when two instances race on one new key the loser's insert waits for the
/// winner's commit, fails with unique_violation, and the store runs the transaction again; the
/// second run reads the winner's marker.
final class PostgresTransaction: StoreTransaction {
    private let connection: PostgresConnection
    var isOpen = true
    /// Idempotency keys (organization NUL key) this transaction read and found absent.
    private var absentIdempotency: Set<String> = []

    init(connection: PostgresConnection) {
        self.connection = connection
    }

    private func open() throws(StoreError) -> PostgresConnection {
        guard isOpen else { throw StoreError("a store transaction was used after it ended") }
        return connection
    }

    /// Rows one sweep statement deletes at most: a sweep never holds many row locks at once.
    private static let sweepBatch: Int64 = 1_000

    // MARK: Organizations and keys

    func organization(named name: String) throws(StoreError) -> OrganizationRecord? {
        try open().query("""
            SELECT name, suspended, created_at, storage_quota,
                   (SELECT coalesce(sum(bytes), 0) FROM storage_usage WHERE organization = $1)
            FROM organizations WHERE name = $1
            """, [.text(name)]) {
            OrganizationRecord(name: $0.text(0), suspended: $0.boolean(1), createdAt: $0.integer(2), storedBytes: $0.integer(4),
                               storageQuota: $0.optionalInteger(3))
        }.first
    }

    func setStorageQuota(_ bytes: Int64?, organization name: String) throws(StoreError) -> Bool {
        try open().execute("UPDATE organizations SET storage_quota = $1 WHERE name = $2",
                           [bytes.map(PostgresValue.integer) ?? .null, .text(name)]) > 0
    }

    func storedBytes() throws(StoreError) -> [String: Int64] {
        let rows = try open().query("SELECT organization, sum(bytes) FROM storage_usage GROUP BY organization", []) {
            ($0.text(0), $0.integer(1))
        }
        return Dictionary(rows, uniquingKeysWith: +)
    }

    /// Slots of one organization's stored bytes: concurrent identify transactions of one
    /// organization each lock one row until they commit, and spread over these rarely meet.
    static let storageUsageSlots = 16

    func ensureOrganization(named name: String, now: Int64) throws(StoreError) -> OrganizationRecord {
        try open().execute("INSERT INTO organizations (name, suspended, created_at) VALUES ($1, FALSE, $2) ON CONFLICT (name) DO NOTHING",
                           [.text(name), .integer(now)])
        guard let organization = try organization(named: name) else { throw StoreError("an organization vanished while created") }
        return organization
    }

    func setSuspended(_ suspended: Bool, organization name: String) throws(StoreError) -> Bool {
        try open().execute("UPDATE organizations SET suspended = $1 WHERE name = $2", [.boolean(suspended), .text(name)]) > 0
    }

    private static let keyColumns = "public_key, secret_key_hash, organization, environment, revoked, created_at"

    private static func key(_ row: PostgresRow) -> KeyRecord {
        KeyRecord(publicKey: row.text(0), secretKeyHash: row.bytes(1), organization: row.text(2), environment: row.text(3),
                  revoked: row.boolean(4), createdAt: row.integer(5))
    }

    func insertKey(_ key: KeyRecord) throws(StoreError) {
        try open().execute("INSERT INTO keys (\(Self.keyColumns)) VALUES ($1, $2, $3, $4, $5, $6)",
                           [.text(key.publicKey), .bytes(key.secretKeyHash), .text(key.organization), .text(key.environment),
                            .boolean(key.revoked), .integer(key.createdAt)])
    }

    func key(publicKey: String) throws(StoreError) -> KeyRecord? {
        try open().query("SELECT \(Self.keyColumns) FROM keys WHERE public_key = $1", [.text(publicKey)], row: Self.key).first
    }

    func key(secretKeyHash: [UInt8]) throws(StoreError) -> KeyRecord? {
        try open().query("SELECT \(Self.keyColumns) FROM keys WHERE secret_key_hash = $1", [.bytes(secretKeyHash)], row: Self.key).first
    }

    func revokeKey(publicKey: String) throws(StoreError) -> Bool {
        try open().execute("UPDATE keys SET revoked = TRUE WHERE public_key = $1", [.text(publicKey)]) > 0
    }

    func keys(organization: String?) throws(StoreError) -> [KeyRecord] {
        let limit = Int64(StoreLimits.maximumRows)
        if let organization {
            return try open().query("SELECT \(Self.keyColumns) FROM keys WHERE organization = $1 ORDER BY created_at, public_key LIMIT $2",
                                    [.text(organization), .integer(limit)], row: Self.key)
        }
        return try open().query("SELECT \(Self.keyColumns) FROM keys ORDER BY organization, created_at, public_key LIMIT $1",
                                [.integer(limit)], row: Self.key)
    }

    func identifierSecret(organization: String, candidate: [UInt8]) throws(StoreError) -> [UInt8]? {
        let connection = try open()
        // The UPDATE locks the row: a second instance making a secret at once waits, then finds it set.
        try connection.execute("UPDATE organizations SET identifier_secret = $1 WHERE name = $2 AND identifier_secret IS NULL",
                               [.bytes(candidate), .text(organization)])
        return try connection.query("SELECT identifier_secret FROM organizations WHERE name = $1", [.text(organization)]) {
            $0.optionalBytes(0)
        }.first ?? nil
    }

    func rekeyVisitors(organization: String, _ transform: (String) -> String) throws(StoreError) -> Int {
        let connection = try open()
        let visitors = try connection.query("SELECT id, instance_id, hardware_id FROM visitors WHERE organization = $1",
                                            [.text(organization)]) { ($0.text(0), $0.optionalText(1), $0.optionalText(2)) }
        for (id, instanceId, hardwareId) in visitors {
            try connection.execute("UPDATE visitors SET instance_id = $1, hardware_id = $2 WHERE id = $3",
                                   [.optionalText(instanceId.map(transform)), .optionalText(hardwareId.map(transform)), .text(id)])
        }
        let components = try connection.query("SELECT visitor_id, scope, name, hash FROM visitor_components WHERE organization = $1",
                                              [.text(organization)]) { ($0.text(0), $0.text(1), $0.text(2), $0.text(3)) }
        for (visitor, scope, name, hash) in components {
            try connection.execute("""
                UPDATE visitor_components SET hash = $1 WHERE visitor_id = $2 AND scope = $3 AND name = $4 AND hash = $5
                """, [.text(transform(hash)), .text(visitor), .text(scope), .text(name), .text(hash)])
        }
        return visitors.count
    }

    // MARK: Idempotency

    private static func idempotencyKey(_ organization: String, _ key: String) -> String { organization + "\u{0}" + key }

    func idempotency(organization: String, key: String) throws(StoreError) -> IdempotencyRecord? {
        // FOR UPDATE: the engine writes what it decided from this read; another instance's
        // transaction on the same key waits here instead of deciding from the same old row.
        let record = try open().query("""
            SELECT body_hash, state, response, status, created_at, updated_at, response_encoding FROM idempotency
            WHERE organization = $1 AND key = $2 FOR UPDATE
            """, [.text(organization), .text(key)]) { row throws(StoreError) in
            let stateText = row.text(1)
            guard let state = IdempotencyRecord.State(rawValue: stateText) else {
                throw StoreError("an idempotency record has the unknown state \(stateText)")
            }
            return IdempotencyRecord(organization: organization, key: key, bodyHash: row.bytes(0), state: state,
                                     response: try row.optionalBytes(2).map { (stored) throws(StoreError) in
                                         try StoredBlobCodec.decode(stored, encoding: row.integer(6))
                                     },
                                     status: row.optionalInteger(3).map { Int($0) },
                                     createdAt: row.integer(4), updatedAt: row.integer(5))
        }.first
        let marker = Self.idempotencyKey(organization, key)
        if record == nil { absentIdempotency.insert(marker) } else { absentIdempotency.remove(marker) }
        return record
    }

    func putIdempotency(_ record: IdempotencyRecord) throws(StoreError) {
        let connection = try open()
        // This backend writes plain; an upsert over a row holding LZ4 (copied from SQLite) must
        // say so too, or the next read would decode plain JSON as a block.
        let values: [PostgresValue] = [.text(record.organization), .text(record.key), .bytes(record.bodyHash), .text(record.state.rawValue),
                                       .optionalBytes(record.response), .optionalInteger(record.status), .integer(record.createdAt),
                                       .integer(record.updatedAt), .integer(StoredBlobCodec.Encoding.plain.rawValue)]
        let marker = Self.idempotencyKey(record.organization, record.key)
        if absentIdempotency.contains(marker) {
            // Read as absent: the unique (organization, key) decides between two instances given
            // the same key at once. ON CONFLICT DO NOTHING waits for the other insert to commit and
            // then writes nothing; this transaction runs again, reads the other's marker and
            // answers 409 or the replay, never overwriting it.
            let inserted = try connection.execute("""
                INSERT INTO idempotency (organization, key, body_hash, state, response, status, created_at, updated_at, response_encoding)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
                ON CONFLICT (organization, key) DO NOTHING
                """, values)
            guard inserted == 1 else { throw StoreError("another transaction stored the same idempotency key", isTransient: true) }
            absentIdempotency.remove(marker)
            return
        }
        try connection.execute("""
            INSERT INTO idempotency (organization, key, body_hash, state, response, status, created_at, updated_at, response_encoding)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
            ON CONFLICT (organization, key) DO UPDATE SET body_hash = excluded.body_hash, state = excluded.state,
                response = excluded.response, status = excluded.status, created_at = excluded.created_at, updated_at = excluded.updated_at,
                response_encoding = excluded.response_encoding
            """, values)
    }

    func deleteIdempotency(organization: String, key: String) throws(StoreError) {
        try open().execute("DELETE FROM idempotency WHERE organization = $1 AND key = $2", [.text(organization), .text(key)])
        absentIdempotency.remove(Self.idempotencyKey(organization, key))
    }

    /// Safe on every instance at once: rows another sweep holds are skipped, not waited for.
    func expireIdempotency(createdBefore cutoff: Int64) throws(StoreError) -> Int {
        try sweep("""
            DELETE FROM idempotency WHERE (organization, key) IN (
                SELECT organization, key FROM idempotency WHERE created_at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)
            """, cutoff)
    }

    private func sweep(_ sql: String, _ cutoff: Int64) throws(StoreError) -> Int {
        let connection = try open()
        var total = 0
        while true {
            let deleted = try connection.execute(sql, [.integer(cutoff), .integer(Self.sweepBatch)])
            total += deleted
            if Int64(deleted) < Self.sweepBatch { return total }
        }
    }

    // MARK: Visitors

    private static let visitorColumns = "id, organization, instance_id, hardware_id, first_seen, last_seen, event_bytes"

    private func visitors(_ sql: String, _ values: [PostgresValue]) throws(StoreError) -> [VisitorRecord] {
        let connection = try open()
        let rows = try connection.query(sql, values) {
            VisitorRecord(id: $0.text(0), organization: $0.text(1), instanceId: $0.optionalText(2), hardwareId: $0.optionalText(3),
                          firstSeen: $0.integer(4), lastSeen: $0.integer(5), components: [], deviceKeys: [],
                          eventBytes: $0.integer(6))
        }
        return try rows.map { visitor throws(StoreError) in
            var visitor = visitor
            visitor.components = try connection.query(
                "SELECT scope, name, hash FROM visitor_components WHERE visitor_id = $1 ORDER BY scope, name, hash",
                [.text(visitor.id)]) { ComponentRecord(scope: $0.text(0), name: $0.text(1), hash: $0.text(2)) }
            visitor.deviceKeys = try connection.query(
                "SELECT key_id, first_proven_at FROM visitor_device_keys WHERE visitor_id = $1 ORDER BY first_proven_at, key_id",
                [.text(visitor.id)]) { DeviceKeyRecord(keyId: $0.text(0), firstProvenAt: $0.integer(1)) }
            return visitor
        }
    }

    func visitor(id: String, organization: String) throws(StoreError) -> VisitorRecord? {
        try visitors("SELECT \(Self.visitorColumns) FROM visitors WHERE id = $1 AND organization = $2", [.text(id), .text(organization)]).first
    }

    func visitors(instanceId: String, organization: String, preferringHardwareId hardwareId: String?, limit: Int) throws(StoreError) -> [VisitorRecord] {
        try visitors("""
            SELECT \(Self.visitorColumns) FROM visitors WHERE organization = $1 AND instance_id = $2
            ORDER BY CASE WHEN hardware_id = $3::text THEN 0 WHEN hardware_id IS NULL THEN 1 ELSE 2 END, last_seen DESC, id
            LIMIT $4
            """, [.text(organization), .text(instanceId), .optionalText(hardwareId), .integer(StoreLimits.clamped(limit))])
    }

    func visitors(sharingAnyOf hashes: [String], organization: String, limit: Int) throws(StoreError) -> [VisitorRecord] {
        guard let list = try StoreLimits.lookupList(hashes, limit: limit) else { return [] }
        return try visitors("""
            SELECT \(Self.visitorColumns) FROM visitors JOIN (
                SELECT visitor_id, COUNT(*) AS shared FROM visitor_components
                WHERE organization = $1 AND hash IN (SELECT jsonb_array_elements_text($2::jsonb))
                GROUP BY visitor_id ORDER BY shared DESC, visitor_id LIMIT $3
            ) AS matches ON matches.visitor_id = visitors.id
            WHERE visitors.organization = $1
            ORDER BY matches.shared DESC, visitors.id
            """, [.text(organization), .text(list), .integer(StoreLimits.clamped(limit))])
    }

    func putVisitor(_ visitor: VisitorRecord, stored previous: VisitorRecord?) throws(StoreError) {
        let connection = try open()
        try VisitorRowChanges.check(visitor)
        let touched = try connection.execute("""
            UPDATE visitors SET first_seen = $1, last_seen = $2
            WHERE id = $3 AND organization = $4 AND instance_id IS NOT DISTINCT FROM $5::text AND hardware_id IS NOT DISTINCT FROM $6::text
            """, [.integer(visitor.firstSeen), .integer(visitor.lastSeen), .text(visitor.id), .text(visitor.organization),
                  .optionalText(visitor.instanceId), .optionalText(visitor.hardwareId)])
        var rowCost: Int64 = 0
        if touched == 0 {
            // An id taken by another organization is never overwritten: the WHERE leaves it as it is.
            // xmax is 0 on a row this statement inserted, not on one it updated: a new visitor's row costs.
            let inserted = try connection.query("""
                INSERT INTO visitors (id, organization, instance_id, hardware_id, first_seen, last_seen) VALUES ($1, $2, $3, $4, $5, $6)
                ON CONFLICT (id) DO UPDATE SET instance_id = excluded.instance_id, hardware_id = excluded.hardware_id,
                    first_seen = excluded.first_seen, last_seen = excluded.last_seen
                WHERE visitors.organization = excluded.organization
                RETURNING (xmax = 0)
                """, [.text(visitor.id), .text(visitor.organization), .optionalText(visitor.instanceId), .optionalText(visitor.hardwareId),
                      .integer(visitor.firstSeen), .integer(visitor.lastSeen)]) { $0.boolean(0) }
            guard let new = inserted.first else {
                throw StoreError("visitor id \(visitor.id) belongs to another organization")
            }
            if new { rowCost += StoreLimits.rowBytes(visitors: 1, components: 0, keys: 0) }
        }
        // The UPDATE above locked the visitor's row, but a row read before it (`previous`) may
        // predate another instance's change to the components: inserts skip what is there and
        // deletes of what is gone change nothing, so the difference is still safe to apply.
        let known = VisitorRowChanges.known(previous, for: visitor, updatedInPlace: touched > 0)
        var storedComponents = Set(known?.components ?? [])
        var storedKeys = Set(known?.deviceKeys.map(\.keyId) ?? [])
        if known == nil {
            storedComponents = Set(try connection.query("SELECT scope, name, hash FROM visitor_components WHERE visitor_id = $1", [.text(visitor.id)]) {
                ComponentRecord(scope: $0.text(0), name: $0.text(1), hash: $0.text(2))
            })
            storedKeys = Set(try connection.query("SELECT key_id FROM visitor_device_keys WHERE visitor_id = $1", [.text(visitor.id)]) { $0.text(0) })
        }
        let changes = VisitorRowChanges(visitor, storedComponents: storedComponents, storedKeys: storedKeys)
        // Rows counted as the statements changed them: one another instance wrote or removed first costs nothing twice.
        var components: Int64 = 0, keys: Int64 = 0
        for component in changes.removedComponents {
            components -= Int64(try connection.execute(
                "DELETE FROM visitor_components WHERE visitor_id = $1 AND scope = $2 AND name = $3 AND hash = $4",
                [.text(visitor.id), .text(component.scope), .text(component.name), .text(component.hash)]))
        }
        for component in changes.addedComponents {
            components += Int64(try connection.execute("""
                INSERT INTO visitor_components (visitor_id, organization, scope, name, hash) VALUES ($1, $2, $3, $4, $5)
                ON CONFLICT DO NOTHING
                """, [.text(visitor.id), .text(visitor.organization), .text(component.scope), .text(component.name),
                      .text(component.hash)]))
        }
        for keyId in changes.removedKeys {
            keys -= Int64(try connection.execute("DELETE FROM visitor_device_keys WHERE visitor_id = $1 AND key_id = $2",
                                                 [.text(visitor.id), .text(keyId)]))
        }
        for key in changes.addedKeys {
            keys += Int64(try connection.execute("""
                INSERT INTO visitor_device_keys (visitor_id, key_id, first_proven_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING
                """, [.text(visitor.id), .text(key.keyId), .integer(key.firstProvenAt)]))
        }
        rowCost += StoreLimits.rowBytes(visitors: 0, components: components, keys: keys)
        if rowCost != 0 { try addStoredBytes(rowCost, organization: visitor.organization) }
    }

    func unidentifiedVisitor(boundToKey keyId: String, organization: String) throws(StoreError) -> VisitorRecord? {
        try visitors("""
            SELECT \(Self.visitorColumns) FROM visitors
            WHERE organization = $2 AND instance_id IS NULL AND hardware_id IS NULL
              AND id IN (SELECT visitor_id FROM visitor_device_keys WHERE key_id = $1)
            ORDER BY last_seen DESC, id LIMIT 1
            """, [.text(keyId), .text(organization)]).first
    }

    /// Adds `bytes` to one of the organization's usage slots, chosen at random.
    private func addStoredBytes(_ bytes: Int64, organization: String) throws(StoreError) {
        try open().execute("""
            INSERT INTO storage_usage (organization, slot, bytes) VALUES ($1, $2, $3)
            ON CONFLICT (organization, slot) DO UPDATE SET bytes = storage_usage.bytes + excluded.bytes
            """, [.text(organization), .integer(Int64.random(in: 0..<Int64(Self.storageUsageSlots))), .integer(bytes)])
    }

    func visitors(organization: String, limit: Int) throws(StoreError) -> [VisitorRecord] {
        try visitors("SELECT \(Self.visitorColumns) FROM visitors WHERE organization = $1 ORDER BY last_seen DESC, id LIMIT $2",
                     [.text(organization), .integer(StoreLimits.clamped(limit))])
    }

    /// A transaction-scoped advisory lock on a 64-bit hash of the organization and the key: a
    /// lock, not a unique constraint, because resolution may legitimately make a second visitor
    /// for one instanceId (a cloned image). Two hosts whose keys collide only wait for each other.
    func lockIdentity(organization: String, key: String) throws(StoreError) {
        _ = try open().query("SELECT pg_advisory_xact_lock(hashtextextended($1 || '/' || $2, 0))",
                             [.text(organization), .text(key)]) { _ in () }
    }

    func expireVisitors(lastSeenBefore cutoff: Int64) throws(StoreError) -> Int {
        // Components and device keys go with them (ON DELETE CASCADE); each batch takes its rows'
        // cost off slot 0, counted from the snapshot the DELETE starts from.
        let connection = try open()
        var total = 0
        while true {
            let deleted = try connection.query("""
                WITH doomed AS (
                    SELECT id, organization FROM visitors WHERE last_seen < $1 LIMIT $2 FOR UPDATE SKIP LOCKED),
                costs AS (
                    SELECT organization, count(*) * \(StoreLimits.visitorRowBytes)
                        + coalesce(sum((SELECT count(*) FROM visitor_components AS c WHERE c.visitor_id = d.id)), 0)
                            * \(StoreLimits.componentRowBytes)
                        + coalesce(sum((SELECT count(*) FROM visitor_device_keys AS k WHERE k.visitor_id = d.id)), 0)
                            * \(StoreLimits.deviceKeyRowBytes) AS bytes
                    FROM doomed AS d GROUP BY organization),
                gone AS (DELETE FROM visitors WHERE id IN (SELECT id FROM doomed) RETURNING id),
                taken AS (
                    INSERT INTO storage_usage (organization, slot, bytes)
                    SELECT organization, 0, -bytes FROM costs
                    ON CONFLICT (organization, slot) DO UPDATE SET bytes = storage_usage.bytes + excluded.bytes)
                SELECT count(*) FROM gone
                """, [.integer(cutoff), .integer(Self.sweepBatch)]) { $0.integer(0) }.first ?? 0
            total += Int(deleted)
            if deleted < Self.sweepBatch { return total }
        }
    }

    // MARK: Events

    func insertEvent(_ event: EventRecord) throws(StoreError) {
        try open().execute("INSERT INTO events (request_id, organization, visitor_id, received_at, document) VALUES ($1, $2, $3, $4, $5)",
                           [.text(event.requestId), .text(event.organization), .text(event.visitorId), .integer(event.receivedAt),
                            .bytes(event.document)])
        try addStoredBytes(Int64(event.document.count), organization: event.organization)
        // The visitor's row is locked by this transaction already (putVisitor updated it).
        try open().execute("UPDATE visitors SET event_bytes = event_bytes + $1 WHERE id = $2 AND organization = $3",
                           [.integer(Int64(event.document.count)), .text(event.visitorId), .text(event.organization)])
    }

    func event(requestId: String, organization: String) throws(StoreError) -> EventRecord? {
        try open().query("""
            SELECT visitor_id, received_at, document, document_encoding FROM events WHERE request_id = $1 AND organization = $2
            """, [.text(requestId), .text(organization)]) { (row) throws(StoreError) in
            EventRecord(requestId: requestId, organization: organization, visitorId: row.text(0), receivedAt: row.integer(1),
                        document: try StoredBlobCodec.decode(row.bytes(2), encoding: row.integer(3)))
        }.first
    }

    func eventCount(organization: String?) throws(StoreError) -> Int {
        let counts = if let organization {
            try open().query("SELECT COUNT(*) FROM events WHERE organization = $1", [.text(organization)]) { $0.integer(0) }
        } else {
            try open().query("SELECT COUNT(*) FROM events", []) { $0.integer(0) }
        }
        return Int(counts.first ?? 0)
    }

    func expireEvents(receivedBefore cutoff: Int64) throws(StoreError) -> Int {
        // Each batch takes what it deleted off the organizations' slot 0 in the same statement.
        let connection = try open()
        var total = 0
        while true {
            let deleted = try connection.query("""
                WITH gone AS (
                    DELETE FROM events WHERE request_id IN (
                        SELECT request_id FROM events WHERE received_at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)
                    RETURNING organization, visitor_id, octet_length(document) AS bytes),
                taken AS (
                    INSERT INTO storage_usage (organization, slot, bytes)
                    SELECT organization, 0, -sum(bytes) FROM gone GROUP BY organization
                    ON CONFLICT (organization, slot) DO UPDATE SET bytes = storage_usage.bytes + excluded.bytes),
                shares AS (
                    UPDATE visitors SET event_bytes = greatest(0, visitors.event_bytes - spent.bytes)
                    FROM (SELECT visitor_id, sum(bytes) AS bytes FROM gone GROUP BY visitor_id) AS spent
                    WHERE visitors.id = spent.visitor_id)
                SELECT count(*) FROM gone
                """, [.integer(cutoff), .integer(Self.sweepBatch)]) { $0.integer(0) }.first ?? 0
            total += Int(deleted)
            if deleted < Self.sweepBatch { return total }
        }
    }

    // MARK: Rate limits

    func incrementCounter(bucket: String, window: Int64) throws(StoreError) -> Int {
        let counts = try open().query("""
            INSERT INTO counters (bucket, window_start, count) VALUES ($1, $2, 1)
            ON CONFLICT (bucket, window_start) DO UPDATE SET count = counters.count + 1
            RETURNING count
            """, [.text(bucket), .integer(window)]) { $0.integer(0) }
        guard let count = counts.first else { throw StoreError("a counter increment returned nothing") }
        return Int(count)
    }

    func expireCounters(windowsBefore cutoff: Int64) throws(StoreError) -> Int {
        try sweep("""
            DELETE FROM counters WHERE (bucket, window_start) IN (
                SELECT bucket, window_start FROM counters WHERE window_start < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)
            """, cutoff)
    }
}
