import Synchronization

/// Requests refused before the per-key budget (an unknown or revoked key, a signature missing or not
/// verifying, a suspended organization, a missing idempotency key), counted per source address and
/// second in this process's memory. They never reach an organization's budget in the store, so junk
/// sent with an organization's public key cannot spend its devices' requests; and counting them costs
/// no store write.
///
/// Two levels, since a device key costs an attacker nothing to make: past `limit` failures of an
/// address, its requests without a verifying signature are refused; past `limit` failures of requests
/// whose signature verified (a self-made key with an unknown public key, say), its signed requests are
/// refused too, but for the devices this process admitted before under the same public key, which
/// genuine clients behind the attacker's address (a NAT) are. Either way, at most about twice `limit`
/// refused requests an address and second reach the store.
///
/// Per process on purpose, unlike the per-key budget: several processes each allow `limit`,
/// which bounds the cost of junk as well, and a shared counter would cost what it saves.
package final class FailureLimiter: Sendable {
    /// Addresses tracked in one second; further ones share one overflow count, so a flood from
    /// many addresses is bounded in memory and still limited as a whole.
    package static let trackedAddresses = 16_384
    static let overflowAddress = "*"
    /// Devices remembered as admitted, in each of two generations: the older one is forgotten when
    /// the newer fills, so a device admitted since stays and memory stays bounded.
    package static let rememberedDevices = 8_192

    /// A device key that verified, with the public key it came with.
    package struct Device: Hashable, Sendable {
        package let publicKey: String
        package let keyID: String

        package init(publicKey: String, keyID: String) {
            self.publicKey = publicKey
            self.keyID = keyID
        }
    }

    private struct Failures {
        var all = 0
        var signed = 0
        /// Requests admitted from this address signed by a device not admitted before.
        var newDevices = 0
        /// Requests admitted from this address with a verified device key.
        var devices = 0
    }

    private struct Window {
        var second: Int64 = .min
        var failures: [String: Failures] = [:]
    }

    private struct Admitted {
        var current: Set<Device> = []
        var previous: Set<Device> = []
    }

    package let limit: Int
    /// Requests a second from one address by devices this process has not admitted before, and
    /// `devicesPerAddress` times that by any device: a device key costs nothing to make, so each
    /// new one would otherwise bring a budget of its own.
    package let newDeviceLimit: Int
    /// Devices a busy address (a NAT) may hold at the rate limit each.
    package static let devicesPerAddress = 10
    private let window = Mutex(Window())
    private let admitted = Mutex(Admitted())

    package init(limit: Int, newDeviceLimit: Int = .max) {
        self.limit = limit
        self.newDeviceLimit = newDeviceLimit
    }

    /// Whether `peer` has used up its failures of the second `now` for this request: its next
    /// failure would be answered 429 without any store access. `device` is the request's verified
    /// device key, nil when it has none.
    package func isExhausted(peer: String, now: Int64, device: Device? = nil) -> Bool {
        let counted = window.withLock { window -> Failures? in
            guard window.second == now else { return nil }
            return window.failures[peer] ?? window.failures[Self.overflowAddress]
        }
        guard let counted else { return false }
        guard let device else { return counted.all >= limit }
        return counted.signed >= limit && !wasAdmitted(device)
    }

    /// Counts one failure of `peer` in the second `now`; `signed` when the request's signature verified.
    package func recordFailure(peer: String, now: Int64, signed: Bool = false) {
        window.withLock { window in
            if window.second != now {
                window.second = now
                window.failures.removeAll(keepingCapacity: true)
            }
            let tracked = window.failures[peer] != nil || window.failures.count < Self.trackedAddresses
            let address = tracked ? peer : Self.overflowAddress
            window.failures[address, default: Failures()].all += 1
            if signed { window.failures[address, default: Failures()].signed += 1 }
        }
    }

    /// Counts a request of `device` from `peer` in the second `now` before its own budget is
    /// spent; false, and it is to be refused, when the address has sent `newDeviceLimit` requests
    /// by devices not admitted before, or `devicesPerAddress` times that by any, this second.
    package func admitsDevice(peer: String, now: Int64, device: Device) -> Bool {
        let known = wasAdmitted(device)
        let (first, _) = newDeviceLimit.multipliedReportingOverflow(by: Self.devicesPerAddress)
        let addressLimit = first < newDeviceLimit ? Int.max : first
        return window.withLock { window in
            if window.second != now {
                window.second = now
                window.failures.removeAll(keepingCapacity: true)
            }
            let tracked = window.failures[peer] != nil || window.failures.count < Self.trackedAddresses
            // Past the tracked addresses every other one shares a count: a device admitted before is
            // not held to what a flood from addresses it never used spent of it.
            if !tracked && known { return true }
            let address = tracked ? peer : Self.overflowAddress
            var counted = window.failures[address, default: Failures()]
            guard counted.devices < addressLimit, known || counted.newDevices < newDeviceLimit else { return false }
            counted.devices += 1
            if !known { counted.newDevices += 1 }
            window.failures[address] = counted
            return true
        }
    }

    /// Remembers a device whose request was admitted: counted against its organization's budget.
    package func recordAdmitted(_ device: Device) {
        admitted.withLock { admitted in
            guard !admitted.current.contains(device) else { return }
            if admitted.current.count >= Self.rememberedDevices {
                admitted.previous = admitted.current
                admitted.current.removeAll(keepingCapacity: true)
            }
            admitted.current.insert(device)
        }
    }

    private func wasAdmitted(_ device: Device) -> Bool {
        admitted.withLock { $0.current.contains(device) || $0.previous.contains(device) }
    }
}
