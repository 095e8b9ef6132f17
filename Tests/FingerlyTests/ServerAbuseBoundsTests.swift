@testable import FingerlyPostgresStore
@testable import FingerlySQLiteStore
import Foundation
import Testing
@testable import Fingerly
@testable import FingerlyEngine
@testable import FingerlyModel
@testable import FingerlyServer
@testable import FingerlyStore
@testable import FingerlyTransport

/// A device of a test: signs identify requests as the Fingerly client does.
struct SigningDevice {
    let key: DeviceKey
    let publicKey: String
    let harness: ServerHarness

    init(_ harness: ServerHarness, publicKey: String) throws {
        key = try DeviceKey.ephemeral()
        self.publicKey = publicKey
        self.harness = harness
    }

    /// A signed identify with a fresh idempotency key; `path` is what is signed, `target` what is sent.
    func identify(body: [UInt8] = ServerTests.reportBody, created: Int64 = Int64(Date().timeIntervalSince1970),
                  path: String = "/v1/identify", target: String = "/v1/identify") throws -> RawResponse {
        let idempotencyKey = "\"\(UUID().uuidString.lowercased())\""
        let fields = try MessageSignature.sign(method: "POST", path: path, body: body, idempotencyKey: idempotencyKey, created: created, with: key)
        return try harness.client.request("POST", target, headers: harness.identifyHeaders(publicKey, idempotencyKey: idempotencyKey) + fields.headers,
                                          body: body)
    }
}

/// A clock a test moves (or any count several threads add to).
final class MovableClock: @unchecked Sendable {
    private let lock = NSLock()
    private var seconds: Int64
    init(_ seconds: Int64) { self.seconds = seconds }
    var now: Int64 { lock.withLock { seconds } }
    func advance(days: Int64) { advance(seconds: days * 86_400) }
    func advance(seconds: Int64) { lock.withLock { self.seconds += seconds } }
    var read: @Sendable () -> Int64 { { [self] in now } }
}

/// Rate limits an attacker cannot spend for others (issue 22, finding 6): only requests whose
/// key and signature verified count against a key's budget; authentication failures have a
/// cheap limit of their own per source address.
@Suite(.serialized)
struct AuthenticatedRateLimitTests {
    /// The acceptance scenario: `--rate-limit 20`, 500 invalid requests in 3 s for the
    /// organization (its public key with a signature that does not verify, and unknown keys),
    /// from the same address as its genuine device; the device is answered 200 throughout.
    @Test func aFloodOfInvalidRequestsLeavesTheGenuineDeviceAnswered() throws {
        let harness = try ServerHarness(clock: nil) { $0.rateLimit = 20; $0.threads = 4 }
        let (publicKey, _) = try harness.keys()
        let device = try SigningDevice(harness, publicKey: publicKey)
        let unknown = ServerKey.generatePair(region: "eu", environment: "production", organization: "acme").publicKey
        let sent = MovableClock(0)
        let flooded = DispatchGroup()
        let started = Date()
        for worker in 0..<5 {
            flooded.enter()
            Thread {
                defer { flooded.leave() }
                for index in 0..<100 {
                    let key = (worker + index) % 4 == 0 ? unknown : publicKey
                    let headers = harness.identifyHeaders(key) + [("Signature", "fingerly=:AAAA:"),
                                                                 ("Signature-Input", "fingerly=(\"@method\");created=1"),
                                                                 ("Fingerly-Device-Key", ":AAAA:")]
                    let paced = Date()
                    if let answer = try? harness.client.request("POST", "/v1/identify", headers: headers, body: ServerTests.body) {
                        if answer.status == 401 || answer.status == 429 { sent.advance(seconds: 1) }
                    }
                    // 500 in all over about 3 s: five senders at 165 requests per second.
                    let left = 0.029 - Date().timeIntervalSince(paced)
                    if left > 0 { usleep(UInt32(left * 1_000_000)) }
                }
            }.start()
        }
        var genuine: [Int] = []
        while flooded.wait(timeout: .now() + .milliseconds(150)) == .timedOut {
            genuine.append(try device.identify().status)
        }
        genuine.append(try device.identify().status)
        let seconds = Date().timeIntervalSince(started)
        #expect(seconds <= 3.5, "the flood took \(seconds) s")
        #expect(sent.now == 500, "only \(sent.now) of the junk requests were refused")
        #expect(genuine.count >= 10)
        #expect(genuine.allSatisfy { $0 == 200 }, "\(genuine)")
        let metrics = try harness.client.request("GET", "/metrics").text
        let limited = metrics.split(separator: "\n").first { $0.hasPrefix("fingerly_failure_limited_total ") }
        #expect(Int(limited?.split(separator: " ").last ?? "") ?? 0 > 0, "\(limited ?? "none")")
    }

    /// Device keys cost nothing to make: a hundred requests each signed by a new one, within one
    /// second, share the address's budget for new devices (20) with the genuine device's first
    /// request, and the genuine device, admitted then, keeps its own budget of 20.
    @Test func selfMadeDeviceKeysNeverSpendAGenuineDevicesBudget() throws {
        let now: Int64 = 1_767_225_600
        let harness = try ServerHarness(clock: { now }) { $0.rateLimit = 20; $0.failureLimit = 1_000 }
        let (publicKey, _) = try harness.keys()
        let genuine = try SigningDevice(harness, publicKey: publicKey)
        #expect(try genuine.identify(created: now).status == 200)
        var statuses: [Int: Int] = [:]
        for _ in 0..<100 {
            let answer = try SigningDevice(harness, publicKey: publicKey).identify(created: now)
            statuses[answer.status, default: 0] += 1
            if answer.status == 429 { #expect(answer.errorCode == "rate_limited" && answer.text.contains("new devices")) }
        }
        // The genuine device's first request was a new device's too.
        #expect(statuses == [200: 19, 429: 81], "\(statuses)")
        for index in 1..<20 {
            let answered = try genuine.identify(created: now)
            #expect(answered.status == 200, "request \(index + 1): \(answered.text)")
        }
        let limited = try genuine.identify(created: now)
        #expect(limited.status == 429 && limited.text.contains("for this device"), "\(limited.text)")
    }

    /// Junk with a bad signature never spends the key's budget: after ten of them within one
    /// second, the device still gets its three requests of a limit of three.
    @Test func requestsThatFailTheirSignatureDoNotCountAgainstTheKey() throws {
        let now: Int64 = 1_767_225_600
        let harness = try ServerHarness(clock: { now }) { $0.rateLimit = 3; $0.failureLimit = 1_000 }
        let (publicKey, _) = try harness.keys()
        let device = try SigningDevice(harness, publicKey: publicKey)
        for _ in 0..<10 {
            let junk = try harness.client.request("POST", "/v1/identify",
                                                  headers: harness.identifyHeaders(publicKey) + [("Signature", "fingerly=:AAAA:")], body: ServerTests.body)
            #expect(junk.status == 401 && junk.errorCode == "invalid_signature")
        }
        for _ in 0..<3 {
            let answered = try device.identify(created: now)
            #expect(answered.status == 200, "\(answered.text)")
        }
        // The budget itself still holds for what verified.
        let limited = try device.identify(created: now)
        #expect(limited.status == 429 && limited.errorCode == "rate_limited")
    }

    /// An address past its failure limit gets 429 too_many_failures with Retry-After, answered
    /// without the store, while a request from it with a verifying signature is served.
    @Test func anAddressPastItsFailureLimitIsRefusedButASignedRequestFromItIsServed() throws {
        let now: Int64 = 1_767_225_600
        let harness = try ServerHarness(clock: { now }) { $0.failureLimit = 5 }
        let (publicKey, secretKey) = try harness.keys()
        let device = try SigningDevice(harness, publicKey: publicKey)
        let unknown = ServerKey.generatePair(region: "eu", environment: "production", organization: "acme").publicKey
        for _ in 0..<5 {
            #expect(try harness.client.request("POST", "/v1/identify", headers: harness.identifyHeaders(unknown), body: ServerTests.body)
                .errorCode == "invalid_key")
        }
        let refused = try harness.client.request("POST", "/v1/identify", headers: harness.identifyHeaders(unknown), body: ServerTests.body)
        #expect(refused.status == 429 && refused.errorCode == "too_many_failures")
        #expect(refused.headers["retry-after"] == "1")
        // Once failing, even a request with a valid key but no valid signature waits.
        let unsigned = try harness.client.request("POST", "/v1/identify", headers: harness.identifyHeaders(publicKey), body: ServerTests.body)
        #expect(unsigned.errorCode == "too_many_failures")
        let reads = try harness.client.request("GET", "/v1/events/req_x", headers: [("Authorization", "Bearer \(secretKey)")])
        #expect(reads.errorCode == "too_many_failures")
        let signed = try device.identify(created: now)
        #expect(signed.status == 200, "\(signed.text)")
        #expect(try harness.client.request("GET", "/metrics").text.contains("fingerly_failure_limited_total 3"))
    }

    @Test func theFailureLimiterForgetsAtTheNextSecondAndBoundsItsAddresses() {
        let limiter = FailureLimiter(limit: 2)
        limiter.recordFailure(peer: "192.0.2.1", now: 10)
        limiter.recordFailure(peer: "192.0.2.1", now: 10)
        #expect(limiter.isExhausted(peer: "192.0.2.1", now: 10))
        #expect(!limiter.isExhausted(peer: "192.0.2.2", now: 10))
        #expect(!limiter.isExhausted(peer: "192.0.2.1", now: 11))
        for index in 0..<(FailureLimiter.trackedAddresses + 10) {
            limiter.recordFailure(peer: "10.\(index >> 16 & 255).\(index >> 8 & 255).\(index & 255)", now: 12)
        }
        // Past the tracked addresses, the rest share one count: limited together, not forgotten.
        #expect(limiter.isExhausted(peer: "203.0.113.9", now: 12))
        #expect(!limiter.isExhausted(peer: "10.0.0.1", now: 12))
    }

    /// A flood from more addresses than are tracked shares one count past them; a device admitted
    /// before, arriving from an address the flood never used, is not held to what it spent.
    @Test func anAdmittedDeviceIsNotHeldToTheOverflowCountOfAFloodsAddresses() {
        let limiter = FailureLimiter(limit: 1_000, newDeviceLimit: 2)
        let genuine = FailureLimiter.Device(publicKey: "fly_pk_a", keyID: "genuine")
        limiter.recordAdmitted(genuine)
        for index in 0..<FailureLimiter.trackedAddresses {
            limiter.recordFailure(peer: "10.\(index >> 16 & 255).\(index >> 8 & 255).\(index & 255)", now: 20)
        }
        let flooder = FailureLimiter.Device(publicKey: "fly_pk_a", keyID: "flooder")
        limiter.recordAdmitted(flooder)
        let allowed = 2 * FailureLimiter.devicesPerAddress
        for index in 0..<allowed {
            #expect(limiter.admitsDevice(peer: "172.16.0.\(index)", now: 20, device: flooder))
        }
        // Untracked addresses: a device never admitted shares the new devices' allowance, which the
        // flood left whole here, and then is refused; the genuine one is admitted from a fresh address.
        let newcomer = FailureLimiter.Device(publicKey: "fly_pk_a", keyID: "new")
        #expect(limiter.admitsDevice(peer: "172.16.1.1", now: 20, device: newcomer))
        #expect(limiter.admitsDevice(peer: "172.16.1.2", now: 20, device: newcomer))
        #expect(!limiter.admitsDevice(peer: "172.16.1.3", now: 20, device: newcomer))
        #expect(limiter.admitsDevice(peer: "192.0.2.77", now: 20, device: genuine))
        // A tracked address keeps its own count for every device.
        #expect(limiter.admitsDevice(peer: "10.0.0.1", now: 20, device: genuine))
    }
}

/// Bounded storage per organization (issue 22, finding 5): a quota on the bytes of events,
/// visitor retention, components bounded per visitor; figures in `/metrics`.
@Suite(.serialized)
struct BoundedStorageTests {
    static func metric(_ name: String, in text: String) -> Int64? {
        text.split(separator: "\n").first { $0.hasPrefix(name + " ") }.flatMap { Int64($0.split(separator: " ").last ?? "") }
    }

    @Test func anOrganizationAtItsQuotaGets507WithRetryAfterAndRetentionFreesRoom() throws {
        let clock = MovableClock(1_767_225_600)
        let harness = try ServerHarness(clock: clock.read) { $0.storageQuota = 4_096 }
        let (publicKey, _) = try harness.keys()
        let (otherKey, _) = try harness.keys(organization: "other")
        // Its own quota, none, over the server's.
        _ = try harness.store.transaction { tx throws(StoreError) in try tx.setStorageQuota(0, organization: "other") }
        var statuses: [Int] = []
        let firstKey = "\"\(UUID().uuidString.lowercased())\""
        for index in 0..<20 {
            let headers = index == 0 ? harness.identifyHeaders(publicKey, idempotencyKey: firstKey) : harness.identifyHeaders(publicKey)
            let answer = try harness.client.request("POST", "/v1/identify", headers: headers, body: ServerTests.reportBody)
            statuses.append(answer.status)
            if answer.status == 507 {
                #expect(answer.errorCode == "storage_quota_exceeded")
                #expect(answer.headers["retry-after"] == "3600")
                break
            }
        }
        #expect(statuses.first == 200 && statuses.last == 507, "\(statuses)")
        // A retry of an answered request still gets its answer: it stores nothing.
        let retried = try harness.client.request("POST", "/v1/identify", headers: harness.identifyHeaders(publicKey, idempotencyKey: firstKey),
                                                 body: ServerTests.reportBody)
        #expect(retried.status == 200, "\(retried.text)")
        #expect(try JSONDecoder.fingerly.decode(IdentifyAnswer.self, from: Data(retried.body)).duplicate)
        let stored = try harness.store.transaction { tx throws(StoreError) in try tx.organization(named: "acme") }
        #expect((stored?.storedBytes ?? 0) >= 4_096)
        #expect(try harness.client.request("POST", "/v1/identify", headers: harness.identifyHeaders(otherKey),
                                           body: ServerTests.reportBody(organization: "other")).status == 200)
        let metrics = try harness.client.request("GET", "/metrics").text
        #expect((Self.metric("fingerly_store_event_bytes", in: metrics) ?? 0) > (stored?.storedBytes ?? 0))
        #expect(Self.metric("fingerly_store_organizations_over_quota", in: metrics) == 1)

        clock.advance(days: 31)
        harness.server.purgeExpired(clock.now)
        // The events are gone; the visitor they were stored under stays (visitor retention) and keeps costing its rows.
        let (freed, visitors) = try harness.store.transaction { tx throws(StoreError) in
            (try tx.organization(named: "acme"), try tx.visitors(organization: "acme", limit: 10))
        }
        #expect(visitors.count == 1 && visitors.first?.eventBytes == 0)
        #expect(freed?.storedBytes == visitors.map {
            StoreLimits.rowBytes(visitors: 1, components: Int64($0.components.count), keys: Int64($0.deviceKeys.count))
        }.reduce(0, +))
        let after = try harness.client.request("GET", "/metrics").text
        // acme's events and other's one.
        #expect(after.contains(#"fingerly_retention_purged_total{kind="events"} "# + String(statuses.count)), "\(after)")
        #expect(Self.metric("fingerly_store_organizations_over_quota", in: after) == 0)
        #expect(try harness.client.request("POST", "/v1/identify", headers: harness.identifyHeaders(publicKey), body: ServerTests.reportBody).status == 200)
    }

    /// `keys quota` gives one organization its own quota over the server's default, read per
    /// request from the database.
    @Test func theKeysCommandSetsAndShowsAnOrganizationsQuota() throws {
        let database = try TestPaths.temporaryDirectory("server-quota") + "/db.sqlite"
        let acme = try addedKeys(try runServerCLI(["keys", "add", "--org", "acme", "--region", "eu", "--db", database]))
        let other = try addedKeys(try runServerCLI(["keys", "add", "--org", "other", "--db", database]))
        let set = try runServerCLI(["keys", "quota", "--org", "acme", "--bytes", "1", "--db", database])
        #expect(set.status == 0, "\(set.standardError)")
        #expect(set.standardOutput == "organization acme: quota 1; events stored 0 bytes\n")
        #expect(try runServerCLI(["keys", "quota", "--org", "acme", "--bytes", "lots", "--db", database]).status == 64)
        #expect(try runServerCLI(["keys", "quota", "--org", "nobody", "--bytes", "1MiB", "--db", database]).status == 67)

        // Unsigned requests, as a third-party client's: the quota is the subject here, not binding.
        let server = try ServerProcess(database: database, arguments: ["--allow-unsigned"])
        let otherBody = ServerTests.reportBody(organization: "other")
        func identify(_ key: String) throws -> RawResponse {
            try server.client.request("POST", "/v1/identify", headers: [("Authorization", "Bearer \(key)"), ("Content-Type", "application/json"),
                                                                        ("Idempotency-Key", "\"\(UUID().uuidString.lowercased())\"")],
                                      body: key == other.publicKey ? otherBody : ServerTests.reportBody)
        }
        #expect(try identify(acme.publicKey).status == 200)
        let full = try identify(acme.publicKey)
        #expect(full.status == 507 && full.errorCode == "storage_quota_exceeded")
        #expect(try identify(other.publicKey).status == 200)
        let shown = try runServerCLI(["keys", "quota", "--org", "acme", "--db", database]).standardOutput
        #expect(shown.hasPrefix("organization acme: quota 1; events stored ") && !shown.contains("stored 0 bytes"), "\(shown)")
        #expect(try runServerCLI(["keys", "quota", "--org", "acme", "--bytes", "default", "--db", database]).standardOutput
            .hasPrefix("organization acme: quota the server's storage-quota;"))
        #expect(try identify(acme.publicKey).status == 200)
        #expect(server.terminate() == 0)
    }

    @Test func visitorsUnseenForTheRetentionArePurgedWithTheirComponentsAndKeys() throws {
        let clock = MovableClock(1_767_225_600)
        let harness = try ServerHarness(clock: clock.read) { $0.visitorRetentionDays = 90 }
        let (publicKey, _) = try harness.keys()
        let device = try SigningDevice(harness, publicKey: publicKey)
        let first = try device.identify(created: clock.now)
        #expect(first.status == 200, "\(first.text)")
        let visitorId = try JSONDecoder.fingerly.decode(IdentifyAnswer.self, from: Data(first.body)).visitorId
        let stored = try #require(try harness.store.transaction { tx throws(StoreError) in try tx.visitor(id: visitorId, organization: "acme") })
        #expect(!stored.components.isEmpty && !stored.deviceKeys.isEmpty)

        clock.advance(days: 89)
        harness.server.purgeExpired(clock.now)
        #expect(try harness.store.transaction { tx throws(StoreError) in try tx.visitor(id: visitorId, organization: "acme") } != nil)
        clock.advance(days: 2)
        harness.server.purgeExpired(clock.now)
        #expect(try harness.store.transaction { tx throws(StoreError) in try tx.visitor(id: visitorId, organization: "acme") } == nil)
        let sharing = try harness.store.transaction { tx throws(StoreError) in
            try tx.visitors(sharingAnyOf: stored.components.map(\.hash), organization: "acme", limit: 10)
        }
        #expect(sharing.isEmpty)
        #expect(try harness.client.request("GET", "/metrics").text.contains(#"fingerly_retention_purged_total{kind="visitors"} 1"#))
        // The device comes back as a new visitor.
        let again = try device.identify(created: clock.now)
        #expect(try JSONDecoder.fingerly.decode(IdentifyAnswer.self, from: Data(again.body)).visitorIsNew)
    }

    /// Each fresh report may bring new component kinds: an update keeps at most the limit.
    @Test func aVisitorKeepsAtMostTheComponentLimitOnUpdateToo() {
        let limit = ResolutionThresholds.componentLimit
        func components(_ prefix: String) -> [ComponentRecord] {
            (0..<limit).map { ComponentRecord(scope: "instance", name: "\(prefix)-\($0)", hash: String(repeating: "a", count: 64)) }
        }
        let stored = VisitorRecord(id: "vis_1", organization: "acme", instanceId: "i", hardwareId: nil, firstSeen: 0, lastSeen: 0,
                                   components: components("old"), deviceKeys: [])
        let observed = ObservedIdentity(instanceId: "i", hardwareId: nil, components: components("new"))
        #expect(updatedVisitor(stored, with: observed, provenKeyID: nil, now: 1).components.count == limit)
    }

    @Test func storageSizesParseWithTheirUnits() {
        #expect(StorageSize.parse("0") == 0)
        #expect(StorageSize.parse("256MiB") == Int64(256) << 20)
        #expect(StorageSize.parse("2GiB") == Int64(2) << 30)
        #expect(StorageSize.parse("1TiB") == Int64(1) << 40)
        #expect(StorageSize.parse("MiB") == nil && StorageSize.parse("-1") == nil && StorageSize.parse("99999999TiB") == nil)
        #expect(StorageSize.describe(256 * 1_048_576) == "256MiB")
        #expect(StorageSize.describe(1_000) == "1000")
    }
}

/// The smaller items of issue 22 (finding 7).
@Suite(.serialized)
struct SmallerServerHardeningTests {
    /// The signed `@path` is the path as received: `/v1/%69dentify` routes as identify but a
    /// signature over `/v1/identify` does not verify for it; a query is refused.
    @Test func theSignedPathIsThePathAsReceivedAndIdentifyTakesNoQuery() throws {
        let now: Int64 = 1_767_225_600
        let harness = try ServerHarness(clock: { now })
        let (publicKey, _) = try harness.keys()
        let device = try SigningDevice(harness, publicKey: publicKey)
        #expect(try device.identify(created: now).status == 200)
        let encoded = try device.identify(created: now, target: "/v1/%69dentify")
        #expect(encoded.status == 401 && encoded.errorCode == "invalid_signature", "\(encoded.text)")
        let query = try device.identify(created: now, target: "/v1/identify?x=1")
        #expect(query.status == 400 && query.errorCode == "bad_request", "\(query.text)")
        #expect(try device.identify(created: now, target: "/v1/identify?").status == 400)
        // What the client signs is the path it sends, a proxy's prefix and all.
        let address = APIAddress(endpoint: "https://api.example/fingerly/")
        #expect(address.identifyPath == "/fingerly/v1/identify")
        #expect(address.identifyURL == "https://api.example" + address.identifyPath)
    }

    /// No byte of a request's method reaches the log raw: control bytes (a terminal's escape
    /// sequences) are written as `\xNN`.
    @Test func controlBytesOfARequestNeverReachTheLog() throws {
        let harness = try ServerHarness()
        for method in ["G\u{1b}]0;owned\u{07}ET", "P\u{7f}OST", "GE\u{8}\u{8}T", "\u{1b}[2J"] {
            _ = try? harness.client.exchange(Array("\(method) /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".utf8))
        }
        _ = try? harness.client.exchange(Array("GET /hea\u{1b}[31mlthz HTTP/1.1\r\nHost: x\r\nX-A: \u{1b}[2J\r\nConnection: close\r\n\r\n".utf8))
        usleep(200_000)
        let lines = harness.log.value
        #expect(lines.count >= 1, "nothing was logged")
        for line in lines {
            #expect(!line.dropLast().unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F }, "\(line.debugDescription)")
        }
        #expect(lines.contains { $0.hasPrefix(#"G\x1b]0;owned\x07ET "#) }, "\(lines)")
    }

    @Test func theLogEscapesEverythingButVisibleASCII() {
        #expect(ServerRoutes.loggable("GET".utf8) == "GET")
        #expect(ServerRoutes.loggable("G\u{1b}[2J\\ é".utf8) == #"G\x1b[2J\x5c\x20\xc3\xa9"#)
    }

    /// Both keys of a suspended organization get 402, as `keys suspend` and the README say.
    @Test func aSuspendedOrganizationsSecretKeyGets402() throws {
        let harness = try ServerHarness()
        let (publicKey, secretKey) = try harness.keys()
        let stored = try harness.client.request("POST", "/v1/identify", headers: harness.identifyHeaders(publicKey), body: ServerTests.reportBody)
        let requestId = try JSONDecoder.fingerly.decode(IdentifyAnswer.self, from: Data(stored.body)).requestId
        let path = "/v1/events/\(requestId)"
        #expect(try harness.client.request("GET", path, headers: [("Authorization", "Bearer \(secretKey)")]).status == 200)
        _ = try harness.store.transaction { tx throws(StoreError) in try tx.setSuspended(true, organization: "acme") }
        let read = try harness.client.request("GET", path, headers: [("Authorization", "Bearer \(secretKey)")])
        #expect(read.status == 402 && read.errorCode == "organization_not_accepting")
        #expect(!read.text.contains(requestId))
        let identify = try harness.client.request("POST", "/v1/identify", headers: harness.identifyHeaders(publicKey), body: ServerTests.body)
        #expect(identify.status == 402)
        _ = try harness.store.transaction { tx throws(StoreError) in try tx.setSuspended(false, organization: "acme") }
        #expect(try harness.client.request("GET", path, headers: [("Authorization", "Bearer \(secretKey)")]).status == 200)
    }
}

/// A database URL's password never appears in any output (issue 22, finding 7): libpq quotes
/// the part of a URL it cannot parse, and a password may be that part.
@Suite struct DatabasePasswordTests {
    static let urls = ["postgresql://app:S3cr%zzPassw0rd@127.0.0.1:1/fingerly",
                       "postgres://app@127.0.0.1:1/fingerly?password=S3cr%zzPassw0rd",
                       "postgresql://app:S3cr%00Passw0rd@127.0.0.1:1/fingerly",
                       "postgresql://app@127.0.0.1:1/fingerly?p%61ssword=S3cr%zzPassw0rd&sslmode=nonsense",
                       "postgresql://app:S3cr%41Passw0rd@127.0.0.1:1/fingerly?connect_timeout=1",
                       // An unencoded "/" in the password: libpq reads "S3cr" as the port and quotes it.
                       "postgres://app:S3cr/Passw0rd@127.0.0.1:1/fingerly",
                       // Nearly right: neither a SQLite file named after the password nor the value printed.
                       "POSTGRES://app:S3crPassw0rd@127.0.0.1:1/fingerly", " postgres://app:S3crPassw0rd@127.0.0.1:1/x",
                       "postgres:/app:S3crPassw0rd@127.0.0.1:1/x", "pgsql://app:S3crPassw0rd@127.0.0.1:1/x",
                       "\"postgres://app:S3crPassw0rd@127.0.0.1:1/x", "host=127.0.0.1 port=1 password=S3crPassw0rd",
                       // An unencoded "@" in the password: libpq would quote its tail as the host.
                       "postgres://app:S3cr@Passw0rd@127.0.0.1:1/fingerly"]

    static func leaks(_ text: String) -> Bool {
        ["S3cr", "Passw0rd", "S3crAPassw0rd"].contains { text.contains($0) }
    }

    @Test func noCommandPrintsAPasswordOfAMalformedOrRefusedURL() throws {
        for url in Self.urls {
            for arguments in [["migrate", "--db", url], ["keys", "list", "--db", url],
                              ["serve", "--listen", "127.0.0.1:0", "--db", url]] {
                let run = try runServerCLI(arguments)
                #expect(run.status != 0)
                #expect(!Self.leaks(run.standardOutput + run.standardError), "\(arguments[0]): \(run.standardError)")
                #expect(!run.standardError.isEmpty)
            }
        }
    }

    /// A database setting that can never work is one to correct, not an outage the unit would
    /// restart every two seconds: 78, as for every other bad setting.
    @Test func aDatabaseSettingThatCanNeverWorkExits78() throws {
        for url in Self.urls.suffix(7) {
            for arguments in [["migrate", "--db", url], ["serve", "--listen", "127.0.0.1:0", "--db", url]] {
                let run = try runServerCLI(arguments)
                #expect(run.status == 78, "\(arguments[0]) \(url): \(run.status) \(run.standardError)")
            }
        }
    }

    @Test func theSecretsOfAConnectionStringAreTheAsWrittenAndDecodedPasswords() {
        let secrets = ConnectionSecrets("postgresql://app:pa%73s@db/x?sslmode=require&password=two%zz")
        #expect(Set(secrets.values) == ["pa%73s", "pass", "two%zz"])
        #expect(secrets.redacting(#"invalid percent-encoded token: "two%zz" and pass"#) == #"invalid percent-encoded token: "***" and ***"#)
        #expect(ConnectionSecrets("host=db password='x y'").values.contains("x"))
        #expect(ConnectionSecrets("postgresql://app@db/x").values.isEmpty)
    }
}

/// The local store obeys the rule of the installation secret beside it (issue 22, finding 7):
/// a state directory another user may write, or a store file they may write, is refused.
@Suite(.serialized)
struct LocalStoreOwnershipTests {
    static let arguments = ["--root", TestPaths.fixture("laptop-baremetal"), "--tiers", "fast", "--json"]

    static func run(_ state: String) throws -> ProcessOutput {
        let environment = ProcessInfo.processInfo.environment.merging(["FINGERLY_STATE_DIR": state]) { $1 }
        return try runCLI(arguments, environment: environment, removing: ["FINGERLY_API_KEY", "FINGERLY_ENDPOINT"])
    }

    @Test func aStateDirectoryOthersMayWriteHoldsNoLocalStore() throws {
        let state = try TestPaths.temporaryDirectory("local-1777")
        #expect(chmod(state, 0o1777) == 0)
        let refused = try Self.run(state)
        #expect(refused.status != 0)
        #expect(refused.standardError.contains("writable by another user"), "\(refused.standardError)")
        #expect(!FileManager.default.fileExists(atPath: state + "/local.sqlite"))
    }

    @Test func aLocalStoreOthersMayWriteIsRefused() throws {
        let state = try TestPaths.temporaryDirectory("local-store-mode")
        #expect(chmod(state, 0o700) == 0)
        let first = try Self.run(state)
        #expect(first.status == 0, "\(first.standardError)")
        #expect(chmod(state + "/local.sqlite", 0o666) == 0)
        let refused = try Self.run(state)
        #expect(refused.status != 0)
        #expect(refused.standardError.contains("local.sqlite: writable by others (mode 666)"), "\(refused.standardError)")
        #expect(chmod(state + "/local.sqlite", 0o644) == 0)
        #expect(try Self.run(state).status == 0)
    }
}

/// What every backend must do for the storage bounds: stored bytes that follow events in and
/// out, per-organization quotas, and visitors swept by age with their rows.
@Suite(.serialized)
struct StorageBoundsStoreContractTests {
    static func event(_ id: String, organization: String, at receivedAt: Int64, size: Int) -> EventRecord {
        // Varied bytes, so a compressing backend stores about what it was given.
        var generator = SystemRandomNumberGenerator()
        let document = (0..<size).map { _ in UInt8.random(in: 0x20...0x7E, using: &generator) }
        return EventRecord(requestId: id, organization: organization, visitorId: "vis_\(id)", receivedAt: receivedAt, document: document)
    }

    @Test(arguments: StoreBackend.allCases) func storedBytesFollowEventsInAndOut(backend: StoreBackend) throws {
        let (store, dispose) = try backend.make()
        defer { dispose() }
        try store.transaction { tx throws(StoreError) in
            _ = try tx.ensureOrganization(named: "acme", now: 0)
            _ = try tx.ensureOrganization(named: "other", now: 0)
            for index in 0..<10 { try tx.insertEvent(Self.event("req_a\(index)", organization: "acme", at: Int64(index), size: 20_000)) }
            try tx.insertEvent(Self.event("req_o", organization: "other", at: 100, size: 5_000))
        }
        let stored = try store.transaction { tx throws(StoreError) in try tx.storedBytes() }
        #expect((180_000...220_000).contains(stored["acme"] ?? 0), "\(stored)")
        #expect((4_000...6_000).contains(stored["other"] ?? 0), "\(stored)")
        #expect(try store.transaction { tx throws(StoreError) in try tx.organization(named: "acme")?.storedBytes } == stored["acme"])

        let expired = try store.transaction { tx throws(StoreError) in try tx.expireEvents(receivedBefore: 5) }
        #expect(expired == 5)
        let after = try store.transaction { tx throws(StoreError) in try tx.storedBytes() }
        #expect(((stored["acme"] ?? 0) / 2 - 2_000...(stored["acme"] ?? 0) / 2 + 2_000).contains(after["acme"] ?? 0), "\(after)")
        #expect(after["other"] == stored["other"])
        _ = try store.transaction { tx throws(StoreError) in try tx.expireEvents(receivedBefore: 1_000) }
        #expect(try store.transaction { tx throws(StoreError) in try tx.organization(named: "acme")?.storedBytes } == 0)
    }

    @Test(arguments: StoreBackend.allCases) func anOrganizationsQuotaIsItsOwnUntilReset(backend: StoreBackend) throws {
        let (store, dispose) = try backend.make()
        defer { dispose() }
        try store.transaction { tx throws(StoreError) in
            _ = try tx.ensureOrganization(named: "acme", now: 0)
            #expect(try tx.organization(named: "acme")?.storageQuota == nil)
            #expect(try tx.setStorageQuota(1 << 30, organization: "acme"))
            #expect(try tx.organization(named: "acme")?.storageQuota == 1 << 30)
            #expect(try tx.setStorageQuota(nil, organization: "acme"))
            #expect(try tx.organization(named: "acme")?.storageQuota == nil)
            #expect(try !tx.setStorageQuota(0, organization: "nobody"))
        }
    }

    @Test(arguments: StoreBackend.allCases) func visitorsAreSweptByLastSeenWithTheirComponentsAndKeys(backend: StoreBackend) throws {
        let (store, dispose) = try backend.make()
        defer { dispose() }
        let hash = String(repeating: "b", count: 64)
        try store.transaction { tx throws(StoreError) in
            for (id, lastSeen) in [("vis_old", Int64(10)), ("vis_new", Int64(1_000))] {
                try tx.putVisitor(VisitorRecord(id: id, organization: "acme", instanceId: "i-\(id)", hardwareId: nil, firstSeen: 0,
                                                lastSeen: lastSeen, components: [ComponentRecord(scope: "instance", name: "machine-id", hash: hash + id)],
                                                deviceKeys: [DeviceKeyRecord(keyId: "key-\(id)", firstProvenAt: 0)]))
            }
        }
        #expect(try store.transaction { tx throws(StoreError) in try tx.expireVisitors(lastSeenBefore: 500) } == 1)
        try store.transaction { tx throws(StoreError) in
            #expect(try tx.visitor(id: "vis_old", organization: "acme") == nil)
            #expect(try tx.visitors(sharingAnyOf: [hash + "vis_old"], organization: "acme", limit: 10).isEmpty)
            let kept = try tx.visitor(id: "vis_new", organization: "acme")
            #expect(kept?.components.count == 1 && kept?.deviceKeys == [DeviceKeyRecord(keyId: "key-vis_new", firstProvenAt: 0)])
            // The old one's id can be used again: no row of its components or keys was left behind.
            try tx.putVisitor(VisitorRecord(id: "vis_old", organization: "acme", instanceId: nil, hardwareId: nil, firstSeen: 0, lastSeen: 2_000,
                                            components: [], deviceKeys: []))
            #expect(try tx.visitor(id: "vis_old", organization: "acme")?.deviceKeys == [])
        }
    }
}

/// The quota and the failure limit on `fingerly-server` processes over PostgreSQL: the stored
/// bytes live in the database, so two instances enforce one quota.
@Suite(.serialized, .enabled(if: PostgresCluster.isAvailable, "PostgreSQL's server binaries are not installed"))
struct PostgresStorageBoundsTests {
    @Test func twoInstancesEnforceOneQuotaAndShowItsFigures() throws {
        let cluster = try PostgresCluster.shared()
        let name = try cluster.createDatabase()
        defer { cluster.dropDatabase(name) }
        let url = cluster.url(database: name)
        let acme = try addedKeys(try runServerCLI(["keys", "add", "--org", "acme", "--region", "eu", "--db", url]))
        #expect(try runServerCLI(["keys", "quota", "--org", "acme", "--bytes", "1", "--db", url]).status == 0)
        // Unsigned requests, as a third-party client's: the quota and the failure limit are the subject.
        let first = try ServerProcess(database: url, arguments: ["--failure-limit", "3", "--allow-unsigned"])
        let second = try ServerProcess(database: url, arguments: ["--allow-unsigned"])
        defer { _ = first.terminate(); _ = second.terminate() }
        func identify(_ server: ServerProcess, key: String = acme.publicKey) throws -> RawResponse {
            try server.client.request("POST", "/v1/identify", headers: [("Authorization", "Bearer \(key)"), ("Content-Type", "application/json"),
                                                                        ("Idempotency-Key", "\"\(UUID().uuidString.lowercased())\"")],
                                      body: ServerTests.reportBody)
        }
        #expect(try identify(first).status == 200)
        let full = try identify(second)
        #expect(full.status == 507 && full.errorCode == "storage_quota_exceeded" && full.headers["retry-after"] == "3600")
        let metrics = try second.client.request("GET", "/metrics").text
        #expect((BoundedStorageTests.metric("fingerly_store_event_bytes", in: metrics) ?? 0) > 0)
        #expect(BoundedStorageTests.metric("fingerly_store_organizations_over_quota", in: metrics) == 1)

        // Junk: counted per address in each process, never in the database.
        let unknown = ServerKey.generatePair(region: "eu", environment: "production", organization: "acme").publicKey
        var statuses: [Int] = []
        // Twenty within a second or two: a second that ends on the way only starts the count over.
        for _ in 0..<20 { statuses.append(try identify(first, key: unknown).status) }
        #expect(statuses.prefix(3).allSatisfy { $0 == 401 } && statuses.contains(429), "\(statuses)")
        #expect(try identify(second, key: unknown).status == 401)
    }
}

/// The storage-usage migration on a database that already holds events: each organization's stored bytes start
/// at what its events take, so a quota holds from the first request after the upgrade.
@Suite struct StorageUsageMigrationTests {
    @Test func theMigrationCountsTheEventsAlreadyStored() throws {
        let database = try TestPaths.temporaryDirectory("quota-migration") + "/db.sqlite"
        let store = try SQLiteStore(path: database)
        let hash = String(repeating: "c", count: 64)
        try store.transaction { tx throws(StoreError) in
            _ = try tx.ensureOrganization(named: "acme", now: 0)
            // One of the events' visitors is stored, with two components and a key.
            try tx.putVisitor(VisitorRecord(id: "vis_req_0", organization: "acme", instanceId: "i", hardwareId: nil, firstSeen: 0, lastSeen: 1,
                                            components: [ComponentRecord(scope: "instance", name: "machine-id", hash: hash),
                                                         ComponentRecord(scope: "hardware", name: "disk", hash: hash)],
                                            deviceKeys: [DeviceKeyRecord(keyId: "key-a", firstProvenAt: 0)]))
            for index in 0..<4 { try tx.insertEvent(StorageBoundsStoreContractTests.event("req_\(index)", organization: "acme", at: 1, size: 3_000)) }
        }
        let (counted, share) = try store.transaction { tx throws(StoreError) in
            (try tx.storedBytes()["acme"] ?? 0, try tx.visitor(id: "vis_req_0", organization: "acme")?.eventBytes ?? 0)
        }
        store.close()
        // Back to the version before them, as a database written before these migrations is.
        let downgrade = try runProcess("/usr/bin/sqlite3", [database, """
            DROP INDEX visitor_device_keys_key; ALTER TABLE visitors DROP COLUMN event_bytes;
            DROP TABLE storage_usage; ALTER TABLE organizations DROP COLUMN storage_quota;
            DELETE FROM schema_migrations WHERE version >= \(SchemaVersion.storageUsage);
            """])
        try #require(downgrade.status == 0, "\(downgrade.standardError)")
        let upgraded = try SQLiteStore(path: database)
        defer { upgraded.close() }
        #expect(try upgraded.schemaVersion() == SQLiteSchema.latestVersion)
        #expect(counted > 12_000 && share > 2_000 && share < counted)
        // What the migrations count is what the store counts as it goes: the events and the visitor's rows.
        #expect(try upgraded.transaction { tx throws(StoreError) in try tx.organization(named: "acme")?.storedBytes } == counted)
        #expect(try upgraded.transaction { tx throws(StoreError) in try tx.visitor(id: "vis_req_0", organization: "acme")?.eventBytes } == share)
    }
}
