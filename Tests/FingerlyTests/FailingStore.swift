import Foundation
@testable import FingerlyStore

/// A real store that can be told to fail every transaction, as a database gone away would, and
/// that counts the transactions begun (what a request costs the store).
final class FailingStore: IdentityStore, @unchecked Sendable {
    let base: any IdentityStore
    private let lock = NSLock()
    private var failure: StoreError?
    private var begun = 0

    var transactionsBegun: Int { lock.withLock { begun } }

    init(_ base: any IdentityStore) { self.base = base }

    func fail(with error: StoreError?) { lock.withLock { failure = error } }

    var groupCommits: GroupCommitCounts? { base.groupCommits }

    func transaction<Result>(_ body: (any StoreTransaction) throws(StoreError) -> Result) throws(StoreError) -> Result {
        if let failure = lock.withLock({ begun += 1; return failure }) { throw failure }
        return try base.transaction(body)
    }
}
