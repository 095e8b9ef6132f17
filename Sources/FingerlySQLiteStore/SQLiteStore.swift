import FingerlyHost
import FingerlyStore
import Glibc
import Synchronization

/// The identity store in one SQLite file.
///
/// One connection, used under a lock. SQLite admits one writer at a time and every operation here
/// is a write transaction (BEGIN IMMEDIATE), so a pool would only move the queue from this lock
/// into SQLite's busy handler, where waiters sleep and poll instead of being woken in turn.
/// The body of a transaction therefore holds every other request of the process: callers do their
/// decoding, scoring and encoding outside it.
package final class SQLiteStore: IdentityStore, @unchecked Sendable {
    package struct Options: Sendable {
        /// How long SQLite waits for another process's lock before reporting busy.
        package var busyTimeoutMilliseconds: Int32 = 1_000
        /// Attempts of a transaction that met busy or locked, the first included.
        package var attempts: Int = 4
        /// The pause before the second attempt; doubles after each further one.
        package var retryPauseMilliseconds: Int = 5
        /// false keeps the WAL unmerged when the store closes, as after a crash (tests).
        package var checkpointOnClose: Bool = true
        /// Merge the WAL from a thread of the store's own instead of inside the commits that
        /// fill it (`SQLiteCheckpointer`): for a long-running server, not a one-shot command.
        package var backgroundCheckpoints: Bool = false

        package init() {}
    }


    package let path: String
    private let options: Options
    // Guards `connection`; the C handle is reached under it only, hence @unchecked Sendable.
    private let lock = ConditionLock()
    private var connection: SQLiteConnection?
    /// Set when `backgroundCheckpoints`; stopped before `connection` closes.
    package private(set) var checkpointer: SQLiteCheckpointer?
    /// The thread inside a transaction, so a nested call fails instead of deadlocking on `lock`.
    private let owner = Atomic<UInt>(0)
    /// Transactions of several threads that arrive together commit together.
    private let group = TransactionGroup()

    /// Opens the database at `path`, creating it (mode 0600) when missing, and applies pending
    /// migrations. The parent directory must exist. A database written by a newer build is refused.
    package init(path: String, options: Options = Options()) throws(StoreError) {
        self.path = path
        self.options = options
        try Self.createPrivately(path)
        connection = try SQLiteConnection(path: path, busyTimeoutMilliseconds: options.busyTimeoutMilliseconds,
                                          checkpointOnClose: options.checkpointOnClose)
        do throws(StoreError) {
            try migrate()
            if options.backgroundCheckpoints {
                let checkpointer = try SQLiteCheckpointer(path: path)
                self.checkpointer = checkpointer
                connection?.reportCommits(to: checkpointer)
            }
        } catch {
            connection?.close()
            throw error
        }
    }

    deinit { checkpointer?.stop() }

    /// Closes the connection; later transactions fail. Waits for a running one.
    package func close() {
        lock.lock()
        defer { lock.unlock() }
        // The checkpointer's connection closes first, so the store's is the last and merges
        // the WAL into the file as it closes.
        checkpointer?.stop()
        connection?.close()
        connection = nil
    }

    /// The schema version the database is at.
    package func schemaVersion() throws(StoreError) -> Int64 {
        try withConnection { connection throws(StoreError) in
            try Self.currentVersion(connection)
        }
    }

    /// Versions and times of the applied migrations, oldest first.
    package func appliedMigrations() throws(StoreError) -> [(version: Int64, appliedAt: Int64)] {
        try withConnection { connection throws(StoreError) in
            try connection.query("SELECT version, applied_at FROM schema_migrations ORDER BY version", []) {
                (version: $0.integer(0), appliedAt: $0.integer(1))
            }
        }
    }

    /// Runs `body` in a transaction of its own or, when other threads' transactions are waiting
    /// too, as a savepoint in one transaction with theirs (group commit). Either way it sees the
    /// writes of those before it, a throw undoes its own writes only, and it returns only once
    /// its writes are committed. A transient failure (another process's lock, a busy commit)
    /// runs the whole group again, so `body` must have no effect outside the database.
    package func transaction<Result>(_ body: (any StoreTransaction) throws(StoreError) -> Result) throws(StoreError) -> Result {
        guard owner.load(ordering: .relaxed) != UInt(pthread_self()) else {
            throw StoreError("a store transaction was started inside another on the same thread")
        }
        var result: Result?
        // The group runs the body on the thread that leads it, and `run` returns only after
        // the group has let go of it: the closure never outlives this call.
        let failure: StoreError? = withoutActuallyEscaping(body) { body in
            let work = GroupedTransaction { connection throws(StoreError) in
                let transaction = SQLTransaction(session: connection)
                // A transaction object kept past its closure must not write outside BEGIN…COMMIT.
                defer { transaction.isOpen = false }
                result = try body(transaction)
            }
            return group.run(work) { batch in self.commit(batch) }
        }
        if let failure { throw failure }
        guard let result else { throw StoreError("a grouped transaction ended without a result") }
        return result
    }

    /// Transactions waiting for a batch, and the most one batch has held (tests).
    package var groupCounts: (waiting: Int, largestBatch: Int) { group.counts }

    package var groupCommits: GroupCommitCounts? { group.committed }

    /// One BEGIN IMMEDIATE … COMMIT for a batch (`retrying`, which attempts it again after a
    /// transient failure): each body in a savepoint when there are several, so one that throws
    /// undoes only its own writes.
    private func commit(_ batch: [GroupedTransaction]) {
        do throws(StoreError) {
            try retrying { connection throws(StoreError) in
                for work in batch { work.failure = nil }
                for work in batch { try Self.runGrouped(work, alone: batch.count == 1, on: connection) }
            }
        } catch {
            // Nothing of the batch is stored: a body's own failure names it better.
            for work in batch where work.failure == nil { work.failure = error }
        }
    }

    /// A body's own failure is kept for it and the batch goes on, unless the failure is
    /// transient (the batch runs again) or SQLite ended the transaction (nothing can go on).
    private static func runGrouped(_ work: GroupedTransaction, alone: Bool, on connection: SQLiteConnection) throws(StoreError) {
        if alone {
            do throws(StoreError) { try work.body?(connection) } catch {
                if error.isTransient { throw error }
                work.failure = error
                // Alone, its failure undoes the transaction, as before grouping.
                throw error
            }
            return
        }
        _ = try connection.execute("SAVEPOINT grouped", [])
        do throws(StoreError) {
            try work.body?(connection)
            _ = try connection.execute("RELEASE grouped", [])
        } catch {
            if error.isTransient || connection.isAutocommit { throw error }
            work.failure = error
            _ = try connection.execute("ROLLBACK TO grouped", [])
            _ = try connection.execute("RELEASE grouped", [])
        }
    }

    // MARK: Internals

    private static func createPrivately(_ path: String) throws(StoreError) {
        let parent = Self.directory(of: path)
        var status = stat()
        guard stat(parent.isEmpty ? "." : parent, &status) == 0, status.st_mode & S_IFMT == S_IFDIR else {
            throw StoreError("the directory of the database \(path) does not exist")
        }
        // SQLite would create the file 0644 and give its -wal and -shm the same mode; created
        // here first, all three are the owner's alone (organizations, key hashes, events).
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
        if descriptor >= 0 {
            Glibc.close(descriptor)
        } else if errno != EEXIST {
            throw StoreError("cannot create the database \(path): \(String(cString: strerror(errno)))")
        }
    }

    /// The directory part of `path` as dirname(3) reads it, "" for a bare file name.
    private static func directory(of path: String) -> String {
        var trimmed = Substring(path)
        while trimmed.count > 1, trimmed.hasSuffix("/") { trimmed.removeLast() }
        guard let slash = trimmed.lastIndex(of: "/") else { return "" }
        var parent = trimmed[..<slash]
        while parent.count > 1, parent.hasSuffix("/") { parent.removeLast() }
        return parent.isEmpty ? "/" : String(parent)
    }

    private func withConnection<Result>(_ body: (SQLiteConnection) throws(StoreError) -> Result) throws(StoreError) -> Result {
        let thread = UInt(pthread_self())
        guard owner.load(ordering: .relaxed) != thread else {
            throw StoreError("a store transaction was started inside another on the same thread")
        }
        lock.lock()
        owner.store(thread, ordering: .relaxed)
        defer {
            owner.store(0, ordering: .relaxed)
            lock.unlock()
        }
        guard let connection, connection.isOpen else { throw StoreError("the store is closed") }
        return try body(connection)
    }

    /// BEGIN IMMEDIATE … COMMIT around `body`, ROLLBACK when it throws; attempts again after busy
    /// or locked, so `body` must have no effect outside the database.
    private func retrying<Result>(_ body: (SQLiteConnection) throws(StoreError) -> Result) throws(StoreError) -> Result {
        try TransactionRetry(attempts: options.attempts, pauseMilliseconds: options.retryPauseMilliseconds).run {
            () -> TransactionAttempt<Result> in
            do throws(StoreError) {
                return try withConnection { connection throws(StoreError) in
                    let outcome = connection.attempt(body)
                    if case .committed = outcome, let checkpointer, checkpointer.writerShouldMerge {
                        connection.checkpoint()
                    }
                    return outcome
                }
            } catch {
                return .rolledBack(error)
            }
        }
    }

    private static func currentVersion(_ connection: SQLiteConnection) throws(StoreError) -> Int64 {
        try connection.query("SELECT COALESCE(MAX(version), 0) FROM schema_migrations", []) { $0.integer(0) }.first ?? 0
    }

    /// Each migration in its own transaction, re-reading the version inside it so that two
    /// processes opening one new file apply each migration once.
    private func migrate() throws(StoreError) {
        let known = SQLiteSchema.latestVersion
        let path = path
        // Version 0 only creates the bookkeeping table and refuses a newer database.
        for migration in [SchemaMigration(version: 0, statements: [])] + SQLiteSchema.migrations {
            try retrying { connection throws(StoreError) in
                try connection.execute(SQLiteSchema.createMigrationTable, [])
                let current = try Self.currentVersion(connection)
                guard current <= known else {
                    throw StoreError("the database \(path) is at schema version \(current), newer than this build's \(known): "
                        + "upgrade fingerly before opening it")
                }
                guard migration.version > current else { return }
                for statement in migration.statements { try connection.execute(statement, []) }
                try connection.execute("INSERT INTO schema_migrations (version, applied_at) VALUES (?1, ?2)",
                                       [.integer(migration.version), .integer(Int64(time(nil)))])
            }
        }
    }
}

/// A transaction body waiting for, or running in, a group commit.
final class GroupedTransaction {
    /// Dropped before the waiting thread is woken: the body is that thread's, never kept.
    var body: ((SQLiteConnection) throws(StoreError) -> Void)?
    var failure: StoreError?
    var finished = false

    init(_ body: @escaping (SQLiteConnection) throws(StoreError) -> Void) {
        self.body = body
    }
}

/// Group commit: a thread with a transaction queues it; if no batch is being committed it
/// takes every queued transaction (its own among them) and commits them as one, while those
/// that arrive meanwhile queue for the next batch. A commit costs two writes per WAL page and a
/// transaction's worth of file locks; grouped, it serves several requests, and a page they all
/// touch (a counter, an index's last leaf) goes to the WAL once.
final class TransactionGroup: @unchecked Sendable {
    /// Most transactions one batch takes, so one leader's wait stays short.
    static let largestBatch = 32
    // Guards `queue`, `leading` and `largestCommitted`, and orders every GroupedTransaction's fields.
    private let condition = ConditionLock()
    private var queue: [GroupedTransaction] = []
    private var leading = false
    private var largestCommitted = 0
    private var committedCounts = GroupCommitCounts()

    /// Transactions queued for the next batch, and the most one batch has held (tests).
    var counts: (waiting: Int, largestBatch: Int) {
        condition.lock()
        defer { condition.unlock() }
        return (queue.count, largestCommitted)
    }

    /// Batches committed so far, by size.
    var committed: GroupCommitCounts {
        condition.lock()
        defer { condition.unlock() }
        return committedCounts
    }

    /// Runs `work` in some batch and returns its failure, nil once it is committed.
    func run(_ work: GroupedTransaction, commit: ([GroupedTransaction]) -> Void) -> StoreError? {
        condition.lock()
        defer { condition.unlock() }
        queue.append(work)
        while !work.finished {
            if leading {
                condition.wait()
                continue
            }
            leading = true
            let batch = Array(queue.prefix(Self.largestBatch))
            queue.removeFirst(batch.count)
            largestCommitted = max(largestCommitted, batch.count)
            condition.unlock()
            commit(batch)
            condition.lock()
            // Counted once committed: a batch that failed as a whole stored nothing.
            let stored = batch.filter { $0.failure == nil }.count
            if stored > 0 { committedCounts.add(batchOf: stored) }
            for done in batch {
                done.body = nil
                done.finished = true
            }
            leading = false
            condition.broadcast()
        }
        return work.failure
    }
}
