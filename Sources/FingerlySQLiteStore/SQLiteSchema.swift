import FingerlyStore

/// The schema, as numbered migrations. A migration once shipped never changes: a new version
/// appends one. Column types and constraints stay within what PostgreSQL also has, so the next
/// backend can keep the same shape.
enum SQLiteSchema {
    static var latestVersion: Int64 { migrations.latestVersion }

    static let createMigrationTable = SharedMigrations.migrationTable(integer: "INTEGER")

    // WITHOUT ROWID on the tables of small rows keyed by text: the primary key is the table, not a
    // second b-tree beside it, so an insert writes one page fewer. Events keep their rowid: a
    // 20 KB document belongs in overflow pages, not in an index b-tree. Events are read by
    // request_id with the organization in the WHERE clause; the primary key serves that alone,
    // so there is no (organization, request_id) index to write on every insert.
    static let migrations: [SchemaMigration] = [
        SchemaMigration(version: 1, statements: [
            """
            CREATE TABLE organizations (
                name TEXT PRIMARY KEY NOT NULL,
                suspended INTEGER NOT NULL DEFAULT 0,
                created_at INTEGER NOT NULL
            ) WITHOUT ROWID
            """,
            """
            CREATE TABLE keys (
                public_key TEXT PRIMARY KEY NOT NULL,
                secret_key_hash BLOB NOT NULL UNIQUE,
                organization TEXT NOT NULL REFERENCES organizations(name),
                environment TEXT NOT NULL,
                revoked INTEGER NOT NULL DEFAULT 0,
                created_at INTEGER NOT NULL
            )
            """,
            SharedMigrations.keysByOrganization,
            """
            CREATE TABLE idempotency (
                organization TEXT NOT NULL,
                key TEXT NOT NULL,
                body_hash BLOB NOT NULL,
                state TEXT NOT NULL CHECK (state IN ('in_flight', 'complete')),
                response BLOB,
                status INTEGER,
                created_at INTEGER NOT NULL,
                updated_at INTEGER NOT NULL,
                PRIMARY KEY (organization, key)
            ) WITHOUT ROWID
            """,
            // Expiry sweeps by age; without it each sweep reads the whole table under the write lock.
            SharedMigrations.idempotencyByAge,
            """
            CREATE TABLE visitors (
                id TEXT PRIMARY KEY NOT NULL,
                organization TEXT NOT NULL,
                instance_id TEXT,
                hardware_id TEXT,
                first_seen INTEGER NOT NULL,
                last_seen INTEGER NOT NULL
            ) WITHOUT ROWID
            """,
            // No index on last_seen: it changes on every identify, and only an operator's listing sorts by it.
            SharedMigrations.visitorsByInstance,
            // The organization is repeated here so a hash lookup never leaves its organization
            // and the index serves it alone.
            """
            CREATE TABLE visitor_components (
                visitor_id TEXT NOT NULL REFERENCES visitors(id) ON DELETE CASCADE,
                organization TEXT NOT NULL,
                scope TEXT NOT NULL,
                name TEXT NOT NULL,
                hash TEXT NOT NULL,
                PRIMARY KEY (visitor_id, scope, name, hash)
            ) WITHOUT ROWID
            """,
            SharedMigrations.componentsByHash,
            """
            CREATE TABLE visitor_device_keys (
                visitor_id TEXT NOT NULL REFERENCES visitors(id) ON DELETE CASCADE,
                key_id TEXT NOT NULL,
                PRIMARY KEY (visitor_id, key_id)
            ) WITHOUT ROWID
            """,
            """
            CREATE TABLE events (
                request_id TEXT PRIMARY KEY NOT NULL,
                organization TEXT NOT NULL,
                visitor_id TEXT NOT NULL,
                received_at INTEGER NOT NULL,
                document BLOB NOT NULL
            )
            """,
            SharedMigrations.eventsByAge,
            // window_start, not window: WINDOW is reserved in PostgreSQL.
            """
            CREATE TABLE counters (
                bucket TEXT NOT NULL,
                window_start INTEGER NOT NULL,
                count INTEGER NOT NULL,
                PRIMARY KEY (bucket, window_start)
            ) WITHOUT ROWID
            """,
            SharedMigrations.countersByWindow,
        ]),
        // Every identify increments a counter, and the index on its window cost a WAL page per
        // request (bench/server); the sweep it served reads a table of at most a minute of
        // windows per key, which a scan does as well.
        SharedMigrations.withoutCounterWindows,
        // Large documents and answers are kept LZ4-compressed (StoredBlobCodec); each row says
        // how its blob is encoded, and the rows already there are plain. Adding a column with a
        // constant default rewrites no row.
        SharedMigrations.encodingColumns(type: "INTEGER", checked: true),
        // Device keys are kept and evicted by the time a request first proved them, not by keyid
        // (an attacker picks keyids); a key stored before knew only its visitor's first_seen. Each
        // organization gets a secret its stored identifiers are keyed with, made at first use.
        SchemaMigration(version: 4, statements: [
            "ALTER TABLE visitor_device_keys ADD COLUMN first_proven_at INTEGER NOT NULL DEFAULT 0",
            """
            UPDATE visitor_device_keys SET first_proven_at = COALESCE(
                (SELECT first_seen FROM visitors WHERE visitors.id = visitor_device_keys.visitor_id), 0)
            """,
            "ALTER TABLE organizations ADD COLUMN identifier_secret BLOB",
        ]),
        // Storage quotas: the bytes of event documents each organization keeps, added as events
        // are stored and taken off as they expire, so admission reads a few rows instead of
        // summing the events. A table of its own rather than a column of the organization, so
        // PostgreSQL can spread one organization's concurrent writes over several rows (slot);
        // SQLite, one writer at a time, uses slot 0. Visitors are swept by age without an index
        // on last_seen: it changes on every identify, and the hourly sweep may scan.
        SchemaMigration(version: SchemaVersion.storageUsage, statements: [
            "ALTER TABLE organizations ADD COLUMN storage_quota INTEGER",
            """
            CREATE TABLE storage_usage (
                organization TEXT NOT NULL,
                slot INTEGER NOT NULL,
                bytes INTEGER NOT NULL,
                PRIMARY KEY (organization, slot)
            ) WITHOUT ROWID
            """,
            SharedMigrations.storageUsageOfEvents,
        ]),
        // One device's share of the quota: the bytes of events each visitor keeps, on its row (the
        // row an identify writes anyway). Visitor rows count against the quota (the figures of
        // StoreLimits.rowBytes when this shipped). Device keys are looked up by keyid: a key that
        // claimed another's identity is settled as a visitor of its own, found by the key alone.
        SchemaMigration(version: SchemaVersion.deviceShare, statements: [
            "ALTER TABLE visitors ADD COLUMN event_bytes INTEGER NOT NULL DEFAULT 0",
            SharedMigrations.eventBytesOfVisitors,
            SharedMigrations.deviceKeysByKeyId,
            SharedMigrations.usageOfVisitorRows,
        ]),
    ]
}
