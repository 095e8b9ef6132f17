@testable import FingerlySQLiteStore
import Foundation
import Testing
@testable import Fingerly
@testable import FingerlyEngine
@testable import FingerlyModel
@testable import FingerlyServer
@testable import FingerlyStore
@testable import FingerlyTransport

/// An answer read off the socket.
struct RawResponse {
    let status: Int
    let headers: [String: String]
    let body: [UInt8]

    var errorCode: String? { (try? JSONDecoder().decode(WireError.self, from: Data(body)))?.error.code }
    var text: String { String(decoding: body, as: UTF8.self) }
}

/// A blocking loopback client: writes bytes as given (so a test can send what no well-behaved
/// client would), reads the answer until the server closes.
struct RawClient {
    let port: UInt16

    func connect() throws -> Int32 {
        try connectToLoopback(port: port, timeoutSeconds: 20)
    }

    static func write(_ descriptor: Int32, _ bytes: [UInt8]) {
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if written <= 0 { return }
            offset += written
        }
    }

    static func readAll(_ descriptor: Int32) -> [UInt8] {
        var data: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = recv(descriptor, &buffer, buffer.count, 0)
            if count < 0 && errno == EINTR { continue }
            if count <= 0 { break }
            data.append(contentsOf: buffer[0..<count])
        }
        return data
    }

    static func parse(_ data: [UInt8]) throws -> RawResponse {
        let separator = Array("\r\n\r\n".utf8)
        guard let end = (0...max(0, data.count - 4)).first(where: { data.count >= 4 && Array(data[$0..<$0 + 4]) == separator }) else {
            throw POSIXError(.EBADMSG)
        }
        let lines = String(decoding: data[..<end], as: UTF8.self).components(separatedBy: "\r\n")
        let statusParts = lines[0].split(separator: " ")
        guard statusParts.count >= 2, let status = Int(statusParts[1]) else { throw POSIXError(.EBADMSG) }
        var headers: [String: String] = [:]
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        return RawResponse(status: status, headers: headers, body: Array(data[(end + 4)...]))
    }

    /// Sends raw bytes and reads the answer.
    func exchange(_ bytes: [UInt8]) throws -> RawResponse {
        let descriptor = try connect()
        defer { close(descriptor) }
        Self.write(descriptor, bytes)
        return try Self.parse(Self.readAll(descriptor))
    }

    func request(_ method: String, _ path: String, headers: [(String, String)] = [], body: [UInt8] = []) throws -> RawResponse {
        var head = "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        if method == "POST" || !body.isEmpty { head += "Content-Length: \(body.count)\r\n" }
        return try exchange(Array((head + "\r\n").utf8) + body)
    }
}

/// A server on an ephemeral loopback port over a fresh SQLite database.
final class ServerHarness: @unchecked Sendable {
    let store: FailingStore
    let server: RunningServer
    let log = Locked<[String]>([])
    var client: RawClient { RawClient(port: server.port) }

    init(clock: (@Sendable () -> Int64)? = nil, _ configure: (inout ServerConfiguration) -> Void = { _ in }) throws {
        let database = try TestPaths.temporaryDirectory("server") + "/db.sqlite"
        store = FailingStore(try SQLiteStore(path: database))
        var configuration = ServerConfiguration(database: database)
        configuration.listen = ListenAddress.parse("127.0.0.1:0")!
        configuration.threads = 2
        // Most tests here are about something else than signatures and send unsigned requests;
        // those about signatures set it back.
        configuration.allowUnsigned = true
        configure(&configuration)
        let log = self.log
        let engine = IdentityEngine(store: store, policy: .embedded())
        let record: @Sendable (String) -> Void = { line in log.set(log.value + [line]) }
        if let clock {
            server = try RunningServer(configuration: configuration, store: store, engine: engine, log: record, clock: clock)
        } else {
            server = try RunningServer(configuration: configuration, store: store, engine: engine, log: record)
        }
    }

    deinit { server.shutdown() }

    /// A fresh key pair of `organization`, stored as `keys add` stores it.
    func keys(organization: String = "acme", environment: String = "production") throws -> (publicKey: String, secretKey: String) {
        let pair = ServerKey.generatePair(region: "eu", environment: environment, organization: organization)
        try store.transaction { tx throws(StoreError) in
            _ = try tx.ensureOrganization(named: organization, now: 0)
            try tx.insertKey(KeyRecord(publicKey: pair.publicKey, secretKeyHash: ServerKey.secretHash(pair.secretKey),
                                       organization: organization, environment: environment, revoked: false, createdAt: 0))
        }
        return pair
    }

    func identifyHeaders(_ key: String, idempotencyKey: String = "\"\(UUID().uuidString.lowercased())\"") -> [(String, String)] {
        [("Authorization", "Bearer \(key)"), ("Content-Type", "application/json"), ("Idempotency-Key", idempotencyKey)]
    }
}

@Suite(.serialized)
struct ServerTests {
    static let body = Array(#"{"client":{"proxy":false,"sdk":"fingerly-linux","version":"0.1.0"},"report":{}}"#.utf8)

    /// A real submission body for organization acme, as the client makes it from a fixture host.
    static let reportBody: [UInt8] = reportBody(organization: "acme")

    /// The CLI's body for `organization`: its identifiers derive under that organization's name, as
    /// the server checks.
    static func reportBody(organization: String) -> [UInt8] {
        let state = (try? TestPaths.temporaryDirectory("server-body")) ?? NSTemporaryDirectory()
        var env = SubmissionCLITests.environment(state: state, apiKey: TestKeys.key(org: organization, region: "eu"))
        env["FINGERLY_ENDPOINT"] = nil
        let run = try? runCLI(["--no-submit", "--request-only", "--root", TestPaths.fixture("kvm-qemu"), "--tiers", "fast"], environment: env)
        return Array((run?.standardOutput ?? "").utf8)
    }

    @Test func healthAndMetrics() throws {
        let harness = try ServerHarness()
        let health = try harness.client.request("GET", "/healthz")
        #expect(health.status == 200)
        #expect(health.text == #"{"status":"ok"}"#)
        let metrics = try harness.client.request("GET", "/metrics")
        #expect(metrics.status == 200)
        #expect(metrics.headers["content-type"]?.hasPrefix("text/plain") == true)
        #expect(metrics.text.contains(#"fingerly_http_requests_total{route="healthz",status="200"} 1"#))
        #expect(metrics.text.contains(#"fingerly_http_request_duration_seconds_count{route="healthz"} 1"#))
        #expect(metrics.text.contains("fingerly_store_errors_total 0"))
        // SQLite's group commit: every commit so far carried one transaction, alone on the server.
        let commits = BoundedStorageTests.metric("fingerly_store_group_commit_transactions_count", in: metrics.text) ?? 0
        #expect(commits >= 2, "the health check's and the metrics' own transactions")
        #expect(BoundedStorageTests.metric("fingerly_store_group_commit_transactions_sum", in: metrics.text) == commits)
        #expect(metrics.text.contains(#"fingerly_store_group_commit_transactions_bucket{le="1"} \#(commits)"#))
        #expect(metrics.text.contains(#"fingerly_store_group_commit_transactions_bucket{le="+Inf"} \#(commits)"#))

        harness.store.fail(with: StoreError("disk gone"))
        let down = try harness.client.request("GET", "/healthz")
        #expect(down.status == 503)
        #expect(down.errorCode == "unavailable")
        let (publicKey, _) = ("fly_pk_eu_production_acme_" + String(repeating: "a", count: 32), 0)
        let identify = try harness.client.request("POST", "/v1/identify", headers: harness.identifyHeaders(publicKey), body: Self.body)
        #expect(identify.status == 500)
        #expect(identify.errorCode == "internal")
        harness.store.fail(with: StoreError("locked", isTransient: true))
        let busy = try harness.client.request("POST", "/v1/identify", headers: harness.identifyHeaders(publicKey), body: Self.body)
        #expect(busy.status == 503)
        #expect(busy.headers["retry-after"] == "1")
        harness.store.fail(with: nil)
        let after = try harness.client.request("GET", "/metrics")
        #expect(after.text.contains("fingerly_store_errors_total 3"))
        #expect(after.text.contains(#"fingerly_http_requests_total{route="identify",status="500"} 1"#))
        // One line per request, without the key.
        #expect(harness.log.value.count >= 5)
        #expect(!harness.log.value.joined().contains("fly_"))
        #expect(harness.log.value.first?.hasPrefix("GET healthz 200 ") == true)
    }

    @Test func unknownRoutesAndWrongMethods() throws {
        let harness = try ServerHarness()
        let missing = try harness.client.request("GET", "/v2/identify")
        #expect(missing.status == 404)
        #expect(missing.errorCode == "not_found")
        let wrong = try harness.client.request("GET", "/v1/identify")
        #expect(wrong.status == 405)
        #expect(wrong.errorCode == "method_not_allowed")
        #expect(wrong.headers["allow"] == "POST")
        let wrongEvents = try harness.client.request("DELETE", "/v1/events/req_1")
        #expect(wrongEvents.status == 405)
        #expect(wrongEvents.headers["allow"] == "GET")
    }

    @Test func keysAndOrganizations() throws {
        let harness = try ServerHarness()
        let (publicKey, secretKey) = try harness.keys()
        let client = harness.client
        func identify(_ headers: [(String, String)]) throws -> RawResponse {
            try client.request("POST", "/v1/identify", headers: headers, body: Self.body)
        }
        let withoutKey = [("Content-Type", "application/json"), ("Idempotency-Key", "\"a\"")]
        #expect(try identify(withoutKey).errorCode == "invalid_key")
        #expect(try identify(harness.identifyHeaders("fly_pk_eu_production_acme_" + String(repeating: "b", count: 32))).status == 401)
        #expect(try identify(harness.identifyHeaders("not a key")).errorCode == "invalid_key")
        // A secret key never submits: a real key where it is not allowed (KeyPermissionTests).
        #expect(try identify(harness.identifyHeaders(secretKey)).status == 403)

        var missingKey = harness.identifyHeaders(publicKey)
        missingKey.removeLast()
        let noIdempotency = try identify(missingKey)
        #expect(noIdempotency.status == 400)
        #expect(noIdempotency.errorCode == "bad_request")
        #expect(try identify(harness.identifyHeaders(publicKey, idempotencyKey: "unquoted")).status == 400)

        try harness.store.transaction { tx throws(StoreError) in _ = try tx.setSuspended(true, organization: "acme") }
        let suspended = try identify(harness.identifyHeaders(publicKey))
        #expect(suspended.status == 402)
        #expect(suspended.errorCode == "organization_not_accepting")
        try harness.store.transaction { tx throws(StoreError) in _ = try tx.setSuspended(false, organization: "acme") }
        #expect(try identify(harness.identifyHeaders(publicKey)).status != 402)
        try harness.store.transaction { tx throws(StoreError) in _ = try tx.revokeKey(publicKey: publicKey) }
        #expect(try identify(harness.identifyHeaders(publicKey)).errorCode == "invalid_key")
    }

    @Test func eventsNeedTheSecretKey() throws {
        let harness = try ServerHarness()
        let (publicKey, secretKey) = try harness.keys()
        let (_, otherSecret) = try harness.keys(organization: "other")
        let client = harness.client
        let withPublic = try client.request("GET", "/v1/events/req_x", headers: [("Authorization", "Bearer \(publicKey)")])
        #expect(withPublic.status == 403)
        #expect(withPublic.errorCode == "forbidden")
        let unknown = try client.request("GET", "/v1/events/req_x",
                                         headers: [("Authorization", "Bearer fly_sk_eu_production_acme_" + String(repeating: "c", count: 32))])
        #expect(unknown.status == 401)
        // A secret key whose text names another organization than the one it belongs to.
        let renamed = otherSecret.replacingOccurrences(of: "_other_", with: "_acme_")
        #expect(try client.request("GET", "/v1/events/req_x", headers: [("Authorization", "Bearer \(renamed)")]).status == 401)
        #expect(try client.request("GET", "/v1/events/req_x").status == 401)
        let valid = try client.request("GET", "/v1/events/req_x", headers: [("Authorization", "Bearer \(secretKey)")])
        #expect(valid.status != 401 && valid.status != 403)
    }

    @Test func bodyLimitWithContentLengthAndWhileStreaming() throws {
        let harness = try ServerHarness(clock: nil) { $0.bodyLimit = 4096 }
        let (publicKey, _) = try harness.keys()
        let client = harness.client
        let declared = try client.request("POST", "/v1/identify", headers: harness.identifyHeaders(publicKey),
                                          body: Array(repeating: UInt8(ascii: "x"), count: 5000))
        #expect(declared.status == 413)
        #expect(declared.errorCode == "payload_too_large")

        // Chunked: identify takes none (RequestFramingTests), answered from the head.
        var raw = "POST /v1/identify HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n"
        for (name, value) in harness.identifyHeaders(publicKey) { raw += "\(name): \(value)\r\n" }
        raw += "\r\n"
        let chunk = String(repeating: "y", count: 1000)
        for _ in 0..<10 { raw += "3e8\r\n\(chunk)\r\n" }
        raw += "0\r\n\r\n"
        let streamed = try client.exchange(Array(raw.utf8))
        #expect(streamed.status == 411)
        #expect(streamed.errorCode == "length_required")

        // At the limit is not over it.
        let exact = try client.request("POST", "/v1/identify", headers: harness.identifyHeaders(publicKey),
                                       body: Array(repeating: UInt8(ascii: " "), count: 4096))
        #expect(exact.status != 413)
    }

    @Test func rateLimitPerKey() throws {
        let harness = try ServerHarness(clock: { 1_767_225_600 }) { $0.rateLimit = 3 }
        let (publicKey, _) = try harness.keys()
        let (otherKey, _) = try harness.keys(organization: "other")
        var statuses: [Int] = []
        for _ in 0..<3 {
            statuses.append(try harness.client.request("POST", "/v1/identify", headers: harness.identifyHeaders(publicKey), body: Self.body).status)
        }
        #expect(!statuses.contains(429))
        let limited = try harness.client.request("POST", "/v1/identify", headers: harness.identifyHeaders(publicKey), body: Self.body)
        #expect(limited.status == 429)
        #expect(limited.errorCode == "rate_limited")
        #expect(limited.headers["retry-after"] == "1")
        // Another key has its own budget.
        #expect(try harness.client.request("POST", "/v1/identify", headers: harness.identifyHeaders(otherKey), body: Self.body).status != 429)
    }

    @Test func signatures() throws {
        let now: Int64 = 1_767_225_600
        let harness = try ServerHarness(clock: { now })
        let (publicKey, _) = try harness.keys()
        let device = try DeviceKey.ephemeral()
        func signed(path: String = "/v1/identify", body: [UInt8] = Self.reportBody, created: Int64 = now, send: [UInt8]? = nil) throws -> RawResponse {
            let idempotencyKey = "\"\(UUID().uuidString.lowercased())\""
            let fields = try MessageSignature.sign(method: "POST", path: path, body: body, idempotencyKey: idempotencyKey, created: created, with: device)
            return try harness.client.request("POST", "/v1/identify",
                                              headers: harness.identifyHeaders(publicKey, idempotencyKey: idempotencyKey) + fields.headers,
                                              body: send ?? body)
        }
        let good = try signed()
        #expect(good.status == 200, "\(good.text)")
        let otherPath = try signed(path: "/elsewhere/v1/identify")
        #expect(otherPath.status == 401)
        #expect(otherPath.errorCode == "invalid_signature")
        #expect(try signed(created: now - 301).errorCode == "stale_signature")
        #expect(try signed(created: now + 301).errorCode == "stale_signature")
        #expect(try signed(created: now - 300).status != 401)
        let tampered = try signed(send: Self.reportBody.map { $0 == UInt8(ascii: "0") ? UInt8(ascii: "9") : $0 })
        #expect(tampered.status == 400)
        #expect(tampered.errorCode == "bad_request")
        // Half a signature is a bad one, not an unsigned request.
        let partial = try harness.client.request("POST", "/v1/identify",
                                                 headers: harness.identifyHeaders(publicKey) + [("Signature", "fingerly=:AAAA:")], body: Self.body)
        #expect(partial.errorCode == "invalid_signature")
        let unsigned = try harness.client.request("POST", "/v1/identify", headers: harness.identifyHeaders(publicKey), body: Self.body)
        #expect(unsigned.status != 401)
        let metrics = try harness.client.request("GET", "/metrics").text
        #expect(metrics.contains(#"fingerly_identify_signatures_total{outcome="verified"} 2"#))
        #expect(metrics.contains(#"fingerly_identify_signatures_total{outcome="stale"} 2"#))
        #expect(metrics.contains(#"fingerly_identify_signatures_total{outcome="unsigned"} 1"#))

        let strict = try ServerHarness(clock: { now }) { $0.allowUnsigned = false }
        let (strictKey, _) = try strict.keys()
        let refused = try strict.client.request("POST", "/v1/identify", headers: strict.identifyHeaders(strictKey), body: Self.body)
        #expect(refused.status == 401)
        #expect(refused.errorCode == "missing_signature")
    }

    @Test func aSlowClientTimesOutWithoutBlockingOthers() throws {
        let harness = try ServerHarness(clock: nil) { $0.connectionTimeout = 1; $0.threads = 1 }
        let slow = try harness.client.connect()
        defer { close(slow) }
        RawClient.write(slow, Array("GET /healthz HTTP/1.1\r\nHost: x\r\n".utf8))
        // The same single worker thread answers others while the slow head is pending.
        for _ in 0..<5 { #expect(try harness.client.request("GET", "/healthz").status == 200) }
        // Then the server gives up on it: the connection closes without an answer.
        #expect(RawClient.readAll(slow).isEmpty)
    }

    @Test func shutdownLetsARequestInFlightFinish() throws {
        let harness = try ServerHarness()
        let (publicKey, _) = try harness.keys()
        let connection = try harness.client.connect()
        defer { close(connection) }
        var head = "POST /v1/identify HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: \(Self.body.count)\r\n"
        for (name, value) in harness.identifyHeaders(publicKey) { head += "\(name): \(value)\r\n" }
        RawClient.write(connection, Array((head + "\r\n").utf8) + Self.body.prefix(10))
        while harness.server.requestsInFlight == 0 { usleep(1000) }
        let stopped = Locked(false)
        Thread { harness.server.shutdown(); stopped.set(true) }.start()
        // New connections are refused once the daemon stops accepting.
        var refused = false
        for _ in 0..<500 where !refused {
            if (try? harness.client.connect()).map({ close($0) }) == nil { refused = true } else { usleep(2000) }
        }
        #expect(refused)
        #expect(!stopped.value)
        RawClient.write(connection, Array(Self.body.dropFirst(10)))
        let answer = try RawClient.parse(RawClient.readAll(connection))
        #expect(answer.status != 0)
        while !stopped.value { usleep(1000) }
    }

    @Test func malformedRequestsGet4xxAndTheServerKeepsServing() throws {
        let harness = try ServerHarness(clock: nil) { $0.headerMemoryLimit = 8192 }
        let (publicKey, _) = try harness.keys()
        let client = harness.client
        // A head larger than the connection's memory: libmicrohttpd answers it itself.
        let huge = try client.request("GET", "/healthz", headers: [("X-Padding", String(repeating: "p", count: 20_000))])
        #expect((400..<500).contains(huge.status))
        let garbage = try client.exchange(Array("\u{1}\u{2} nonsense\r\n\r\n".utf8))
        #expect((400..<500).contains(garbage.status))
        let twoKeys = try client.request("POST", "/v1/identify", headers: harness.identifyHeaders(publicKey) + [("Idempotency-Key", "\"b\"")],
                                         body: Self.body)
        #expect(twoKeys.status == 400)
        let twoAuthorizations = try client.request("POST", "/v1/identify",
                                                   headers: harness.identifyHeaders(publicKey) + [("Authorization", "Bearer \(publicKey)")], body: Self.body)
        #expect(twoAuthorizations.errorCode == "invalid_key")
        #expect(try client.request("GET", "/healthz").status == 200)
    }

    @Test func configurationFileAndFlags() throws {
        var configuration = ServerConfiguration(database: "/x")
        let keys = try configuration.apply(file: "# comment\n\nlisten = [::1]:9000\nbody-limit=2048\r\nallow-unsigned = true\n", name: "c")
        #expect(keys == ["listen", "body-limit", "allow-unsigned"])
        #expect(configuration.listen.description == "[::1]:9000")
        #expect(configuration.bodyLimit == 2048)
        #expect(configuration.allowUnsigned)
        for (text, problem) in [("threads = 0", "c:1: threads must be an integer in 1...256"),
                                ("\nlisten = localhost:80", "c:2: listen must be IPV4:PORT or [IPV6]:PORT with a literal address"),
                                ("rate-limit = 5\nrate-limit = 6", "c:2: 'rate-limit' is set twice"),
                                ("ratelimit = 5", "c:1: unknown setting 'ratelimit'"),
                                ("just words", "c:1: expected key = value"),
                                ("body-limit = 99999999999999999999", "c:1: body-limit must be an integer in 1024...67108864")] {
            var fresh = ServerConfiguration(database: "/x")
            #expect(throws: ConfigurationError(problem)) { _ = try fresh.apply(file: text, name: "c") }
        }

        let directory = try TestPaths.temporaryDirectory("server-config")
        let file = directory + "/server.conf"
        try "listen = 127.0.0.1:9001\nrate-limit = 7\ndatabase = /from/file\n".write(toFile: file, atomically: true, encoding: .utf8)
        let merged = try FingerlyServerCommand.configuration(["--config", file, "--rate-limit", "9", "--allow-unsigned"],
                                                             environment: ["STATE_DIRECTORY": "/var/lib/s"])
        #expect(merged.rateLimit == 9)
        #expect(merged.listen.port == 9001)
        #expect(merged.database == "/from/file")
        #expect(merged.allowUnsigned)
        // Signatures are required unless allowed otherwise; the old setting says what replaced it.
        #expect(try !FingerlyServerCommand.configuration([], environment: [:]).allowUnsigned)
        #expect(try !FingerlyServerCommand.configuration(["--allow-unsigned", "false"], environment: [:]).allowUnsigned)
        for arguments in [["--require-signatures"], ["--require-signatures", "false"]] {
            #expect(throws: ConfigurationError("--require-signatures: require-signatures is gone: signatures are required by default, "
                + "and allow-unsigned accepts unsigned requests")) { _ = try FingerlyServerCommand.configuration(arguments, environment: [:]) }
        }
        var old = ServerConfiguration(database: "/x")
        #expect(throws: ConfigurationError("c:1: require-signatures is gone: signatures are required by default, and allow-unsigned "
            + "accepts unsigned requests")) { _ = try old.apply(file: "require-signatures = true", name: "c") }
        #expect(try FingerlyServerCommand.configuration([], environment: ["STATE_DIRECTORY": "/var/lib/s"]).database
                == "/var/lib/s/fingerly-server.sqlite")
        #expect(throws: ConfigurationError("unknown option --port")) { _ = try FingerlyServerCommand.configuration(["--port", "1"], environment: [:]) }
        #expect(throws: ConfigurationError("tls-cert and tls-key come together")) {
            _ = try FingerlyServerCommand.configuration(["--tls-cert", "/c"], environment: [:])
        }
    }

    @Test func generatedKeysHaveTheClientsFormat() throws {
        let pair = ServerKey.generatePair(region: "ap", environment: "staging", organization: "acme-2")
        guard case .success(let parsed) = APIKey.parse(pair.publicKey) else { Issue.record("not a public key"); return }
        #expect(parsed.organization == "acme-2")
        #expect(parsed.environment == "staging")
        #expect(parsed.region == .ap)
        #expect(pair.secretKey.hasPrefix("fly_sk_ap_staging_acme-2_"))
        #expect(ServerKey(pair.secretKey)?.kind == .secretKey)
        #expect(ServerKey.generatePair(region: "ap", environment: "staging", organization: "acme-2").publicKey != pair.publicKey)
        #expect(ServerKey.constantTimeEqual([1, 2], [1, 2]) && !ServerKey.constantTimeEqual([1, 2], [1, 3]) && !ServerKey.constantTimeEqual([1], [1, 2]))
    }
}

/// `fingerly-server serve` as a real process on an ephemeral port, for what only a process
/// shows: signals, the keys commands' exit codes, the real client talking to it.
final class ServerProcess {
    static let executable = TestPaths.packageRoot + "/.build/debug/fingerly-server"
    let pid: pid_t
    let port: UInt16
    let standardError: Locked<String>
    /// Signalled when the server's stderr reaches its end: what it said last is then all read.
    private let readerDone = DispatchSemaphore(value: 0)
    var client: RawClient { RawClient(port: port) }

    init(database: String, arguments: [String] = []) throws {
        var errPipe: [Int32] = [0, 0]
        guard pipe(&errPipe) == 0 else { throw POSIXError(.EMFILE) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, errPipe[1], 2)
        posix_spawn_file_actions_addclose(&actions, errPipe[0])
        posix_spawn_file_actions_addclose(&actions, errPipe[1])
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        startsWithDefaultSignals(&attributes)
        let argv = ([Self.executable, "serve", "--listen", "127.0.0.1:0", "--db", database] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, Self.executable, &actions, &attributes, argv, environ)
        close(errPipe[1])
        guard spawned == 0 else { close(errPipe[0]); throw POSIXError(POSIXErrorCode(rawValue: spawned) ?? .ENOENT) }
        self.pid = pid
        let output = Locked("")
        standardError = output
        let descriptor = errPipe[0]
        let done = readerDone
        Thread {
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let count = read(descriptor, &buffer, buffer.count)
                if count < 0 && errno == EINTR { continue }
                if count <= 0 { break }
                output.set(output.value + String(decoding: buffer[0..<count], as: UTF8.self))
            }
            close(descriptor)
            done.signal()
        }.start()
        var found: UInt16?
        for _ in 0..<3000 where found == nil {
            if let line = output.value.split(separator: "\n").first(where: { $0.contains("://127.0.0.1:") && $0.contains("listening on") }),
               let port = UInt16(line.split(separator: ":").last ?? "") {
                found = port
            } else if waitpid(pid, nil, WNOHANG) == pid {
                reaped = true
                throw POSIXError(.ECHILD)
            } else {
                usleep(10_000)
            }
        }
        port = try #require(found, "the server never said where it listens: \(output.value)")
    }

    /// Sends SIGTERM and returns the exit status.
    /// Set once the process is reaped, so `deinit` never signals a pid the kernel may reuse.
    private var reaped = false

    /// A test that ends early, or forgets, leaves no server running.
    deinit {
        guard !reaped else { return }
        kill(pid, SIGKILL)
        while waitpid(pid, nil, 0) < 0 && errno == EINTR {}
    }

    /// Waits for the process to end and returns its raw wait status.
    func waitForExit() -> Int32 {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        reaped = true
        return status
    }

    func terminate() -> Int32 {
        kill(pid, SIGTERM)
        let status = waitForExit()
        _ = readerDone.wait(timeout: .now() + 5)
        return (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
    }
}

func runServerCLI(_ arguments: [String]) throws -> ProcessOutput {
    try runProcess(ServerProcess.executable, arguments)
}

/// `keys add`'s two lines.
func addedKeys(_ output: ProcessOutput) throws -> (publicKey: String, secretKey: String) {
    let lines = output.standardOutput.split(separator: "\n")
    let publicKey = try #require(lines.first { $0.hasPrefix("public key: ") }?.dropFirst("public key: ".count))
    let secretKey = try #require(lines.first { $0.hasPrefix("secret key: ") }?.dropFirst("secret key: ".count))
    return (String(publicKey), String(secretKey))
}

@Suite(.serialized)
struct ServerProcessTests {
    @Test func keysCommandsRoundTrip() throws {
        let database = try TestPaths.temporaryDirectory("server-keys") + "/db.sqlite"
        let added = try runServerCLI(["keys", "add", "--org", "acme", "--region", "eu", "--db", database])
        #expect(added.status == 0, "\(added.standardError)")
        let (publicKey, secretKey) = try addedKeys(added)
        guard case .success(let parsed) = APIKey.parse(publicKey) else { Issue.record("not a client key: \(publicKey)"); return }
        #expect(parsed.organization == "acme" && parsed.environment == "production" && parsed.region == .eu)
        #expect(secretKey.hasPrefix("fly_sk_eu_production_acme_"))

        let listed = try runServerCLI(["keys", "list", "--db", database])
        #expect(listed.status == 0)
        #expect(listed.standardOutput.contains(publicKey))
        #expect(listed.standardOutput.contains("\tactive\t"))
        #expect(!listed.standardOutput.contains("fly_sk_"))

        let server = try ServerProcess(database: database, arguments: ["--allow-unsigned"])
        let headers = [("Authorization", "Bearer \(publicKey)"), ("Content-Type", "application/json"),
                       ("Idempotency-Key", "\"k1\"")]
        #expect(try server.client.request("POST", "/v1/identify", headers: headers, body: ServerTests.body).status != 401)

        #expect(try runServerCLI(["keys", "suspend", "--org", "acme", "--db", database]).status == 0)
        #expect(try runServerCLI(["keys", "list", "--org", "acme", "--db", database]).standardOutput.contains("\tsuspended\t"))
        #expect(try server.client.request("POST", "/v1/identify", headers: headers, body: ServerTests.body).status == 402)
        #expect(try runServerCLI(["keys", "resume", "--org", "acme", "--db", database]).status == 0)
        #expect(try server.client.request("POST", "/v1/identify", headers: headers, body: ServerTests.body).status != 402)
        #expect(try runServerCLI(["keys", "revoke", "--key", publicKey, "--db", database]).status == 0)
        #expect(try server.client.request("POST", "/v1/identify", headers: headers, body: ServerTests.body).status == 401)
        #expect(try runServerCLI(["keys", "list", "--db", database]).standardOutput.contains("\trevoked\t"))
        #expect(server.terminate() == 0)
        #expect(!server.standardError.value.contains("fly_"))

        #expect(try runServerCLI(["keys", "suspend", "--org", "nobody", "--db", database]).status == 67)
        #expect(try runServerCLI(["keys", "revoke", "--key", "fly_pk_eu_production_acme_" + String(repeating: "z", count: 20), "--db", database]).status == 67)
        #expect(try runServerCLI(["keys", "add", "--org", "Not Valid", "--db", database]).status == 64)
        #expect(try runServerCLI(["keys", "add", "--db", database]).status == 64)
        #expect(try runServerCLI(["keys", "frobnicate"]).status == 64)
        #expect(try runServerCLI(["serve", "--listen", "nowhere"]).status == 78)
    }

    @Test func sigtermLetsARequestInFlightFinish() throws {
        let database = try TestPaths.temporaryDirectory("server-term") + "/db.sqlite"
        let (publicKey, _) = try addedKeys(try runServerCLI(["keys", "add", "--org", "acme", "--db", database]))
        let server = try ServerProcess(database: database)
        let connection = try server.client.connect()
        defer { close(connection) }
        let body = ServerTests.body
        let head = "POST /v1/identify HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: \(body.count)\r\n"
            + "Authorization: Bearer \(publicKey)\r\nContent-Type: application/json\r\n"
            + "Idempotency-Key: \"term-1\"\r\n\r\n"
        RawClient.write(connection, Array(head.utf8) + body.prefix(10))
        // The head is in once the metrics count one request in flight.
        var seen = false
        for _ in 0..<2000 where !seen {
            seen = (try? server.client.request("GET", "/metrics"))?.text.contains("fingerly_http_requests_in_flight 2") == true
            if !seen { usleep(5000) }
        }
        #expect(seen)
        kill(server.pid, SIGTERM)
        var refused = false
        for _ in 0..<1000 where !refused {
            if (try? server.client.connect()).map({ close($0) }) == nil { refused = true } else { usleep(2000) }
        }
        #expect(refused)
        RawClient.write(connection, Array(body.dropFirst(10)))
        let answer = try RawClient.parse(RawClient.readAll(connection))
        #expect(answer.status != 0 && answer.status != 503)
        #expect(server.terminate() == 0)
        #expect(server.standardError.value.contains("stopped"))
    }
}

@Suite(.serialized)
struct ServerEndToEndTests {
    /// Acceptance 1: the real client against the real server process.
    /// Acceptance 3's last point: the local mode gives the same answers as the server for the same
    /// sequence of hosts (identifiers are keyed differently, so the ids differ; who is new, who is
    /// the same visitor, the confidences, scores and triggers must not).
    @Test func theLocalModeAnswersAsTheServerDoes() throws {
        let database = try TestPaths.temporaryDirectory("server-vs-local") + "/db.sqlite"
        let (publicKey, _) = try addedKeys(try runServerCLI(["keys", "add", "--org", "acme", "--db", database]))
        let server = try ServerProcess(database: database)
        let endpoint = "http://127.0.0.1:\(server.port)"
        let hosts = ["laptop-baremetal", "laptop-baremetal", "kvm-qemu", "laptop-baremetal", "kvm-qemu"]

        func sequence(submitting: Bool) throws -> [IdentifyResult] {
            let state = try SubmissionCLITests.freshState(submitting ? "versus-server" : "versus-local")
            return try hosts.map { host in
                var arguments = ["--root", TestPaths.fixture(host), "--tiers", "fast", "--json"]
                if submitting { arguments += ["--endpoint", endpoint] }
                let run = try runCLI(arguments, environment: SubmissionCLITests.environment(state: state, apiKey: submitting ? publicKey : nil))
                #expect(run.status == 0, "\(host): \(run.standardError)")
                return try run.identifyResult()
            }
        }
        let remote = try sequence(submitting: true)
        let local = try sequence(submitting: false)
        #expect(remote.allSatisfy { $0.state == .enriched } && local.allSatisfy { $0.state == .local })
        #expect(remote.map(\.visitorIsNew) == local.map(\.visitorIsNew))
        #expect(remote.map(\.visitorConfidence) == local.map(\.visitorConfidence))
        #expect(remote.map(\.identifiable) == local.map(\.identifiable))
        #expect(remote.map(\.suspectScore) == local.map(\.suspectScore))
        #expect(remote.map { $0.triggers.map(\.signal) } == local.map { $0.triggers.map(\.signal) })
        // The same visitor where the server saw the same visitor, and only there.
        for first in hosts.indices {
            for second in hosts.indices where second > first {
                #expect((remote[first].visitorId == remote[second].visitorId) == (local[first].visitorId == local[second].visitorId),
                        "\(hosts[first]) #\(first) and \(hosts[second]) #\(second)")
            }
        }
        #expect(remote[0].visitorId == remote[1].visitorId && remote[0].visitorId != remote[2].visitorId)
        #expect(server.terminate() == 0)
    }

    @Test func theRealClientAgainstTheServer() throws {
        let directory = try TestPaths.temporaryDirectory("server-e2e")
        let database = directory + "/db.sqlite"
        let (publicKey, secretKey) = try addedKeys(try runServerCLI(["keys", "add", "--org", "acme", "--region", "eu", "--db", database]))
        let (otherPublic, otherSecret) = try addedKeys(try runServerCLI(["keys", "add", "--org", "other", "--db", database]))
        // The raw requests below, about idempotency, are unsigned; the client signs.
        let server = try ServerProcess(database: database, arguments: ["--allow-unsigned"])
        let endpoint = "http://127.0.0.1:\(server.port)"

        func identify(_ key: String, state: String) throws -> IdentifyResult {
            let run = try runCLI(SubmissionCLITests.identifyArguments(endpoint) + ["--json"],
                                 environment: SubmissionCLITests.environment(state: state, apiKey: key))
            #expect(run.status == 0, "\(run.standardError)")
            return try run.identifyResult()
        }
        let state = try SubmissionCLITests.freshState("server-e2e")
        let first = try identify(publicKey, state: state)
        #expect(first.state == .enriched)
        #expect(first.visitorIsNew == true)
        #expect(first.duplicate == false)
        let second = try identify(publicKey, state: state)
        #expect(second.visitorId == first.visitorId)
        #expect(second.visitorIsNew == false)
        #expect(second.requestId != first.requestId)

        // Verification by requestId with the secret key: the same event.
        let event = try server.client.request("GET", "/v1/events/\(first.requestId)", headers: [("Authorization", "Bearer \(secretKey)")])
        #expect(event.status == 200, "\(event.text)")
        let stored = try JSONDecoder.fingerly.decode(IdentifyAnswer.self, from: Data(event.body))
        #expect(stored.requestId == first.requestId)
        #expect(stored.visitorId == first.visitorId)
        #expect(event.text.contains(#""verified":true"#))
        // Another organization's secret key cannot see it; the other organization's client gets its own visitor.
        let foreign = try server.client.request("GET", "/v1/events/\(first.requestId)", headers: [("Authorization", "Bearer \(otherSecret)")])
        #expect(foreign.status == 404)
        #expect(foreign.errorCode == "not_found")
        let otherResult = try identify(otherPublic, state: try SubmissionCLITests.freshState("server-e2e-other"))
        #expect(otherResult.visitorId != first.visitorId)

        // A replayed idempotency key: the stored answer with duplicate true, no second event.
        let headers = [("Authorization", "Bearer \(publicKey)"), ("Content-Type", "application/json"),
                       ("Idempotency-Key", "\"replay-1\"")]
        let original = try server.client.request("POST", "/v1/identify", headers: headers, body: ServerTests.reportBody)
        #expect(original.status == 200, "\(original.text)")
        let replay = try server.client.request("POST", "/v1/identify", headers: headers, body: ServerTests.reportBody)
        let originalAnswer = try JSONDecoder.fingerly.decode(IdentifyAnswer.self, from: Data(original.body))
        let replayAnswer = try JSONDecoder.fingerly.decode(IdentifyAnswer.self, from: Data(replay.body))
        #expect(replayAnswer.duplicate && !originalAnswer.duplicate)
        #expect(replayAnswer.requestId == originalAnswer.requestId)
        let reused = try server.client.request("POST", "/v1/identify", headers: headers, body: ServerTests.reportBody + [0x20])
        #expect(reused.status == 422)
        #expect(reused.errorCode == "idempotency_key_reused")
        #expect(server.terminate() == 0)
        let count = try SQLiteStore(path: database).transaction { tx throws(StoreError) in try tx.eventCount(organization: "acme") }
        #expect(count == 3)
    }
}
