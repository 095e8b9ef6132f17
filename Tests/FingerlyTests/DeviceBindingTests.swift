@testable import FingerlyCatalogue
@testable import FingerlyPostgresStore
@testable import FingerlySQLiteStore
import Foundation
import Testing
@testable import Fingerly
@testable import FingerlyEngine
@testable import FingerlyModel
@testable import FingerlyPolicy
@testable import FingerlyProbes
@testable import FingerlyServer
@testable import FingerlyStore
@testable import FingerlyTransport

/// Device-bound visitors and identifiers the server can check (issue 22), against a real
/// `fingerly-server` over SQLite and over PostgreSQL, with the real client as the victim and an
/// impostor that holds the public key and a copy of the victim's report.
@Suite(.serialized) struct DeviceBindingTests {
    /// A server over a fresh database of `backend` with a key of acme, and a way to read its store.
    final class Deployment {
        let database: String
        let publicKey: String
        let secretKey: String
        let server: ServerProcess
        private let dispose: () -> Void

        init(_ backend: StoreBackend, arguments: [String] = []) throws {
            switch backend {
            case .sqlite:
                database = try TestPaths.temporaryDirectory("binding") + "/db.sqlite"
                dispose = {}
            case .postgres:
                let cluster = try PostgresCluster.shared()
                let name = try cluster.createDatabase()
                database = cluster.url(database: name)
                dispose = { cluster.dropDatabase(name) }
                let migrated = try runServerCLI(["migrate", "--db", database])
                try #require(migrated.status == 0, "\(migrated.standardError)")
            }
            (publicKey, secretKey) = try addedKeys(try runServerCLI(["keys", "add", "--org", "acme", "--region", "eu", "--db", database]))
            server = try ServerProcess(database: database, arguments: arguments)
        }

        deinit {
            _ = server.terminate()
            dispose()
        }

        var endpoint: String { "http://127.0.0.1:\(server.port)" }

        func store() throws -> any IdentityStore {
            database.hasPrefix("postgres") ? try PostgresStore(url: database) : try SQLiteStore(path: database)
        }

        func visitor(_ id: String) throws -> VisitorRecord? {
            try store().transaction { (tx) throws(StoreError) -> VisitorRecord? in try tx.visitor(id: id, organization: "acme") }
        }

        func storedKeys() throws -> StoredIdentifierKeys {
            let secret = try store().transaction { (tx) throws(StoreError) -> [UInt8]? in
                try tx.identifierSecret(organization: "acme", candidate: [0])
            }
            return StoredIdentifierKeys(secret: try #require(secret))
        }

        /// The real client's run from `state`: signed with that state's device key.
        func clientRun(state: String) throws -> IdentifyResult {
            let run = try runCLI(SubmissionCLITests.identifyArguments(endpoint) + ["--json"],
                                 environment: SubmissionCLITests.environment(state: state, apiKey: publicKey))
            #expect(run.status == 0, "\(run.standardError)")
            return try run.identifyResult()
        }

        /// The body the real client makes of the victim's host, as anyone holding the public key can.
        func copiedBody() throws -> [UInt8] {
            var environment = SubmissionCLITests.environment(state: try SubmissionCLITests.freshState("binding-copy"), apiKey: publicKey)
            environment["FINGERLY_ENDPOINT"] = nil
            let run = try runCLI(["--no-submit", "--request-only", "--root", SubmissionCLITests.fixture, "--tiers", "fast"],
                                 environment: environment)
            try #require(run.status == 0, "\(run.standardError)")
            return Array(run.standardOutput.utf8)
        }

        func post(_ body: [UInt8], signedBy signer: DeviceKey?, rotation: String? = nil) throws -> RawResponse {
            let idempotencyKey = "\"\(UUID().uuidString.lowercased())\""
            var headers = [("Authorization", "Bearer \(publicKey)"), ("Content-Type", "application/json"), ("Idempotency-Key", idempotencyKey)]
            if let signer {
                headers += try MessageSignature.sign(method: "POST", path: "/v1/identify", body: body, idempotencyKey: idempotencyKey,
                                                     created: Int64(Date().timeIntervalSince1970), with: signer).headers
            }
            if let rotation { headers.append((KeyRotation.fieldName, rotation)) }
            return try server.client.request("POST", "/v1/identify", headers: headers, body: body)
        }
    }

    static func answer(_ response: RawResponse) throws -> IdentifyAnswer {
        try #require(response.status == 200, "\(response.status): \(response.text)")
        return try JSONDecoder.fingerly.decode(IdentifyAnswer.self, from: Data(response.body))
    }

    /// `body` with the report's hardware components replaced by values of the impostor's own and
    /// the identifiers derived from them (a clone on other hardware), or, with `instanceId`, its
    /// instance components too and that instanceId written over what they derive.
    static func rewritten(_ body: [UInt8], instanceId: String? = nil) throws -> [UInt8] {
        let hasher = IdentifierHasher(organization: "acme")
        return try withComponentHashes(body, instanceId: instanceId) { component in
            component.scope == .hardware || instanceId != nil ? hasher.hash("impostor-" + component.hash) : component.hash
        }
    }

    /// `body` with each identity component's hash replaced by `hash(component)` and the identifiers
    /// derived from them under acme, as the collector derives them; `instanceId` written over the
    /// derived one when given.
    static func withComponentHashes(_ body: [UInt8], instanceId: String? = nil,
                                    _ hash: (IdentityComponent) -> String) throws -> [UInt8] {
        let submission = try JSONDecoder.fingerly.decode(SubmissionBody.self, from: Data(body))
        let report = submission.report
        let probes = report.probes.map { probe in
            ProbeEntry(id: probe.id, tier: probe.tier, status: probe.status, durationMs: probe.durationMs, detail: probe.detail,
                       issues: probe.issues, signals: probe.signals, identityComponents: probe.identityComponents.map {
                           IdentityComponent(scope: $0.scope, name: $0.name, hash: hash($0), worldReadable: $0.worldReadable)
                       })
        }
        let derived = HostIdentity.derive(from: probes.flatMap(\.identityComponents),
                                          hasher: IdentifierHasher(organization: "acme"))
        let identity = HostIdentity(hardwareId: derived.hardwareId, hardwareIdVersion: derived.hardwareIdVersion,
                                    instanceId: instanceId ?? derived.instanceId, instanceIdVersion: derived.instanceIdVersion,
                                    hardwareComponents: derived.hardwareComponents, instanceComponents: derived.instanceComponents,
                                    rootOnlyEvidence: derived.rootOnlyEvidence)
        let changed = SignalReport(schemaVersion: report.schemaVersion, collectorVersion: report.collectorVersion,
                                   collectedAt: report.collectedAt, tag: report.tag, root: report.root, tiers: report.tiers,
                                   budgetMs: report.budgetMs, elapsedMs: report.elapsedMs, probes: probes, identity: identity,
                                   identifierKeying: report.identifierKeying, freeText: report.freeText)
        return Array(try JSONEncoder.fingerly.encode(SubmissionBody(client: submission.client, report: changed)))
    }

    /// Acceptance: an impostor with the victim's report, unsigned, signed with a new key, on
    /// other hardware, with forged ids, and with a rotation statement of a key not the victim's,
    /// is never the victim's visitor without the high-weight trigger; the victim's next run has
    /// the same visitorId and a score no higher than before; what is stored is keyed server-side.
    @Test(arguments: StoreBackend.allCases) func anImpostorNeverJoinsOrFramesABoundVisitor(backend: StoreBackend) throws {
        // Unsigned requests reach the engine here: the worst case (by default they are refused, below).
        let deployment = try Deployment(backend, arguments: ["--allow-unsigned"])
        let state = try SubmissionCLITests.freshState("binding-victim-\(backend)")
        let first = try deployment.clientRun(state: state)
        let victimId = try #require(first.visitorId)
        let victimKey = try DeviceKey.loadOrCreate(in: state)
        #expect(try deployment.visitor(victimId)?.deviceKeys.map(\.keyId) == [victimKey.keyID])
        let before = try #require(try deployment.visitor(victimId))

        let farmWeight = try #require(Policy.embedded().suspect?.weights[.farm])
        let copied = try deployment.copiedBody()
        let otherHardware = try Self.rewritten(copied)
        let stranger = try DeviceKey.ephemeral()
        let claims: [(String, RawResponse)] = [
            ("unsigned", try deployment.post(copied, signedBy: nil)),
            ("a new key", try deployment.post(copied, signedBy: try DeviceKey.ephemeral())),
            ("other hardware, unsigned", try deployment.post(otherHardware, signedBy: nil)),
            ("other hardware, a new key", try deployment.post(otherHardware, signedBy: try DeviceKey.ephemeral())),
            ("a rotation by a stranger's key", try deployment.post(copied, signedBy: try DeviceKey.ephemeral(),
                                                                    rotation: try KeyRotation.field(rotatingTo: try DeviceKey.ephemeral(),
                                                                                                    from: stranger))),
        ]
        for (label, response) in claims {
            if label.hasPrefix("a rotation") {
                // The statement names another key than the one that signed: refused outright.
                #expect(response.status == 401 && response.errorCode == "invalid_key_rotation", "\(label): \(response.text)")
                continue
            }
            let answer = try Self.answer(response)
            #expect(answer.visitorId != victimId && answer.visitorIsNew, "\(label)")
            let claim = answer.triggers?.first { $0.signal == "identity_claimed_without_key" }
            #expect(claim?.weight == farmWeight && claim?.confidence == .high, "\(label): \(answer.triggers ?? [])")
        }
        // A valid rotation statement, but by a key the victim never had.
        let newKey = try DeviceKey.ephemeral()
        let rotatedByStranger = try Self.answer(try deployment.post(copied, signedBy: newKey,
                                                                    rotation: try KeyRotation.field(rotatingTo: newKey, from: stranger)))
        #expect(rotatedByStranger.visitorId != victimId && rotatedByStranger.triggers?.contains { $0.signal == "identity_claimed_without_key" } == true)

        // Identifiers that do not derive from the components: refused, whoever signs.
        let forged = try Self.rewritten(copied, instanceId: try JSONDecoder.fingerly.decode(SubmissionBody.self, from: Data(copied)).report.identity.instanceId)
        for signer in [nil, try DeviceKey.ephemeral(), victimKey] as [DeviceKey?] {
            let refused = try deployment.post(forged, signedBy: signer)
            #expect(refused.status == 400 && refused.errorCode == "identity_mismatch", "\(refused.text)")
        }

        // Nothing of that touched the victim's visitor, and its next run is as it was.
        #expect(try deployment.visitor(victimId)?.components == before.components)
        #expect(try deployment.visitor(victimId)?.deviceKeys == before.deviceKeys)
        let next = try deployment.clientRun(state: state)
        #expect(next.visitorId == victimId && next.visitorIsNew == false)
        #expect((next.suspectScore ?? 0) <= (first.suspectScore ?? 0), "\(first.triggers) then \(next.triggers)")
        #expect(!next.triggers.contains { ["identity_claimed_without_key", "duplicated_machine_identity"].contains($0.signal) })

        // The event read with the secret key shows the server-side values, none a client sent.
        let event = try deployment.server.client.request("GET", "/v1/events/\(first.requestId)",
                                                         headers: [("Authorization", "Bearer \(deployment.secretKey)")])
        #expect(event.status == 200, "\(event.text)")
        let stored = try JSONDecoder.fingerly.decode(StoredEvent.self, from: Data(event.body))
        let sent = try JSONDecoder.fingerly.decode(SubmissionBody.self, from: Data(copied)).report
        let keys = try deployment.storedKeys()
        #expect(stored.report.identity.instanceId == sent.identity.instanceId.map(keys.rekey))
        #expect(stored.report.identity.hardwareId == sent.identity.hardwareId.map(keys.rekey))
        for value in ([sent.identity.instanceId, sent.identity.hardwareId].compactMap { $0 } + sent.probes.flatMap(\.identityComponents).map(\.hash)) {
            #expect(!event.text.contains(value))
        }
        #expect(before.instanceId == stored.report.identity.instanceId)
        // What the event shows, sent back as a claim, derives nothing.
        let replayed = Array(try JSONEncoder.fingerly.encode(SubmissionBody(client: ClientInfo(proxy: false, sdk: "fingerly-linux", version: "0.1.0"),
                                                                            report: stored.report)))
        #expect(try deployment.post(replayed, signedBy: try DeviceKey.ephemeral()).errorCode == "identity_mismatch")
    }

    /// Acceptance: nine new keys claiming the victim's identifiers leave the victim's key in
    /// place; a rotation statement by the victim's own key adopts the new key, kept newest last.
    @Test(arguments: StoreBackend.allCases) func nineNewKeysLeaveTheVictimsKeyInPlace(backend: StoreBackend) throws {
        let deployment = try Deployment(backend)
        let state = try SubmissionCLITests.freshState("binding-nine-\(backend)")
        let first = try deployment.clientRun(state: state)
        let victimId = try #require(first.visitorId)
        let victimKey = try DeviceKey.loadOrCreate(in: state)
        let copied = try deployment.copiedBody()
        // Keyids are SHA-256 of the key: the attack picked keys whose ids sort after the victim's.
        var strangers: [DeviceKey] = []
        while strangers.count < 9 {
            let key = try DeviceKey.ephemeral()
            if key.keyID > victimKey.keyID { strangers.append(key) }
        }
        for key in strangers {
            let answer = try Self.answer(try deployment.post(copied, signedBy: key))
            #expect(answer.visitorId != victimId)
            #expect(answer.triggers?.contains { $0.signal == "identity_claimed_without_key" } == true)
            // A key that claimed once is no better the second time.
            #expect(try Self.answer(try deployment.post(copied, signedBy: key)).visitorId != victimId)
        }
        #expect(try deployment.visitor(victimId)?.deviceKeys.map(\.keyId) == [victimKey.keyID])
        let next = try deployment.clientRun(state: state)
        #expect(next.visitorId == victimId && next.triggers.allSatisfy { $0.signal != "identity_claimed_without_key" })

        // The victim's key vouches for a new one: the new key joins, no trigger, and is kept after the old.
        let successor = try DeviceKey.ephemeral()
        let rotated = try Self.answer(try deployment.post(copied, signedBy: successor,
                                                          rotation: try KeyRotation.field(rotatingTo: successor, from: victimKey)))
        #expect(rotated.visitorId == victimId && rotated.triggers?.contains { $0.signal == "identity_claimed_without_key" } == false)
        let keys = try #require(try deployment.visitor(victimId)?.deviceKeys)
        #expect(keys.map(\.keyId) == [victimKey.keyID, successor.keyID])
        #expect(keys[0].firstProvenAt < keys[1].firstProvenAt)
        // Signed by the successor alone from now on.
        #expect(try Self.answer(try deployment.post(copied, signedBy: successor)).visitorId == victimId)

        // By default an unsigned request is refused, and a rotation statement needs a signature.
        let unsigned = try deployment.post(copied, signedBy: nil)
        #expect(unsigned.status == 401 && unsigned.errorCode == "missing_signature")
        let unsignedRotation = try deployment.post(copied, signedBy: nil, rotation: try KeyRotation.field(rotatingTo: successor, from: victimKey))
        #expect(unsignedRotation.status == 401 && unsignedRotation.errorCode == "invalid_key_rotation")
    }

    /// A database from before identifiers were re-keyed: its visitors hold the values clients
    /// sent. The organization's first request makes its secret and re-keys them in the same
    /// transaction, so every host keeps its visitor across the upgrade.
    @Test(arguments: StoreBackend.allCases) func visitorsStoredBeforeTheSecretKeepTheirIdentity(backend: StoreBackend) throws {
        let (store, dispose) = try backend.make()
        defer { dispose() }
        let report = EngineFixtures.report(EngineFixtures.host())
        let observed = ObservedIdentity(report: report)
        let old = VisitorRecord(id: "vis_before", organization: "acme", instanceId: observed.instanceId, hardwareId: observed.hardwareId,
                                firstSeen: 1, lastSeen: 1, components: observed.components,
                                deviceKeys: [DeviceKeyRecord(keyId: "key-a", firstProvenAt: 1)])
        try store.transaction { (tx) throws(StoreError) in
            _ = try tx.ensureOrganization(named: "acme", now: 1)
            try tx.putVisitor(old)
        }
        let engine = IdentityEngine(store: store, policy: .embedded())
        let answer = try engine.identify(organization: "acme", idempotencyKey: "after-upgrade", body: try EngineFixtures.body(report),
                                         deviceKeyID: "key-a", signatureVerified: true, now: EngineFixtures.now).identifyAnswer()
        #expect(answer.visitorId == "vis_before" && !answer.visitorIsNew && answer.triggers?.isEmpty == true)
        let (secret, visitor) = try store.transaction { (tx) throws(StoreError) -> ([UInt8]?, VisitorRecord?) in
            (try tx.identifierSecret(organization: "acme", candidate: [0]), try tx.visitor(id: "vis_before", organization: "acme"))
        }
        let keys = StoredIdentifierKeys(secret: try #require(secret))
        #expect(visitor?.instanceId == observed.instanceId.map(keys.rekey) && visitor?.hardwareId == observed.hardwareId.map(keys.rekey))
        #expect(Set(visitor?.components ?? []) == Set(observed.components.map { ComponentRecord(scope: $0.scope, name: $0.name, hash: keys.rekey($0.hash)) }))
        // Once only: a second engine (another process) finds the secret made and re-keys nothing again.
        let again = try IdentityEngine(store: store, policy: .embedded()).identify(
            organization: "acme", idempotencyKey: "later", body: try EngineFixtures.body(report), deviceKeyID: "key-a",
            signatureVerified: true, now: EngineFixtures.now + 1).identifyAnswer()
        #expect(again.visitorId == "vis_before" && again.triggers?.isEmpty == true)
    }

    /// The local mode goes through the engine as the server does: its requests are signed with
    /// the device key, so its visitors are bound; the key deleted, the host claims its old visitor.
    @Test func theLocalModeSignsAndBindsItsVisitors() throws {
        let state = try SubmissionCLITests.freshState("binding-local")
        let environment = ProcessInfo.processInfo.environment.merging(["FINGERLY_STATE_DIR": state]) { $1 }
        let arguments = ["--root", TestPaths.fixture("laptop-baremetal"), "--tiers", "fast", "--json"]
        func run() throws -> IdentifyResult {
            let output = try runCLI(arguments, environment: environment, removing: ["FINGERLY_API_KEY", "FINGERLY_ENDPOINT"])
            #expect(output.status == 0, "\(output.standardError)")
            return try output.identifyResult()
        }
        let first = try run()
        #expect(first.state == .local && first.visitorIsNew == true)
        let key = try DeviceKey.loadOrCreate(in: state)
        let event = try runCLI(["events", "show", first.requestId], environment: environment)
        #expect(event.status == 0 && event.standardOutput.contains(#""keyId":"\#(key.keyID)","verified":true"#), "\(event.standardOutput.prefix(600))")
        #expect(try run().visitorId == first.visitorId)

        try DeviceKey.delete(in: state)
        let claimed = try run()
        #expect(claimed.visitorId != first.visitorId && claimed.visitorIsNew == true)
        #expect(claimed.triggers.contains { $0.signal == "identity_claimed_without_key" && $0.confidence == .high })
        // The new key's claim is settled as a visitor of its own, kept without identifiers.
        let visitors = try runCLI(["visitors", "--json"], environment: environment)
        #expect(visitors.status == 0, "\(visitors.standardError)")
        let listed = try JSONDecoder.fingerly.decode([VisitorSummary].self, from: Data(visitors.standardOutput.utf8))
        let settled = try #require(listed.first { $0.visitorId == claimed.visitorId })
        #expect(settled.instanceId == nil && settled.hardwareId == nil && settled.components == 0 && settled.deviceKeys == 1)
        let again = try run()
        #expect(again.visitorId == claimed.visitorId && again.visitorIsNew == false)
        #expect(!again.triggers.contains { $0.signal == "identity_claimed_without_key" })
    }
}
