import FingerlyEngine
import FingerlyHost
import FingerlyStore
import FingerlyTransport
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The routes of docs/api.md plus the operator's two: authentication, rate limits, signatures,
/// then the engine. Knows nothing of libmicrohttpd.
package final class ServerRoutes: HTTPApplication, Sendable {
    package let configuration: ServerConfiguration
    package let store: any IdentityStore
    package let engine: IdentityEngine
    package let metrics: ServerMetrics
    /// Authentication failures per source address, in memory: junk never costs a store write.
    package let failures: FailureLimiter
    /// One line per request (method, route, status, milliseconds); never a key or a body.
    private let log: @Sendable (String) -> Void
    /// Unix seconds; a test may freeze it.
    private let clock: @Sendable () -> Int64
    /// Set by whoever owns the HTTP server, for the in-flight gauge.
    private let inFlight: @Sendable () -> Int
    /// The organization each public key was last admitted for: a key's organization never
    /// changes, so the engine may key a body before the transaction that admits it (the
    /// admission still decides, and the engine compares). Only admitted keys go in, so made-up
    /// ones never grow it; past the bound it starts again.
    private let organizationOfKey = Mutex<[String: String]>([:])
    private static let organizationsKept = 4_096
    /// Identify requests of each rate-limit bucket in the current second, as this process saw
    /// them: past the budget a request is expected to be refused, and its body is not read before
    /// its admission (a flood of one key then costs what its admissions cost). Emptied every
    /// second; a bucket past the bound is not judged early.
    private let earlyJudgements = Mutex<(second: Int64, counts: [String: Int])>((0, [:]))
    private static let bucketsCounted = 65_536

    package init(configuration: ServerConfiguration, store: any IdentityStore, engine: IdentityEngine, metrics: ServerMetrics,
                 log: @escaping @Sendable (String) -> Void, clock: @escaping @Sendable () -> Int64 = { Int64(time(nil)) },
                 inFlight: @escaping @Sendable () -> Int = { 0 }) {
        self.configuration = configuration
        self.store = store
        self.engine = engine
        self.metrics = metrics
        failures = FailureLimiter(limit: configuration.failureLimit, newDeviceLimit: configuration.rateLimit)
        self.log = log
        self.clock = clock
        self.inFlight = inFlight
    }

    package var bodyLimit: Int { configuration.bodyLimit }

    private enum Route: String {
        case identify, events, healthz, metrics, unknown

        init(path: String) {
            switch path {
            case "/v1/identify": self = .identify
            case "/healthz": self = .healthz
            case "/metrics": self = .metrics
            case _ where path.hasPrefix("/v1/events/"): self = .events
            default: self = .unknown
            }
        }

        var method: String { self == .identify ? "POST" : "GET" }
    }

    package func respond(toHead head: HTTPRequestHead) -> HTTPResponse? {
        // libmicrohttpd frames the body by the first Content-Length and keeps the rest; two
        // lengths, or two Hosts, are how a request smuggled past a proxy looks (RFC 9112 §6.3, §3.2).
        if head.values("content-length").count > 1 || head.values("host").count > 1 {
            return .error(400, "bad_request", "Content-Length and Host may appear at most once.")
        }
        let route = Route(path: head.path)
        if route == .unknown { return .error(404, "not_found", "No such route.") }
        guard head.method == route.method else {
            return .error(405, "method_not_allowed", "\(route.method) only.", headers: [("Allow", route.method)])
        }
        // A signature covers the path, not a query: identify takes none rather than one unsigned.
        if route == .identify && head.hasQuery {
            return .error(400, "bad_request", "POST /v1/identify takes no query string.")
        }
        // libmicrohttpd answers a chunk line longer than its buffer 500 (0.9.75): identify takes a
        // declared length, as every client that knows its body sends, and no chunk is ever parsed.
        if route == .identify && !head.values("transfer-encoding").isEmpty {
            return .error(411, "length_required",
                          "POST /v1/identify takes its body with Content-Length, not Transfer-Encoding.")
        }
        // Answered before the body is read: a body that is not JSON would only be refused later.
        if route == .identify, !Self.isJSON(head.values("content-type")) {
            return .error(415, "unsupported_media_type",
                          "POST /v1/identify takes Content-Type: application/json, once.")
        }
        return route == .identify ? nil : respond(to: head, body: [])
    }

    /// One `Content-Type` field whose media type is `application/json` (RFC 9110 §8.3.1: type and
    /// subtype without case), its parameters well formed, a `charset` among them `utf-8`.
    static func isJSON(_ fields: [String]) -> Bool {
        guard fields.count == 1 else { return false }
        if fields[0] == "application/json" { return true }
        let parts = fields[0].split(separator: ";", omittingEmptySubsequences: false)
        guard parts[0].trimmingSpaces.lowercased() == "application/json" else { return false }
        for parameter in parts.dropFirst() {
            let pair = parameter.trimmingSpaces.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard pair.count == 2, !pair[0].isEmpty, !pair[1].isEmpty else { return false }
            let name = pair[0].lowercased(), value = pair[1].lowercased()
            if name == "charset" && value != "utf-8" && value != "\"utf-8\"" { return false }
        }
        return true
    }

    package func respond(to head: HTTPRequestHead, body: [UInt8]) -> HTTPResponse {
        switch Route(path: head.path) {
        case .identify: identify(head, body)
        case .events: event(head)
        case .healthz: health()
        case .metrics: HTTPResponse(status: 200, headers: [("Content-Type", "text/plain; version=0.0.4")],
                                    body: Array(metrics.exposition(inFlight: inFlight(), storage: storage(),
                                                                  groupCommits: store.groupCommits).utf8))
        case .unknown: .error(404, "not_found", "No such route.")
        }
    }

    package func finished(_ head: HTTPRequestHead, status: Int, seconds: Double) {
        let route = Route(path: head.path).rawValue
        metrics.record(route: route, status: status, seconds: seconds)
        let milliseconds = (seconds * 10_000).rounded() / 10
        log("\(Self.loggable(head.method.utf8.prefix(16))) \(route) \(status == 0 ? "aborted" : String(status)) \(milliseconds)ms\n")
    }

    /// Request bytes as a log may show them: visible ASCII as is, anything else (control bytes,
    /// a terminal's escape sequences, spaces, a backslash, non-ASCII) as `\xNN`.
    static func loggable<Bytes: Sequence<UInt8>>(_ bytes: Bytes) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        for byte in bytes {
            if (0x21...0x7E).contains(byte) && byte != UInt8(ascii: "\\") {
                out.append(byte)
            } else {
                out += [UInt8(ascii: "\\"), UInt8(ascii: "x"), digits[Int(byte >> 4)], digits[Int(byte & 15)]]
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    // MARK: identify

    private func identify(_ head: HTTPRequestHead, _ body: [UInt8]) -> HTTPResponse {
        let now = clock()
        // Every request whose body was read counts once in fingerly_identify_signatures_total:
        // "unjudged" when it was refused before its signature was looked at.
        var outcome = "unjudged"
        defer { metrics.signature(outcome) }
        guard let key = bearer(head) else {
            return authenticationFailed(head, now,
                                        .error(401, "invalid_key", "Identify needs a public key: Authorization: Bearer fly_pk_…."))
        }
        if key.kind == .secretKey { return secretKeyOnIdentify(head, key, now) }
        // Judged here, answered in this order inside the admission: a request with an unknown
        // key is told so before anything about its headers or its signature.
        let idempotencyFields = head.values("idempotency-key")
        let idempotencyKey: String?, idempotencyRefusal: String
        let parsedKey = idempotencyFields.count == 1
            ? IdempotencyKeyField.parse(fieldValue: idempotencyFields[0]) : .failure(.notAString)
        switch parsedKey {
        case .success(let parsed): (idempotencyKey, idempotencyRefusal) = (parsed, "")
        case .failure(let refusal):
            idempotencyKey = nil
            idempotencyRefusal = idempotencyFields.isEmpty ? "Idempotency-Key is missing"
                : idempotencyFields.count > 1 ? "Idempotency-Key appears more than once" : refusal.description
        }
        let signing = signature(head, body, now: now)
        // An address past its failures is answered before the store is touched, but a request
        // that proves a device key is served from it until signed junk exhausts it too: its
        // genuine devices may share it (FailureLimiter).
        let device = signing.deviceKeyID.map { FailureLimiter.Device(publicKey: key.text, keyID: $0) }
        if failures.isExhausted(peer: head.peer, now: now, device: device) { return failureLimited() }
        // Each device has a budget of its own (below), and an address may not bring new devices
        // faster than one device's budget: a key costs an attacker nothing to make.
        if let device, !failures.admitsDevice(peer: head.peer, now: now, device: device) {
            return .error(429, "rate_limited", "More than \(configuration.rateLimit) requests per second from new devices, "
                            + "or \(configuration.rateLimit * FailureLimiter.devicesPerAddress) from all, at this address.",
                          headers: [("Retry-After", "1")])
        }

        // Admission shares the engine's first transaction (and commit) with the in-flight marker.
        // Only a request whose key is known and whose signature verified (or that the server
        // lets go unsigned) counts against the key's budget: junk sent with an organization's
        // public key never spends its devices' requests. Every refusal before the budget counts
        // against the address instead, so none is free.
        var refusal: HTTPResponse?
        var signatureJudged = false
        var failedAuthentication = false
        var admittedOrganization: String?
        let hint = organizationOfKey.withLock { $0[key.text] }
        let bucket = "identify:" + key.text + (signing.deviceKeyID.map { ":device:" + $0 } ?? ":address:" + head.peer)
        let judgeEarly = hint != nil && withinBudget(bucket, now: now)
        let answer = engine.identify(idempotencyKey: idempotencyKey ?? "", body: body, deviceKeyID: signing.deviceKeyID,
                                     signatureVerified: signing.deviceKeyID != nil, rotatedFrom: signing.rotatedFrom,
                                     organizationHint: hint, judgeEarly: judgeEarly,
                                     now: now) { tx throws(StoreError) -> IdentityEngine.Admission in
            refusal = nil
            signatureJudged = false
            failedAuthentication = false
            admittedOrganization = nil
            guard let record = try tx.key(publicKey: key.text), !record.revoked else {
                refusal = .error(401, "invalid_key", "The key is unknown or revoked.")
                failedAuthentication = true
                return .refused(Self.refusedMarker)
            }
            guard let organization = try tx.organization(named: record.organization), !organization.suspended else {
                refusal = .error(402, "organization_not_accepting", "The organization is not accepting traffic.")
                failedAuthentication = true
                return .refused(Self.refusedMarker)
            }
            guard idempotencyKey != nil else {
                refusal = .error(400, "bad_request", idempotencyRefusal + ": it must appear once, as a Structured "
                    + "Fields string of 1 to \(IdempotencyKeyField.maximumLength) characters (\"…\").")
                failedAuthentication = true
                return .refused(Self.refusedMarker)
            }
            signatureJudged = true
            if let failure = signing.failure {
                refusal = failure
                failedAuthentication = true
                return .refused(Self.refusedMarker)
            }
            // A device's budget is its own, so a flood of other keys never spends it; without a
            // signature (--allow-unsigned), the address's.
            if let limited = try rateLimited(tx, bucket: bucket, spender: signing.deviceKeyID == nil ? "address" : "device",
                                             now: now) {
                refusal = limited
                return .refused(Self.refusedMarker)
            }
            // A retry of an answered request stores nothing: it gets its answer again, full or not.
            if let full = quotaExceeded(organization),
               try !hasAnswer(tx, organization: record.organization, key: idempotencyKey, now: now) {
                refusal = full
                return .refused(Self.refusedMarker)
            }
            admittedOrganization = record.organization
            return .admitted(organization: record.organization, deviceStorageLimit: deviceStorageLimit(organization))
        }
        if let admittedOrganization, hint != admittedOrganization {
            organizationOfKey.withLock { known in
                // Full: started again rather than frozen, so the keys in use now are the ones kept.
                if known.count >= Self.organizationsKept, known[key.text] == nil { known.removeAll(keepingCapacity: true) }
                known[key.text] = admittedOrganization
            }
        }
        if signatureJudged { outcome = signing.metric }
        if let refusal {
            return failedAuthentication ? authenticationFailed(head, now, refusal, signed: device != nil) : refusal
        }
        if let device, answer.status < 500 { failures.recordAdmitted(device) }
        if answer.status >= 500 { metrics.storeError() }
        if answer.unknownMembersDropped > 0 { metrics.unknownMembersDropped(answer.unknownMembersDropped) }
        if answer.code == "device_quota_exceeded" { metrics.deviceQuotaRefused() }
        let retry = answer.status == 503 ? "1" : answer.status == 507 ? String(Self.quotaRetrySeconds) : nil
        return .json(answer.status, answer.body, headers: retry.map { [("Retry-After", $0)] } ?? [])
    }

    /// A secret key is a real key used where it may not be: 403 once it proves to be one, as a public
    /// key reading events is; an unknown or revoked one is 401 as any. Either counts against the address.
    private func secretKeyOnIdentify(_ head: HTTPRequestHead, _ key: ServerKey, _ now: Int64) -> HTTPResponse {
        if failures.isExhausted(peer: head.peer, now: now) { return failureLimited() }
        let known: Bool
        do throws(StoreError) {
            known = try store.transaction { tx throws(StoreError) -> Bool in
                let hash = ServerKey.secretHash(key.text)
                guard let record = try tx.key(secretKeyHash: hash) else { return false }
                return ServerKey.constantTimeEqual(record.secretKeyHash, hash) && !record.revoked
                    && record.organization == key.organization
            }
        } catch {
            return storeFailure(error)
        }
        return authenticationFailed(head, now, known
            ? .error(403, "forbidden", "A secret key cannot submit reports; use the public key (fly_pk_…).")
            : .error(401, "invalid_key", "The key is unknown or revoked."))
    }

    /// Counts a failed authentication of the request's source address and answers `response`;
    /// `signed` when the request's signature verified.
    private func authenticationFailed(_ head: HTTPRequestHead, _ now: Int64, _ response: HTTPResponse,
                                      signed: Bool = false) -> HTTPResponse {
        failures.recordFailure(peer: head.peer, now: now, signed: signed)
        return response
    }

    private func failureLimited() -> HTTPResponse {
        metrics.failureLimited()
        return .error(429, "too_many_failures",
                      "More than \(configuration.failureLimit) failed authentications per second from this address.",
                      headers: [("Retry-After", "1")])
    }

    /// 507 once the organization keeps its quota's worth of events; retention frees room hourly.
    private func quotaExceeded(_ organization: OrganizationRecord) -> HTTPResponse? {
        let quota = organization.storageQuota ?? configuration.storageQuota
        guard quota > 0, organization.storedBytes >= quota else { return nil }
        return .error(507, "storage_quota_exceeded",
                      "The organization keeps \(StorageSize.describe(organization.storedBytes)) of events, "
                        + "its quota is \(StorageSize.describe(quota)).",
                      headers: [("Retry-After", String(Self.quotaRetrySeconds))])
    }

    /// Bytes of events one of the organization's devices may keep: its share of the quota.
    private func deviceStorageLimit(_ organization: OrganizationRecord) -> Int64? {
        let quota = organization.storageQuota ?? configuration.storageQuota
        guard quota > 0, configuration.deviceShare > 0 else { return nil }
        let share = quota.multipliedReportingOverflow(by: Int64(configuration.deviceShare))
        return share.overflow ? quota / 100 * Int64(configuration.deviceShare) : max(1, share.partialValue / 100)
    }

    /// Whether the engine would replay a stored answer for this idempotency key (or refuse it as
    /// reused): either way it stores nothing new.
    private func hasAnswer(_ tx: any StoreTransaction, organization: String, key: String?,
                           now: Int64) throws(StoreError) -> Bool {
        guard let key, let record = try tx.idempotency(organization: organization, key: key), record.state == .complete else {
            return false
        }
        let age = now.subtractingReportingOverflow(record.createdAt)
        return !age.overflow && age.partialValue < IdentityEngine.idempotencyRetentionSeconds
    }

    /// The retention pass frees room hourly.
    static let quotaRetrySeconds = 3600

    /// The engine's answer for a request the admission refused; the route answers `refusal`.
    private static let refusedMarker = EngineAnswer(status: 0, body: [], code: nil)

    /// The request's signature judged before admission: the verified device key, or the answer
    /// a failure gets once the key and organization are admitted, and the metric to count.
    private func signature(_ head: HTTPRequestHead, _ body: [UInt8], now: Int64)
        -> (deviceKeyID: String?, rotatedFrom: String?, failure: HTTPResponse?, metric: String) {
        let signatureFields = ["signature", "signature-input", "fingerly-device-key"]
        let rotations = head.values("fingerly-key-rotation")
        if signatureFields.contains(where: { !head.values($0).isEmpty }) {
            do {
                // The path as received: `/v1/%69dentify` routes as identify but is not what was signed.
                let verified = try MessageSignature.verify(method: head.method, path: String(head.receivedPath),
                                                           fields: head.fields, body: body,
                                                           now: now, window: configuration.signatureWindow)
                if rotations.isEmpty { return (verified.keyID, nil, nil, "verified") }
                guard rotations.count == 1, let old = KeyRotation.verify(rotations[0], newKeyID: verified.keyID) else {
                    return (nil, nil, .error(401, "invalid_key_rotation", "Fingerly-Key-Rotation is not one valid statement of an old key "
                        + "for the key that signed this request."), "invalid_rotation")
                }
                return (verified.keyID, old, nil, "verified")
            } catch {
                let (response, metric) = signatureFailure(error)
                return (nil, nil, response, metric)
            }
        }
        if !rotations.isEmpty {
            return (nil, nil, .error(401, "invalid_key_rotation", "Fingerly-Key-Rotation needs a request signed by the new key."),
                    "invalid_rotation")
        }
        if !configuration.allowUnsigned {
            return (nil, nil, .error(401, "missing_signature", "This server requires signed requests (RFC 9421)."), "missing")
        }
        let digests = head.values("content-digest")
        if digests.count > 1 || digests.contains(where: { $0.utf8.count > MessageSignature.maximumFieldLength }) {
            return (nil, nil, .error(400, "bad_request", "Content-Digest appears more than once, or is longer than "
                + "\(MessageSignature.maximumFieldLength) bytes."), "digest_mismatch")
        }
        if let digest = digests.first {
            switch ContentDigest.check(Substring(digest).utf8, body: body) {
            case .matches: break
            case .mismatch:
                let mismatch = HTTPResponse.error(400, "bad_request", "Content-Digest does not match the body.")
                return (nil, nil, mismatch, "digest_mismatch")
            case .refused(let reason): return (nil, nil, .error(400, "bad_request", reason + "."), "digest_mismatch")
            }
        }
        return (nil, nil, nil, "unsigned")
    }

    private func signatureFailure(_ error: SignatureVerificationError) -> (HTTPResponse, String) {
        switch error {
        case .digestMismatch:
            return (.error(400, "bad_request", "Content-Digest does not match the body."), "digest_mismatch")
        case .createdInFuture, .createdTooOld:
            return (.error(401, "stale_signature", "The signature's created time is outside the server's window."), "stale")
        case .missingField(let name):
            return (.error(401, "invalid_signature", "The signature is incomplete: no \(name) field."), "invalid")
        default:
            return (.error(401, "invalid_signature", "The request signature does not verify."), "invalid")
        }
    }

    // MARK: events

    private func event(_ head: HTTPRequestHead) -> HTTPResponse {
        let now = clock()
        guard let key = bearer(head) else {
            return authenticationFailed(head, now,
                                        .error(401, "invalid_key", "Reading events needs a secret key: Authorization: Bearer fly_sk_…."))
        }
        if failures.isExhausted(peer: head.peer, now: now) { return failureLimited() }
        let requestId = String(head.path.dropFirst("/v1/events/".count))
        let admitted: Admission
        do throws(StoreError) {
            admitted = try store.transaction { tx throws(StoreError) -> Admission in
                if key.kind == .publicKey {
                    guard let record = try tx.key(publicKey: key.text), !record.revoked else {
                        return .failed(.error(401, "invalid_key", "The key is unknown or revoked."))
                    }
                    // Refused before any budget, as every failure here: each counts against the address.
                    return .failed(.error(403, "forbidden", "A public key cannot read events; use the secret key."))
                }
                let hash = ServerKey.secretHash(key.text)
                guard let record = try tx.key(secretKeyHash: hash), ServerKey.constantTimeEqual(record.secretKeyHash, hash),
                      !record.revoked, record.organization == key.organization else {
                    return .failed(.error(401, "invalid_key", "The key is unknown or revoked."))
                }
                // Both keys of a suspended organization get 402, as `keys suspend` says.
                guard let organization = try tx.organization(named: record.organization), !organization.suspended else {
                    return .failed(.error(402, "organization_not_accepting",
                                          "The organization is not accepting traffic."))
                }
                if let limited = try rateLimited(tx, bucket: "events:" + Self.hex(hash.prefix(16)), spender: "key", now: now) { return .refused(limited) }
                return .admitted(record.organization)
            }
        } catch {
            return storeFailure(error)
        }
        switch admitted {
        case .refused(let response): return response
        case .failed(let response): return authenticationFailed(head, now, response)
        case .admitted(let organization):
            guard (1...128).contains(requestId.utf8.count), requestId.utf8.allSatisfy({ (0x21...0x7E).contains($0) && $0 != 0x2F }) else {
                return .error(404, "not_found", "No event with this requestId.")
            }
            let answer = engine.event(requestId: requestId, organization: organization)
            if answer.status >= 500 { metrics.storeError() }
            return .json(answer.status, answer.body)
        }
    }

    // MARK: shared

    private func bearer(_ head: HTTPRequestHead) -> ServerKey? {
        let fields = head.values("authorization")
        guard fields.count == 1 else { return nil }
        let value = Substring(fields[0]).trimmingSpaces
        guard value.count > 7, value.prefix(7).lowercased() == "bearer " else { return nil }
        return ServerKey(String(value.dropFirst(7).trimmingSpaces))
    }

    /// Whether this process has seen no more than the rate limit of `bucket`'s requests this second.
    private func withinBudget(_ bucket: String, now: Int64) -> Bool {
        earlyJudgements.withLock { state in
            if state.second != now { state = (now, [:]) }
            guard state.counts.count < Self.bucketsCounted || state.counts[bucket] != nil else { return false }
            let seen = state.counts[bucket, default: 0] + 1
            state.counts[bucket] = seen
            return seen <= configuration.rateLimit
        }
    }

    /// Counts this request in the store's per-second window: a shared counter, so several
    /// server processes on one database enforce one limit together.
    /// `spender` names whose budget it is in the answer: "device", "address" or "key".
    private func rateLimited(_ tx: any StoreTransaction, bucket: String, spender: String,
                             now: Int64) throws(StoreError) -> HTTPResponse? {
        let count = try tx.incrementCounter(bucket: bucket, window: now)
        guard count > configuration.rateLimit else { return nil }
        return .error(429, "rate_limited", "More than \(configuration.rateLimit) requests per second for this \(spender).",
                      headers: [("Retry-After", "1")])
    }

    private func storeFailure(_ error: StoreError) -> HTTPResponse {
        metrics.storeError()
        return error.isTransient
            ? .error(503, "unavailable", "The store is busy; retry.", headers: [("Retry-After", "1")])
            : .error(500, "internal", "The server failed.")
    }

    /// The store's figures for `/metrics`: a few rows per organization, read per scrape.
    private func storage() -> ServerMetrics.Storage? {
        do {
            return try store.transaction { tx throws(StoreError) -> ServerMetrics.Storage in
                let bytes = try tx.storedBytes()
                var over = 0
                for (name, used) in bytes where used > 0 {
                    guard let organization = try tx.organization(named: name) else { continue }
                    if quotaExceeded(organization) != nil { over += 1 }
                }
                return ServerMetrics.Storage(eventBytes: bytes.values.reduce(0, +), organizationsOverQuota: over)
            }
        } catch {
            metrics.storeError()
            return nil
        }
    }

    private func health() -> HTTPResponse {
        do {
            _ = try store.transaction { tx throws(StoreError) in try tx.organization(named: "-") }
            return .json(200, Array(#"{"status":"ok"}"#.utf8))
        } catch {
            metrics.storeError()
            return .error(503, "unavailable", "The store is not reachable.", headers: [("Retry-After", "1")])
        }
    }

    private enum Admission {
        case admitted(String)
        case refused(HTTPResponse)
        /// Refused before the key's budget, which counts against the source address.
        case failed(HTTPResponse)
    }

    static func hex<Bytes: Sequence<UInt8>>(_ bytes: Bytes) -> String { lowercaseHex(Array(bytes)) }
}
