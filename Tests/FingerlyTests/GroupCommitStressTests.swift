@testable import FingerlySQLiteStore
import Foundation
import Synchronization
import Testing
@testable import FingerlyStore

/// Many threads' transactions through SQLite's group commit at once (also a target for
/// `swift test --sanitize=thread`): each returns what it read inside its own transaction, one
/// in five throws after writing, and afterwards the file holds exactly the writes of those that
/// returned, with every returned count matching the order the commits made.
@Suite(.serialized) struct GroupCommitStressTests {
    @Test func everyReturnedTransactionIsStoredAndNoThrownOneIs() throws {
        let directory = try TestPaths.temporaryDirectory("group-commit")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try SQLiteStore(path: directory + "/fingerly.db")
        defer { store.close() }
        let threads = 8, rounds = 150
        let returned = Mutex<[String: Int]>([:])
        let thrown = Mutex<Set<String>>([])
        let unexpected = Mutex<[String]>([])
        let group = DispatchGroup()
        for thread in 0..<threads {
            group.enter()
            Thread {
                defer { group.leave() }
                for round in 0..<rounds {
                    let id = "t\(thread)-r\(round)"
                    let fails = (thread + round) % 5 == 0
                    do throws(StoreError) {
                        let count = try store.transaction { tx throws(StoreError) -> Int in
                            let before = try tx.incrementCounter(bucket: "order", window: 1)
                            try tx.insertEvent(EventRecord(requestId: id, organization: "acme", visitorId: "v", receivedAt: 1,
                                                           document: Array(id.utf8)))
                            if fails { throw StoreError("deliberate \(id)") }
                            return before
                        }
                        if fails { unexpected.withLock { $0.append("\(id) returned") } }
                        returned.withLock { $0[id] = count }
                    } catch {
                        if error.message != "deliberate \(id)" { unexpected.withLock { $0.append("\(id): \(error.message)") } }
                        thrown.withLock { _ = $0.insert(id) }
                    }
                }
            }.start()
        }
        group.wait()
        #expect(unexpected.withLock { $0 }.isEmpty)
        let returnedIds = returned.withLock { $0 }
        let thrownIds = thrown.withLock { $0 }
        #expect(returnedIds.count + thrownIds.count == threads * rounds)
        let stored = try store.transaction { tx throws(StoreError) -> (present: Set<String>, counter: Int) in
            var present = Set<String>()
            for thread in 0..<threads {
                for round in 0..<rounds where try tx.event(requestId: "t\(thread)-r\(round)", organization: "acme") != nil {
                    present.insert("t\(thread)-r\(round)")
                }
            }
            return (present, try tx.incrementCounter(bucket: "order", window: 1) - 1)
        }
        #expect(stored.present == Set(returnedIds.keys))
        // The counter counts only committed increments, each seen by exactly one transaction.
        #expect(stored.counter == returnedIds.count)
        #expect(Set(returnedIds.values) == Set(1...max(1, returnedIds.count)))
    }
}
