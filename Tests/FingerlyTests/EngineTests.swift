@testable import FingerlyCatalogue
@testable import FingerlySQLiteStore
import Foundation
import Testing
@testable import FingerlyEngine
@testable import FingerlyModel
@testable import FingerlyPolicy
@testable import FingerlyProbes
@testable import FingerlyStore

/// Reports and bodies built the way the client builds them, for the engine tests.
enum EngineFixtures {
    static let organization = "acme"
    static let now: Int64 = 1_767_225_600

    typealias Raw = (scope: IdentityComponent.Scope, name: String, value: String, worldReadable: Bool)

    /// A host: one machine-id, a root-only DMI UUID, one disk, one NIC and the model strings.
    static func host(machineId: String = "machine-1", uuid: String = "uuid-1", disk: String = "disk-1", nic: String = "nic-1",
                     model: String = "ThinkPad X1") -> [Raw] {
        [(.instance, "machine-id", machineId, true), (.hardware, "dmi-uuid", uuid, false), (.hardware, "disk", disk, true),
         (.hardware, "nic", nic, true), (.hardware, "cpu-model", "Intel Core i7-1185G7", true), (.hardware, "dmi-model", model, true)]
    }

    static func report(_ raw: [Raw], tag: String? = nil, signals: [String: SignalValue] = [:], schemaVersion: Int = 2,
                       organization: String = organization) -> SignalReport {
        let hasher = IdentifierHasher(organization: organization)
        let components = raw.map { IdentityComponent(scope: $0.scope, name: $0.name, hash: hasher.hash($0.value), worldReadable: $0.worldReadable) }
        let probe = ProbeEntry(id: "machine-identity", tier: .fast, status: .ok, durationMs: 1, issues: [], signals: signals,
                               identityComponents: components)
        return SignalReport(schemaVersion: schemaVersion, collectorVersion: "0.1.0", collectedAt: Date(timeIntervalSince1970: 1_767_225_600),
                            tag: tag, root: "/", tiers: [.fast], budgetMs: 1200, elapsedMs: 2, probes: [probe],
                            identity: HostIdentity.derive(from: components, hasher: hasher), identifierKeying: .organization,
                            freeText: .fingerprint)
    }

    static func body(_ report: SignalReport) throws -> [UInt8] {
        Array(try JSONEncoder.fingerly.encode(SubmissionBody(client: ClientInfo(proxy: false, sdk: "fingerly-linux", version: "0.1.0"),
                                                             report: report)))
    }

    static func visitor(_ id: String, _ report: SignalReport, lastSeen: Int64 = now, deviceKeys: [String] = []) -> VisitorRecord {
        let observed = ObservedIdentity(report: report)
        return VisitorRecord(id: id, organization: organization, instanceId: observed.instanceId, hardwareId: observed.hardwareId,
                             firstSeen: lastSeen, lastSeen: lastSeen, components: observed.components,
                             deviceKeys: deviceKeys.map { DeviceKeyRecord(keyId: $0, firstProvenAt: lastSeen) })
    }

    /// The request body of docs/api.md's worked example (a QEMU guest with one model component).
    static let documentedBody = Array(#"{"client":{"proxy":false,"sdk":"fingerly-linux","version":"0.1.0"},"report":{"budgetMs":1200,"collectedAt":"2026-01-01T00:00:00Z","collectorVersion":"0.1.0","elapsedMs":2.46,"freeText":"fingerprint","identifierKeying":"organization","identity":{"hardwareComponents":["dmi-model:8a080bc33a77"],"hardwareId":"3c9db2705a08f48100051e4601c6412fc9f52acffefc3efcd13d72e9d2b10521","hardwareIdVersion":1,"instanceComponents":[],"instanceIdVersion":1,"rootOnlyEvidence":[]},"probes":[{"durationMs":1.932,"id":"dmi","identityComponents":[{"hash":"8a080bc33a7773cf917608c4be2dc0061488abcb2c1b7bc210e7c1e9d996fa5f","name":"dmi-model","scope":"hardware","worldReadable":true}],"issues":[{"detail":"No such file or directory","path":"/sys/class/dmi/id/board_vendor","status":"absent"}],"signals":{"dmi.bios_vendor":"Bochs","dmi.bios_version":"Bochs","dmi.chassis_kind":"other","dmi.chassis_type":1,"dmi.product_name":"Bochs","dmi.sys_vendor":"Bochs","dmi.virtualization_kind":"qemu"},"status":"ok","tier":"fast"}],"root":"/","schemaVersion":2,"tag":"checkout","tiers":["fast"]}}"#.utf8)
}

/// An engine over a fresh SQLite store in its own directory.
struct EngineUnderTest {
    let engine: IdentityEngine
    let store: SQLiteStore

    init(_ label: String) throws {
        let directory = try TestPaths.temporaryDirectory("engine-\(label)")
        store = try SQLiteStore(path: directory + "/fingerly.db")
        engine = IdentityEngine(store: store, policy: .embedded())
    }

    func identify(_ body: [UInt8], key: String = UUID().uuidString.lowercased(), organization: String = EngineFixtures.organization,
                  deviceKey: String? = nil, verified: Bool = false, now: Int64 = EngineFixtures.now) -> EngineAnswer {
        engine.identify(organization: organization, idempotencyKey: key, body: body, deviceKeyID: deviceKey,
                        signatureVerified: verified, now: now)
    }

    func eventCount(_ organization: String? = nil) throws -> Int {
        try store.transaction { (tx) throws(StoreError) -> Int in try tx.eventCount(organization: organization) }
    }

    func idempotency(_ key: String, organization: String = EngineFixtures.organization) throws -> IdempotencyRecord? {
        try store.transaction { (tx) throws(StoreError) -> IdempotencyRecord? in try tx.idempotency(organization: organization, key: key) }
    }
}

/// What several threads hand back.
final class Gathered<Item>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: [Item] = []
    func append(_ item: Item) { lock.withLock { stored.append(item) } }
    var items: [Item] { lock.withLock { stored } }
}

extension EngineAnswer {
    func identifyAnswer() throws -> IdentifyAnswer {
        try #require(status == 200, "status \(status): \(String(decoding: body, as: UTF8.self))")
        return try JSONDecoder.fingerly.decode(IdentifyAnswer.self, from: Data(body))
    }

    func wireError() throws -> WireError {
        try JSONDecoder.fingerly.decode(WireError.self, from: Data(body))
    }
}

/// Resolution and scoring as pure functions: no store.
@Suite(.serialized) struct EngineResolutionTests {
    typealias F = EngineFixtures

    @Test func sameInstanceAndHardwareIsTheVisitorWithHighConfidence() {
        let report = F.report(F.host())
        let known = F.visitor("vis_a", report)
        let resolution = resolveVisitor(ObservedIdentity(report: report), instanceHolders: [known], candidates: [])
        #expect(resolution.matched?.id == "vis_a" && resolution.confidence == 98 && resolution.identifiable && resolution.findings.isEmpty)

        // A stored visitor without a hardwareId is consistent with any: 95.
        var bare = known
        bare.hardwareId = nil
        #expect(resolveVisitor(ObservedIdentity(report: report), instanceHolders: [bare], candidates: []).confidence == 95)
    }

    @Test func sameInstanceWithAReplacedDiskKeepsTheVisitorAndAClonedHostDoesNot() {
        let known = F.visitor("vis_a", F.report(F.host()))
        let replacedDisk = ObservedIdentity(report: F.report(F.host(disk: "disk-2")))
        #expect(replacedDisk.hardwareId != known.hardwareId && replacedDisk.instanceId == known.instanceId)
        let kept = resolveVisitor(replacedDisk, instanceHolders: [known], candidates: [])
        #expect(kept.matched?.id == "vis_a" && kept.findings.isEmpty)
        #expect((70...90).contains(kept.confidence))

        // The image's machine-id on another machine (UUID, disk and NIC its own): a clone.
        let clone = ObservedIdentity(report: F.report(F.host(uuid: "uuid-9", disk: "disk-9", nic: "nic-9")))
        let cloned = resolveVisitor(clone, instanceHolders: [known], candidates: [])
        #expect(cloned.matched == nil && cloned.findings == [.duplicatedMachineIdentity])

        // Once both are visitors, each keeps its own and both show the duplicated identity.
        let cloneVisitor = F.visitor("vis_b", F.report(F.host(uuid: "uuid-9", disk: "disk-9", nic: "nic-9")))
        let again = resolveVisitor(clone, instanceHolders: [known, cloneVisitor], candidates: [])
        #expect(again.matched?.id == "vis_b" && again.confidence == 98 && again.findings == [.duplicatedMachineIdentity])
        let original = resolveVisitor(ObservedIdentity(report: F.report(F.host())), instanceHolders: [cloneVisitor, known], candidates: [])
        #expect(original.matched?.id == "vis_a" && original.findings == [.duplicatedMachineIdentity])
    }

    @Test func withoutTheInstanceIdAWeightedOverlapMatches() {
        // The stored visitor has another instanceId (a collector that added an instance kind),
        // the same machine-id, and a disk since replaced.
        let stored = F.visitor("vis_a", F.report(F.host() + [(.instance, "root-filesystem", "fs-1", true)]))
        let observed = ObservedIdentity(report: F.report(F.host(disk: "disk-2")))
        #expect(observed.instanceId != stored.instanceId)
        let overlap = Overlap.between(observed.components, stored.components)
        // root-filesystem is on one side only: no evidence. disk (30) of 144 comparable differs.
        #expect(overlap.comparableWeight == 144 && abs(overlap.score - 114.0 / 144.0) < 1e-9 && !overlap.otherInstallation)
        let resolution = resolveVisitor(observed, instanceHolders: [], candidates: [stored])
        #expect(resolution.matched?.id == "vis_a")
        #expect(resolution.confidence == Int((50 + 100 * (114.0 / 144.0 - 0.6)).rounded()))
    }

    @Test func anotherInstallationOrAnotherHostOfTheModelIsANewVisitor() {
        let stored = F.visitor("vis_a", F.report(F.host()))
        // Same hardware, another OS installation (a second container, a reinstall): its machine-id differs.
        let reinstalled = ObservedIdentity(report: F.report(F.host(machineId: "machine-2")))
        #expect(Overlap.between(reinstalled.components, stored.components).otherInstallation)
        #expect(resolveVisitor(reinstalled, instanceHolders: [], candidates: [stored]).matched == nil)

        // Another unit of the model: only the model strings agree.
        let sibling = ObservedIdentity(report: F.report(F.host(machineId: "machine-3", uuid: "uuid-3", disk: "disk-3", nic: "nic-3")))
        let resolution = resolveVisitor(sibling, instanceHolders: [], candidates: [stored])
        #expect(resolution.matched == nil && resolution.identifiable)
        #expect(resolution.confidence >= 90)
    }

    @Test func identifiableNeedsStrongComponents() {
        let weakOnly = ObservedIdentity(report: F.report([(.hardware, "cpu-model", "cpu", true), (.hardware, "dmi-model", "m", true),
                                                         (.hardware, "pci-inventory", "p", true)]))
        #expect(weakOnly.hardwareId != nil && !weakOnly.identifiable && weakOnly.strongHashes.isEmpty)
        let resolution = resolveVisitor(weakOnly, instanceHolders: [], candidates: [])
        #expect(resolution.matched == nil && resolution.confidence == 20 && !resolution.identifiable)
        #expect(ObservedIdentity(report: F.report([(.instance, "machine-id", "m", true)])).identifiable)
        // Two matching weak kinds never reach the comparable strong floor.
        let stored = F.visitor("vis_w", F.report([(.hardware, "cpu-model", "cpu", true), (.hardware, "nic", "n", true)]))
        let observed = ObservedIdentity(report: F.report([(.hardware, "cpu-model", "cpu", true), (.hardware, "dmi-model", "m", true)]))
        #expect(resolveVisitor(observed, instanceHolders: [], candidates: [stored]).matched == nil)
    }

    @Test func updatingAVisitorLearnsReportedKindsAndKeepsTheOthers() {
        let stored = F.visitor("vis_a", F.report(F.host()), lastSeen: 10, deviceKeys: ["k1"])
        // A run without root: no dmi-uuid, a new disk.
        let observed = ObservedIdentity(report: F.report(F.host(disk: "disk-2").filter { $0.name != "dmi-uuid" }))
        let next = updatedVisitor(stored, with: observed, provenKeyID: "k2", now: 20)
        let hasher = IdentifierHasher(organization: F.organization)
        #expect(next.components.contains { $0.name == "dmi-uuid" && $0.hash == hasher.hash("uuid-1") })
        #expect(next.components.filter { $0.name == "disk" }.map(\.hash) == [hasher.hash("disk-2")])
        #expect(next.lastSeen == 20 && next.firstSeen == 10)
        #expect(next.deviceKeys == [DeviceKeyRecord(keyId: "k1", firstProvenAt: 10), DeviceKeyRecord(keyId: "k2", firstProvenAt: 20)])
        // A key proven again keeps its first-proven time; none proven changes no key.
        #expect(updatedVisitor(next, with: observed, provenKeyID: "k1", now: 30).deviceKeys == next.deviceKeys)
        #expect(updatedVisitor(next, with: observed, provenKeyID: nil, now: 30).deviceKeys == next.deviceKeys)
    }

    @Test func keysAreEvictedOldestProvenFirstNeverByKeyId() {
        // The oldest-proven key has the highest id: by id it would be kept, by age it goes first.
        let keys = (0..<8).map { DeviceKeyRecord(keyId: "k\(9 - $0)", firstProvenAt: 100 + Int64($0)) }
        var stored = F.visitor("vis_a", F.report(F.host()))
        stored.deviceKeys = keys
        let observed = ObservedIdentity(report: F.report(F.host()))
        let next = updatedVisitor(stored, with: observed, provenKeyID: "k0", now: 200)
        #expect(next.deviceKeys.map(\.keyId) == ["k8", "k7", "k6", "k5", "k4", "k3", "k2", "k0"])
        // Proven within the second of the newest key, a key is still the newest.
        let sameSecond = updatedVisitor(next, with: observed, provenKeyID: "a", now: 200)
        #expect(sameSecond.deviceKeys.last == DeviceKeyRecord(keyId: "a", firstProvenAt: 201))
        #expect(!sameSecond.deviceKeys.contains { $0.keyId == "k8" })
    }

    @Test func findingsScoreLikeVerdictsAndAGroupNeverExceedsItsWeight() throws {
        let scoring = try #require(Policy.embedded().suspect)
        let farmWeight = try #require(scoring.weights[.farm])
        let quiet = SuspectScoring.Assessment(score: 3, level: .low,
                                              triggers: [IdentifyTrigger(signal: "x", group: "virtualization", weight: 3, confidence: .medium)])
        let scored = addingFindings([.identityClaimedWithoutKey, .duplicatedMachineIdentity], to: quiet, scoring: scoring)
        // high: the whole farm weight; the duplicated identity then finds the group full.
        #expect(scored.triggers.map(\.signal) == ["x", "identity_claimed_without_key", "duplicated_machine_identity"])
        #expect(scored.triggers.map(\.weight) == [3, farmWeight, 0])
        #expect(scored.score == 3 + farmWeight)
        let claimOnly = addingFindings([.identityClaimedWithoutKey], to: quiet, scoring: scoring)
        #expect(claimOnly.triggers.last?.weight == farmWeight && claimOnly.triggers.last?.confidence == .high)
        // The policy's levels, and the cap at 100.
        let loud = SuspectScoring.Assessment(score: 95, level: .high, triggers: [])
        let capped = addingFindings([.duplicatedMachineIdentity], to: loud, scoring: scoring)
        #expect(capped.score == 100 && capped.level == .high)
        let nearMedium = SuspectScoring.Assessment(score: scoring.mediumFrom - farmWeight, level: .low, triggers: [])
        #expect(addingFindings([.duplicatedMachineIdentity], to: nearMedium, scoring: scoring).level == .medium)
    }

    @Test func mintedIdsAreURLSafeAndUnique() {
        let ids = (0..<1000).map { _ in EngineWire.mintId(prefix: "req_") }
        #expect(Set(ids).count == ids.count)
        let alphabet = Set("0123456789ABCDEFGHJKMNPQRSTVWXYZ")
        #expect(ids.allSatisfy { $0.count == 30 && $0.hasPrefix("req_") && $0.dropFirst(4).allSatisfy(alphabet.contains) })
    }

    /// Request ids sort by the millisecond they were minted in, and stay unique within one.
    @Test func requestIdsSortByTheirTime() {
        let alphabet = Set("0123456789ABCDEFGHJKMNPQRSTVWXYZ")
        let times: [Int64] = [0, 1, 999, 1_000, 1_764_560_000_000, 1_764_560_000_001, 0xFFFF_FFFF_FFFF]
        let ids = times.flatMap { time in (0..<50).map { _ in (time, EngineWire.mintTimeOrderedId(prefix: "req_", unixMilliseconds: time)) } }
        #expect(Set(ids.map(\.1)).count == ids.count)
        #expect(ids.allSatisfy { $0.1.count == 30 && $0.1.hasPrefix("req_") && $0.1.dropFirst(4).allSatisfy(alphabet.contains) })
        for (earlier, later) in zip(ids, ids.dropFirst()) where earlier.0 < later.0 {
            #expect(earlier.1 < later.1, "\(earlier) before \(later)")
        }
        // Nine characters hold 45 of the time's 48 bits; from the tenth on, the rest is random.
        let sameTime = ids.filter { $0.0 == 1_764_560_000_000 }.map(\.1)
        #expect(Set(sameTime.map { $0.prefix(13) }).count == 1)
        #expect(Set(sameTime.map { $0.dropFirst(13) }).count == sameTime.count)
        // A clock before 1970 mints the smallest time, not a crash.
        #expect(EngineWire.mintTimeOrderedId(prefix: "req_", unixMilliseconds: -5).hasPrefix("req_000000000"))
    }
}

/// The engine over the real SQLite store.
@Suite(.serialized) struct EngineTests {
    typealias F = EngineFixtures

    @Test func firstIsNewSecondIsKnownAndAReplayIsADuplicateThatStoresNothing() throws {
        let under = try EngineUnderTest("basic")
        let body = try F.body(F.report(F.host()))
        let first = try under.identify(body, key: "key-1").identifyAnswer()
        #expect(first.visitorIsNew && !first.duplicate && first.identifiable && first.policy == "default")
        #expect(first.requestId.hasPrefix("req_") && first.visitorId.hasPrefix("vis_"))
        let second = try under.identify(body, key: "key-2", now: F.now + 60).identifyAnswer()
        #expect(second.visitorId == first.visitorId && !second.visitorIsNew && second.visitorConfidence == 98)
        #expect(second.requestId != first.requestId)

        let firstBytes = under.identify(body, key: "key-1a").body
        let firstOfItsKey = try JSONDecoder.fingerly.decode(IdentifyAnswer.self, from: Data(firstBytes))
        let replayAnswer = under.identify(body, key: "key-1", now: F.now + 120)
        let replay = try replayAnswer.identifyAnswer()
        #expect(replay.duplicate && replay.requestId == first.requestId && replay.visitorIsNew)
        // Identical but for `duplicate`, byte for byte: the record names the event its answer is
        // part of, and the replay is rebuilt from it.
        let stored = try #require(try under.idempotency("key-1")?.response)
        #expect(String(decoding: stored, as: UTF8.self) == first.requestId)
        var replayed = replay
        replayed.duplicate = false
        #expect(Array(try JSONEncoder.fingerly.encode(replayed)) == Array(try JSONEncoder.fingerly.encode(first)))
        let replayOfItsKey = under.identify(body, key: "key-1a", now: F.now + 130).body
        #expect(String(decoding: replayOfItsKey, as: UTF8.self)
                == String(decoding: firstBytes, as: UTF8.self).replacingOccurrences(of: #""duplicate":false"#, with: #""duplicate":true"#))
        #expect(!firstOfItsKey.duplicate)
        #expect(try under.eventCount() == 3)
    }

    @Test func aRecordWrittenWithItsAnswerBeforeStillReplaysIt() throws {
        let under = try EngineUnderTest("replay-stored-answer")
        let body = try F.body(F.report(F.host()))
        let first = under.identify(body, key: "old")
        let record = try #require(try under.idempotency("old"))
        // As records were written before they named their event: the answer itself.
        try under.store.transaction { (tx) throws(StoreError) in
            try tx.putIdempotency(IdempotencyRecord(organization: record.organization, key: record.key, bodyHash: record.bodyHash,
                                                    state: .complete, response: first.body, status: 200,
                                                    createdAt: record.createdAt, updatedAt: record.updatedAt))
        }
        let replay = under.identify(body, key: "old", now: F.now + 5)
        #expect(String(decoding: replay.body, as: UTF8.self)
                == String(decoding: first.body, as: UTF8.self).replacingOccurrences(of: #""duplicate":false"#, with: #""duplicate":true"#))
    }

    @Test func theSameKeyWithAnotherBodyIs422AndTheFirstStands() throws {
        let under = try EngineUnderTest("reused")
        let first = try under.identify(try F.body(F.report(F.host())), key: "k").identifyAnswer()
        let other = under.identify(try F.body(F.report(F.host(), tag: "other")), key: "k")
        #expect(other.status == 422 && other.code == "idempotency_key_reused")
        #expect(try other.wireError().error.code == "idempotency_key_reused")
        #expect(try under.identify(try F.body(F.report(F.host())), key: "k").identifyAnswer().requestId == first.requestId)
        #expect(try under.eventCount() == 1)
        // Keys are per organization: another one may use the same key for its own body.
        #expect(try under.identify(try F.body(F.report(F.host(), tag: "other", organization: "globex")), key: "k",
                                   organization: "globex").identifyAnswer().visitorIsNew)
    }

    /// Identifiers become indexed text in either backend: a NUL (valid JSON, refused by
    /// PostgreSQL), a control character or a megabyte of id is a 400 naming the field, on SQLite too.
    @Test func identifiersThatAreNotShortPrintableTextAre400() throws {
        let under = try EngineUnderTest("identifiers")
        let report = F.report(F.host())
        func replacing(instanceId: String? = nil, componentHash: String? = nil) -> SignalReport {
            let identity = HostIdentity(hardwareId: report.identity.hardwareId, hardwareIdVersion: 1,
                                        instanceId: instanceId ?? report.identity.instanceId, instanceIdVersion: 1,
                                        hardwareComponents: [], instanceComponents: [], rootOnlyEvidence: [])
            var probes = report.probes
            if let componentHash {
                let probe = probes[0]
                var components = probe.identityComponents
                components[1] = IdentityComponent(scope: components[1].scope, name: components[1].name, hash: componentHash, worldReadable: true)
                probes[0] = ProbeEntry(id: probe.id, tier: probe.tier, status: probe.status, durationMs: probe.durationMs, issues: probe.issues,
                                       signals: probe.signals, identityComponents: components)
            }
            return SignalReport(schemaVersion: 2, collectorVersion: "0.1.0", collectedAt: report.collectedAt, root: "/", tiers: [.fast],
                                budgetMs: 1200, elapsedMs: 1, probes: probes, identity: identity)
        }
        for (bad, field) in [(replacing(instanceId: "machine\u{0}id"), "report.identity.instanceId"),
                             (replacing(instanceId: "tab\there"), "report.identity.instanceId"),
                             (replacing(instanceId: ""), "report.identity.instanceId"),
                             (replacing(componentHash: String(repeating: "a", count: 129)), "report.probes[0].identityComponents[1].hash"),
                             (replacing(componentHash: "é"), "report.probes[0].identityComponents[1].hash")] {
            let answer = under.identify(try F.body(bad))
            #expect(answer.status == 400 && answer.code == "bad_request")
            #expect(try answer.wireError().error.message.contains(field))
        }
        #expect(try under.eventCount() == 0)
        // The in-flight marker of a refused body is gone: the same key may be used again.
        #expect(try under.identify(try F.body(report)).identifyAnswer().visitorIsNew)
    }

    @Test func anInFlightKeyIs409UntilItIsStaleThenTakenOver() throws {
        let under = try EngineUnderTest("inflight")
        let body = try F.body(F.report(F.host()))
        // What a first attempt leaves in the store while it works (or after it died).
        try under.store.transaction { (tx) throws(StoreError) in
            try tx.putIdempotency(IdempotencyRecord(organization: F.organization, key: "k", bodyHash: EngineWire.sha256(body),
                                                    state: .inFlight, response: nil, status: nil, createdAt: F.now, updatedAt: F.now))
        }
        let busy = under.identify(body, key: "k", now: F.now + 29)
        #expect(busy.status == 409 && busy.code == "request_in_progress")
        // Another body under the in-flight key is still a reuse.
        #expect(under.identify(try F.body(F.report(F.host(), tag: "t")), key: "k", now: F.now + 29).status == 422)
        #expect(try under.eventCount() == 0)

        let taken = try under.identify(body, key: "k", now: F.now + 30).identifyAnswer()
        #expect(!taken.duplicate && taken.visitorIsNew)
        let record = try #require(try under.idempotency("k"))
        #expect(record.state == .complete && record.createdAt == F.now && record.status == 200)
        #expect(try under.identify(body, key: "k", now: F.now + 31).identifyAnswer().duplicate)
        #expect(try under.eventCount() == 1)
    }

    @Test func aKeyOlderThan24HoursIsForgotten() throws {
        let under = try EngineUnderTest("expiry")
        let body = try F.body(F.report(F.host()))
        let first = try under.identify(body, key: "k").identifyAnswer()
        let late = try under.identify(body, key: "k", now: F.now + IdentityEngine.idempotencyRetentionSeconds).identifyAnswer()
        #expect(!late.duplicate && late.requestId != first.requestId && late.visitorId == first.visitorId)
        #expect(try under.eventCount() == 2)
    }

    @Test func anInvalidBodyIs400NamingTheFieldAndLeavesNothingBehind() throws {
        let under = try EngineUnderTest("invalid")
        let valid = String(decoding: try F.body(F.report(F.host())), as: UTF8.self)
        let cases: [(body: String, mentions: String)] = [
            ("{\"client\":", "not valid JSON"),
            ("[]", "body"),
            (valid.replacingOccurrences(of: #""status":"ok""#, with: #""status":7"#), "report.probes[0].status"),
            (valid.replacingOccurrences(of: #""status":"ok""#, with: #""status":""# + String(repeating: "x", count: 100_000) + #"""#),
             "report.probes[0].status"),
            (valid.replacingOccurrences(of: #""identity":"#, with: #""identityX":"#), "report.identity"),
            (valid.replacingOccurrences(of: #""proxy":false"#, with: #""proxy":null"#), "client.proxy"),
            (valid.replacingOccurrences(of: #""schemaVersion":2"#, with: #""schemaVersion":3"#), "report.schemaVersion"),
        ]
        for (index, item) in cases.enumerated() {
            let answer = under.identify(Array(item.body.utf8), key: "k\(index)")
            #expect(answer.status == 400 && answer.code == "bad_request", "\(item.mentions)")
            let error = try answer.wireError()
            #expect(error.error.code == "bad_request")
            #expect(error.error.message.contains(item.mentions), "\(error.error.message)")
            #expect(error.error.message.utf8.count <= 512)
            #expect(try under.idempotency("k\(index)") == nil)
        }
        // Bytes no JSON reader should choke on: invalid UTF-8, deep nesting, a huge number.
        let hostile: [[UInt8]] = [[0x7B, 0xFF, 0x7D], Array(repeating: UInt8(ascii: "["), count: 100_000), [],
                                  Array(valid.replacingOccurrences(of: #""budgetMs":1200"#, with: #""budgetMs":1e400"#).utf8)]
        for (index, body) in hostile.enumerated() {
            let answer = under.identify(body, key: "h\(index)")
            #expect(answer.status == 400 && answer.code == "bad_request")
        }
        #expect(try under.eventCount() == 0)
        // The key is free: a good body under it is processed, not refused as a reuse.
        #expect(try under.identify(Array(valid.utf8), key: "k0").identifyAnswer().visitorIsNew)
        #expect(under.identify(Array(valid.utf8), key: "").status == 400)
    }

    @Test func theServerJudgesTheReportWithThePolicy() throws {
        let under = try EngineUnderTest("judged")
        // The example's key is acme42's, which derived its hardwareId.
        let answer = try under.identify(F.documentedBody, organization: "acme42").identifyAnswer()
        // docs/api.md's example answer for this body.
        #expect(answer.verdicts?.virtualization.value == true && answer.verdicts?.virtualization.kind == "qemu")
        #expect(answer.triggers == [IdentifyTrigger(signal: "dmi_vendor_names_hypervisor", group: "virtualization", weight: 3, confidence: .medium)])
        #expect(answer.suspectScore == 3 && answer.suspectLevel == .low)
        // One model string is nothing to know a host by.
        #expect(!answer.identifiable && answer.visitorIsNew && answer.visitorConfidence == 20)
    }

    @Test func eventsAreStoredWithTheReportAsJudgedAndReadOnlyByTheirOrganization() throws {
        let under = try EngineUnderTest("events")
        // Members this server does not know are dropped and counted, never stored.
        var text = String(decoding: try F.body(F.report(F.host(), tag: "checkout")), as: UTF8.self)
        text = text.replacingOccurrences(of: #""report":{"#, with: #""report":{"futureMember":{"n":12345678901234567890},"#)
        text = text.replacingOccurrences(of: #""client":{"#, with: #""client":{"extra":[1,{"a":2}],"#)
        let body = Array(text.utf8)
        let stored = under.identify(body, deviceKey: "ab12", verified: true)
        #expect(stored.unknownMembersDropped == 2)
        let answer = try stored.identifyAnswer()

        let read = under.engine.event(requestId: answer.requestId, organization: F.organization)
        #expect(read.status == 200)
        let event = try JSONDecoder.fingerly.decode(StoredEvent.self, from: Data(read.body))
        #expect(event.requestId == answer.requestId && event.visitorId == answer.visitorId && event.visitorIsNew && !event.duplicate)
        #expect(event.receivedAt == Date(timeIntervalSince1970: Double(F.now)) && event.tag == "checkout")
        #expect(event.signature == StoredEvent.Signature(verified: true, keyId: "ab12"))
        #expect(event.suspectScore == answer.suspectScore && event.triggers == answer.triggers ?? [])
        let secret = try #require(try under.store.transaction { (tx) throws(StoreError) -> [UInt8]? in
            try tx.identifierSecret(organization: F.organization, candidate: [1])
        })
        let judged = StoredIdentifierKeys(secret: secret).rekeyed(F.report(F.host(), tag: "checkout"))
        #expect(event.report == judged)
        let document = String(decoding: read.body, as: UTF8.self)
        #expect(!document.contains("futureMember") && !document.contains("extra"))
        // The canonical encoding of what was judged, re-keyed, the last member of the event.
        let canonical = String(decoding: try JSONEncoder.fingerly.encode(judged), as: UTF8.self)
        #expect(document.hasSuffix(#""report":"# + canonical + "}"))
        // Nulls are written out.
        let unsigned = try under.identify(try F.body(F.report(F.host()))).identifyAnswer()
        let plain = String(decoding: under.engine.event(requestId: unsigned.requestId, organization: F.organization).body, as: UTF8.self)
        #expect(plain.contains(#""tag":null"#) && plain.contains(#""signature":{"keyId":null,"verified":false}"#))

        for (requestId, organization) in [(answer.requestId, "globex"), ("req_UNKNOWN", F.organization), ("", F.organization),
                                          (String(repeating: "r", count: 10_000), F.organization)] {
            let missing = under.engine.event(requestId: requestId, organization: organization)
            #expect(missing.status == 404 && missing.code == "not_found")
            #expect(try missing.wireError().error.code == "not_found")
        }
    }

    @Test func organizationsNeverShareVisitors() throws {
        let under = try EngineUnderTest("orgs")
        let body = try F.body(F.report(F.host()))
        let a = try under.identify(body, organization: "acme").identifyAnswer()
        let b = try under.identify(try F.body(F.report(F.host(), organization: "globex")), organization: "globex").identifyAnswer()
        #expect(a.visitorIsNew && b.visitorIsNew && a.visitorId != b.visitorId)
        #expect(try under.engine.visitors(organization: "acme", limit: 10).map(\.visitorId) == [a.visitorId])
        #expect(try under.eventCount("globex") == 1)
    }

    @Test func aVisitorBoundToAKeyIsNeverJoinedWithoutIt() throws {
        let under = try EngineUnderTest("devicekey")
        let body = try F.body(F.report(F.host()))
        let farmWeight = try #require(Policy.embedded().suspect?.weights[.farm])
        let first = try under.identify(body, deviceKey: "key-a", verified: true).identifyAnswer()
        #expect(first.triggers?.isEmpty == true)
        #expect(try under.identify(body, deviceKey: "key-a", verified: true).identifyAnswer().triggers?.isEmpty == true)
        let claim = IdentifyTrigger(signal: "identity_claimed_without_key", group: "farm", weight: farmWeight, confidence: .high)
        // Unsigned, an unverified keyid (whatever the sender wrote) or a new verified key: each a
        // visitor of its own with the claim; the bound visitor is untouched.
        var claimants: [String] = []
        for (key, verified) in [(nil, false), ("key-a", false), ("key-b", true)] as [(String?, Bool)] {
            let answer = try under.identify(body, deviceKey: key, verified: verified).identifyAnswer()
            #expect(answer.visitorId != first.visitorId && answer.visitorIsNew)
            #expect(answer.triggers == [claim] && answer.suspectScore == farmWeight && answer.visitorConfidence == 20)
            claimants.append(answer.visitorId)
        }
        #expect(Set(claimants).count == 3)
        // The new key's claim is settled: its next request is the visitor it was answered as, not news.
        let settled = try under.identify(body, deviceKey: "key-b", verified: true).identifyAnswer()
        #expect(settled.visitorId == claimants[2] && !settled.visitorIsNew && settled.visitorConfidence == 80)
        #expect(settled.triggers?.isEmpty == true)
        let stored = try under.store.transaction { (tx) throws(StoreError) -> VisitorRecord? in try tx.visitor(id: first.visitorId, organization: F.organization) }
        #expect(stored?.deviceKeys.map(\.keyId) == ["key-a"])
        // Only the verified key's claim is remembered, without identifiers: nothing the host sends finds it.
        let listed = try under.engine.visitors(organization: F.organization, limit: 10)
        #expect(Set(listed.map(\.visitorId)) == [first.visitorId, claimants[2]])
        #expect(listed.first { $0.visitorId == claimants[2] }.map { $0.instanceId == nil && $0.components == 0 && $0.deviceKeys == 1 } == true)
        let again = try under.identify(body, deviceKey: "key-a", verified: true).identifyAnswer()
        #expect(again.visitorId == first.visitorId && again.triggers?.isEmpty == true)
        // A rotation statement the caller verified (key-a vouching for key-c) lets key-c join and binds it.
        let rotated = try under.engine.identify(organization: F.organization, idempotencyKey: "rotation", body: body, deviceKeyID: "key-c",
                                                signatureVerified: true, rotatedFrom: "key-a", now: F.now + 1).identifyAnswer()
        #expect(rotated.visitorId == first.visitorId && rotated.triggers?.isEmpty == true)
        #expect(try under.identify(body, deviceKey: "key-c", verified: true).identifyAnswer().visitorId == first.visitorId)
        // Rotating from a key the visitor never had proves nothing.
        let forged = try under.engine.identify(organization: F.organization, idempotencyKey: "forged", body: body, deviceKeyID: "key-d",
                                               signatureVerified: true, rotatedFrom: "key-z", now: F.now + 2).identifyAnswer()
        #expect(forged.visitorId != first.visitorId && forged.triggers == [claim])
        let keys = try under.store.transaction { (tx) throws(StoreError) -> VisitorRecord? in try tx.visitor(id: first.visitorId, organization: F.organization) }
        #expect(keys?.deviceKeys == [DeviceKeyRecord(keyId: "key-a", firstProvenAt: F.now), DeviceKeyRecord(keyId: "key-c", firstProvenAt: F.now + 1)])
    }

    @Test func aVisitorFirstSeenUnsignedIsNeverBound() throws {
        let under = try EngineUnderTest("unbound")
        let body = try F.body(F.report(F.host()))
        let first = try under.identify(body).identifyAnswer()
        let signed = try under.identify(body, deviceKey: "key-a", verified: true).identifyAnswer()
        #expect(signed.visitorId == first.visitorId && signed.triggers?.isEmpty == true)
        #expect(try under.identify(body).identifyAnswer().visitorId == first.visitorId)
        let stored = try under.store.transaction { (tx) throws(StoreError) -> VisitorRecord? in try tx.visitor(id: first.visitorId, organization: F.organization) }
        #expect(stored?.deviceKeys.isEmpty == true)
    }

    @Test func identifiersThatDoNotDeriveFromTheComponentsAre400() throws {
        let under = try EngineUnderTest("derivation")
        let victim = F.report(F.host())
        let own = F.report(F.host(machineId: "machine-9", uuid: "uuid-9", disk: "disk-9", nic: "nic-9"))
        func forged(instanceId: String?, hardwareId: String?) -> SignalReport {
            let identity = HostIdentity(hardwareId: hardwareId, hardwareIdVersion: 1, instanceId: instanceId, instanceIdVersion: 1,
                                        hardwareComponents: own.identity.hardwareComponents, instanceComponents: own.identity.instanceComponents,
                                        rootOnlyEvidence: own.identity.rootOnlyEvidence)
            return SignalReport(schemaVersion: 2, collectorVersion: "0.1.0", collectedAt: own.collectedAt, root: "/", tiers: [.fast],
                                budgetMs: 1200, elapsedMs: 1, probes: own.probes, identity: identity, identifierKeying: .organization)
        }
        for (report, field) in [(forged(instanceId: victim.identity.instanceId, hardwareId: own.identity.hardwareId), "instanceId"),
                                (forged(instanceId: own.identity.instanceId, hardwareId: victim.identity.hardwareId), "hardwareId"),
                                (forged(instanceId: nil, hardwareId: own.identity.hardwareId), "instanceId")] {
            let answer = under.identify(try F.body(report))
            #expect(answer.status == 400 && answer.code == "identity_mismatch")
            #expect(try answer.wireError().error.message.contains("report.identity.\(field)"))
        }
        // Another organization's keying derives other ids: a report made for acme is refused by globex.
        #expect(under.identify(try F.body(own), organization: "globex").code == "identity_mismatch")
        #expect(try under.eventCount() == 0)
        #expect(try under.identify(try F.body(own)).identifyAnswer().visitorIsNew)
    }

    /// Each summary entry stands for a component and is re-keyed against them: seventy thousand
    /// made-up ones cost seconds of CPU a request (a hostile review's finding), and are refused.
    @Test func identitySummariesLongerThanTheComponentsAre400() throws {
        let under = try EngineUnderTest("summaries")
        let own = F.report(F.host())
        let components = own.probes.reduce(0) { $0 + $1.identityComponents.count }
        let padding = (0...components).map { String(format: "made-up-%d:%012x", $0, $0) }
        for field in ["hardwareComponents", "instanceComponents", "rootOnlyEvidence"] {
            let identity = own.identity
            let padded = HostIdentity(hardwareId: identity.hardwareId, hardwareIdVersion: 1, instanceId: identity.instanceId,
                                      instanceIdVersion: 1,
                                      hardwareComponents: field == "hardwareComponents" ? padding : identity.hardwareComponents,
                                      instanceComponents: field == "instanceComponents" ? padding : identity.instanceComponents,
                                      rootOnlyEvidence: field == "rootOnlyEvidence" ? padding : identity.rootOnlyEvidence)
            let report = SignalReport(schemaVersion: 2, collectorVersion: "0.1.0", collectedAt: own.collectedAt, root: "/",
                                      tiers: [.fast], budgetMs: 1200, elapsedMs: 1, probes: own.probes, identity: padded,
                                      identifierKeying: .organization)
            let answer = under.identify(try F.body(report))
            #expect(answer.status == 400, "\(field)")
            #expect(try answer.wireError().error.message.contains("report.identity.\(field)"))
        }
        #expect(try under.eventCount() == 0)
        #expect(under.identify(try F.body(own)).status == 200)
    }

    @Test func storedIdentifiersAreHMACSHA256UnderTheSecret() {
        // RFC 2104 over "fingerly-stored-identifier-v1\nabc" (Python's hmac module gives the same).
        #expect(StoredIdentifierKeys(secret: Array(repeating: 7, count: 32)).rekey("abc")
                == "853252c9b04de71516a1e9d27f4821a92860d0c2eaef3b25cbcad54bf149efb3")
    }

    @Test func theServersIdentifiersAreTheOnesDeriveGives() {
        let hasher = IdentifierHasher(organization: F.organization)
        func component(_ scope: IdentityComponent.Scope, _ name: String, _ value: String, _ readable: Bool = true) -> IdentityComponent {
            IdentityComponent(scope: scope, name: name, hash: hasher.hash(value), worldReadable: readable)
        }
        let sets: [[IdentityComponent]] = [
            [], [component(.hardware, "dmi.product_uuid", "u", false)],
            [component(.instance, "machine.machine_id", "m"), component(.hardware, "dmi.product_uuid", "u"),
             component(.hardware, "dmi.product_uuid", "u"), component(.hardware, "net.mac=odd", "a")],
        ]
        for components in sets {
            let full = HostIdentity.derive(from: components, hasher: hasher)
            let ids = HostIdentity.derivedIdentifiers(from: components, hasher: hasher)
            #expect(ids.hardwareId == full.hardwareId && ids.instanceId == full.instanceId)
        }
    }

    @Test func aSummaryIsLookedUpByTheTwelveCharactersClientsWrite() {
        let keys = StoredIdentifierKeys(secret: Array(repeating: 7, count: 32))
        let hasher = IdentifierHasher(organization: F.organization)
        let hash = hasher.hash("uuid")
        let components = [IdentityComponent(scope: .hardware, name: "dmi.product_uuid", hash: hash, worldReadable: false),
                          IdentityComponent(scope: .hardware, name: "short", hash: "abc", worldReadable: false)]
        let base = F.report(F.host())
        let identity = HostIdentity(hardwareId: nil, hardwareIdVersion: 1, instanceId: nil, instanceIdVersion: 1,
                                    hardwareComponents: [], instanceComponents: [],
                                    rootOnlyEvidence: ["hardware/dmi.product_uuid:" + hash.prefix(12),
                                                       "hardware/dmi.product_uuid:" + hash.prefix(11), "hardware/short:abc"])
        let report = SignalReport(schemaVersion: base.schemaVersion, collectorVersion: base.collectorVersion,
                                  collectedAt: base.collectedAt, tag: nil, root: base.root, tiers: base.tiers,
                                  budgetMs: base.budgetMs, elapsedMs: base.elapsedMs,
                                  probes: [ProbeEntry(id: "p", tier: .fast, status: .ok, durationMs: 1, detail: nil, issues: [],
                                                      signals: [:], identityComponents: components)],
                                  identity: identity, identifierKeying: nil, freeText: nil, prefetchedAgeMs: nil)
        let stored = keys.rekeyed(report).identity.rootOnlyEvidence
        #expect(stored[0] == "hardware/dmi.product_uuid:" + keys.rekey(hash).prefix(12))
        #expect(stored[2] == "hardware/short:" + keys.rekey("abc").prefix(12))
        // Eleven characters are no prefix a client writes: the summary is re-keyed on its own.
        #expect(stored[1] == "hardware/dmi.product_uuid:" + keys.rekey("summary\n" + identity.rootOnlyEvidence[1]).prefix(12))
    }

    @Test func hashesInsideASignalsTextAreReKeyed() {
        let keys = StoredIdentifierKeys(secret: Array(repeating: 7, count: 32))
        let hash = String(repeating: "ab", count: 32)
        #expect(StoredIdentifierKeys.identifierHashRanges(in: "eth0 \(hash)") == [5..<69])
        #expect(StoredIdentifierKeys.identifierHashRanges(in: "x\(hash)").isEmpty)
        #expect(StoredIdentifierKeys.identifierHashRanges(in: hash + "0").isEmpty)
        #expect(StoredIdentifierKeys.identifierHashRanges(in: "\(hash),\(hash)") == [0..<64, 65..<129])
        let report = F.report(F.host(), signals: ["net.permanent_macs": .strings(["eth0 \(hash)", "lo"])])
        let kept = keys.rekeyed(report).probes.compactMap { $0.signals["net.permanent_macs"] }.first
        #expect(kept == .strings(["eth0 \(keys.rekey(hash))", "lo"]))
    }

    @Test func theReportTextIsReKeyedInPlaceOnlyWhenThatIsExactlyTheReKeyedReport() throws {
        let keys = StoredIdentifierKeys(secret: Array(repeating: 7, count: 32))
        let hasher = IdentifierHasher(organization: F.organization)
        let report = F.report(F.host(), signals: ["machine.machine_id": .string(hasher.hash("machine-1"))])
        let text = try JSONEncoder.fingerly.encode(report)
        let replaced = try #require(keys.rekeyed(reportText: Array(text)[...], of: report))
        #expect(try JSONDecoder.fingerly.decode(SignalReport.self, from: Data(replaced)) == keys.rekeyed(report))
        #expect(replaced == Array(try JSONEncoder.fingerly.encode(keys.rekeyed(report))))
        // A summary spelt like a component hash is re-keyed as a summary, the hash as a hash: one
        // value, two stored values, so no rewrite by value can be right.
        let hash = try #require(report.probes.flatMap(\.identityComponents).first?.hash)
        let identity = report.identity
        let ambiguous = SignalReport(schemaVersion: report.schemaVersion, collectorVersion: report.collectorVersion,
                                     collectedAt: report.collectedAt, tag: report.tag, root: report.root, tiers: report.tiers,
                                     budgetMs: report.budgetMs, elapsedMs: report.elapsedMs, probes: report.probes,
                                     identity: HostIdentity(hardwareId: identity.hardwareId, hardwareIdVersion: identity.hardwareIdVersion,
                                                            instanceId: identity.instanceId, instanceIdVersion: identity.instanceIdVersion,
                                                            hardwareComponents: identity.hardwareComponents + [hash],
                                                            instanceComponents: identity.instanceComponents,
                                                            rootOnlyEvidence: identity.rootOnlyEvidence),
                                     identifierKeying: report.identifierKeying, freeText: report.freeText,
                                     prefetchedAgeMs: report.prefetchedAgeMs)
        #expect(keys.rekeyed(reportText: Array(try JSONEncoder.fingerly.encode(ambiguous))[...], of: ambiguous) == nil)
        // An escape could hide a value; a value where the report does not have it (here the tag)
        // would be replaced where rekeyed(_:) keeps it: the caller encodes instead.
        let escaped = String(decoding: text, as: UTF8.self).replacingOccurrences(of: #""root":"/""#, with: #""root":"\/""#)
        #expect(keys.rekeyed(reportText: Array(escaped.utf8)[...], of: report) == nil)
        let tagged = F.report(F.host(), tag: report.identity.instanceId)
        #expect(keys.rekeyed(reportText: Array(try JSONEncoder.fingerly.encode(tagged))[...], of: tagged) == nil)
        // Through the engine either way, the event holds the re-keyed report.
        let under = try EngineUnderTest("rekeyed-text")
        let secret = try #require(try under.store.transaction { (tx) throws(StoreError) -> [UInt8]? in
            _ = try tx.ensureOrganization(named: F.organization, now: 1)
            return try tx.identifierSecret(organization: F.organization, candidate: [1])
        })
        let body = String(decoding: try F.body(tagged), as: UTF8.self).replacingOccurrences(of: #""root":"/""#, with: #""root":"\/""#)
        let answer = try under.identify(Array(body.utf8)).identifyAnswer()
        let event = try JSONDecoder.fingerly.decode(StoredEvent.self, from: Data(under.engine.event(requestId: answer.requestId,
                                                                                                   organization: F.organization).body))
        #expect(event.report == StoredIdentifierKeys(secret: secret).rekeyed(tagged))
    }

    @Test func storedIdentifiersAndTheEventAreKeyedWithTheOrganizationsSecret() throws {
        let under = try EngineUnderTest("rekeyed")
        let report = F.report(F.host())
        let answer = try under.identify(try F.body(report), deviceKey: "key-a", verified: true).identifyAnswer()
        let secret = try #require(try under.store.transaction { (tx) throws(StoreError) -> [UInt8]? in
            try tx.identifierSecret(organization: F.organization, candidate: [1])
        })
        #expect(secret.count == 32 && secret != [1])
        let keys = StoredIdentifierKeys(secret: secret)
        let clientValues = Set([report.identity.instanceId, report.identity.hardwareId].compactMap { $0 }
            + report.probes.flatMap(\.identityComponents).map(\.hash))
        let visitor = try #require(try under.store.transaction { (tx) throws(StoreError) -> VisitorRecord? in
            try tx.visitor(id: answer.visitorId, organization: F.organization)
        })
        #expect(visitor.instanceId == report.identity.instanceId.map(keys.rekey))
        #expect(visitor.hardwareId == report.identity.hardwareId.map(keys.rekey))
        #expect(!visitor.components.isEmpty && visitor.components.allSatisfy { !clientValues.contains($0.hash) })
        let eventBytes = under.engine.event(requestId: answer.requestId, organization: F.organization).body
        let event = try JSONDecoder.fingerly.decode(StoredEvent.self, from: Data(eventBytes))
        #expect(event.report == keys.rekeyed(report))
        // An identifier hash a probe also wrote as a signal is re-keyed there too, consistently.
        let withSignal = F.report(F.host(), signals: ["machine.machine_id": .string(IdentifierHasher(organization: F.organization).hash("machine-1")),
                                                      "os.id": .string("debian")])
        let rekeyedSignals = keys.rekeyed(withSignal).probes[0].signals
        #expect(rekeyedSignals["machine.machine_id"] == .string(keys.rekey(IdentifierHasher(organization: F.organization).hash("machine-1"))))
        #expect(rekeyedSignals["os.id"] == .string("debian"))
        let text = String(decoding: eventBytes, as: UTF8.self)
        for value in clientValues { #expect(!text.contains(value)) }
        for part in report.identity.hardwareComponents + report.identity.instanceComponents {
            #expect(!text.contains(part), "\(part)")
        }
        // The stored values sent back as a claim are refused: they derive nothing.
        #expect(under.identify(try F.body(event.report)).code == "identity_mismatch")
        // Another organization has its own secret.
        _ = try under.identify(try F.body(F.report(F.host(), organization: "globex")), organization: "globex").identifyAnswer()
        let other = try under.store.transaction { (tx) throws(StoreError) -> [UInt8]? in
            try tx.identifierSecret(organization: "globex", candidate: [1])
        }
        #expect(other != nil && other != secret)
    }

    @Test func concurrentAttemptsStoreOneEventAndOneVisitor() throws {
        let under = try EngineUnderTest("concurrent")
        let body = try F.body(F.report(F.host()))
        // One key from eight threads at once: one is processed, the rest wait (409) or replay.
        let answers = Gathered<EngineAnswer>()
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            let answer = under.identify(body, key: "same")
            answers.append(answer)
        }
        let sameKey = answers.items
        #expect(sameKey.allSatisfy { $0.status == 200 || $0.status == 409 })
        let fresh = try sameKey.filter { $0.status == 200 }.map { try $0.identifyAnswer() }.filter { !$0.duplicate }
        #expect(fresh.count == 1)
        #expect(try under.eventCount() == 1)

        // Eight keys for one new host at once: the first makes the visitor, the others find it.
        let visitors = Gathered<String>()
        DispatchQueue.concurrentPerform(iterations: 8) { index in
            let answer = under.identify(try! F.body(F.report(F.host(machineId: "shared-new-host"))), key: "k\(index)")
            if let decoded = try? JSONDecoder.fingerly.decode(IdentifyAnswer.self, from: Data(answer.body)) {
                visitors.append(decoded.visitorId)
            }
        }
        let ids = visitors.items
        #expect(ids.count == 8 && Set(ids).count == 1)
        #expect(try under.eventCount() == 9)
    }

    @Test func anOriginalAmongMoreClonesThanTheLookupLimitKeepsItsVisitor() throws {
        let under = try EngineUnderTest("farm")
        let original = try under.identify(try F.body(F.report(F.host()))).identifyAnswer()
        let clones = ResolutionThresholds.candidateLimit + 6
        for index in 0..<clones {
            let clone = try under.identify(try F.body(F.report(F.host(uuid: "u\(index)", disk: "d\(index)", nic: "n\(index)"))),
                                           now: F.now + Int64(index) + 1).identifyAnswer()
            #expect(clone.visitorIsNew && clone.triggers?.contains { $0.signal == "duplicated_machine_identity" } == true)
        }
        // Every clone was seen after the original, yet the original's hardware finds its own visitor.
        let back = try under.identify(try F.body(F.report(F.host())), now: F.now + 1000).identifyAnswer()
        #expect(back.visitorId == original.visitorId && !back.visitorIsNew && back.visitorConfidence == 98)
        #expect(back.triggers?.contains { $0.signal == "duplicated_machine_identity" } == true)
    }

    @Test func throughputOnSQLite() throws {
        let under = try EngineUnderTest("throughput")
        // Realistic bodies: many distinct hosts of one model, unique keys.
        let bodies = try (0..<400).map { index in
            try F.body(F.report(F.host(machineId: "m\(index)", uuid: "u\(index)", disk: "d\(index)", nic: "n\(index)"),
                                signals: ["dmi.sys_vendor": .string("LENOVO"), "dmi.product_name": .string("20XW")]))
        }
        let start = Date()
        for (index, body) in bodies.enumerated() {
            #expect(under.identify(body, key: "k\(index)").status == 200)
        }
        let again = Date()
        for (index, body) in bodies.enumerated() {
            #expect(under.identify(body, key: "r\(index)").status == 200)
        }
        let end = Date()
        let newRate = Double(bodies.count) / again.timeIntervalSince(start)
        let knownRate = Double(bodies.count) / end.timeIntervalSince(again)
        #if DEBUG
        let build = "debug"
        #else
        let build = "release"
        #endif
        print("engine identify on SQLite (\(build) build, \(bodies[0].count)-byte bodies): \(Int(newRate))/s new visitors, \(Int(knownRate))/s known visitors")
        #expect(try under.eventCount() == 2 * bodies.count)
    }
}

/// Issue 12's resolution acceptance over the collector's stability fixtures: each report is
/// collected from a fixture tree by the real CLI and the engine gets the exact body it would send.
@Suite(.serialized) struct EngineFixtureResolutionTests {
    static let organization = "org-a"

    private func laptop(_ label: String, recordings: [String] = [DeviceFixtures.laptop]) throws -> String {
        try #require(DeviceFixtures.umockdevAvailable, "umockdev-run is missing: scripts/install-deps --test installs it")
        return try DeviceFixtures.hostRoot(recordings: recordings, label: label)
    }

    private func set(_ root: String, _ path: String, _ value: String) throws {
        try DeviceFixtures.write(value + "\n", to: root + path)
    }

    /// What `fingerly-identify` would submit for this tree, byte for byte.
    private func body(_ root: String) throws -> [UInt8] {
        let output = try runCLI(["--no-submit", "--request-only", "--api-key", TestKeys.key(org: Self.organization), "--root", root])
        try #require(output.status == 0, "\(output.standardError)")
        return Array(output.standardOutput.utf8)
    }

    @Test func rebootUSBAndDiskKeepTheVisitorCloneAndSiblingDoNot() throws {
        let under = try EngineUnderTest("fixtures")
        func identify(_ body: [UInt8]) throws -> IdentifyAnswer {
            try under.identify(body, organization: Self.organization).identifyAnswer()
        }
        let base = try laptop("engine-base")
        let baseBody = try body(base)
        let first = try identify(baseBody)
        #expect(first.visitorIsNew && first.identifiable)

        // Every component kind the probes emitted has a weight of its own.
        let submission = try JSONDecoder.fingerly.decode(SubmissionBody.self, from: Data(baseBody))
        let kinds = Set(submission.report.probes.flatMap(\.identityComponents).map(\.name))
        #expect(kinds.isSuperset(of: ["machine-id", "dmi-uuid", "disk", "nic", "cpu-model", "dmi-model", "pci-inventory", "built-in-panel"]))
        #expect(kinds.subtracting(ComponentWeights.table.keys).isEmpty, "\(kinds.subtracting(ComponentWeights.table.keys))")

        let rebooted = try TestPaths.copyOfTree(base, label: "engine-reboot")
        try set(rebooted, "/proc/sys/kernel/random/boot_id", "6c1e0a52-7d4f-4b8e-a1c3-9f2e5d7b8a60")
        try set(rebooted, "/proc/uptime", "12.53 20.11")
        let afterReboot = try identify(try body(rebooted))
        #expect(afterReboot.visitorId == first.visitorId && !afterReboot.visitorIsNew && afterReboot.visitorConfidence == 98)

        let plugged = try identify(try body(try laptop("engine-usb", recordings: [DeviceFixtures.laptop, DeviceFixtures.peripherals])))
        #expect(plugged.visitorId == first.visitorId && !plugged.visitorIsNew && plugged.visitorConfidence == 98)

        let newDisk = try TestPaths.copyOfTree(base, label: "engine-disk")
        try set(newDisk, HardwareIdentityTests.nvme + "/serial", "S69ENF0R999999Z")
        try set(newDisk, HardwareIdentityTests.nvme + "/nvme0n1/wwid", "eui.002538b221b30000")
        let diskBody = try body(newDisk)
        let afterDisk = try identify(diskBody)
        #expect(afterDisk.visitorId == first.visitorId && !afterDisk.visitorIsNew)
        #expect((70...90).contains(afterDisk.visitorConfidence), "\(afterDisk.visitorConfidence)")
        #expect(afterDisk.triggers?.contains { $0.signal == "duplicated_machine_identity" } == false)

        // A VM cloned from the image: the same machine-id and filesystem, its own SMBIOS UUID,
        // serials, disk and MAC from the hypervisor.
        let clone = try TestPaths.copyOfTree(base, label: "engine-clone")
        try set(clone, "/sys/class/dmi/id/product_uuid", "5b0e7c1a-92d4-4f6e-8a3b-1c2d3e4f5a6b")
        for file in ["product_serial", "board_serial", "chassis_serial"] {
            try set(clone, "/sys/class/dmi/id/" + file, "CLONE-\(file)-0042")
        }
        try set(clone, HardwareIdentityTests.nvme + "/serial", "QM00042")
        try set(clone, HardwareIdentityTests.nvme + "/nvme0n1/wwid", "eui.0000000000000042")
        try set(clone, HardwareIdentityTests.wifi + "/net/wlp0s20f3/address", "52:54:00:12:34:56")
        let cloneBody = try body(clone)
        let cloneReport = try JSONDecoder.fingerly.decode(SubmissionBody.self, from: Data(cloneBody)).report
        #expect(cloneReport.identity.instanceId == submission.report.identity.instanceId)
        #expect(cloneReport.identity.hardwareId != submission.report.identity.hardwareId)
        let cloned = try identify(cloneBody)
        #expect(cloned.visitorIsNew && cloned.visitorId != first.visitorId)
        let farm = try #require(cloned.triggers?.first { $0.signal == "duplicated_machine_identity" })
        #expect(farm.group == "farm" && farm.confidence == .high && farm.weight > 0)
        #expect((cloned.suspectScore ?? 0) >= farm.weight)

        // Another laptop of the model (HardwareIdentityTests' sibling): its own machine-id, disk and MAC.
        let sibling = try TestPaths.copyOfTree(base, label: "engine-sibling")
        try set(sibling, "/etc/machine-id", "0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e")
        try set(sibling, HardwareIdentityTests.nvme + "/serial", "S69ENF0R654321B")
        try set(sibling, HardwareIdentityTests.nvme + "/nvme0n1/wwid", "eui.002538b221b3ffee")
        try set(sibling, HardwareIdentityTests.wifi + "/net/wlp0s20f3/address", "3c:a9:f4:77:10:02")
        let other = try identify(try body(sibling))
        #expect(other.visitorIsNew && other.visitorId != first.visitorId && other.visitorId != cloned.visitorId)
        #expect(other.triggers?.contains { $0.signal == "duplicated_machine_identity" } == false)

        // Each clone keeps its own visitor, and both now show the duplicated machine identity.
        let cloneAgain = try identify(cloneBody)
        #expect(cloneAgain.visitorId == cloned.visitorId && !cloneAgain.visitorIsNew)
        let originalAgain = try identify(diskBody)
        #expect(originalAgain.visitorId == first.visitorId)
        #expect(cloneAgain.triggers?.contains { $0.signal == "duplicated_machine_identity" } == true)
        #expect(originalAgain.triggers?.contains { $0.signal == "duplicated_machine_identity" } == true)
        #expect(try under.engine.visitors(organization: Self.organization, limit: 10).count == 3)
    }
}
