import Synchronization

/// Requests that failed authentication (an unknown or revoked key, a signature missing or not
/// verifying), counted per source address and second in this process's memory. They never
/// reach an organization's budget in the store, so junk sent with an organization's public key
/// cannot spend its devices' requests; and counting them costs no store write.
///
/// Per process on purpose, unlike the per-key budget: several processes each allow `limit`,
/// which bounds the cost of junk as well, and a shared counter would cost what it saves.
package final class FailureLimiter: Sendable {
    /// Addresses tracked in one second; further ones share one overflow count, so a flood from
    /// many addresses is bounded in memory and still limited as a whole.
    package static let trackedAddresses = 16_384
    static let overflowAddress = "*"

    private struct Window {
        var second: Int64 = .min
        var failures: [String: Int] = [:]
    }

    package let limit: Int
    private let window = Mutex(Window())

    package init(limit: Int) { self.limit = limit }

    /// Whether `peer` has used up its failures of the second `now`: its next failure is
    /// answered 429 without any store access.
    package func isExhausted(peer: String, now: Int64) -> Bool {
        window.withLock { window in
            guard window.second == now else { return false }
            return (window.failures[peer] ?? window.failures[Self.overflowAddress] ?? 0) >= limit
        }
    }

    /// Counts one failure of `peer` in the second `now`.
    package func recordFailure(peer: String, now: Int64) {
        window.withLock { window in
            if window.second != now {
                window.second = now
                window.failures.removeAll(keepingCapacity: true)
            }
            if window.failures[peer] != nil || window.failures.count < Self.trackedAddresses {
                window.failures[peer, default: 0] += 1
            } else {
                window.failures[Self.overflowAddress, default: 0] += 1
            }
        }
    }
}
