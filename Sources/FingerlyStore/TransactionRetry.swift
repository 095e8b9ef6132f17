import Glibc

/// What one attempt at a transaction came to.
package enum TransactionAttempt<Result> {
    case committed(Result)
    /// Ended before its COMMIT took effect: nothing of it landed, so a transient failure may
    /// run it again.
    case rolledBack(StoreError)
    /// The COMMIT failed in a way that leaves unknown whether it landed (PostgreSQL's connection
    /// lost mid-commit): running the body again could apply it twice, so it never is.
    case outcomeUnknown(StoreError)
}

/// Transaction control of a session, around which `attempt` runs a body.
package protocol TransactionalSession: SQLSession {
    func beginTransaction() throws(StoreError)
    func commitTransaction() throws(StoreError)
    /// Rolls back whatever is open; nothing when the failure ended the transaction already.
    func rollbackTransaction()
    /// Whether a failed COMMIT may have landed all the same.
    var commitFailureMayHaveLanded: Bool { get }
}

extension TransactionalSession {
    /// BEGIN … COMMIT around `body`, ROLLBACK when it throws.
    package func attempt<Result>(_ body: (Self) throws(StoreError) -> Result) -> TransactionAttempt<Result> {
        do {
            try beginTransaction()
        } catch {
            return .rolledBack(error)
        }
        let result: Result
        do {
            result = try body(self)
        } catch {
            rollbackTransaction()
            return .rolledBack(error)
        }
        do {
            try commitTransaction()
        } catch {
            rollbackTransaction()
            guard commitFailureMayHaveLanded else { return .rolledBack(error) }
            return .outcomeUnknown(StoreError("the commit's outcome is unknown: \(error.message)", isTransient: true))
        }
        return .committed(result)
    }
}

/// The retry loop both stores run a transaction in: a transient failure (busy, a lock timeout,
/// a serialization conflict, a lost connection) before COMMIT runs the attempt again, up to
/// `attempts` in all, after a pause that doubles each time with jitter, so two processes that
/// collided do not collide again in step. The caller gets the error, never a success that was
/// not committed.
package struct TransactionRetry: Sendable {
    /// Attempts in all, the first included.
    package var attempts: Int
    /// The pause before the second attempt.
    package var pauseMilliseconds: Int

    package init(attempts: Int, pauseMilliseconds: Int) {
        self.attempts = attempts
        self.pauseMilliseconds = pauseMilliseconds
    }

    package func run<Result>(_ attempt: () -> TransactionAttempt<Result>) throws(StoreError) -> Result {
        var made = 0
        while true {
            let error: StoreError
            switch attempt() {
            case .committed(let result):
                return result
            case .outcomeUnknown(let unknown):
                throw unknown
            case .rolledBack(let failure):
                error = failure
            }
            made += 1
            guard error.isTransient, made < attempts else { throw error }
            pause(beforeAttempt: made)
        }
    }

    private func pause(beforeAttempt attempt: Int) {
        let base = pauseMilliseconds << min(attempt - 1, 6)
        let milliseconds = base + Int.random(in: 0...max(base / 2, 1))
        usleep(UInt32(clamping: milliseconds * 1_000))
    }
}
