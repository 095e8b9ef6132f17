import CFingerlySQLite
import CSQLite
import FingerlyHost
import FingerlyStore
import Glibc
import Synchronization

/// Merges the WAL into the database file from a thread of its own, on a connection of its own.
///
/// SQLite's automatic checkpoint runs inside the commit that crosses its threshold, with two
/// fsyncs, while SQLiteStore's lock holds every other request of the process: those commits
/// were the server's slowest answers (`bench/server`: p99 31 ms with it, 18 ms without). A
/// passive checkpoint from another connection copies committed frames while the writer goes on,
/// and the writer starts the WAL over once a checkpoint has caught up.
package final class SQLiteCheckpointer: @unchecked Sendable {
    /// WAL pages after a commit that wake the checkpointer: SQLite's own default threshold.
    static let wakeThresholdPages: Int32 = 1_000
    /// WAL pages after which the WAL should start over. SQLite starts it over only once a
    /// checkpoint has copied every frame, which a passive checkpoint from another connection
    /// never quite does under steady writes: the file would grow without bound (1.2 GB in a
    /// 10 s benchmark). Past this size the store's own connection finishes the merge between
    /// two transactions, with every other request of the process waiting.
    static let restartThresholdPages: Int32 = 4_000
    /// Frames the thread may leave uncopied for that merge. The merge syncs what it copies, and
    /// an fdatasync here took 1.6 ms for 50 scattered pages and 9 ms for 500: merging whatever
    /// had piled up cost 7.8 ms a time, 85 times in a 10 s `bench/server` run. So past the
    /// threshold the thread copies on, and the writer merges once it has caught up to this.
    static let mergeTailPages: Int32 = 256
    /// WAL pages past which the writer merges however far behind the thread is (a thread
    /// starved of CPU must not let the file grow without bound).
    static let hardLimitPages: Int32 = 16_000
    /// The longest the thread sleeps without a wake-up, so a quiet server's WAL is merged too.
    static let idleSeconds: Double = 5

    private let path: String
    // Guards `wakeRequested`, `stopping` and `stopped`; the connection belongs to the thread.
    private let condition = ConditionLock()
    private var wakeRequested = false
    private var stopping = false
    private var stopped = false
    private var failedCheckpoints = 0
    private let wakePending = Atomic<Bool>(false)
    /// The WAL's size in pages after the last commit.
    let lastWALPages = Atomic<Int32>(0)
    /// The WAL pages the last checkpoint had copied.
    private let copiedPages = Atomic<Int32>(0)
    private var completedCheckpoints = 0

    /// Opens a second connection to `path` and starts the thread.
    init(path: String) throws(StoreError) {
        self.path = path
        var handle: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW
        guard sqlite3_open_v2(path, &handle, flags, nil) == SQLITE_OK, let handle else {
            sqlite3_close_v2(handle)
            throw StoreError("cannot open the database \(path) for checkpoints")
        }
        // The checkpointer's connection must never merge or delete the WAL when it closes: the
        // store's own connection does that last.
        _ = fingerly_sqlite_set_checkpoint_on_close(handle, 0)
        // A connection that has read nothing is not yet in WAL mode, and a checkpoint on it
        // succeeds without copying a frame.
        guard sqlite3_exec(handle, "SELECT count(*) FROM sqlite_master", nil, nil, nil) == SQLITE_OK else {
            sqlite3_close_v2(handle)
            throw StoreError("cannot read the database \(path) for checkpoints")
        }
        let connection = UnsafeSendableHandle(handle)
        guard startDetachedThread({ [self] in
            nameCurrentThread("fingerly-checkpoint")
            run(connection.handle)
        }) else {
            sqlite3_close_v2(handle)
            throw StoreError("cannot start the checkpoint thread for \(path)")
        }
    }

    /// Called from the writer's WAL hook after every commit: cheap, never blocks on a checkpoint.
    func committed(walPages: Int32) {
        lastWALPages.store(walPages, ordering: .relaxed)
        let uncopied = uncopiedPages(walPages)
        // Below the restart threshold, a checkpoint per thousand pages; past it, whenever more
        // than the writer's merge should copy is left. One wake-up per checkpoint either way.
        let wanted = walPages < Self.restartThresholdPages ? uncopied >= Self.wakeThresholdPages : uncopied > Self.mergeTailPages
        guard wanted, !wakePending.exchange(true, ordering: .acquiringAndReleasing) else { return }
        condition.lock()
        wakeRequested = true
        condition.signal()
        condition.unlock()
    }

    /// Whether the writer should merge the WAL now, between two transactions: past the restart
    /// threshold once the thread has copied all but a short tail, and past the hard limit always.
    var writerShouldMerge: Bool {
        let walPages = lastWALPages.load(ordering: .relaxed)
        guard walPages >= Self.restartThresholdPages else { return false }
        return walPages >= Self.hardLimitPages || uncopiedPages(walPages) <= Self.mergeTailPages
    }

    /// Frames not yet copied; a WAL started over is shorter than what was copied from it.
    private func uncopiedPages(_ walPages: Int32) -> Int32 {
        let copied = copiedPages.load(ordering: .relaxed)
        return walPages >= copied ? walPages - copied : walPages
    }

    /// Checkpoints run to completion and failed ones (busy is neither), for tests.
    package var counts: (completed: Int, failed: Int) {
        condition.lock()
        defer { condition.unlock() }
        return (completedCheckpoints, failedCheckpoints)
    }

    /// Wakes the thread now, as a full WAL would.
    package func wake() { committed(walPages: Self.wakeThresholdPages) }

    /// Stops the thread and waits for it; the connection is closed when this returns.
    func stop() {
        condition.lock()
        stopping = true
        condition.broadcast()
        while !stopped { condition.wait() }
        condition.unlock()
    }

    private func run(_ database: OpaquePointer) {
        // A library's thread takes no process signal: SIGTERM sent to a server must reach its
        // sigwait, not end the process from here.
        var everything = sigset_t()
        sigfillset(&everything)
        pthread_sigmask(SIG_BLOCK, &everything, nil)
        while true {
            condition.lock()
            if !wakeRequested && !stopping { _ = condition.wait(untilMonotonicMilliseconds: monotonicMilliseconds() + Self.idleSeconds * 1000) }
            let woken = wakeRequested
            wakeRequested = false
            let stop = stopping
            condition.unlock()
            if stop { break }
            wakePending.store(false, ordering: .releasing)
            // Once the writer may merge, a checkpoint here would only collide with its merge; a
            // quiet server's writer merges nothing, so the idle round copies the tail itself.
            if woken && writerShouldMerge { continue }
            var logFrames: Int32 = 0, checkpointed: Int32 = 0
            let code = sqlite3_wal_checkpoint_v2(database, nil, SQLITE_CHECKPOINT_PASSIVE, &logFrames, &checkpointed)
            if code == SQLITE_OK { copiedPages.store(checkpointed, ordering: .relaxed) }
            condition.lock()
            if code == SQLITE_OK {
                completedCheckpoints += 1
            } else if code & 0xff != SQLITE_BUSY {
                failedCheckpoints += 1
            }
            condition.unlock()
        }
        sqlite3_close_v2(database)
        condition.lock()
        stopped = true
        condition.broadcast()
        condition.unlock()
    }
}

/// A C handle handed to the one thread that uses it.
private struct UnsafeSendableHandle: @unchecked Sendable {
    let handle: OpaquePointer
    init(_ handle: OpaquePointer) { self.handle = handle }
}
