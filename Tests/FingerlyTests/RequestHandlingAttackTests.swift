import Foundation
import Testing
@testable import FingerlyEngine
@testable import FingerlyModel
@testable import FingerlyServer
@testable import FingerlyStore
@testable import FingerlyHost
@testable import FingerlyTransport

/// A hostile review of the server's request handling (issue 22): refusals that skipped every limit,
/// stored answers replayed to another device key, slow connections that starved the server, and a
/// declared length no integer holds.
enum RequestHandlingAttack {
    /// The fields of a request signed by `key` over `idempotencyKey` as given, even one the signing
    /// API refuses to make (an empty key): what an attacker's own code sends.
    static func signatureFields(_ key: DeviceKey, body: [UInt8], idempotencyKey: String, created: Int64) throws -> [(String, String)] {
        let digest = ContentDigest.fieldValue(for: body)
        let base = MessageSignature.signatureBase(method: "POST", path: "/v1/identify", contentDigest: digest,
                                                  idempotencyKey: idempotencyKey, created: created, keyID: key.keyID)
        let signature = try key.sign(base)
        return [("Content-Digest", digest), ("Fingerly-Device-Key", ":\(StrictBase64.encode(key.publicKey)):"),
                ("Signature-Input", "fingerly=" + MessageSignature.parameters(created: created, keyID: key.keyID)),
                ("Signature", "fingerly=:\(StrictBase64.encode(signature)):")]
    }

    /// An identify request with exactly these headers, signed by `key` when one is given.
    static func identify(_ harness: ServerHarness, publicKey: String, idempotencyKey: String, body: [UInt8] = ServerTests.reportBody,
                         signedBy key: DeviceKey?, created: Int64 = Int64(Date().timeIntervalSince1970),
                         extra: [(String, String)] = []) throws -> RawResponse {
        let signature = try key.map { try signatureFields($0, body: body, idempotencyKey: idempotencyKey, created: created) } ?? []
        return try harness.client.request("POST", "/v1/identify", headers: [("Authorization", "Bearer \(publicKey)"),
                                          ("Content-Type", "application/json"), ("Idempotency-Key", idempotencyKey)]
                                          + signature + extra, body: body)
    }

    static func fresh() -> String { "\"\(UUID().uuidString.lowercased())\"" }

    /// A TCP connection to 127.0.0.1:`port` from `source` (any 127/8 address is this host's on Linux).
    static func connect(port: UInt16, from source: String, timeoutSeconds: Int = 5) throws -> Int32 {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { throw POSIXError(.EMFILE) }
        var timeout = timeval(tv_sec: timeoutSeconds, tv_usec: 0)
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(descriptor, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        func address(_ text: String, _ port: UInt16) -> sockaddr_in {
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = port.bigEndian
            inet_pton(AF_INET, text, &address.sin_addr)
            return address
        }
        var local = address(source, 0), remote = address("127.0.0.1", port)
        let bound = withUnsafePointer(to: &local) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        let connected = bound == 0 && withUnsafePointer(to: &remote) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        } == 0
        guard connected else {
            let code = errno
            close(descriptor)
            throw POSIXError(POSIXErrorCode(rawValue: code) ?? .ECONNREFUSED)
        }
        return descriptor
    }

    /// Whether the server closed its end: a read that does not wait finds the end of the stream or an error.
    static func isClosedByPeer(_ descriptor: Int32) -> Bool {
        var byte: UInt8 = 0
        let count = recv(descriptor, &byte, 1, Int32(MSG_DONTWAIT))
        return count == 0 || (count < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
    }
}

/// W1: every refused request of a client counts against the failure limit or the key's budget
/// before the store is touched, whatever it claims (an empty idempotency key, a key of its own
/// making with an unknown public key).
@Suite(.serialized)
struct RefusedRequestLimitTests {
    @Test func theIdempotencyKeyGrammarIsOneForTheSignatureAndTheServer() throws {
        #expect(IdempotencyKeyField.key(inFieldValue: "\"\"") == nil)
        #expect(IdempotencyKeyField.key(inFieldValue: " \"a\"\t") == "a")
        #expect(IdempotencyKeyField.key(inFieldValue: "\"" + String(repeating: "k", count: 255) + "\"")?.count == 255)
        #expect(IdempotencyKeyField.key(inFieldValue: "\"" + String(repeating: "k", count: 256) + "\"") == nil)
        // An escaped quote is one character of an sf-string (IdempotencyKeyGrammarTests has the rest).
        #expect(IdempotencyKeyField.key(inFieldValue: "\"a\\\"b\"") == "a\"b")
        let key = try DeviceKey.ephemeral()
        for refused in ["\"\"", "\"" + String(repeating: "k", count: 256) + "\""] {
            #expect(throws: SigningError.invalidComponent("idempotency-key")) {
                try MessageSignature.sign(method: "POST", path: "/v1/identify", body: [], idempotencyKey: refused, created: 1, with: key)
            }
        }
        // What a signature verifies under, the server takes: a signature over an empty key does not verify.
        let fields = try RequestHandlingAttack.signatureFields(key, body: [], idempotencyKey: "\"\"", created: 100)
        #expect(throws: SignatureVerificationError.self) {
            try MessageSignature.verify(method: "POST", path: "/v1/identify", fields: fields.map { (name: $0.0, value: $0.1) }
                                            + [(name: "Idempotency-Key", value: "\"\"")], body: [], now: 100, window: 300)
        }
    }

    /// The flood of the review: junk signed by the attacker's own key with `Idempotency-Key: ""`, the
    /// same unsigned, and an unknown public key with a valid self-signature. It gets 429 after at most
    /// twice the failure limit of store transactions; the genuine device (admitted before, from the
    /// same address) stays 200 and its budget unspent, while a device never admitted waits with the rest.
    @Test func aFloodOfSelfSignedJunkIsLimitedBeforeTheStoreAndTheGenuineDeviceStaysAnswered() throws {
        let now: Int64 = 1_767_225_600
        let failureLimit = 5
        let harness = try ServerHarness(clock: { now }) { $0.failureLimit = failureLimit; $0.rateLimit = 3 }
        let (publicKey, _) = try harness.keys()
        let genuine = try SigningDevice(harness, publicKey: publicKey)
        #expect(try genuine.identify(created: now).status == 200)

        let attacker = try DeviceKey.ephemeral()
        let unknown = ServerKey.generatePair(region: "eu", environment: "production", organization: "acme").publicKey
        let before = harness.store.transactionsBegun
        var answers: [String: Int] = [:]
        for index in 0..<300 {
            let answer: RawResponse
            switch index % 3 {
            case 0: answer = try RequestHandlingAttack.identify(harness, publicKey: publicKey, idempotencyKey: "\"\"",
                                                                 signedBy: attacker, created: now)
            case 1: answer = try RequestHandlingAttack.identify(harness, publicKey: publicKey, idempotencyKey: "\"\"", signedBy: nil)
            default: answer = try RequestHandlingAttack.identify(harness, publicKey: unknown, idempotencyKey: RequestHandlingAttack.fresh(),
                                                                 signedBy: attacker, created: now)
            }
            answers["\(answer.status) \(answer.errorCode ?? "-")", default: 0] += 1
        }
        let storeWork = harness.store.transactionsBegun - before
        #expect(storeWork <= 2 * failureLimit, "the flood cost \(storeWork) store transactions")
        // Refused before the store either way: by the address's failures, or, for requests signed by a
        // device it never admitted, by the address's budget for new devices (the rate limit).
        let limited = (answers["429 too_many_failures"] ?? 0) + (answers["429 rate_limited"] ?? 0)
        #expect(limited >= 300 - 2 * failureLimit, "\(answers)")
        #expect(Set(answers.keys).isSubset(of: ["429 too_many_failures", "429 rate_limited", "401 invalid_signature",
                                                "400 bad_request", "401 invalid_key"]), "\(answers)")

        // The same second: the genuine device has the two requests left of its budget of three.
        for _ in 0..<2 {
            let answered = try genuine.identify(created: now)
            #expect(answered.status == 200, "\(answered.text)")
        }
        let fresh = try SigningDevice(harness, publicKey: publicKey).identify(created: now)
        #expect(fresh.status == 429 && ["too_many_failures", "rate_limited"].contains(fresh.errorCode), "\(fresh.text)")
    }

    /// Refusals that are neither a bad key nor a bad signature count too: a suspended organization's
    /// 402 and a public key reading events, each of which used to cost a store transaction unlimited.
    @Test func suspendedAndForbiddenRefusalsCountAgainstTheAddress() throws {
        let now: Int64 = 1_767_225_600
        let harness = try ServerHarness(clock: { now }) { $0.failureLimit = 3 }
        let (publicKey, _) = try harness.keys()
        let (suspendedKey, _) = try harness.keys(organization: "dormant")
        _ = try harness.store.transaction { tx throws(StoreError) in try tx.setSuspended(true, organization: "dormant") }
        func suspendedIdentify() throws -> String {
            try harness.client.request("POST", "/v1/identify", headers: harness.identifyHeaders(suspendedKey), body: ServerTests.body)
                .errorCode ?? "-"
        }
        let readsEvents = { try harness.client.request("GET", "/v1/events/req_x", headers: [("Authorization", "Bearer \(publicKey)")]) }
        let codes = [try suspendedIdentify(), try suspendedIdentify(), try readsEvents().errorCode ?? "-", try readsEvents().errorCode ?? "-"]
        #expect(codes == ["organization_not_accepting", "organization_not_accepting", "forbidden", "too_many_failures"])
    }
}

/// W2: a stored answer is replayed only to the proof that produced it.
@Suite(.serialized)
struct IdempotentReplayBindingTests {
    static func stored(_ harness: ServerHarness) throws -> Int64 {
        try harness.store.transaction { tx throws(StoreError) in try tx.organization(named: "acme")?.storedBytes ?? -1 }
    }

    /// The review's replay: a victim's request captured, re-signed by the attacker's own device key
    /// with the same Idempotency-Key and body. It gets 422 and stores nothing; the victim's retry still
    /// gets its answer.
    @Test func aCapturedRequestReSignedByAnotherDeviceKeyGetsNoStoredAnswer() throws {
        let harness = try ServerHarness(clock: nil) { $0.allowUnsigned = false }
        let (publicKey, _) = try harness.keys()
        let victim = try DeviceKey.ephemeral(), attacker = try DeviceKey.ephemeral()
        let key = RequestHandlingAttack.fresh()
        let first = try RequestHandlingAttack.identify(harness, publicKey: publicKey, idempotencyKey: key, signedBy: victim)
        #expect(first.status == 200, "\(first.text)")
        let answer = try JSONDecoder.fingerly.decode(IdentifyAnswer.self, from: Data(first.body))
        let bytes = try Self.stored(harness)

        for _ in 0..<2 {
            let replayed = try RequestHandlingAttack.identify(harness, publicKey: publicKey, idempotencyKey: key, signedBy: attacker)
            #expect(replayed.status == 422 && replayed.errorCode == "idempotency_key_reused", "\(replayed.text)")
            #expect(!replayed.text.contains(answer.visitorId) && !replayed.text.contains(answer.requestId))
        }
        #expect(try Self.stored(harness) == bytes)

        let retried = try RequestHandlingAttack.identify(harness, publicKey: publicKey, idempotencyKey: key, signedBy: victim)
        #expect(retried.status == 200, "\(retried.text)")
        let again = try JSONDecoder.fingerly.decode(IdentifyAnswer.self, from: Data(retried.body))
        #expect(again.duplicate && again.visitorId == answer.visitorId && again.requestId == answer.requestId)
        #expect(try Self.stored(harness) == bytes)
    }

    /// Under --allow-unsigned, unsigned-ness is the proof: an unsigned copy of a signed request, and a
    /// signed copy of an unsigned one, get 422; an unsigned retry of an unsigned request its answer.
    @Test func signedAndUnsignedRequestsNeverGetEachOthersAnswers() throws {
        let harness = try ServerHarness(clock: nil) { $0.allowUnsigned = true }
        let (publicKey, _) = try harness.keys()
        let device = try DeviceKey.ephemeral(), attacker = try DeviceKey.ephemeral()

        let signedKey = RequestHandlingAttack.fresh()
        #expect(try RequestHandlingAttack.identify(harness, publicKey: publicKey, idempotencyKey: signedKey, signedBy: device).status == 200)
        let unsignedCopy = try RequestHandlingAttack.identify(harness, publicKey: publicKey, idempotencyKey: signedKey, signedBy: nil)
        #expect(unsignedCopy.status == 422 && unsignedCopy.errorCode == "idempotency_key_reused", "\(unsignedCopy.text)")

        let unsignedKey = RequestHandlingAttack.fresh()
        let original = try RequestHandlingAttack.identify(harness, publicKey: publicKey, idempotencyKey: unsignedKey, signedBy: nil)
        #expect(original.status == 200, "\(original.text)")
        let bytes = try Self.stored(harness)
        let signedCopy = try RequestHandlingAttack.identify(harness, publicKey: publicKey, idempotencyKey: unsignedKey, signedBy: attacker)
        #expect(signedCopy.status == 422 && signedCopy.errorCode == "idempotency_key_reused", "\(signedCopy.text)")
        #expect(try Self.stored(harness) == bytes)
        let retried = try RequestHandlingAttack.identify(harness, publicKey: publicKey, idempotencyKey: unsignedKey, signedBy: nil)
        #expect(retried.status == 200)
        #expect(try JSONDecoder.fingerly.decode(IdentifyAnswer.self, from: Data(retried.body)).duplicate)
    }

    /// A report queued before a device-key rotation and flushed after it, signed by the new key with
    /// the old key's statement, is the same device's: it gets its answer.
    @Test func aRetryByAKeyRotatedFromTheOriginalGetsItsAnswer() throws {
        let harness = try ServerHarness(clock: nil) { $0.allowUnsigned = false }
        let (publicKey, _) = try harness.keys()
        let old = try DeviceKey.ephemeral(), new = try DeviceKey.ephemeral()
        let key = RequestHandlingAttack.fresh()
        let first = try RequestHandlingAttack.identify(harness, publicKey: publicKey, idempotencyKey: key, signedBy: old)
        #expect(first.status == 200, "\(first.text)")
        let rotation = try KeyRotation.field(rotatingTo: new, from: old)
        let flushed = try RequestHandlingAttack.identify(harness, publicKey: publicKey, idempotencyKey: key, signedBy: new,
                                                         extra: [(KeyRotation.fieldName, rotation)])
        #expect(flushed.status == 200, "\(flushed.text)")
        let answer = try JSONDecoder.fingerly.decode(IdentifyAnswer.self, from: Data(flushed.body))
        #expect(answer.duplicate)
        #expect(answer.visitorId == (try JSONDecoder.fingerly.decode(IdentifyAnswer.self, from: Data(first.body))).visitorId)
    }
}

/// W3: slow connections from one address cannot take the server's connections from others, and a
/// request head trickled byte by byte is cut at the connection timeout.
@Suite(.serialized)
struct SlowConnectionTests {
    /// 512 connections from 127.0.0.1, each sending its head one byte at a time, against a real
    /// `fingerly-server` with its defaults; /healthz from 127.0.0.2 is answered meanwhile.
    @Test func slowConnectionsFromOneAddressLeaveHealthzAnsweredForAnother() throws {
        let database = try TestPaths.temporaryDirectory("slowloris") + "/db.sqlite"
        let server = try ServerProcess(database: database)
        defer { _ = server.terminate() }
        let head = Array("POST /v1/identify HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: ".utf8)
        var slow: [Int32] = []
        defer { slow.forEach { close($0) } }
        for _ in 0..<512 {
            let descriptor = try RequestHandlingAttack.connect(port: server.port, from: "127.0.0.1")
            slow.append(descriptor)
            RawClient.write(descriptor, [head[0]])
        }
        var answeredWithin: [Double] = []
        for round in 1..<8 {
            for descriptor in slow { RawClient.write(descriptor, [head[round % head.count]]) }
            let started = Date()
            let health = try RequestHandlingAttack.connect(port: server.port, from: "127.0.0.2", timeoutSeconds: 2)
            RawClient.write(health, Array("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".utf8))
            let answer = try RawClient.parse(RawClient.readAll(health))
            close(health)
            #expect(answer.status == 200)
            answeredWithin.append(Date().timeIntervalSince(started))
            usleep(200_000)
        }
        #expect(answeredWithin.allSatisfy { $0 < 2 }, "\(answeredWithin)")
        let kept = slow.filter { !RequestHandlingAttack.isClosedByPeer($0) }.count
        #expect(kept <= ServerConfiguration(database: "").connectionsPerAddress, "\(kept) slow connections kept")
        #expect(kept > 0)
    }

    /// A head sent one byte every 200 ms is never idle for libmicrohttpd's timeout, yet with
    /// `--connection-timeout 2` the server shuts it after about two seconds.
    @Test func aRequestHeadTrickledByteByByteIsCutAtTheConnectionTimeout() throws {
        let database = try TestPaths.temporaryDirectory("slow-head") + "/db.sqlite"
        let server = try ServerProcess(database: database, arguments: ["--connection-timeout", "2"])
        defer { _ = server.terminate() }
        let descriptor = try RequestHandlingAttack.connect(port: server.port, from: "127.0.0.1")
        defer { close(descriptor) }
        let started = Date()
        var cutAfter: Double?
        while cutAfter == nil && Date().timeIntervalSince(started) < 8 {
            let sent = send(descriptor, "X", 1, Int32(MSG_NOSIGNAL))
            if sent <= 0 || RequestHandlingAttack.isClosedByPeer(descriptor) { cutAfter = Date().timeIntervalSince(started) }
            usleep(200_000)
        }
        let seconds = try #require(cutAfter, "the trickled head was never cut")
        #expect(seconds >= 1.8 && seconds < 4, "cut after \(seconds) s")
        // A request that sends its head at once is answered as ever.
        #expect(try server.client.request("GET", "/healthz").status == 200)
    }
}

/// W4: a Content-Length past the body limit is refused from the head alone, whatever its size.
@Suite(.serialized)
struct DeclaredLengthTests {
    @Test func aContentLengthPastTheLimitIs413BeforeAnyBodyIsSent() throws {
        let database = try TestPaths.temporaryDirectory("declared-length") + "/db.sqlite"
        let server = try ServerProcess(database: database)
        defer { _ = server.terminate() }
        for length in ["18446744073709551615", "9223372036854775808", "1048577", "00000000000000000000000000001048577"] {
            let descriptor = try RequestHandlingAttack.connect(port: server.port, from: "127.0.0.1", timeoutSeconds: 5)
            defer { close(descriptor) }
            let started = Date()
            RawClient.write(descriptor, Array(("POST /v1/identify HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer fly_pk_x\r\n"
                + "Idempotency-Key: \"k\"\r\nContent-Type: application/json\r\nContent-Length: \(length)\r\n\r\n").utf8))
            // Only the head was sent: an answer at all means the server did not wait for the body.
            let answer = try RawClient.parse(RawClient.readAll(descriptor))
            #expect(answer.status == 413 && answer.errorCode == "payload_too_large", "\(length): \(answer.status) \(answer.text)")
            #expect(Date().timeIntervalSince(started) < 2)
        }
        // Leading zeros are not size: twelve bytes so declared are read and judged (here: no such key).
        let small = Array(#"{"report":1}"#.utf8)
        let judged = try server.client.exchange(Array(("POST /v1/identify HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
            + "Authorization: Bearer fly_pk_x\r\nIdempotency-Key: \"k\"\r\nContent-Type: application/json\r\n"
            + "Content-Length: 000000000000000000000000012\r\n\r\n").utf8) + small)
        #expect(judged.status == 401 && judged.errorCode == "invalid_key", "\(judged.status) \(judged.text)")
    }

    @Test func aDeclaredLengthIsJudgedByItsDigitsNotByWhatAnIntegerHolds() {
        #expect(HTTPServer.exceeds(declaredLength: "18446744073709551615", limit: 1_048_576))
        #expect(HTTPServer.exceeds(declaredLength: String(repeating: "9", count: 400), limit: 1_048_576))
        #expect(HTTPServer.exceeds(declaredLength: " 1048577 ", limit: 1_048_576))
        #expect(!HTTPServer.exceeds(declaredLength: "1048576", limit: 1_048_576))
        #expect(!HTTPServer.exceeds(declaredLength: String(repeating: "0", count: 400) + "7", limit: 1_048_576))
        // Not digits: libmicrohttpd refuses it 400 before the application sees it.
        #expect(!HTTPServer.exceeds(declaredLength: "+5", limit: 1_048_576))
    }
}
