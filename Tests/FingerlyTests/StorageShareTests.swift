@testable import FingerlyCatalogue
import Foundation
import Testing
@testable import Fingerly
@testable import FingerlyEngine
@testable import FingerlyModel
@testable import FingerlyProbes
@testable import FingerlyServer
@testable import FingerlyStore
@testable import FingerlyTransport

/// What one client may make the server keep, and a host that lost its key (issue 22, after its
/// hostile review of the store): a report is bounded as stored, one device's events take at most
/// its share of the organization's quota, visitors count against the quota, and a reinstalled
/// host is one visitor again from its second run. Real `fingerly-server` processes over SQLite
/// and PostgreSQL, real client runs where a host is involved.
@Suite(.serialized) struct StorageShareTests {
    typealias Deployment = DeviceBindingTests.Deployment

    /// The real client's run of the fixture host `host` from `state`, signed with that state's key.
    static func clientRun(_ deployment: Deployment, host: String, state: String) throws -> IdentifyResult {
        let arguments = ["--endpoint", deployment.endpoint, "--root", TestPaths.fixture(host), "--tiers", "fast", "--attempts", "3",
                         "--retry-delay-ms", "5", "--deadline-ms", "5000", "--json"]
        let run = try runCLI(arguments, environment: SubmissionCLITests.environment(state: state, apiKey: deployment.publicKey))
        #expect(run.status == 0, "\(run.standardError)")
        return try run.identifyResult()
    }

    /// `body` as another host's: every component hash salted, the identifiers derived from them.
    static func anotherHost(_ body: [UInt8], salt: String) throws -> [UInt8] {
        let hasher = IdentifierHasher(organization: "acme")
        return try DeviceBindingTests.withComponentHashes(body) { hasher.hash(salt + $0.hash) }
    }

    static func organization(_ deployment: Deployment) throws -> OrganizationRecord {
        try #require(try deployment.store().transaction { (tx) throws(StoreError) in try tx.organization(named: "acme") })
    }

    /// One device floods with its own report until it is refused 507 device_quota_exceeded with
    /// Retry-After, far below the organization's quota; a second genuine device, the real client on
    /// another host, is still answered 200 and its event stored. A report padded with a free-form
    /// signal past the stored-report bound is 413 report_too_large and stores nothing.
    @Test(arguments: StoreBackend.allCases) func oneDevicesFloodIsRefusedAtItsShareWhileAnotherDeviceIsAnswered(backend: StoreBackend) throws {
        let quota: Int64 = 1_048_576
        let deployment = try Deployment(backend, arguments: ["--storage-quota", "1MiB", "--device-share", "10"])
        let flooder = try DeviceKey.ephemeral()
        let body = try deployment.copiedBody()
        var answered = 0
        var refusal: RawResponse?
        for _ in 0..<500 {
            let response = try deployment.post(body, signedBy: flooder)
            guard response.status == 200 else { refusal = response; break }
            answered += 1
        }
        let refused = try #require(refusal, "500 requests of one device were all answered")
        #expect(refused.status == 507 && refused.errorCode == "device_quota_exceeded", "\(refused.text)")
        #expect(refused.headers["retry-after"] == "3600")
        #expect(answered >= 3, "refused after \(answered)")
        #expect(try deployment.post(body, signedBy: flooder).errorCode == "device_quota_exceeded")

        // It stopped at its share: a tenth of the quota and one event past it, never the whole.
        let visitors = try deployment.store().transaction { (tx) throws(StoreError) in try tx.visitors(organization: "acme", limit: 10) }
        #expect(visitors.count == 1)
        let share = quota / 10
        #expect((visitors.first?.eventBytes ?? 0) >= share && (visitors.first?.eventBytes ?? 0) < share * 2, "\(visitors)")
        #expect(try Self.organization(deployment).storedBytes < quota / 2)

        // Another device of the organization: answered, stored, readable.
        let other = try Self.clientRun(deployment, host: "laptop-baremetal", state: try SubmissionCLITests.freshState("share-other-\(backend)"))
        #expect(other.visitorId != visitors.first?.id && other.visitorIsNew == true)
        let event = try deployment.server.client.request("GET", "/v1/events/\(other.requestId)",
                                                         headers: [("Authorization", "Bearer \(deployment.secretKey)")])
        #expect(event.status == 200, "\(event.text)")

        // A free-form signal of 200 KB: more than a report is kept as, whoever sends it.
        let before = try Self.organization(deployment).storedBytes
        let padding = String((0..<200_000).map { _ in "abcdefghijklmnopqrstuvwxyz0123456789".randomElement()! })
        let text = String(decoding: try Self.anotherHost(body, salt: "padded"), as: UTF8.self)
        let signals = try #require(text.range(of: #""signals":{"#))
        let padded = Array(text.replacingCharacters(in: signals, with: #""signals":{"padding.free":"\#(padding)","#).utf8)
        let tooLarge = try deployment.post(padded, signedBy: try DeviceKey.ephemeral())
        #expect(tooLarge.status == 413 && tooLarge.errorCode == "report_too_large", "\(tooLarge.status) \(tooLarge.text.prefix(300))")
        #expect(try Self.organization(deployment).storedBytes == before)
    }

    /// Every request a host of its own (new components, a new key): each makes a visitor, and its
    /// rows count against the quota with the events, so the flood ends at 507 storage_quota_exceeded
    /// rather than growing the database; the figures are what the rows are, and retention gives
    /// them all back.
    @Test(arguments: StoreBackend.allCases) func visitorsCountAgainstTheQuotaSoNewVisitorsAreBounded(backend: StoreBackend) throws {
        let quota: Int64 = 256 * 1024
        let deployment = try Deployment(backend, arguments: ["--storage-quota", "256KiB", "--device-share", "0"])
        let body = try deployment.copiedBody()
        var made = 0
        var refusal: RawResponse?
        for index in 0..<1_000 {
            let response = try deployment.post(try Self.anotherHost(body, salt: "host-\(index)-"), signedBy: try DeviceKey.ephemeral())
            guard response.status == 200 else { refusal = response; break }
            #expect(try DeviceBindingTests.answer(response).visitorIsNew)
            made += 1
        }
        let refused = try #require(refusal, "1,000 new visitors were all stored")
        #expect(refused.status == 507 && refused.errorCode == "storage_quota_exceeded", "\(refused.text)")

        let (organization, visitors, events) = try deployment.store().transaction { (tx) throws(StoreError) in
            (try tx.organization(named: "acme"), try tx.visitors(organization: "acme", limit: 1_000), try tx.eventCount(organization: "acme"))
        }
        #expect(visitors.count == made && events == made)
        let rows = visitors.map { StoreLimits.rowBytes(visitors: 1, components: Int64($0.components.count), keys: Int64($0.deviceKeys.count)) }
        #expect(rows.allSatisfy { $0 > StoreLimits.visitorRowBytes + StoreLimits.deviceKeyRowBytes })
        // The quota holds the events and every visitor's rows, exactly.
        let rowBytes: Int64 = rows.reduce(0, +), eventBytes: Int64 = visitors.map(\.eventBytes).reduce(0, +)
        #expect(organization?.storedBytes == rowBytes + eventBytes)
        #expect((organization?.storedBytes ?? 0) >= quota)

        _ = try deployment.store().transaction { (tx) throws(StoreError) in
            (try tx.expireEvents(receivedBefore: .max), try tx.expireVisitors(lastSeenBefore: .max))
        }
        #expect(try Self.organization(deployment).storedBytes == 0)
        let answered = try deployment.post(try Self.anotherHost(body, salt: "after"), signedBy: try DeviceKey.ephemeral())
        #expect(answered.status == 200, "\(answered.text)")
    }

    /// A genuine host whose state directory was wiped (a reinstall) signs with a new key: its first
    /// run is a claim (the server cannot tell it from an impostor), its later runs are one stable
    /// visitor without the trigger. Its old visitor keeps its key, components and score, and an
    /// impostor with the host's report and a key of its own is neither of the two.
    @Test(arguments: StoreBackend.allCases) func aHostThatLostItsKeyIsOneVisitorFromItsSecondRun(backend: StoreBackend) throws {
        let deployment = try Deployment(backend)
        let original = try SubmissionCLITests.freshState("rekeyed-original-\(backend)")
        let first = try deployment.clientRun(state: original)
        let originalId = try #require(first.visitorId)
        let before = try #require(try deployment.visitor(originalId))

        let wiped = try SubmissionCLITests.freshState("rekeyed-wiped-\(backend)")
        let claim = try deployment.clientRun(state: wiped)
        let settledId = try #require(claim.visitorId)
        #expect(settledId != originalId && claim.visitorIsNew == true)
        #expect(claim.triggers.contains { $0.signal == "identity_claimed_without_key" && $0.confidence == .high })
        for _ in 0..<2 {
            let later = try deployment.clientRun(state: wiped)
            #expect(later.visitorId == settledId && later.visitorIsNew == false)
            #expect(!later.triggers.contains { $0.signal == "identity_claimed_without_key" }, "\(later.triggers)")
            #expect((later.suspectScore ?? 0) <= (first.suspectScore ?? 0), "\(first.triggers) then \(later.triggers)")
        }
        let newKey = try DeviceKey.loadOrCreate(in: wiped)
        let settled = try #require(try deployment.visitor(settledId))
        #expect(settled.deviceKeys.map(\.keyId) == [newKey.keyID] && settled.instanceId == nil && settled.components.isEmpty)

        // An impostor with the host's report and a key of its own: a claim of its own, twice over.
        let copied = try deployment.copiedBody()
        let impostor = try DeviceKey.ephemeral()
        let claimed = try DeviceBindingTests.answer(try deployment.post(copied, signedBy: impostor))
        #expect(claimed.visitorId != originalId && claimed.visitorId != settledId)
        #expect(claimed.triggers?.contains { $0.signal == "identity_claimed_without_key" } == true)
        let again = try DeviceBindingTests.answer(try deployment.post(copied, signedBy: impostor))
        #expect(again.visitorId == claimed.visitorId && again.visitorId != originalId)

        // The old visitor is as it was; the old key still proves it, with no score added.
        let after = try #require(try deployment.visitor(originalId))
        #expect(after.deviceKeys == before.deviceKeys && after.components == before.components)
        let back = try deployment.clientRun(state: original)
        #expect(back.visitorId == originalId && back.visitorIsNew == false)
        #expect((back.suspectScore ?? 0) <= (first.suspectScore ?? 0))
        #expect(!back.triggers.contains { ["identity_claimed_without_key", "duplicated_machine_identity"].contains($0.signal) })
    }
}
