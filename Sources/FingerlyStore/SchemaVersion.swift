/// Schema versions both backends name: a migration keeps its number in SQLite and PostgreSQL,
/// so a version read from either database means the same columns.
package enum SchemaVersion {
    /// The migration that adds storage quotas, for the test that replays it on a populated database.
    package static let storageUsage: Int64 = 5
    /// The migration that adds per-visitor event bytes and counts visitor rows in the quota.
    package static let deviceShare: Int64 = 6
}
