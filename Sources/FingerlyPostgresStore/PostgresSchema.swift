import FingerlyStore

/// SQLiteSchema's tables in PostgreSQL, under the same version numbers, so `fingerly-server
/// migrate` and the start check speak of one schema whichever backend holds it. A migration once
/// shipped never changes; a new version appends one here and in SQLiteSchema.
///
/// Text columns are COLLATE "C": SQLite compares text bytewise, and listings must come back in
/// the same order from both backends whatever locale the database was created with.
enum PostgresSchema {
    static var latestVersion: Int64 { migrations.latestVersion }

    /// Two-key advisory lock (a key space apart from the one-key locks of `lockIdentity`) that
    /// serializes instances migrating at the same moment.
    static let migrationLock: (Int32, Int32) = (0x46_6C_79, 1)

    static let createMigrationTable = SharedMigrations.migrationTable(integer: "BIGINT")

    static let migrations: [SchemaMigration] = [
        SchemaMigration(version: 1, statements: [
            """
            CREATE TABLE organizations (
                name TEXT COLLATE "C" PRIMARY KEY NOT NULL,
                suspended BOOLEAN NOT NULL DEFAULT FALSE,
                created_at BIGINT NOT NULL
            )
            """,
            """
            CREATE TABLE keys (
                public_key TEXT COLLATE "C" PRIMARY KEY NOT NULL,
                secret_key_hash BYTEA NOT NULL UNIQUE,
                organization TEXT COLLATE "C" NOT NULL REFERENCES organizations(name),
                environment TEXT COLLATE "C" NOT NULL,
                revoked BOOLEAN NOT NULL DEFAULT FALSE,
                created_at BIGINT NOT NULL
            )
            """,
            SharedMigrations.keysByOrganization,
            // The in-flight state is this row: its primary key is what makes two instances given
            // one key at the same moment store one event.
            """
            CREATE TABLE idempotency (
                organization TEXT COLLATE "C" NOT NULL,
                key TEXT COLLATE "C" NOT NULL,
                body_hash BYTEA NOT NULL,
                state TEXT NOT NULL CHECK (state IN ('in_flight', 'complete')),
                response BYTEA,
                status BIGINT,
                created_at BIGINT NOT NULL,
                updated_at BIGINT NOT NULL,
                PRIMARY KEY (organization, key)
            )
            """,
            SharedMigrations.idempotencyByAge,
            """
            CREATE TABLE visitors (
                id TEXT COLLATE "C" PRIMARY KEY NOT NULL,
                organization TEXT COLLATE "C" NOT NULL,
                instance_id TEXT COLLATE "C",
                hardware_id TEXT COLLATE "C",
                first_seen BIGINT NOT NULL,
                last_seen BIGINT NOT NULL
            )
            """,
            SharedMigrations.visitorsByInstance,
            """
            CREATE TABLE visitor_components (
                visitor_id TEXT COLLATE "C" NOT NULL REFERENCES visitors(id) ON DELETE CASCADE,
                organization TEXT COLLATE "C" NOT NULL,
                scope TEXT COLLATE "C" NOT NULL,
                name TEXT COLLATE "C" NOT NULL,
                hash TEXT COLLATE "C" NOT NULL,
                PRIMARY KEY (visitor_id, scope, name, hash)
            )
            """,
            SharedMigrations.componentsByHash,
            """
            CREATE TABLE visitor_device_keys (
                visitor_id TEXT COLLATE "C" NOT NULL REFERENCES visitors(id) ON DELETE CASCADE,
                key_id TEXT COLLATE "C" NOT NULL,
                PRIMARY KEY (visitor_id, key_id)
            )
            """,
            """
            CREATE TABLE events (
                request_id TEXT COLLATE "C" PRIMARY KEY NOT NULL,
                organization TEXT COLLATE "C" NOT NULL,
                visitor_id TEXT COLLATE "C" NOT NULL,
                received_at BIGINT NOT NULL,
                document BYTEA NOT NULL
            )
            """,
            SharedMigrations.eventsByAge,
            """
            CREATE TABLE counters (
                bucket TEXT COLLATE "C" NOT NULL,
                window_start BIGINT NOT NULL,
                count BIGINT NOT NULL,
                PRIMARY KEY (bucket, window_start)
            )
            """,
            SharedMigrations.countersByWindow,
        ]),
        // As in SQLite: the window index cost a write per request and served only the sweep.
        SharedMigrations.withoutCounterWindows,
        // The encoding columns SQLite's migration 3 adds, so both backends keep one schema:
        // PostgreSQL writes its blobs plain (TOAST compresses them) and reads either encoding
        // (StoredBlobCodec). A constant default rewrites no row; a CHECK would scan the events
        // table under an exclusive lock, and this backend writes only 0.
        SharedMigrations.encodingColumns(type: "SMALLINT", checked: false),
        // SQLite's migration 4: device keys by the time they were first proven, and the
        // organization's identifier secret.
        SchemaMigration(version: 4, statements: [
            "ALTER TABLE visitor_device_keys ADD COLUMN first_proven_at BIGINT NOT NULL DEFAULT 0",
            """
            UPDATE visitor_device_keys SET first_proven_at = visitors.first_seen
            FROM visitors WHERE visitors.id = visitor_device_keys.visitor_id
            """,
            "ALTER TABLE organizations ADD COLUMN identifier_secret BYTEA",
        ]),
        // SQLiteSchema's migration 5: each organization's stored bytes, here over several slots
        // so concurrent identify transactions of one organization rarely wait on one row lock.
        SchemaMigration(version: SchemaVersion.storageUsage, statements: [
            "ALTER TABLE organizations ADD COLUMN storage_quota BIGINT",
            """
            CREATE TABLE storage_usage (
                organization TEXT COLLATE "C" NOT NULL,
                slot SMALLINT NOT NULL,
                bytes BIGINT NOT NULL,
                PRIMARY KEY (organization, slot)
            )
            """,
            SharedMigrations.storageUsageOfEvents,
        ]),
        // SQLiteSchema's migration 6: each visitor's event bytes, visitor rows in the quota, and
        // device keys looked up by keyid.
        SchemaMigration(version: SchemaVersion.deviceShare, statements: [
            "ALTER TABLE visitors ADD COLUMN event_bytes BIGINT NOT NULL DEFAULT 0",
            SharedMigrations.eventBytesOfVisitors,
            SharedMigrations.deviceKeysByKeyId,
            SharedMigrations.usageOfVisitorRows,
        ]),
    ]
}
