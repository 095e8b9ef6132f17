/// The schema, as numbered migrations. A migration once shipped never changes: a new version
/// appends one. Column types and constraints stay within what PostgreSQL also has, so the next
/// backend can keep the same shape.
enum SQLiteSchema {
    struct Migration {
        let version: Int64
        let statements: [String]
    }

    static var latestVersion: Int64 { migrations.last?.version ?? 0 }

    static let createMigrationTable = """
        CREATE TABLE IF NOT EXISTS schema_migrations (
            version INTEGER PRIMARY KEY NOT NULL,
            applied_at INTEGER NOT NULL
        )
        """

    static let migrations: [Migration] = [
        Migration(version: 1, statements: [
            """
            CREATE TABLE organizations (
                name TEXT PRIMARY KEY NOT NULL,
                suspended INTEGER NOT NULL DEFAULT 0,
                created_at INTEGER NOT NULL
            )
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
            "CREATE INDEX keys_organization ON keys(organization)",
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
            )
            """,
            // Expiry sweeps by age; without it each sweep reads the whole table under the write lock.
            "CREATE INDEX idempotency_created_at ON idempotency(created_at)",
            """
            CREATE TABLE visitors (
                id TEXT PRIMARY KEY NOT NULL,
                organization TEXT NOT NULL,
                instance_id TEXT,
                hardware_id TEXT,
                first_seen INTEGER NOT NULL,
                last_seen INTEGER NOT NULL
            )
            """,
            "CREATE INDEX visitors_instance ON visitors(organization, instance_id)",
            "CREATE INDEX visitors_last_seen ON visitors(organization, last_seen)",
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
            )
            """,
            "CREATE INDEX visitor_components_hash ON visitor_components(organization, hash)",
            """
            CREATE TABLE visitor_device_keys (
                visitor_id TEXT NOT NULL REFERENCES visitors(id) ON DELETE CASCADE,
                key_id TEXT NOT NULL,
                PRIMARY KEY (visitor_id, key_id)
            )
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
            "CREATE INDEX events_organization ON events(organization, request_id)",
            "CREATE INDEX events_received_at ON events(received_at)",
            // window_start, not window: WINDOW is reserved in PostgreSQL.
            """
            CREATE TABLE counters (
                bucket TEXT NOT NULL,
                window_start INTEGER NOT NULL,
                count INTEGER NOT NULL,
                PRIMARY KEY (bucket, window_start)
            )
            """,
            "CREATE INDEX counters_window ON counters(window_start)",
        ]),
    ]
}
