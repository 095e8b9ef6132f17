@testable import FingerlyCatalogue
@testable import FingerlySQLiteStore
import Foundation
import Testing
@testable import FingerlyEngine
@testable import FingerlyModel
@testable import FingerlyPolicy
@testable import FingerlyProbes
@testable import FingerlyStore
@testable import FingerlyTransport

/// A `fingerly-server` process over a fresh SQLite database, and a client that signs every
/// request with one device key, as the Fingerly client does.
final class SigningServer {
    let database: String
    let server: ServerProcess
    let device: DeviceKey
    private var keys: [String: (publicKey: String, secretKey: String)] = [:]

    init(_ name: String, arguments: [String] = []) throws {
        let database = try TestPaths.temporaryDirectory(name) + "/db.sqlite"
        // The database exists, with its first organization, before the server opens it.
        keys["acme"] = try Self.add("acme", database)
        self.database = database
        server = try ServerProcess(database: database, arguments: arguments)
        device = try DeviceKey.ephemeral()
    }

    private static func add(_ organization: String, _ database: String)
        throws -> (publicKey: String, secretKey: String) {
        let added = try runServerCLI(["keys", "add", "--org", organization, "--region", "eu", "--db", database])
        #expect(added.status == 0, "\(added.standardError)")
        return try addedKeys(added)
    }

    /// The organization's key pair, made by `keys add` the first time.
    func keys(organization: String) throws -> (publicKey: String, secretKey: String) {
        if let pair = keys[organization] { return pair }
        let pair = try Self.add(organization, database)
        keys[organization] = pair
        return pair
    }

    /// `POST /v1/identify`, signed.
    func identify(_ body: [UInt8], organization: String = "acme",
                  idempotencyKey: String = UUID().uuidString.lowercased()) throws -> RawResponse {
        let quoted = "\"\(idempotencyKey)\""
        let created = Int64(Date().timeIntervalSince1970)
        let fields = try MessageSignature.sign(method: "POST", path: "/v1/identify", body: body, idempotencyKey: quoted,
                                               created: created, with: device)
        let headers = [("Authorization", "Bearer \(try keys(organization: organization).publicKey)"),
                       ("Content-Type", "application/json"), ("Idempotency-Key", quoted)] + fields.headers
        return try server.client.request("POST", "/v1/identify", headers: headers, body: body)
    }

    func event(_ requestId: String, organization: String = "acme") throws -> RawResponse {
        let secretKey = try keys(organization: organization).secretKey
        return try server.client.request("GET", "/v1/events/\(requestId)",
                                         headers: [("Authorization", "Bearer \(secretKey)")])
    }

    /// What the database holds: its pages in use (WAL frames included, as a reader sees them),
    /// and the bytes of the file and its WAL once a checkpoint has moved the frames in.
    func storedBytes() throws -> (logical: Int64, files: Int64) {
        let connection = try SQLiteConnection(path: database, busyTimeoutMilliseconds: 5_000, checkpointOnClose: false)
        defer { connection.close() }
        func number(_ pragma: String) throws -> Int64 {
            try connection.query("PRAGMA \(pragma)", []) { (row) throws(StoreError) in row.integer(0) }.first ?? 0
        }
        let pages = try number("page_count"), size = try number("page_size")
        _ = try connection.query("PRAGMA wal_checkpoint(TRUNCATE)", []) { (row) throws(StoreError) in row.integer(0) }
        func bytes(_ path: String) -> Int64 {
            ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? NSNumber)?.int64Value ?? 0
        }
        return (pages * size, bytes(database) + bytes(database + "-wal"))
    }
}

/// Findings 3 and 4 of the hostile review (issue 22): what a client leaves out never reads
/// cleaner than what it reports honestly, and what is stored is what was judged.
@Suite(.serialized)
struct JudgedReportTests {
    /// A real collected report, both tiers, of a fixture host, for organization acme.
    static let collected: [UInt8] = {
        let state = (try? TestPaths.temporaryDirectory("judged-body")) ?? NSTemporaryDirectory()
        var env = SubmissionCLITests.environment(state: state, apiKey: TestKeys.key(org: "acme", region: "eu"))
        env["FINGERLY_ENDPOINT"] = nil
        let run = try? runCLI(["--no-submit", "--request-only", "--root", TestPaths.fixture("laptop-baremetal")],
                              environment: env)
        return Array((run?.standardOutput ?? "").utf8)
    }()

    static func submission() throws -> SubmissionBody {
        try JSONDecoder.fingerly.decode(SubmissionBody.self, from: Data(collected))
    }

    /// The report with `probes` in place of its own, and its identifiers derived from what they
    /// carry for `organization`, as the collector would have derived them.
    static func body(_ submission: SubmissionBody, probes: [ProbeEntry], organization: String) throws -> [UInt8] {
        let report = submission.report
        let identity = HostIdentity.derive(from: probes.flatMap(\.identityComponents),
                                           hasher: IdentifierHasher(organization: organization))
        let changed = SignalReport(schemaVersion: report.schemaVersion, collectorVersion: report.collectorVersion,
                                   collectedAt: report.collectedAt, tag: report.tag, root: report.root,
                                   tiers: report.tiers, budgetMs: report.budgetMs, elapsedMs: report.elapsedMs,
                                   probes: probes, identity: identity, identifierKeying: report.identifierKeying,
                                   freeText: report.freeText, prefetchedAgeMs: report.prefetchedAgeMs)
        return Array(try JSONEncoder.fingerly.encode(SubmissionBody(client: submission.client, report: changed)))
    }

    static func denied(_ probe: ProbeEntry) -> ProbeEntry {
        ProbeEntry(id: probe.id, tier: probe.tier, status: .denied, durationMs: probe.durationMs,
                   detail: "Permission denied", issues: [], signals: [:], identityComponents: [])
    }

    /// A suspicion order: the higher, the less clean.
    static func suspicion(_ verdict: Verdict) -> Int {
        let rank = [Confidence.low: 0, .medium: 1, .high: 2][verdict.confidence] ?? 0
        return verdict.value ? 10 + rank : 3 - rank
    }

    @Test func removedProbesNeverScoreCleanerThanDeniedOnes() throws {
        let submission = try Self.submission()
        let probes = submission.report.probes
        #expect(probes.count > 30, "the fixture report carries \(probes.count) probes")
        let engine = VerdictEngine(policy: .embedded(), catalogue: .embedded)
        var subsets: [Set<String>] = [Set(probes.map(\.id))]
        for tier in Tier.allCases { subsets.append(Set(probes.filter { $0.tier == tier }.map(\.id))) }
        // The probes each verdict reads, so that every verdict loses all of its evidence once.
        for name in VerdictName.allCases {
            let read = Set(Policy.embedded().signals(of: name).compactMap { engine.owners[$0] })
            subsets.append(read.intersection(probes.map(\.id)))
        }
        // And a few arbitrary ones, the same in every run.
        var generator = SeededGenerator(seed: 22)
        for _ in 0..<4 { subsets.append(Set(probes.map(\.id).filter { _ in Bool.random(using: &generator) })) }

        let server = try SigningServer("judged-absence")
        for (index, left) in subsets.enumerated() where !left.isEmpty {
            // Each variant in an organization of its own: resolution against the other variants'
            // visitors would add findings that are not what this compares.
            let removedOrg = "removed\(index)", deniedOrg = "denied\(index)"
            let removedBody = try Self.body(submission, probes: probes.filter { !left.contains($0.id) },
                                            organization: removedOrg)
            let deniedBody = try Self.body(submission,
                                           probes: probes.map { left.contains($0.id) ? Self.denied($0) : $0 },
                                           organization: deniedOrg)
            let removedAnswer = try server.identify(removedBody, organization: removedOrg)
            let deniedAnswer = try server.identify(deniedBody, organization: deniedOrg)
            #expect(removedAnswer.status == 200 && deniedAnswer.status == 200,
                    "\(removedAnswer.text) \(deniedAnswer.text)")
            let removed = try JSONDecoder.fingerly.decode(IdentifyAnswer.self, from: Data(removedAnswer.body))
            let denied = try JSONDecoder.fingerly.decode(IdentifyAnswer.self, from: Data(deniedAnswer.body))
            let label = "without \(left.sorted())"
            let removedScore = try #require(removed.suspectScore), deniedScore = try #require(denied.suspectScore)
            #expect(removedScore >= deniedScore, "\(label)")
            #expect(!removed.identifiable || denied.identifiable, "\(label)")
            let removedVerdicts = try #require(removed.verdicts), deniedVerdicts = try #require(denied.verdicts)
            for name in VerdictName.allCases {
                let (gone, refused) = (removedVerdicts[name], deniedVerdicts[name])
                #expect(Self.suspicion(gone) >= Self.suspicion(refused), "\(name) \(label): \(gone) against \(refused)")
                // Every probe whose denial is missing evidence is missing evidence when it is left out.
                #expect(Set(refused.missingEvidence.map(\.probe)).isSubset(of: gone.missingEvidence.map(\.probe)),
                        "\(name) \(label): \(gone.missingEvidence) against \(refused.missingEvidence)")
                if refused.missingEvidence.contains(where: { left.contains($0.probe) }) {
                    #expect(!gone.value ? gone.confidence == .low : true, "\(name) \(label)")
                }
            }
        }

        // The review's case: `"probes": []` is no clean host at medium confidence, and no one to know.
        let empty = try server.identify(try Self.body(submission, probes: [], organization: "acme"))
        #expect(empty.status == 200, "\(empty.text)")
        let answer = try JSONDecoder.fingerly.decode(IdentifyAnswer.self, from: Data(empty.body))
        #expect(!answer.identifiable)
        for name in VerdictName.allCases {
            let verdict = try #require(answer.verdicts)[name]
            #expect(!verdict.value && verdict.confidence == .low && !verdict.missingEvidence.isEmpty,
                    "\(name): \(verdict)")
        }
        // The honest report it came from misses only what it says it could not look at: the server
        // takes no sender's word for `absent` or `skipped`, the probes it reported ok are evidence.
        let honestAnswer = try server.identify(Self.collected)
        let honest = try JSONDecoder.fingerly.decode(IdentifyAnswer.self, from: Data(honestAnswer.body))
        let unread = Set(probes.filter { $0.status != .ok }.map(\.id))
        for name in VerdictName.allCases {
            let missing = try #require(honest.verdicts)[name].missingEvidence
            #expect(Set(missing.map(\.probe)).isSubset(of: unread), "\(name): \(missing)")
        }
        #expect(honest.identifiable)
    }

    /// A probe claimed `skipped`, `absent`, `error`, `malformed` or `timeout` is no cleaner than the
    /// same probe `denied`: the server has only the sender's word for any of them. Per verdict's
    /// probes and over all of them, each in an organization of its own; the client's own scoring
    /// still takes `absent` as evidence (no DMI on a VM without it is what it says).
    @Test func claimedStatusesNeverScoreCleanerThanDeniedOnes() throws {
        let submission = try Self.submission()
        let probes = submission.report.probes
        let engine = VerdictEngine(policy: .embedded(), catalogue: .embedded)
        var subsets: [Set<String>] = [Set(probes.map(\.id))]
        for name in VerdictName.allCases {
            let read = Set(Policy.embedded().signals(of: name).compactMap { engine.owners[$0] }).intersection(probes.map(\.id))
            if !read.isEmpty { subsets.append(read) }
        }
        func claimed(_ probe: ProbeEntry, _ status: ProbeStatus) -> ProbeEntry {
            ProbeEntry(id: probe.id, tier: probe.tier, status: status, durationMs: probe.durationMs, detail: "claimed",
                       issues: [], signals: [:], identityComponents: [])
        }
        let server = try SigningServer("judged-statuses")
        for (index, left) in subsets.enumerated() {
            let deniedOrg = "denied\(index)"
            let deniedBody = try Self.body(submission, probes: probes.map { left.contains($0.id) ? Self.denied($0) : $0 },
                                           organization: deniedOrg)
            let denied = try JSONDecoder.fingerly.decode(IdentifyAnswer.self, from: Data(try server.identify(deniedBody, organization: deniedOrg).body))
            for status in [ProbeStatus.skipped, .absent, .error, .malformed, .timeout] {
                let claimOrg = "\(status.rawValue)\(index)"
                let claimBody = try Self.body(submission, probes: probes.map { left.contains($0.id) ? claimed($0, status) : $0 },
                                              organization: claimOrg)
                let response = try server.identify(claimBody, organization: claimOrg)
                #expect(response.status == 200, "\(response.text)")
                let answer = try JSONDecoder.fingerly.decode(IdentifyAnswer.self, from: Data(response.body))
                let label = "\(status.rawValue) for \(left.sorted())"
                #expect(try #require(answer.suspectScore) >= (try #require(denied.suspectScore)), "\(label)")
                let claimedVerdicts = try #require(answer.verdicts), deniedVerdicts = try #require(denied.verdicts)
                for name in VerdictName.allCases {
                    let (claim, refusal) = (claimedVerdicts[name], deniedVerdicts[name])
                    #expect(Self.suspicion(claim) >= Self.suspicion(refusal), "\(name) \(label): \(claim) against \(refusal)")
                    #expect(Set(refusal.missingEvidence.map(\.probe)).isSubset(of: claim.missingEvidence.map(\.probe)),
                            "\(name) \(label): \(claim.missingEvidence) against \(refusal.missingEvidence)")
                }
            }
        }

        // The collector's own judgement of its own run: an absent probe is evidence, not a gap.
        let read = Set(VerdictName.allCases.flatMap { Policy.embedded().signals(of: $0).compactMap { engine.owners[$0] } })
        let absent = try #require(probes.first { $0.status == .absent && read.contains($0.id) })
        let local = engine.evaluate(submission.report)
        #expect(local.values.allSatisfy { verdict in !verdict.missingEvidence.contains { $0.probe == absent.id } })
        let judged = VerdictEngine(policy: .embedded(), catalogue: .embedded, absence: .missingEvidence).evaluate(submission.report)
        #expect(judged.values.contains { verdict in verdict.missingEvidence.contains { $0.probe == absent.id && $0.status == .absent } })
    }

    /// The local mode judges the report its own process collected: what a probe found `absent` is
    /// evidence there (no DMI on a VM without it), while a server, given the same report, lists it
    /// as missing evidence.
    @Test func theLocalModeTakesItsOwnAbsentProbesAsEvidence() throws {
        let state = try SubmissionCLITests.freshState("judged-local-absent")
        let environment = ProcessInfo.processInfo.environment.merging(["FINGERLY_STATE_DIR": state]) { $1 }
        let run = try runCLI(["--root", TestPaths.fixture("laptop-baremetal"), "--json"], environment: environment,
                             removing: ["FINGERLY_API_KEY", "FINGERLY_ENDPOINT"])
        #expect(run.status == 0, "\(run.standardError)")
        let local = try run.identifyResult()
        #expect(local.state == .local)
        let absent = Set(local.report.probes.filter { $0.status == .absent }.map(\.id))
        #expect(!absent.isEmpty)
        for name in VerdictName.allCases {
            let verdict = local.verdicts[name]
            #expect(!verdict.missingEvidence.contains { absent.contains($0.probe) }, "\(name): \(verdict)")
        }
        let server = try SigningServer("judged-local-absent")
        let response = try server.identify(Self.collected)
        let verdicts = try #require(try JSONDecoder.fingerly.decode(IdentifyAnswer.self, from: Data(response.body)).verdicts)
        #expect(VerdictName.allCases.contains { name in
            verdicts[name].missingEvidence.contains { $0.status == .absent }
        })
    }

    /// Declared tiers that leave out the probes present, or none at all, read no cleaner: every
    /// probe a verdict reads that is not in the report is missing evidence, whatever `tiers` says.
    @Test func declaredTiersThatDisagreeWithTheProbesReadNoCleaner() throws {
        let submission = try Self.submission()
        let server = try SigningServer("judged-tiers")
        let report = submission.report
        for tiers in [[], [Tier.fast], [Tier.deferred]] {
            let kept = report.probes.filter { $0.tier == .fast }.dropLast(3)
            let changed = SignalReport(schemaVersion: report.schemaVersion, collectorVersion: report.collectorVersion,
                                       collectedAt: report.collectedAt, root: report.root, tiers: tiers,
                                       budgetMs: report.budgetMs,
                                       elapsedMs: report.elapsedMs, probes: Array(kept),
                                       identity: HostIdentity.derive(from: kept.flatMap(\.identityComponents),
                                                                     hasher: IdentifierHasher(organization: "acme")),
                                       identifierKeying: report.identifierKeying, freeText: report.freeText)
            let body = Array(try JSONEncoder.fingerly.encode(SubmissionBody(client: submission.client,
                                                                            report: changed)))
            let response = try server.identify(body)
            #expect(response.status == 200, "\(response.text)")
            let answer = try JSONDecoder.fingerly.decode(IdentifyAnswer.self, from: Data(response.body))
            let verdicts = try #require(answer.verdicts)
            let present = Set(kept.map(\.id))
            let engine = VerdictEngine(policy: .embedded(), catalogue: .embedded)
            for name in VerdictName.allCases {
                let read = Set(Policy.embedded().signals(of: name).compactMap { engine.owners[$0] })
                let verdict = verdicts[name]
                #expect(Set(verdict.missingEvidence.map(\.probe)).isSuperset(of: read.subtracting(present)),
                        "\(name) with \(tiers)")
                if !verdict.value, !read.isSubset(of: present) {
                    #expect(verdict.confidence == .low, "\(name) with \(tiers)")
                }
            }
        }
    }

    /// The collected body with the first `original` replaced.
    static func replacing(_ original: String, with replacement: String, in body: [UInt8] = collected) -> [UInt8] {
        let text = String(decoding: body, as: UTF8.self)
        guard let range = text.range(of: original) else {
            Issue.record("\(original) is not in the body")
            return body
        }
        return Array(text.replacingCharacters(in: range, with: replacement).utf8)
    }

    @Test func aMemberGivenTwiceAnywhereIs400AndStoresNothing() throws {
        let server = try SigningServer("judged-duplicates")
        let submission = try Self.submission()
        let text = String(decoding: Self.collected, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        let firstProbe = try #require(submission.report.probes.first)
        let withSignals = try #require(submission.report.probes.first { !$0.signals.isEmpty })
        let signal = try #require(withSignals.signals.keys.sorted().first)
        let signalMember = try JSONEncoder.fingerly.encode([signal: withSignals.signals[signal]!])
        let signalText = String(decoding: signalMember, as: UTF8.self).dropFirst().dropLast()
        let component = try #require(submission.report.probes.flatMap(\.identityComponents).first)
        let identity = String(decoding: try JSONEncoder.fingerly.encode(submission.report.identity), as: UTF8.self)
        #expect(text.hasPrefix(#"{"client":{"#) && text.contains(#","report":{"#))

        let cases: [(body: [UInt8], path: String)] = [
            // The review's: an empty list judged, the real one stored.
            (Self.replacing(#","report":{"#, with: #","report":{"probes":[],"#), "report.probes"),
            (Self.replacing(#","report":{"#, with: #","report":{"identity":\#(identity),"#), "report.identity"),
            (Self.replacing(#"{"client":{"#, with: #"{"client":{"sdk":"x","#), "client.sdk"),
            (Array((String(text.dropLast()) + #","client":{"proxy":false,"sdk":"x","version":"1"}}"#).utf8), "client"),
            (Self.replacing(#""id":"\#(firstProbe.id)""#, with: #""id":"\#(firstProbe.id)","status":"ok""#),
             "report.probes[0].status"),
            (Self.replacing(String(signalText), with: signalText + "," + signalText), "report.probes.signals"),
            (Self.replacing(#""hash":"\#(component.hash)""#, with: #""hash":"\#(component.hash)","hash":"0""#),
             "identityComponents"),
            (Self.replacing(#","report":{"#, with: #","report":{"future":{"a":[{"b":1,"b\u0000":2,"\u0062":3}]},"#),
             "report.future.a[0].b"),
            (Self.replacing(#","report":{"#, with: #","report":{"r\u006fot":"/x","#), "report.root"),
            // Two probes with one id: the verdicts would judge the first, a reader might keep the last.
            (try Self.body(submission, probes: submission.report.probes + [firstProbe], organization: "acme"),
             "report.probes"),
        ]
        for (index, (body, path)) in cases.enumerated() {
            let key = "duplicate-\(index)"
            let refused = try server.identify(body, idempotencyKey: key)
            #expect(refused.status == 400 && refused.errorCode == "duplicate_member", "case \(index): \(refused.text)")
            let message = try JSONDecoder().decode(WireError.self, from: Data(refused.body)).error.message
            #expect(path.split(separator: ".").allSatisfy { message.contains($0.split(separator: "[")[0]) },
                    "case \(index): \(message)")
            // Nothing was kept: the same key with a valid body is a first request.
            let valid = try server.identify(Self.collected, idempotencyKey: key)
            #expect(valid.status == 200, "\(valid.text)")
            #expect(try JSONDecoder.fingerly.decode(IdentifyAnswer.self, from: Data(valid.body)).duplicate == false)
        }
    }

    /// Every word of 64 lowercase hex digits in a text: what a keyed identifier hash looks like.
    static func identifierHashes(in text: String) -> Set<String> {
        let words = text.split { !($0.isASCII && ($0.isLetter || $0.isNumber)) }
        return Set(words.filter { $0.count == 64 && $0.allSatisfy(\.isHexDigit) && $0.lowercased() == $0 }.map(String.init))
    }

    @Test func noHashTheClientSentSurvivesInTheStoredEvent() throws {
        let server = try SigningServer("judged-no-client-hash")
        let submission = try Self.submission()
        let component = try #require(submission.report.probes.flatMap(\.identityComponents).first)
        let serial = IdentifierHasher(organization: "acme").hash("serial-1")
        // As the network and block probes write them: the device's name, then its hash.
        let probes = submission.report.probes.enumerated().map { index, probe in
            guard index == 0 else { return probe }
            var signals = probe.signals
            signals["net.permanent_macs"] = .strings(["eth0 \(component.hash)", "lo"])
            signals["block.serials"] = .string("sda \(serial),sdb \(serial)")
            return ProbeEntry(id: probe.id, tier: probe.tier, status: probe.status, durationMs: probe.durationMs,
                              detail: probe.detail, issues: probe.issues, signals: signals,
                              identityComponents: probe.identityComponents)
        }
        for (name, body) in [("collected", Self.collected),
                             ("prefixed", try Self.body(submission, probes: probes, organization: "acme"))] {
            let sent = Self.identifierHashes(in: String(decoding: body, as: UTF8.self))
            #expect(!sent.isEmpty)
            let answered = try server.identify(body)
            #expect(answered.status == 200, "\(name): \(answered.text)")
            let answer = try JSONDecoder.fingerly.decode(IdentifyAnswer.self, from: Data(answered.body))
            let stored = try server.event(answer.requestId)
            #expect(stored.status == 200)
            let kept = Self.identifierHashes(in: stored.text)
            #expect(kept.isDisjoint(with: sent), "\(name): \(kept.intersection(sent).sorted())")
            if name == "prefixed" {
                #expect(stored.text.contains("eth0 ") && stored.text.contains("sda "))
            }
        }
    }

    /// Random text that no compression shortens.
    static func noise(_ count: Int, using generator: inout SeededGenerator) -> String {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
        return String((0..<count).map { _ in alphabet[Int.random(in: 0..<alphabet.count, using: &generator)] })
    }

    /// 500 KB of members no field reads, spread over the body, the report, a probe and a
    /// nested object: none of it is stored, the event holds the canonical judged report, and
    /// `/metrics` counts what was dropped.
    @Test func unknownMembersAreDroppedNotStored() throws {
        let server = try SigningServer("judged-storage")
        var generator = SeededGenerator(seed: 500)
        func padded() -> [UInt8] {
            var members: [String] = []
            for index in 0..<100 { members.append(#""pad\#(index)":"\#(Self.noise(1_000, using: &generator))""#) }
            let probeMembers = (0..<100).map { #""x\#($0)":{"y":["\#(Self.noise(1_000, using: &generator))"]}"# }
            let padding = Self.noise(200_000, using: &generator)
            let nested = members.joined(separator: ",")
            var body = Self.replacing(#","report":{"#,
                                      with: #","report":{"padding":"\#(padding)","nested":{\#(nested)},"#)
            body = Self.replacing(#""durationMs""#, with: probeMembers.joined(separator: ",") + #","durationMs""#,
                                  in: body)
            let top = Self.noise(100_000, using: &generator)
            return Array((#"{"top":"\#(top)","# + String(decoding: body, as: UTF8.self).dropFirst()).utf8)
        }
        let sample = padded()
        #expect(sample.count - Self.collected.count > 500_000, "\(sample.count - Self.collected.count) bytes added")

        // Warm up: the first request makes the visitor and the tables' first pages.
        #expect(try server.identify(Self.collected).status == 200)
        let start = try server.storedBytes()
        for _ in 0..<30 { #expect(try server.identify(Self.collected).status == 200) }
        let plain = try server.storedBytes()
        var lastRequest = ""
        for _ in 0..<30 {
            let response = try server.identify(padded())
            #expect(response.status == 200, "\(response.text)")
            lastRequest = try JSONDecoder.fingerly.decode(IdentifyAnswer.self, from: Data(response.body)).requestId
        }
        let after = try server.storedBytes()
        let plainGrowth = plain.logical - start.logical, paddedGrowth = after.logical - plain.logical
        // Less than 10 KB more a request than without the padding, and under 5 MB for all 30.
        #expect(paddedGrowth - plainGrowth < 30 * 10_000, "plain \(plainGrowth) bytes, padded \(paddedGrowth) for 30")
        #expect(paddedGrowth < 5_000_000 && after.files - plain.files < 5_000_000,
                "\(paddedGrowth), files \(after.files - plain.files)")

        let event = try server.event(lastRequest)
        #expect(event.status == 200)
        let document = event.text
        for dropped in [#""padding""#, #""nested""#, #""pad0""#, #""x0""#, #""top""#] {
            #expect(!document.contains(dropped), "\(dropped) was stored")
        }
        // The judged report in its canonical form, its identifiers re-keyed with the organization's
        // secret (which no client holds): every probe and signal as judged, no identifier as sent.
        let judged = try JSONDecoder.fingerly.decode(SubmissionBody.self, from: Data(sample)).report
        let stored = try JSONDecoder.fingerly.decode(StoredEvent.self, from: Data(event.body)).report
        let canonical = String(decoding: try JSONEncoder.fingerly.encode(stored), as: UTF8.self)
        #expect(document.hasSuffix(#""report":"# + canonical + "}"))
        #expect(stored.probes.map(\.id) == judged.probes.map(\.id))
        #expect(stored.probes.map(\.status) == judged.probes.map(\.status))
        #expect(stored.identity.instanceId != nil && stored.identity.instanceId != judged.identity.instanceId)
        // top, padding, nested, and the hundred members of the first probe, each of 30 requests.
        let metrics = try server.server.client.request("GET", "/metrics").text
        #expect(metrics.contains("fingerly_unknown_members_dropped_total \(30 * 103)"), "\(metrics.suffix(400))")
    }
}

/// A small deterministic generator (SplitMix64): the same subsets and noise in every run.
struct SeededGenerator: RandomNumberGenerator {
    private var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var value = state
        value = (value ^ (value >> 30)) &* 0xBF58_476D_1CE4_E5B9
        value = (value ^ (value >> 27)) &* 0x94D0_49BB_1331_11EB
        return value ^ (value >> 31)
    }
}
