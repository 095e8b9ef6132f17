import FingerlyHost
import FingerlyStore
import Glibc

/// The identity store in PostgreSQL, shared by any number of server processes.
///
/// Isolation: READ COMMITTED, with the row and advisory locks that the reads which decide a
/// write need (an idempotency record FOR UPDATE, `lockIdentity` before resolution), rather than
/// SERIALIZABLE. Every request is a read-then-write of a few rows; under SERIALIZABLE two
/// instances touching neighbouring index pages abort each other and a busy fleet spends its
/// time retrying, while a lock makes the second simply wait for the first.
///
/// A small fixed pool of connections per process, each used by one thread at a time. A
/// connection found broken is reset before use; when the database is down every transaction
/// fails as transient (the server answers 503) and the next one after it is back reconnects.
package final class PostgresStore: IdentityStore, @unchecked Sendable {
    package struct Options: Sendable {
        /// Connections this process opens at most.
        package var poolSize: Int = 4
        /// Attempts of a transaction that met a transient error, the first included.
        package var attempts: Int = 4
        /// The pause before the second attempt; doubles after each further one.
        package var retryPauseMilliseconds: Int = 5
        /// How long a connection attempt may take unless the URL says otherwise.
        package var connectTimeoutSeconds: Int = 5
        /// How long a transaction waits for a connection of the pool before it fails as transient.
        package var acquireTimeoutSeconds: Int = 5
        /// How long a statement waits for a row or advisory lock before it fails as transient.
        package var lockTimeoutMilliseconds: Int = 5_000
        /// Apply pending migrations when opening (`serve` and `migrate`); otherwise only check
        /// that the schema is not newer than this build.
        package var applyMigrations: Bool = true

        package init() {}
    }

    /// A `--db` value naming PostgreSQL rather than a SQLite path.
    package static func isURL(_ value: String) -> Bool {
        value.hasPrefix("postgres://") || value.hasPrefix("postgresql://")
    }

    private let conninfo: String
    private let options: Options
    // Guards `idle`, `opened` and `closed`; connections are reached by one thread at a time.
    private let condition = ConditionLock()
    private var idle: [PostgresConnection] = []
    private var opened = 0
    private var closed = false

    /// Connects (the database must be reachable now) and applies or checks migrations.
    package init(url: String, options: Options = Options()) throws(StoreError) {
        conninfo = url
        self.options = options
        let first = try PostgresConnection(conninfo: url, connectTimeoutSeconds: options.connectTimeoutSeconds,
                                            lockTimeoutMilliseconds: options.lockTimeoutMilliseconds)
        opened = 1
        idle = [first]
        do throws(StoreError) {
            try migrate(apply: options.applyMigrations)
        } catch {
            close()
            throw error
        }
    }

    /// Closes idle connections now and busy ones as they are handed back; later transactions fail.
    package func close() {
        condition.lock()
        closed = true
        let connections = idle
        idle.removeAll()
        condition.broadcast()
        condition.unlock()
        for connection in connections { connection.close() }
    }

    /// The schema version the database is at.
    package func schemaVersion() throws(StoreError) -> Int64 {
        try withConnection { connection throws(StoreError) in try Self.currentVersion(connection) }
    }

    package func transaction<Result>(_ body: (any StoreTransaction) throws(StoreError) -> Result) throws(StoreError) -> Result {
        try retrying { connection throws(StoreError) in
            let transaction = SQLTransaction(session: connection)
            defer { transaction.isOpen = false }
            return try body(transaction)
        }
    }

    // MARK: Pool

    private func acquire() throws(StoreError) -> PostgresConnection {
        let deadline = monotonicMilliseconds() + Double(options.acquireTimeoutSeconds) * 1000
        condition.lock()
        while true {
            if closed {
                condition.unlock()
                throw StoreError("the store is closed")
            }
            if let connection = idle.popLast() {
                condition.unlock()
                return connection
            }
            if opened < max(1, options.poolSize) {
                opened += 1
                condition.unlock()
                do {
                    return try PostgresConnection(conninfo: conninfo, connectTimeoutSeconds: options.connectTimeoutSeconds,
                                                  lockTimeoutMilliseconds: options.lockTimeoutMilliseconds)
                } catch {
                    condition.lock()
                    opened -= 1
                    condition.signal()
                    condition.unlock()
                    throw error
                }
            }
            // A deadline, not a wait without end: when every connection is stuck behind a peer's
            // locks, requests get 503 and the HTTP threads stay free for the rest.
            if !condition.wait(untilMonotonicMilliseconds: deadline) {
                condition.unlock()
                throw StoreError("no PostgreSQL connection came free within \(options.acquireTimeoutSeconds) s", isTransient: true)
            }
        }
    }

    private func release(_ connection: PostgresConnection) {
        condition.lock()
        if closed {
            opened -= 1
            condition.unlock()
            connection.close()
            return
        }
        idle.append(connection)
        condition.signal()
        condition.unlock()
    }

    /// A healthy connection for `body`, reset first when the server dropped it.
    private func withConnection<Result>(_ body: (PostgresConnection) throws(StoreError) -> Result) throws(StoreError) -> Result {
        let connection = try acquire()
        defer { release(connection) }
        if !connection.isHealthy, !connection.reset() {
            throw StoreError("the database is unreachable", isTransient: true)
        }
        return try body(connection)
    }

    // MARK: Transactions

    /// BEGIN … COMMIT around `body`, ROLLBACK when it throws; a transient failure before COMMIT
    /// runs `body` again, so `body` must have no effect outside the database. A COMMIT that
    /// fails is never retried (`TransactionAttempt.outcomeUnknown`).
    private func retrying<Result>(_ body: (PostgresConnection) throws(StoreError) -> Result) throws(StoreError) -> Result {
        try TransactionRetry(attempts: options.attempts, pauseMilliseconds: options.retryPauseMilliseconds).run {
            () -> TransactionAttempt<Result> in
            do throws(StoreError) {
                return try withConnection { connection throws(StoreError) in connection.attempt(body) }
            } catch {
                return .rolledBack(error)
            }
        }
    }

    // MARK: Schema

    private static func currentVersion(_ connection: PostgresConnection) throws(StoreError) -> Int64 {
        try connection.query("SELECT COALESCE(MAX(version), 0)::bigint FROM schema_migrations", []) { $0.integer(0) }.first ?? 0
    }

    /// Each migration in its own transaction under an advisory lock, re-reading the version
    /// inside it, so instances starting at once apply each migration once. DDL is
    /// transactional in PostgreSQL: a migration lands whole or not at all.
    private func migrate(apply: Bool) throws(StoreError) {
        let known = PostgresSchema.latestVersion
        let pending = apply ? PostgresSchema.migrations : []
        for migration in [SchemaMigration(version: 0, statements: [])] + pending {
            try retrying { connection throws(StoreError) in
                _ = try connection.query("SELECT pg_advisory_xact_lock($1::integer, $2::integer)",
                                         [.integer(Int64(PostgresSchema.migrationLock.0)),
                                          .integer(Int64(PostgresSchema.migrationLock.1))]) { _ in () }
                // Under the lock: two instances creating it at once would collide in the catalog.
                try connection.command(PostgresSchema.createMigrationTable)
                let current = try Self.currentVersion(connection)
                guard current <= known else {
                    throw StoreError("the database is at schema version \(current), newer than this build's \(known): "
                        + "upgrade fingerly before opening it")
                }
                guard apply else { return }
                guard migration.version > current else { return }
                for statement in migration.statements { try connection.command(statement) }
                try connection.execute("INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)",
                                       [.integer(migration.version), .integer(Int64(time(nil)))])
            }
        }
        if !apply {
            let current = try schemaVersion()
            guard current == known else {
                throw StoreError("the database is at schema version \(current), older than this build's \(known): "
                    + "run `fingerly-server migrate` first")
            }
        }
    }
}
