/// A value bound to a statement parameter. Values reach SQL through parameters only, never
/// spliced into its text.
package enum SQLValue {
    case integer(Int64)
    case text(String)
    case bytes([UInt8])
    case boolean(Bool)
    case null

    package static func optionalText(_ text: String?) -> SQLValue { text.map(SQLValue.text) ?? .null }
    package static func optionalInteger(_ value: Int?) -> SQLValue { value.map { .integer(Int64($0)) } ?? .null }
    package static func optionalInteger(_ value: Int64?) -> SQLValue { value.map(SQLValue.integer) ?? .null }
    package static func optionalBytes(_ bytes: [UInt8]?) -> SQLValue { bytes.map(SQLValue.bytes) ?? .null }
}

/// The current row of a result; valid only inside the row callback that was handed it.
package protocol SQLRow {
    func isNull(_ column: Int32) -> Bool
    func integer(_ column: Int32) -> Int64
    func boolean(_ column: Int32) -> Bool
    func text(_ column: Int32) -> String
    func bytes(_ column: Int32) -> [UInt8]
}

extension SQLRow {
    package func optionalInteger(_ column: Int32) -> Int64? { isNull(column) ? nil : integer(column) }
    package func optionalText(_ column: Int32) -> String? { isNull(column) ? nil : text(column) }
    package func optionalBytes(_ column: Int32) -> [UInt8]? { isNull(column) ? nil : bytes(column) }
}

/// Where the two databases spell the same statement differently. Everything else of
/// `SQLTransaction` is one text for both: `$1`-style placeholders (a SQLite session rewrites them
/// to `?1` as it prepares), `CAST(… AS TEXT)` rather than `::text`, `IS NOT DISTINCT FROM`,
/// `ON CONFLICT … DO NOTHING`, `RETURNING`.
package struct SQLDialect: Sendable {
    /// Appended to a read whose row decides a write: PostgreSQL's READ COMMITTED lets another
    /// instance change the row between the read and the write unless it is locked; SQLite's
    /// BEGIN IMMEDIATE has admitted no other writer, so it needs nothing.
    package let lockForUpdate: String
    /// Appended to a sweep's batch select, so sweeps on several instances take disjoint rows.
    package let lockSkippingLocked: String
    /// The rows of a JSON array of strings bound at `parameter`, as a subquery.
    package let textsOfJSONArray: @Sendable (_ parameter: String) -> String
    /// A statement holding, until the transaction ends, a lock on `$1 || '/' || $2`; nil when
    /// the transaction already excludes every other writer.
    package let identityLock: String?
    /// Rows one organization's stored bytes are spread over: a PostgreSQL transaction locks the
    /// row it adds to until it commits, and concurrent requests of one organization each pick
    /// one of these at random; SQLite has one writer and one row.
    package let storageUsageSlots: Int

    package init(
        lockForUpdate: String, lockSkippingLocked: String, textsOfJSONArray: @escaping @Sendable (String) -> String,
        identityLock: String?, storageUsageSlots: Int
    ) {
        self.lockForUpdate = lockForUpdate
        self.lockSkippingLocked = lockSkippingLocked
        self.textsOfJSONArray = textsOfJSONArray
        self.identityLock = identityLock
        self.storageUsageSlots = max(1, storageUsageSlots)
    }
}

/// One open connection, used by one thread at a time: what `SQLTransaction` runs its
/// statements through. A backend implements it over its C library.
package protocol SQLSession: AnyObject {
    associatedtype Row: SQLRow

    var dialect: SQLDialect { get }

    /// Runs a statement and maps every row it yields. `sql` is a constant of this package:
    /// sessions cache what they prepared by its text.
    func query<Result>(
        _ sql: String, _ values: [SQLValue], row: (Row) throws(StoreError) -> Result
    ) throws(StoreError) -> [Result]

    /// Runs a statement that yields no rows; returns how many rows it changed.
    @discardableResult
    func execute(_ sql: String, _ values: [SQLValue]) throws(StoreError) -> Int

    /// How a large blob (an event document, a stored answer) is kept: compressed where the
    /// backend compresses (StoredBlobCodec), as given otherwise.
    func storedForm(_ bytes: [UInt8]) -> (bytes: [UInt8], encoding: StoredBlobCodec.Encoding)
}
