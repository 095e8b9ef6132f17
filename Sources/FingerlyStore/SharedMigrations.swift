/// One migration of a schema: applied in one transaction, recorded with its version.
package struct SchemaMigration: Sendable {
    package let version: Int64
    package let statements: [String]

    package init(version: Int64, statements: [String]) {
        self.version = version
        self.statements = statements
    }
}

extension [SchemaMigration] {
    package var latestVersion: Int64 { last?.version ?? 0 }
}

/// Statements and data steps of migrations that read the same in both databases, written once; each schema
/// lists them in its own migrations beside the DDL it spells its own way. `length` of a blob or
/// a bytea is its bytes in both; `WHERE true` lets SQLite parse an INSERT … SELECT before ON
/// CONFLICT, and changes nothing in PostgreSQL.
package enum SharedMigrations {
    /// The table that records the migrations applied, made before any of them.
    package static func migrationTable(integer: String) -> String {
        "CREATE TABLE IF NOT EXISTS schema_migrations "
            + "(version \(integer) PRIMARY KEY NOT NULL, applied_at \(integer) NOT NULL)"
    }

    // The indexes of migration 1, and the one migration 2 drops: the same text in both.
    package static let keysByOrganization = "CREATE INDEX keys_organization ON keys(organization)"
    package static let idempotencyByAge = "CREATE INDEX idempotency_created_at ON idempotency(created_at)"
    package static let visitorsByInstance = "CREATE INDEX visitors_instance ON visitors(organization, instance_id)"
    package static let componentsByHash =
        "CREATE INDEX visitor_components_hash ON visitor_components(organization, hash)"
    package static let eventsByAge = "CREATE INDEX events_received_at ON events(received_at)"
    package static let countersByWindow = "CREATE INDEX counters_window ON counters(window_start)"
    /// Migration 2 of both: every identify increments a counter, and the index on its window
    /// cost a write per request (bench/server) for a sweep that reads a minute of windows per key.
    package static let withoutCounterWindows = SchemaMigration(version: 2, statements: ["DROP INDEX counters_window"])

    /// Migration 3 of both: the column beside each large blob that says how it is encoded
    /// (StoredBlobCodec), 0 for the rows already there. `checked`: with a CHECK of the two values,
    /// which SQLite adds without reading a row and PostgreSQL only by scanning the table.
    package static func encodingColumns(type: String, checked: Bool) -> SchemaMigration {
        SchemaMigration(
            version: 3,
            statements: [("events", "document_encoding"), ("idempotency", "response_encoding")].map {
                "ALTER TABLE \($0.0) ADD COLUMN \($0.1) \(type) NOT NULL DEFAULT 0"
                    + (checked ? " CHECK (\($0.1) IN (0, 1))" : "")
            })
    }

    /// `SchemaVersion.storageUsage`: each organization's stored bytes, as its events take them.
    package static let storageUsageOfEvents = """
        INSERT INTO storage_usage (organization, slot, bytes)
        SELECT organization, 0, sum(length(document)) FROM events GROUP BY organization
        """

    /// `SchemaVersion.deviceShare`: each visitor's event bytes, on its row.
    package static let eventBytesOfVisitors = """
        UPDATE visitors SET event_bytes = stored.bytes
        FROM (SELECT visitor_id, sum(length(document)) AS bytes FROM events GROUP BY visitor_id) AS stored
        WHERE visitors.id = stored.visitor_id
        """

    /// `SchemaVersion.deviceShare`: device keys looked up by keyid.
    package static let deviceKeysByKeyId = "CREATE INDEX visitor_device_keys_key ON visitor_device_keys(key_id)"

    /// `SchemaVersion.deviceShare`: visitor rows count against the quota, at the figures of
    /// `StoreLimits.rowBytes` when it shipped (constants here: a later change of those must not
    /// rewrite what this migration did).
    package static let usageOfVisitorRows = """
        INSERT INTO storage_usage (organization, slot, bytes)
        SELECT organization, 0, count(*) * 256
            + coalesce(sum((SELECT count(*) FROM visitor_components AS c WHERE c.visitor_id = v.id)), 0) * 192
            + coalesce(sum((SELECT count(*) FROM visitor_device_keys AS k WHERE k.visitor_id = v.id)), 0) * 160
        FROM visitors AS v WHERE true GROUP BY organization
        ON CONFLICT (organization, slot) DO UPDATE SET bytes = storage_usage.bytes + excluded.bytes
        """
}
