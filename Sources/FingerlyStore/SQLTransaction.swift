/// The operations of one transaction, written once for both databases; valid only inside the
/// closure it was handed to. What the two spell differently is the session's `SQLDialect`.
///
/// Reads that decide a write lock their rows (`SQLDialect.lockForUpdate`), and a key read as
/// absent is inserted with ON CONFLICT DO NOTHING: when two PostgreSQL instances race on one new
/// idempotency key, the loser's insert waits for the winner's commit and writes nothing, its
/// transaction fails as transient and runs again, and the second run reads the winner's marker.
/// Under SQLite's single writer the race cannot happen and the same statements serve.
package final class SQLTransaction<Session: SQLSession>: StoreTransaction {
    private let session: Session
    private let dialect: SQLDialect
    package var isOpen = true
    /// Idempotency keys (organization NUL key) this transaction read and found absent.
    private var absentIdempotency: Set<String> = []

    package init(session: Session) {
        self.session = session
        dialect = session.dialect
    }

    private func open() throws(StoreError) -> Session {
        guard isOpen else { throw StoreError("a store transaction was used after it ended") }
        return session
    }

    /// Rows one sweep statement takes at most: no statement of a sweep reads or deletes more, and
    /// no list bound as a parameter holds more. (A sweep's batches share its transaction: the row
    /// locks add up until it commits.)
    package static var sweepBatch: Int64 { 1_000 }

    // MARK: Organizations and keys

    package func organization(named name: String) throws(StoreError) -> OrganizationRecord? {
        try open().query(
            """
            SELECT name, suspended, created_at, storage_quota,
                   (SELECT coalesce(sum(bytes), 0) FROM storage_usage WHERE organization = $1)
            FROM organizations WHERE name = $1
            """, [.text(name)]
        ) {
            OrganizationRecord(
                name: $0.text(0), suspended: $0.boolean(1), createdAt: $0.integer(2), storedBytes: $0.integer(4),
                storageQuota: $0.optionalInteger(3))
        }.first
    }

    package func setStorageQuota(_ bytes: Int64?, organization name: String) throws(StoreError) -> Bool {
        try open().execute(
            "UPDATE organizations SET storage_quota = $1 WHERE name = $2",
            [.optionalInteger(bytes), .text(name)]) > 0
    }

    package func storedBytes() throws(StoreError) -> [String: Int64] {
        let rows = try open().query("SELECT organization, sum(bytes) FROM storage_usage GROUP BY organization", []) {
            ($0.text(0), $0.integer(1))
        }
        return Dictionary(rows, uniquingKeysWith: +)
    }

    /// The usage slot this transaction adds to, chosen once: with one slot a transaction it holds
    /// at most one usage row, so two requests never take two rows in opposite orders; slot 0 is
    /// the sweeps' alone where there are several, so a sweep (which locks visitors and then
    /// slot 0) and a request (a visitor, then its slot) never wait for each other in a circle.
    private lazy var requestSlot: Int64 = {
        let slots = Int64(dialect.storageUsageSlots)
        return slots > 1 ? Int64.random(in: 1..<slots) : 0
    }()

    /// Adds `bytes` to the organization's usage: this transaction's slot for a request, so
    /// concurrent ones rarely wait for each other's row; slot 0 for a sweep.
    private func addStoredBytes(_ bytes: Int64, organization: String, randomSlot: Bool = true) throws(StoreError) {
        let slot = randomSlot ? requestSlot : 0
        try open().execute(
            """
            INSERT INTO storage_usage (organization, slot, bytes) VALUES ($1, $2, $3)
            ON CONFLICT (organization, slot) DO UPDATE SET bytes = storage_usage.bytes + excluded.bytes
            """, [.text(organization), .integer(slot), .integer(bytes)])
    }

    package func ensureOrganization(named name: String, now: Int64) throws(StoreError) -> OrganizationRecord {
        try open().execute(
            """
            INSERT INTO organizations (name, suspended, created_at) VALUES ($1, FALSE, $2) ON CONFLICT (name) DO NOTHING
            """, [.text(name), .integer(now)])
        guard let organization = try organization(named: name) else {
            throw StoreError("an organization vanished while created")
        }
        return organization
    }

    package func setSuspended(_ suspended: Bool, organization name: String) throws(StoreError) -> Bool {
        try open().execute(
            "UPDATE organizations SET suspended = $1 WHERE name = $2", [.boolean(suspended), .text(name)]) > 0
    }

    private static var keyColumns: String {
        "public_key, secret_key_hash, organization, environment, revoked, created_at"
    }

    package func insertKey(_ key: KeyRecord) throws(StoreError) {
        try open().execute(
            "INSERT INTO keys (\(Self.keyColumns)) VALUES ($1, $2, $3, $4, $5, $6)",
            [
                .text(key.publicKey), .bytes(key.secretKeyHash), .text(key.organization), .text(key.environment),
                .boolean(key.revoked), .integer(key.createdAt),
            ])
    }

    package func key(publicKey: String) throws(StoreError) -> KeyRecord? {
        try open().query(
            "SELECT \(Self.keyColumns) FROM keys WHERE public_key = $1", [.text(publicKey)],
            row: { keyRecord($0) }
        ).first
    }

    package func key(secretKeyHash: [UInt8]) throws(StoreError) -> KeyRecord? {
        try open().query(
            "SELECT \(Self.keyColumns) FROM keys WHERE secret_key_hash = $1", [.bytes(secretKeyHash)],
            row: { keyRecord($0) }
        ).first
    }

    package func revokeKey(publicKey: String) throws(StoreError) -> Bool {
        try open().execute("UPDATE keys SET revoked = TRUE WHERE public_key = $1", [.text(publicKey)]) > 0
    }

    /// At most `StoreLimits.maximumRows`, oldest first.
    package func keys(organization: String?) throws(StoreError) -> [KeyRecord] {
        let limit = Int64(StoreLimits.maximumRows)
        if let organization {
            return try open().query(
                """
                SELECT \(Self.keyColumns) FROM keys WHERE organization = $1 ORDER BY created_at, public_key LIMIT $2
                """, [.text(organization), .integer(limit)], row: { keyRecord($0) })
        }
        return try open().query(
            "SELECT \(Self.keyColumns) FROM keys ORDER BY organization, created_at, public_key LIMIT $1",
            [.integer(limit)], row: { keyRecord($0) })
    }

    package func identifierSecret(organization: String, candidate: [UInt8]) throws(StoreError) -> [UInt8]? {
        let session = try open()
        // The UPDATE locks the row: a second instance making a secret at once waits, then finds it set.
        try session.execute(
            "UPDATE organizations SET identifier_secret = $1 WHERE name = $2 AND identifier_secret IS NULL",
            [.bytes(candidate), .text(organization)])
        return try session.query("SELECT identifier_secret FROM organizations WHERE name = $1", [.text(organization)]) {
            $0.optionalBytes(0)
        }.first ?? nil
    }

    package func rekeyVisitors(organization: String, _ transform: (String) -> String) throws(StoreError) -> Int {
        let session = try open()
        let visitors = try session.query(
            "SELECT id, instance_id, hardware_id FROM visitors WHERE organization = $1",
            [.text(organization)]
        ) { ($0.text(0), $0.optionalText(1), $0.optionalText(2)) }
        for (id, instanceId, hardwareId) in visitors {
            try session.execute(
                "UPDATE visitors SET instance_id = $1, hardware_id = $2 WHERE id = $3",
                [.optionalText(instanceId.map(transform)), .optionalText(hardwareId.map(transform)), .text(id)])
        }
        let components = try session.query(
            """
            SELECT visitor_id, scope, name, hash FROM visitor_components WHERE organization = $1
            """, [.text(organization)]
        ) { ($0.text(0), $0.text(1), $0.text(2), $0.text(3)) }
        for (visitor, scope, name, hash) in components {
            try session.execute(
                """
                UPDATE visitor_components SET hash = $1 WHERE visitor_id = $2 AND scope = $3 AND name = $4 AND hash = $5
                """, [.text(transform(hash)), .text(visitor), .text(scope), .text(name), .text(hash)])
        }
        return visitors.count
    }

    // MARK: Idempotency

    private static func idempotencyMarker(_ organization: String, _ key: String) -> String {
        organization + "\u{0}" + key
    }

    package func idempotency(organization: String, key: String) throws(StoreError) -> IdempotencyRecord? {
        // Locked: the engine writes what it decided from this read, and another instance's
        // transaction on the same key waits here instead of deciding from the same old row.
        let record = try open().query(
            """
            SELECT body_hash, state, response, status, created_at, updated_at, response_encoding FROM idempotency
            WHERE organization = $1 AND key = $2
            """ + dialect.lockForUpdate, [.text(organization), .text(key)]
        ) { row throws(StoreError) in
            let stateText = row.text(1)
            guard let state = IdempotencyRecord.State(rawValue: stateText) else {
                throw StoreError("an idempotency record has the unknown state \(stateText)")
            }
            return IdempotencyRecord(
                organization: organization, key: key, bodyHash: row.bytes(0), state: state,
                response: try row.optionalBytes(2).map { (stored) throws(StoreError) in
                    try StoredBlobCodec.decode(stored, encoding: row.integer(6))
                },
                status: row.optionalInteger(3).map { Int($0) },
                createdAt: row.integer(4), updatedAt: row.integer(5))
        }.first
        let marker = Self.idempotencyMarker(organization, key)
        if record == nil { absentIdempotency.insert(marker) } else { absentIdempotency.remove(marker) }
        return record
    }

    package func putIdempotency(_ record: IdempotencyRecord) throws(StoreError) {
        let session = try open()
        let response = record.response.map { session.storedForm($0) }
        let values: [SQLValue] = [
            .text(record.organization), .text(record.key), .bytes(record.bodyHash),
            .text(record.state.rawValue), .optionalBytes(response?.bytes), .optionalInteger(record.status),
            .integer(record.createdAt), .integer(record.updatedAt),
            .integer((response?.encoding ?? .plain).rawValue),
        ]
        let marker = Self.idempotencyMarker(record.organization, record.key)
        if absentIdempotency.contains(marker) {
            // Read as absent: the unique (organization, key) decides between two instances given
            // the same key at once, and the loser never overwrites the winner's marker.
            let inserted = try session.execute(
                """
                INSERT INTO idempotency (organization, key, body_hash, state, response, status, created_at, updated_at,
                                         response_encoding)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
                ON CONFLICT (organization, key) DO NOTHING
                """, values)
            guard inserted == 1 else {
                throw StoreError("another transaction stored the same idempotency key", isTransient: true)
            }
            absentIdempotency.remove(marker)
            return
        }
        try session.execute(
            """
            INSERT INTO idempotency (organization, key, body_hash, state, response, status, created_at, updated_at,
                                     response_encoding)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
            ON CONFLICT (organization, key) DO UPDATE SET body_hash = excluded.body_hash, state = excluded.state,
                response = excluded.response, status = excluded.status, created_at = excluded.created_at,
                updated_at = excluded.updated_at, response_encoding = excluded.response_encoding
            """, values)
    }

    package func deleteIdempotency(organization: String, key: String) throws(StoreError) {
        try open().execute(
            "DELETE FROM idempotency WHERE organization = $1 AND key = $2", [.text(organization), .text(key)])
        absentIdempotency.remove(Self.idempotencyMarker(organization, key))
    }

    /// Safe on every instance at once: rows another sweep holds are skipped, not waited for.
    package func expireIdempotency(createdBefore cutoff: Int64) throws(StoreError) -> Int {
        try sweep(
            """
            DELETE FROM idempotency WHERE (organization, key) IN (
                SELECT organization, key FROM idempotency WHERE created_at < $1 LIMIT $2
            """ + dialect.lockSkippingLocked + ")", cutoff)
    }

    /// Runs a batched DELETE (`$1` the cutoff, `$2` the batch) until a batch comes back short.
    private func sweep(_ sql: String, _ cutoff: Int64) throws(StoreError) -> Int {
        let session = try open()
        var total = 0
        while true {
            let deleted = try session.execute(sql, [.integer(cutoff), .integer(Self.sweepBatch)])
            total += deleted
            if Int64(deleted) < Self.sweepBatch { return total }
        }
    }

    // MARK: Visitors

    private static var visitorColumns: String {
        "id, organization, instance_id, hardware_id, first_seen, last_seen, event_bytes"
    }

    /// The visitor rows, each completed with its components and device keys.
    private func visitors(_ sql: String, _ values: [SQLValue]) throws(StoreError) -> [VisitorRecord] {
        let session = try open()
        let rows = try session.query(sql, values) {
            VisitorRecord(
                id: $0.text(0), organization: $0.text(1), instanceId: $0.optionalText(2),
                hardwareId: $0.optionalText(3),
                firstSeen: $0.integer(4), lastSeen: $0.integer(5), components: [], deviceKeys: [],
                eventBytes: $0.integer(6))
        }
        return try rows.map { visitor throws(StoreError) in
            var visitor = visitor
            visitor.components = try session.query(
                "SELECT scope, name, hash FROM visitor_components WHERE visitor_id = $1 ORDER BY scope, name, hash",
                [.text(visitor.id)]
            ) { ComponentRecord(scope: $0.text(0), name: $0.text(1), hash: $0.text(2)) }
            visitor.deviceKeys = try session.query(
                """
                SELECT key_id, first_proven_at FROM visitor_device_keys WHERE visitor_id = $1
                ORDER BY first_proven_at, key_id
                """,
                [.text(visitor.id)]
            ) { DeviceKeyRecord(keyId: $0.text(0), firstProvenAt: $0.integer(1)) }
            return visitor
        }
    }

    package func visitor(id: String, organization: String) throws(StoreError) -> VisitorRecord? {
        try visitors(
            "SELECT \(Self.visitorColumns) FROM visitors WHERE id = $1 AND organization = $2",
            [.text(id), .text(organization)]
        ).first
    }

    package func visitors(
        instanceId: String, organization: String, preferringHardwareId hardwareId: String?,
        limit: Int
    ) throws(StoreError) -> [VisitorRecord] {
        try visitors(
            """
            SELECT \(Self.visitorColumns) FROM visitors WHERE organization = $1 AND instance_id = $2
            ORDER BY CASE WHEN hardware_id = CAST($3 AS TEXT) THEN 0 WHEN hardware_id IS NULL THEN 1 ELSE 2 END,
                     last_seen DESC, id
            LIMIT $4
            """,
            [.text(organization), .text(instanceId), .optionalText(hardwareId), .integer(StoreLimits.clamped(limit))])
    }

    package func visitors(
        sharingAnyOf hashes: [String], organization: String, limit: Int
    ) throws(StoreError) -> [VisitorRecord] {
        guard let list = try StoreLimits.lookupList(hashes, limit: limit) else { return [] }
        return try visitors(
            """
            SELECT \(Self.visitorColumns) FROM visitors JOIN (
                SELECT visitor_id, COUNT(*) AS shared FROM visitor_components
                WHERE organization = $1 AND hash IN (\(dialect.textsOfJSONArray("$2")))
                GROUP BY visitor_id ORDER BY shared DESC, visitor_id LIMIT $3
            ) AS matches ON matches.visitor_id = visitors.id
            WHERE visitors.organization = $1
            ORDER BY matches.shared DESC, visitors.id
            """, [.text(organization), .text(list), .integer(StoreLimits.clamped(limit))])
    }

    package func putVisitor(_ visitor: VisitorRecord, stored previous: VisitorRecord?) throws(StoreError) {
        let session = try open()
        try VisitorRowChanges.check(visitor)
        let write = try writeVisitorRow(visitor, previous: previous)
        var rowCost: Int64 = write == .inserted ? StoreLimits.rowBytes(visitors: 1, components: 0, keys: 0) : 0
        // Only the difference is written: a returning visitor's components rarely change. Under
        // PostgreSQL a row read before this transaction's UPDATE locked it (`previous`) may
        // predate another instance's change to the components: inserts skip what is there and
        // deletes of what is gone change nothing, so the difference is still safe to apply.
        let known =
            write == .inserted
            ? nil : VisitorRowChanges.known(previous, for: visitor, updatedInPlace: write == .seenTimes)
        var storedComponents = Set(known?.components ?? [])
        var storedKeys = Set(known?.deviceKeys.map(\.keyId) ?? [])
        if known == nil, write != .inserted {
            storedComponents = Set(
                try session.query(
                    """
                    SELECT scope, name, hash FROM visitor_components WHERE visitor_id = $1
                    """, [.text(visitor.id)]
                ) { ComponentRecord(scope: $0.text(0), name: $0.text(1), hash: $0.text(2)) })
            storedKeys = Set(
                try session.query(
                    "SELECT key_id FROM visitor_device_keys WHERE visitor_id = $1",
                    [.text(visitor.id)]
                ) { $0.text(0) })
        }
        let changes = VisitorRowChanges(visitor, storedComponents: storedComponents, storedKeys: storedKeys)
        // Rows counted as the statements changed them: one another instance wrote or removed
        // first costs nothing twice.
        var components: Int64 = 0
        var keys: Int64 = 0
        for component in changes.removedComponents {
            components -= Int64(
                try session.execute(
                    "DELETE FROM visitor_components WHERE visitor_id = $1 AND scope = $2 AND name = $3 AND hash = $4",
                    [.text(visitor.id), .text(component.scope), .text(component.name), .text(component.hash)]))
        }
        components += Int64(try insertComponents(changes.addedComponents, of: visitor))
        for keyId in changes.removedKeys {
            keys -= Int64(
                try session.execute(
                    "DELETE FROM visitor_device_keys WHERE visitor_id = $1 AND key_id = $2",
                    [.text(visitor.id), .text(keyId)]))
        }
        for key in changes.addedKeys {
            keys += Int64(
                try session.execute(
                    """
                    INSERT INTO visitor_device_keys (visitor_id, key_id, first_proven_at) VALUES ($1, $2, $3)
                    ON CONFLICT DO NOTHING
                    """, [.text(visitor.id), .text(key.keyId), .integer(key.firstProvenAt)]))
        }
        // A returning visitor whose rows did not change costs no write here.
        rowCost += StoreLimits.rowBytes(visitors: 0, components: components, keys: keys)
        if rowCost != 0 { try addStoredBytes(rowCost, organization: visitor.organization) }
    }

    /// How the visitor's own row was written.
    private enum VisitorRowWrite {
        /// Only its seen times changed: the row held `previous`'s identifiers.
        case seenTimes
        /// Every column rewritten.
        case rewritten
        /// A new row.
        case inserted
    }

    /// One statement in the common cases: the seen times of a returning visitor read in this
    /// transaction (which leaves the instance_id index page clean, one WAL frame fewer), an
    /// INSERT for a new one. An id another organization holds is never overwritten.
    private func writeVisitorRow(
        _ visitor: VisitorRecord, previous: VisitorRecord?
    ) throws(StoreError) -> VisitorRowWrite {
        let session = try open()
        let row: [SQLValue] = [
            .text(visitor.id), .text(visitor.organization), .optionalText(visitor.instanceId),
            .optionalText(visitor.hardwareId), .integer(visitor.firstSeen), .integer(visitor.lastSeen),
        ]
        let insert =
            "INSERT INTO visitors (id, organization, instance_id, hardware_id, first_seen, last_seen) "
            + "VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (id) DO NOTHING"
        let rewrite =
            "UPDATE visitors SET instance_id = $3, hardware_id = $4, first_seen = $5, last_seen = $6 "
            + "WHERE id = $1 AND organization = $2"
        guard let previous, previous.id == visitor.id, previous.organization == visitor.organization else {
            // Not read here: most likely a visitor just made.
            if try session.execute(insert, row) == 1 { return .inserted }
            guard try session.execute(rewrite, row) == 1 else {
                throw StoreError("visitor id \(visitor.id) belongs to another organization")
            }
            return .rewritten
        }
        if previous.instanceId == visitor.instanceId, previous.hardwareId == visitor.hardwareId {
            let touched = try session.execute(
                """
                UPDATE visitors SET first_seen = $5, last_seen = $6
                WHERE id = $1 AND organization = $2
                  AND instance_id IS NOT DISTINCT FROM CAST($3 AS TEXT)
                  AND hardware_id IS NOT DISTINCT FROM CAST($4 AS TEXT)
                """, row)
            if touched == 1 { return .seenTimes }
        }
        if try session.execute(rewrite, row) == 1 { return .rewritten }
        // Gone since it was read (a retention sweep on another instance): made again.
        guard try session.execute(insert, row) == 1 else {
            throw StoreError("visitor id \(visitor.id) belongs to another organization")
        }
        return .inserted
    }

    /// Component rows a statement inserts at most: a new visitor's few dozen go in a handful of
    /// statements rather than one each, and each row count is one prepared statement.
    private static var componentsPerInsert: Int { 8 }

    /// Inserts the components in statements of up to `componentsPerInsert` rows each; returns
    /// how many rows were new.
    private func insertComponents(
        _ components: Set<ComponentRecord>, of visitor: VisitorRecord
    ) throws(StoreError) -> Int {
        let session = try open()
        let ordered = components.sorted { ($0.scope, $0.name, $0.hash) < ($1.scope, $1.name, $1.hash) }
        var inserted = 0
        var start = 0
        while start < ordered.count {
            let batch = ordered[start..<min(start + Self.componentsPerInsert, ordered.count)]
            var values: [SQLValue] = [.text(visitor.id), .text(visitor.organization)]
            var rows: [String] = []
            for component in batch {
                let first = values.count + 1
                rows.append("($1, $2, $\(first), $\(first + 1), $\(first + 2))")
                values += [.text(component.scope), .text(component.name), .text(component.hash)]
            }
            inserted += try session.execute(
                "INSERT INTO visitor_components (visitor_id, organization, scope, name, hash) VALUES "
                    + rows.joined(separator: ", ") + " ON CONFLICT DO NOTHING", values)
            start += batch.count
        }
        return inserted
    }

    package func unidentifiedVisitor(
        boundToKey keyId: String, organization: String
    ) throws(StoreError) -> VisitorRecord? {
        try visitors(
            """
            SELECT \(Self.visitorColumns) FROM visitors
            WHERE organization = $2 AND instance_id IS NULL AND hardware_id IS NULL
              AND id IN (SELECT visitor_id FROM visitor_device_keys WHERE key_id = $1)
            ORDER BY last_seen DESC, id LIMIT 1
            """, [.text(keyId), .text(organization)]
        ).first
    }

    package func visitors(organization: String, limit: Int) throws(StoreError) -> [VisitorRecord] {
        try visitors(
            "SELECT \(Self.visitorColumns) FROM visitors WHERE organization = $1 ORDER BY last_seen DESC, id LIMIT $2",
            [.text(organization), .integer(StoreLimits.clamped(limit))])
    }

    package func lockIdentity(organization: String, key: String) throws(StoreError) {
        let session = try open()
        guard let statement = dialect.identityLock else { return }
        _ = try session.query(statement, [.text(organization), .text(key)]) { _ in () }
    }

    /// Batches of visitors last seen before `cutoff`, each with its rows' cost taken off slot 0 of
    /// its organization; components and device keys go with them (ON DELETE CASCADE). Rows are
    /// locked visitors first, usage after, the order a request takes them in, so a sweep and a
    /// request never wait for each other in a circle.
    package func expireVisitors(lastSeenBefore cutoff: Int64) throws(StoreError) -> Int {
        let session = try open()
        var total = 0
        // In the order of the primary key, each batch after the last one's highest id: last_seen has
        // no index (it changes on every identify), and a batch that scanned from the start each
        // time would pass every live visitor again.
        var after = ""
        while true {
            let batch = try session.query(
                """
                SELECT id, organization,
                       (SELECT count(*) FROM visitor_components AS c WHERE c.visitor_id = v.id),
                       (SELECT count(*) FROM visitor_device_keys AS k WHERE k.visitor_id = v.id)
                FROM visitors AS v WHERE last_seen < $1 AND id > $3 ORDER BY id LIMIT $2
                """ + dialect.lockSkippingLocked, [.integer(cutoff), .integer(Self.sweepBatch), .text(after)]
            ) {
                (
                    $0.text(0), $0.text(1),
                    StoreLimits.rowBytes(visitors: 1, components: $0.integer(2), keys: $0.integer(3))
                )
            }
            if batch.isEmpty { return total }
            after = batch[batch.count - 1].0
            let deleted = try session.execute(
                "DELETE FROM visitors WHERE id IN (\(dialect.textsOfJSONArray("$1")))",
                [.text(try StoreLimits.jsonArray(batch.map(\.0)))])
            var costs: [String: Int64] = [:]
            for (_, organization, bytes) in batch { costs[organization, default: 0] += bytes }
            for (organization, bytes) in costs.sorted(by: { $0.key < $1.key }) where bytes != 0 {
                try addStoredBytes(-bytes, organization: organization, randomSlot: false)
            }
            total += deleted
            if Int64(batch.count) < Self.sweepBatch { return total }
        }
    }

    // MARK: Events

    package func insertEvent(_ event: EventRecord) throws(StoreError) {
        let session = try open()
        let document = session.storedForm(event.document)
        // The visitor's row is written (and, under PostgreSQL, locked) already in this transaction.
        try session.execute(
            "UPDATE visitors SET event_bytes = event_bytes + $1 WHERE id = $2 AND organization = $3",
            [.integer(Int64(document.bytes.count)), .text(event.visitorId), .text(event.organization)])
        try addStoredBytes(Int64(document.bytes.count), organization: event.organization)
        try session.execute(
            """
            INSERT INTO events (request_id, organization, visitor_id, received_at, document, document_encoding)
            VALUES ($1, $2, $3, $4, $5, $6)
            """,
            [
                .text(event.requestId), .text(event.organization), .text(event.visitorId), .integer(event.receivedAt),
                .bytes(document.bytes), .integer(document.encoding.rawValue),
            ])
    }

    package func event(requestId: String, organization: String) throws(StoreError) -> EventRecord? {
        try open().query(
            """
            SELECT visitor_id, received_at, document, document_encoding FROM events
            WHERE request_id = $1 AND organization = $2
            """, [.text(requestId), .text(organization)]
        ) { (row) throws(StoreError) in
            EventRecord(
                requestId: requestId, organization: organization, visitorId: row.text(0), receivedAt: row.integer(1),
                document: try StoredBlobCodec.decode(row.bytes(2), encoding: row.integer(3)))
        }.first
    }

    package func eventCount(organization: String?) throws(StoreError) -> Int {
        let counts =
            if let organization {
                try open().query("SELECT COUNT(*) FROM events WHERE organization = $1", [.text(organization)]) {
                    $0.integer(0)
                }
            } else {
                try open().query("SELECT COUNT(*) FROM events", []) { $0.integer(0) }
            }
        return Int(counts.first ?? 0)
    }

    /// Batches of events received before `cutoff`; what each took comes off its visitor's share
    /// first and its organization's slot 0 after (the order `expireVisitors` says why).
    package func expireEvents(receivedBefore cutoff: Int64) throws(StoreError) -> Int {
        let session = try open()
        var total = 0
        while true {
            let batch = try session.query(
                """
                SELECT request_id, organization, visitor_id, length(document) FROM events
                WHERE received_at < $1 LIMIT $2
                """ + dialect.lockSkippingLocked, [.integer(cutoff), .integer(Self.sweepBatch)]
            ) {
                (requestId: $0.text(0), organization: $0.text(1), visitor: $0.text(2), bytes: $0.integer(3))
            }
            if batch.isEmpty { return total }
            var byVisitor: [String: Int64] = [:]
            var byOrganization: [String: Int64] = [:]
            for event in batch {
                byVisitor[event.visitor, default: 0] += event.bytes
                byOrganization[event.organization, default: 0] += event.bytes
            }
            for (visitor, bytes) in byVisitor.sorted(by: { $0.key < $1.key }) {
                try session.execute(
                    """
                    UPDATE visitors SET event_bytes = CASE WHEN event_bytes > $1 THEN event_bytes - $1 ELSE 0 END
                    WHERE id = $2
                    """, [.integer(bytes), .text(visitor)])
            }
            for (organization, bytes) in byOrganization.sorted(by: { $0.key < $1.key }) where bytes != 0 {
                try addStoredBytes(-bytes, organization: organization, randomSlot: false)
            }
            total += try session.execute(
                "DELETE FROM events WHERE request_id IN (\(dialect.textsOfJSONArray("$1")))",
                [.text(try StoreLimits.jsonArray(batch.map(\.requestId)))])
            if Int64(batch.count) < Self.sweepBatch { return total }
        }
    }

    // MARK: Rate limits

    package func incrementCounter(bucket: String, window: Int64) throws(StoreError) -> Int {
        let counts = try open().query(
            """
            INSERT INTO counters (bucket, window_start, count) VALUES ($1, $2, 1)
            ON CONFLICT (bucket, window_start) DO UPDATE SET count = counters.count + 1
            RETURNING count
            """, [.text(bucket), .integer(window)]
        ) { $0.integer(0) }
        guard let count = counts.first else { throw StoreError("a counter increment returned nothing") }
        return Int(count)
    }

    package func expireCounters(windowsBefore cutoff: Int64) throws(StoreError) -> Int {
        try sweep(
            """
            DELETE FROM counters WHERE (bucket, window_start) IN (
                SELECT bucket, window_start FROM counters WHERE window_start < $1 LIMIT $2
            """ + dialect.lockSkippingLocked + ")", cutoff)
    }
}

/// A key's row, in the order of `keyColumns`.
private func keyRecord(_ row: some SQLRow) -> KeyRecord {
    KeyRecord(
        publicKey: row.text(0), secretKeyHash: row.bytes(1), organization: row.text(2), environment: row.text(3),
        revoked: row.boolean(4), createdAt: row.integer(5))
}
