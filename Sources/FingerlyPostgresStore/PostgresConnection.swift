import CPostgres
import FingerlyStore
import Glibc

/// One row of a result (text format); valid only inside the row callback.
package struct PostgresRow: SQLRow {
    fileprivate let result: OpaquePointer
    fileprivate let row: Int32

    package func isNull(_ column: Int32) -> Bool { PQgetisnull(result, row, column) != 0 }

    private func raw(_ column: Int32) -> UnsafeBufferPointer<UInt8> {
        guard let value = PQgetvalue(result, row, column) else { return UnsafeBufferPointer(start: nil, count: 0) }
        let count = Int(max(0, PQgetlength(result, row, column)))
        return UnsafeRawPointer(value).withMemoryRebound(to: UInt8.self, capacity: count) {
            UnsafeBufferPointer(start: $0, count: count)
        }
    }

    /// A bigint column; the server writes it in decimal, so a malformed one cannot occur.
    package func integer(_ column: Int32) -> Int64 { Int64(String(decoding: raw(column), as: UTF8.self)) ?? 0 }

    package func boolean(_ column: Int32) -> Bool { raw(column).first == UInt8(ascii: "t") }

    package func text(_ column: Int32) -> String { String(decoding: raw(column), as: UTF8.self) }

    /// A bytea column in the server's hex output (`\x` then two digits a byte).
    package func bytes(_ column: Int32) -> [UInt8] {
        let text = raw(column)
        guard text.count >= 2, text[0] == UInt8(ascii: "\\"), text[1] == UInt8(ascii: "x") else { return [] }
        var bytes: [UInt8] = []
        bytes.reserveCapacity((text.count - 2) / 2)
        var index = 2
        while index + 1 < text.count {
            guard let high = Self.nibble(text[index]), let low = Self.nibble(text[index + 1]) else { return [] }
            bytes.append(high << 4 | low)
            index += 2
        }
        return bytes
    }

    private static func nibble(_ digit: UInt8) -> UInt8? {
        switch digit {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): digit - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): digit - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): digit - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}

/// One libpq connection and the statements prepared on it. Not thread-safe: the pool hands it
/// to one thread at a time.
final class PostgresConnection: TransactionalSession {
    /// READ COMMITTED with row locks where a read decides a write (PostgresStore says why), the
    /// usage of one organization spread over rows, and advisory locks for first reports.
    static let dialect = SQLDialect(lockForUpdate: " FOR UPDATE", lockSkippingLocked: " FOR UPDATE SKIP LOCKED",
                                    textsOfJSONArray: { "SELECT jsonb_array_elements_text(CAST(\($0) AS jsonb))" },
                                    // A 64-bit hash of the organization and the key: a lock, not a unique
                                    // constraint, because resolution may legitimately make a second visitor
                                    // for one instanceId (a cloned image). Two hosts whose keys collide only
                                    // wait for each other.
                                    identityLock: "SELECT pg_advisory_xact_lock(hashtextextended($1 || '/' || $2, 0))",
                                    storageUsageSlots: 16)

    var dialect: SQLDialect { Self.dialect }
    private var handle: OpaquePointer?
    /// The passwords of the connection string: never in a message of ours.
    private let secrets: ConnectionSecrets
    /// SQL text → prepared statement name. Every text is a constant of this module, so the map
    /// stays as small as the set of queries. Emptied when the session is reset.
    private var statements: [String: String] = [:]
    /// The SQLSTATE of the last failed statement ("" when none was given).
    private(set) var lastSQLState = ""

    /// `conninfo` is a libpq URI or key=value string; PG* environment variables fill what it leaves out.
    init(conninfo: String, connectTimeoutSeconds: Int, lockTimeoutMilliseconds: Int = 5_000) throws(StoreError) {
        secrets = ConnectionSecrets(conninfo)
        // These come first so that the same keywords in the URI still win. Without a connect
        // timeout an unreachable host holds a request for minutes. The session limits protect
        // the other instances from this one: a process frozen (SIGSTOP, a paused VM) or cut off
        // mid-transaction would otherwise keep its row and advisory locks until TCP gave up,
        // hours later, while every instance's requests for that key queued behind them. The
        // server ends such a session after 30 s idle in a transaction; a statement waits 5 s for
        // a lock and runs 10 s at most, then fails as transient (503 with Retry-After); TCP
        // keepalives and tcp_user_timeout notice a peer that vanished.
        let keywords = ["connect_timeout", "options", "keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count",
                        "tcp_user_timeout", "dbname"]
        let values = [String(connectTimeoutSeconds),
                      "-c statement_timeout=10000 -c lock_timeout=\(max(1, lockTimeoutMilliseconds)) -c idle_in_transaction_session_timeout=30000",
                      "1", "10", "5", "3", "15000", conninfo]
        let connection = Self.withCStrings(keywords) { keywordPointers in
            Self.withCStrings(values) { valuePointers in PQconnectdbParams(keywordPointers, valuePointers, 1) }
        }
        guard let connection else { throw StoreError("cannot connect to PostgreSQL: out of memory", isTransient: true) }
        handle = connection
        guard PQstatus(connection) == CONNECTION_OK else {
            let message = Self.connectionMessage(connection, secrets: secrets)
            close()
            throw StoreError("cannot connect to PostgreSQL: \(message)", isTransient: true)
        }
        silenceNotices()
    }

    deinit { close() }

    func close() {
        if let handle { PQfinish(handle) }
        handle = nil
        statements.removeAll()
    }

    /// Set when a statement failed in a way that leaves the session unusable though libpq may
    /// still call it open (the server went away between two statements).
    private var needsReset = false

    var isHealthy: Bool { !needsReset && (handle.map { PQstatus($0) == CONNECTION_OK } ?? false) }

    /// Inside a transaction block (or a failed one) rather than idle.
    var isInTransaction: Bool {
        guard let handle else { return false }
        let status = PQtransactionStatus(handle)
        return status == PQTRANS_INTRANS || status == PQTRANS_INERROR || status == PQTRANS_ACTIVE
    }

    /// Reconnects a broken session with the same parameters; its prepared statements are gone.
    func reset() -> Bool {
        guard let handle else { return false }
        statements.removeAll()
        PQreset(handle)
        guard PQstatus(handle) == CONNECTION_OK else { return false }
        needsReset = false
        silenceNotices()
        return true
    }

    /// A statement without parameters (transaction control, DDL): a constant of this module.
    func command(_ sql: String) throws(StoreError) {
        guard let handle else { throw StoreError("the database connection is closed", isTransient: true) }
        let result = PQexec(handle, sql)
        defer { PQclear(result) }
        try check(result, "a statement failed")
    }

    /// Runs a prepared statement and maps every row it yields.
    func query<Row>(_ sql: String, _ values: [SQLValue], row: (PostgresRow) throws(StoreError) -> Row) throws(StoreError) -> [Row] {
        let result = try run(sql, values)
        defer { PQclear(result) }
        let count = PQntuples(result)
        var rows: [Row] = []
        rows.reserveCapacity(Int(max(0, count)))
        var index: Int32 = 0
        while index < count {
            rows.append(try row(PostgresRow(result: result, row: index)))
            index += 1
        }
        return rows
    }

    /// Runs a prepared statement that yields no rows; returns how many rows it changed.
    @discardableResult
    func execute(_ sql: String, _ values: [SQLValue]) throws(StoreError) -> Int {
        let result = try run(sql, values)
        defer { PQclear(result) }
        guard let tuples = PQcmdTuples(result) else { return 0 }
        return Int(String(cString: tuples)) ?? 0
    }

    /// This backend writes blobs plain: TOAST compresses them, and it reads either encoding.
    func storedForm(_ bytes: [UInt8]) -> (bytes: [UInt8], encoding: StoredBlobCodec.Encoding) { (bytes, .plain) }

    func beginTransaction() throws(StoreError) { try command("BEGIN ISOLATION LEVEL READ COMMITTED") }

    func commitTransaction() throws(StoreError) { try command("COMMIT") }

    func rollbackTransaction() {
        if isHealthy, isInTransaction { _ = try? command("ROLLBACK") }
    }

    /// The connection may break after the server committed and before it said so.
    var commitFailureMayHaveLanded: Bool { true }

    // MARK: Internals

    private func silenceNotices() {
        // libpq prints NOTICEs (CREATE … IF NOT EXISTS) to stderr; the server's log is its own.
        guard let handle else { return }
        let ignore: @convention(c) (UnsafeMutableRawPointer?, UnsafePointer<CChar>?) -> Void = { _, _ in }
        _ = PQsetNoticeProcessor(handle, ignore, nil)
    }

    private static func connectionMessage(_ connection: OpaquePointer, secrets: ConnectionSecrets) -> String {
        guard let message = PQerrorMessage(connection) else { return "unknown error" }
        return secrets.redacting(String(cString: message).trimmingTrailingNewlines)
    }

    private static func withCStrings<T>(_ strings: [String], _ body: ([UnsafePointer<CChar>?]) -> T) -> T {
        var pointers: [UnsafeMutablePointer<CChar>?] = strings.map { strdup($0) }
        defer { for pointer in pointers { free(pointer) } }
        pointers.append(nil)
        return body(pointers.map { $0.map { UnsafePointer($0) } })
    }

    static func isTransient(sqlState: String) -> Bool {
        // Serialization failure, deadlock, lost or refused connections, a server shutting down
        // or starting, too many connections, a lock not available.
        ["40001", "40P01", "57P01", "57P02", "57P03", "53300", "55P03", "57014"].contains(sqlState) || sqlState.hasPrefix("08")
    }

    /// Throws unless `result` is a success. Only the primary message is kept: the DETAIL of a
    /// constraint error quotes the values (keys, identifiers) and must not reach a log.
    private func check(_ result: OpaquePointer?, _ context: String) throws(StoreError) {
        let status = result.map { PQresultStatus($0) } ?? PGRES_FATAL_ERROR
        if status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK {
            lastSQLState = ""
            return
        }
        var sqlState = ""
        var message = "no answer from the server"
        if let result {
            if let field = PQresultErrorField(result, Int32(UInt8(ascii: "C"))) { sqlState = String(cString: field) }
            if let field = PQresultErrorField(result, Int32(UInt8(ascii: "M"))) { message = String(cString: field) }
        }
        if sqlState.isEmpty, let handle, PQstatus(handle) != CONNECTION_OK {
            message = Self.connectionMessage(handle, secrets: secrets)
        }
        lastSQLState = sqlState
        // No SQLSTATE: libpq's own error (the connection broke mid-exchange), not the server's.
        let lost = sqlState.isEmpty || sqlState.hasPrefix("08") || sqlState.hasPrefix("57P") || (handle.map { PQstatus($0) != CONNECTION_OK } ?? true)
        if lost { needsReset = true }
        throw StoreError("\(context): \(secrets.redacting(message))", isTransient: lost || Self.isTransient(sqlState: sqlState))
    }

    private func prepared(_ sql: String, parameterCount: Int32) throws(StoreError) -> String {
        if let name = statements[sql] { return name }
        guard let handle else { throw StoreError("the database connection is closed", isTransient: true) }
        let name = "fingerly_\(statements.count + 1)"
        let result = PQprepare(handle, name, sql, parameterCount, nil)
        defer { PQclear(result) }
        try check(result, "cannot prepare a statement")
        statements[sql] = name
        return name
    }

    private func run(_ sql: String, _ values: [SQLValue]) throws(StoreError) -> OpaquePointer {
        guard let handle else { throw StoreError("the database connection is closed", isTransient: true) }
        guard let count = Int32(exactly: values.count) else { throw StoreError("too many statement parameters") }
        let name = try prepared(sql, parameterCount: count)
        // All parameters in one buffer: text, integers and booleans in text format (NUL-ended),
        // bytea in binary format with its length, so no escaping is ever needed.
        var storage: [UInt8] = [0]
        var offsets: [Int?] = []
        var lengths: [Int32] = []
        var formats: [Int32] = []
        for value in values {
            switch value {
            case .null:
                offsets.append(nil); lengths.append(0); formats.append(0)
            case .integer(let number):
                offsets.append(storage.count); storage.append(contentsOf: String(number).utf8); storage.append(0)
                lengths.append(0); formats.append(0)
            case .boolean(let flag):
                offsets.append(storage.count); storage.append(flag ? UInt8(ascii: "t") : UInt8(ascii: "f")); storage.append(0)
                lengths.append(0); formats.append(0)
            case .text(let text):
                // PostgreSQL text cannot hold NUL, and a text-format parameter would end at it.
                guard !text.utf8.contains(0) else { throw StoreError("a text value holds a NUL byte") }
                offsets.append(storage.count); storage.append(contentsOf: text.utf8); storage.append(0)
                lengths.append(0); formats.append(0)
            case .bytes(let bytes):
                guard let length = Int32(exactly: bytes.count) else { throw StoreError("a byte value is too long to store") }
                offsets.append(storage.count); storage.append(contentsOf: bytes)
                lengths.append(length); formats.append(1)
            }
        }
        let result = storage.withUnsafeBufferPointer { buffer -> OpaquePointer? in
            let base = UnsafeRawPointer(buffer.baseAddress!)
            let pointers: [UnsafePointer<CChar>?] = offsets.map { offset in
                offset.map { (base + $0).assumingMemoryBound(to: CChar.self) }
            }
            return PQexecPrepared(handle, name, count, pointers, lengths, formats, 0)
        }
        do {
            try check(result, "a statement failed")
        } catch {
            PQclear(result)
            throw error
        }
        guard let result else { throw StoreError("a statement failed: no answer from the server", isTransient: true) }
        return result
    }
}

private extension String {
    var trimmingTrailingNewlines: String {
        var text = self
        while text.last?.isNewline == true { text.removeLast() }
        return text
    }
}
