import CFingerlySQLite
import CSQLite
import FingerlyStore
import Glibc

/// The current row of a stepping statement; valid only inside the row callback.
package struct SQLiteRow: SQLRow {
    fileprivate let statement: OpaquePointer

    package func isNull(_ column: Int32) -> Bool { sqlite3_column_type(statement, column) == SQLITE_NULL }

    package func integer(_ column: Int32) -> Int64 { sqlite3_column_int64(statement, column) }

    /// Booleans are integers in SQLite: 0 is false.
    package func boolean(_ column: Int32) -> Bool { integer(column) != 0 }

    package func text(_ column: Int32) -> String {
        guard let start = sqlite3_column_text(statement, column) else { return "" }
        let count = Int(sqlite3_column_bytes(statement, column))
        return String(decoding: UnsafeBufferPointer(start: start, count: count), as: UTF8.self)
    }

    package func bytes(_ column: Int32) -> [UInt8] {
        // A zero-length blob comes back as a NULL pointer.
        guard let start = sqlite3_column_blob(statement, column) else { return [] }
        let count = Int(sqlite3_column_bytes(statement, column))
        return Array(UnsafeRawBufferPointer(start: start, count: count))
    }
}

/// One SQLite connection and its prepared statements. Not thread-safe: SQLiteStore reaches it
/// under its lock only.
final class SQLiteConnection: TransactionalSession {
    /// One writer at a time (BEGIN IMMEDIATE) needs no row locks, and one row of usage serves.
    static let dialect = SQLDialect(lockForUpdate: "", lockSkippingLocked: "",
                                    textsOfJSONArray: { "SELECT value FROM json_each(\($0))" }, identityLock: nil,
                                    storageUsageSlots: 1)

    var dialect: SQLDialect { Self.dialect }

    /// The oldest SQLite whose SQL the store's statements are written in.
    static let oldestLibrary = (number: Int32(3_039_000), name: "3.39")

    /// The page cache of one connection, in KiB.
    static let cacheKibibytes = 65_536
    private var database: OpaquePointer?
    /// Keyed by SQL text. Every text is a constant of this module, so the cache stays as small
    /// as the set of queries.
    private var statements: [String: OpaquePointer] = [:]
    /// Compresses and expands the large blobs this connection writes and reads.
    let blobs: StoredBlobCodec

    init(path: String, busyTimeoutMilliseconds: Int32, checkpointOnClose: Bool) throws(StoreError) {
        blobs = StoredBlobCodec()
        var handle: OpaquePointer?
        // NOMUTEX: SQLiteStore serializes every use; NOFOLLOW: the database is never reached through a link.
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW
        let opened = sqlite3_open_v2(path, &handle, flags, nil)
        guard opened == SQLITE_OK, let handle else {
            // No handle: the library could not be loaded, or it had no memory for one.
            let message = handle.map { String(cString: sqlite3_errmsg($0)) }
                ?? fingerly_sqlite_problem().map { String(cString: $0) } ?? "out of memory"
            sqlite3_close_v2(handle)
            throw StoreError("cannot open the database \(path): \(message)", isTransient: Self.isTransient(opened))
        }
        database = handle
        // SQLTransaction's statements use IS NOT DISTINCT FROM (3.39) and RETURNING (3.35).
        guard sqlite3_libversion_number() >= Self.oldestLibrary.number else {
            close()
            throw StoreError("SQLite \(String(cString: sqlite3_libversion())) is older than \(Self.oldestLibrary.name), "
                + "which the store needs")
        }
        sqlite3_extended_result_codes(handle, 1)
        sqlite3_busy_timeout(handle, busyTimeoutMilliseconds)
        if !checkpointOnClose { _ = fingerly_sqlite_set_checkpoint_on_close(handle, 0) }
        do throws(StoreError) {
            // WAL: readers never block the writer, and a commit is one append (no fsync under
            // synchronous=NORMAL; a process crash loses nothing committed, a power cut may lose
            // the last commits but never corrupts).
            let mode = try query("PRAGMA journal_mode=WAL", []) { $0.text(0) }
            guard mode.first?.lowercased() == "wal" else {
                throw StoreError("the database \(path) refused WAL mode (\(mode.first ?? "no answer"))")
            }
            _ = try execute("PRAGMA synchronous=NORMAL", [])
            _ = try execute("PRAGMA foreign_keys=ON", [])
            // SQLite's default cache of 2 MB is smaller than the indexes a busy organization
            // touches at random (component hashes, visitor ids): every miss is a pread, and the
            // distinct-hosts workload of bench/server spent a fifth of its time copying pages in.
            // Pages are allocated as they are used, so a small database costs no more.
            _ = try execute("PRAGMA cache_size=-\(Self.cacheKibibytes)", [])
        } catch {
            close()
            throw error
        }
    }

    deinit { close() }

    /// Copies every committed WAL frame into the database file unless a reader or another
    /// checkpoint is in the way; the next transaction then starts the WAL over.
    @discardableResult
    func checkpoint() -> Bool {
        guard let database else { return false }
        var logFrames: Int32 = 0, checkpointed: Int32 = 0
        let code = sqlite3_wal_checkpoint_v2(database, nil, SQLITE_CHECKPOINT_PASSIVE, &logFrames, &checkpointed)
        return code == SQLITE_OK && logFrames == checkpointed
    }

    /// Hands every commit's WAL size to `checkpointer` instead of checkpointing in the commit
    /// (a WAL hook replaces SQLite's automatic checkpoint). The caller keeps `checkpointer`
    /// alive while this connection is open.
    func reportCommits(to checkpointer: SQLiteCheckpointer) {
        guard let database else { return }
        let hook: @convention(c) (UnsafeMutableRawPointer?, OpaquePointer?, UnsafePointer<CChar>?, Int32) -> Int32 = {
            context, _, _, pages in
            if let context { Unmanaged<SQLiteCheckpointer>.fromOpaque(context).takeUnretainedValue().committed(walPages: pages) }
            return SQLITE_OK
        }
        _ = sqlite3_wal_hook(database, hook, Unmanaged.passUnretained(checkpointer).toOpaque())
    }

    var isOpen: Bool { database != nil }

    func close() {
        for statement in statements.values { sqlite3_finalize(statement) }
        statements.removeAll()
        if let database { sqlite3_close_v2(database) }
        database = nil
    }

    /// No transaction is open (SQLite's autocommit mode).
    var isAutocommit: Bool { database.map { sqlite3_get_autocommit($0) != 0 } ?? true }

    /// Rows changed by the last INSERT, UPDATE or DELETE.
    var changes: Int { database.map { Int(sqlite3_changes64($0)) } ?? 0 }

    static func isTransient(_ code: Int32) -> Bool {
        let primary = code & 0xff
        return primary == SQLITE_BUSY || primary == SQLITE_LOCKED || primary == SQLITE_PROTOCOL
    }

    private func failure(_ code: Int32, _ context: String) -> StoreError {
        // sqlite3_errmsg names tables and columns, never bound values, so no key reaches a log.
        let detail = database.map { String(cString: sqlite3_errmsg($0)) } ?? "closed"
        return StoreError("\(context): \(detail)", isTransient: Self.isTransient(code))
    }

    private func prepared(_ sql: String) throws(StoreError) -> OpaquePointer {
        if let cached = statements[sql] { return cached }
        guard let database else { throw StoreError("the database is closed") }
        var statement: OpaquePointer?
        let code = sqlite3_prepare_v3(database, Self.numberedParameters(sql), -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil)
        guard code == SQLITE_OK, let statement else { throw failure(code, "cannot prepare a statement") }
        statements[sql] = statement
        return statement
    }

    /// The statements of `SQLTransaction` number parameters `$1`, as PostgreSQL does; SQLite
    /// reads `$1` as a parameter *named* "1", numbered by where it first appears, so each
    /// becomes `?1`. No statement of this package holds a `$` inside a string literal.
    static func numberedParameters(_ sql: String) -> String {
        var bytes = Array(sql.utf8)
        for index in bytes.indices.dropLast() where bytes[index] == UInt8(ascii: "$")
            && (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index + 1]) {
            bytes[index] = UInt8(ascii: "?")
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    private func bind(_ values: [SQLValue], to statement: OpaquePointer) throws(StoreError) {
        for (offset, value) in values.enumerated() {
            let index = Int32(offset + 1)
            let code: Int32
            switch value {
            case .integer(let number):
                code = sqlite3_bind_int64(statement, index, number)
            case .boolean(let flag):
                code = sqlite3_bind_int64(statement, index, flag ? 1 : 0)
            case .null:
                code = sqlite3_bind_null(statement, index)
            case .text(let text):
                guard let length = Int32(exactly: text.utf8.count) else { throw StoreError("a text value is too long to store") }
                // withCString copies interior NULs too; the explicit length keeps them.
                code = text.withCString { fingerly_sqlite_bind_text(statement, index, $0, length) }
            case .bytes(let bytes):
                guard let length = Int32(exactly: bytes.count) else { throw StoreError("a blob is too long to store") }
                // A NULL pointer would bind SQL NULL, and an empty array may have no storage.
                code = bytes.isEmpty
                    ? sqlite3_bind_zeroblob(statement, index, 0)
                    : bytes.withUnsafeBytes { fingerly_sqlite_bind_blob(statement, index, $0.baseAddress, length) }
            }
            guard code == SQLITE_OK else { throw failure(code, "cannot bind a value") }
        }
    }

    /// Runs a statement and maps every row it yields.
    func query<Row>(_ sql: String, _ values: [SQLValue], row: (SQLiteRow) throws(StoreError) -> Row) throws(StoreError) -> [Row] {
        let statement = try prepared(sql)
        defer {
            sqlite3_reset(statement)
            sqlite3_clear_bindings(statement)
        }
        try bind(values, to: statement)
        var rows: [Row] = []
        while true {
            let code = sqlite3_step(statement)
            if code == SQLITE_DONE { return rows }
            guard code == SQLITE_ROW else { throw failure(code, "a statement failed") }
            rows.append(try row(SQLiteRow(statement: statement)))
        }
    }

    /// Runs a statement that yields no rows; returns how many rows it changed.
    @discardableResult
    func execute(_ sql: String, _ values: [SQLValue]) throws(StoreError) -> Int {
        _ = try query(sql, values) { _ in () }
        return changes
    }

    func storedForm(_ bytes: [UInt8]) -> (bytes: [UInt8], encoding: StoredBlobCodec.Encoding) { blobs.encode(bytes) }

    // IMMEDIATE takes the write lock up front: a deferred transaction that read first could
    // fail to upgrade halfway, after its reads had decided what to write.
    func beginTransaction() throws(StoreError) { try execute("BEGIN IMMEDIATE", []) }

    func commitTransaction() throws(StoreError) { try execute("COMMIT", []) }

    /// Some errors (a full disk, an I/O error) end the transaction themselves.
    func rollbackTransaction() {
        if !isAutocommit { _ = try? execute("ROLLBACK", []) }
    }

    /// A COMMIT that failed did not land: SQLite's commit is the WAL frame that marks it.
    var commitFailureMayHaveLanded: Bool { false }
}
