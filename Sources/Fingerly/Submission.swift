#if canImport(Glibc)
import Glibc
#endif
import FoundationEssentials
import FingerlyHost
import FingerlyModel
import FingerlyPolicy
import FingerlyTransport

/// What `flush()` did.
public struct FlushResult: Sendable, Codable, Hashable {
    /// Reports the server accepted.
    public let delivered: Int
    /// Reports deleted unsent: rejected by the server, too old, or evicted by the caps.
    public let dropped: Int
    /// Reports still queued.
    public let remaining: Int
    /// Why the flush stopped early, when it did.
    public let lastError: TransportError?
}

extension TransportError: Codable {
    private enum CodingKeys: String, CodingKey { case message, status, retryable, code }

    /// Decodes the four fields.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.init(message: try container.decode(String.self, forKey: .message),
                  status: try container.decodeIfPresent(Int.self, forKey: .status),
                  retryable: try container.decode(Bool.self, forKey: .retryable),
                  code: try container.decodeIfPresent(String.self, forKey: .code))
    }

    /// Encodes the four fields.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(message, forKey: .message)
        try container.encodeIfPresent(status, forKey: .status)
        try container.encode(retryable, forKey: .retryable)
        try container.encodeIfPresent(code, forKey: .code)
    }

    /// The code of a retryable failure whose report could not be queued either.
    package static let notQueuedCode = "not_queued"
    /// The code of a proxy that answered 407: its variable needs other credentials.
    package static let proxyAuthenticationCode = "proxy_authentication_required"
    /// The code of a send this host cannot make: libcurl, opened at the first send, is missing or incomplete.
    package static let httpClientUnavailableCode = "http_client_unavailable"
    /// The codes only whoever configures this host can mend (the CLI's exit 78).
    package static let hostConfigurationCodes: Set<String?> = [proxyAuthenticationCode, httpClientUnavailableCode]
}

/// The API's address for one instance: the origin (the region's or the endpoint) and the path
/// of the identify call, a first-party proxy's prefix included.
struct APIAddress: Sendable, Hashable {
    let identifyURL: String
    let identifyPath: String

    init(endpoint: String) {
        var origin = endpoint
        while origin.hasSuffix("/") { origin.removeLast() }
        identifyURL = origin + "/v1/identify"
        // endpoint was checked at load: scheme://host[:port][/prefix], no query or fragment.
        let afterScheme = origin.split(separator: "/", maxSplits: 2, omittingEmptySubsequences: false)
        // ["https:", "", "host:port/prefix…"]: the path starts at the first "/" after the authority.
        let authorityAndPath = afterScheme.count == 3 ? afterScheme[2] : Substring(origin)
        let prefix = authorityAndPath.firstIndex(of: "/").map { String(authorityAndPath[$0...]) } ?? ""
        identifyPath = prefix + "/v1/identify"
    }
}

extension Fingerly {
    static let userAgent = "fingerly-linux/\(Fingerly.version)"
    /// Larger bodies are refused before sending (the server's limit, docs/api.md).
    static let bodyLimit = 1024 * 1024
    static let redactedKey = "Bearer [redacted]"
    static let signedAtSending = "[made at sending, per attempt, with this installation's device key]"

    /// The fixed part of a report's request: the body serialized once, its key, and how it goes.
    struct PreparedSubmission: Sendable {
        let outgoing: OutgoingRequest
        let preview: SubmissionRequest
    }

    /// Serializes the body once and names the key every attempt and flush will use.
    func prepareSubmission(_ report: SignalReport) throws(TransportError) -> PreparedSubmission {
        let address = APIAddress(endpoint: endpoint)
        let proxy = RequestTarget(url: address.identifyURL).flatMap {
            ProxyResolution.decide(for: $0, environment: proxyEnvironment()).endpoint
        }
        let submission = SubmissionBody(
            client: ClientInfo(proxy: proxy != nil, sdk: "fingerly-linux", version: Fingerly.version), report: report)
        let body: [UInt8]
        if let written = ReportWriter.submission(submission) {
            body = written
        } else {
            // Only JSONEncoder's refusal is left to it, so the error says what it always said.
            do {
                body = Array(try JSONEncoder.fingerly.encode(submission))
            } catch {
                throw TransportError(message: "the report cannot be serialized: \(error)", status: nil,
                                     retryable: false, code: "bad_report")
            }
        }
        guard body.count <= Self.bodyLimit else {
            throw TransportError(message: "the report is \(body.count) bytes, above the \(Self.bodyLimit)-byte limit; ignore some attributes",
                                 status: 413, retryable: false, code: "payload_too_large")
        }
        let key = options.fixedIdempotencyKey ?? UUID().uuidString.lowercased()
        let created = Int64((options.frozenClock ?? Date()).timeIntervalSince1970)
        let outgoing = OutgoingRequest(idempotencyKey: key, createdAt: created, organization: apiKey?.organization ?? "",
                                       destination: address.identifyURL, body: body)
        var headers = fixedHeaders(key: key, body: body).map { SubmissionRequest.Header(name: $0.0, value: $0.1) }
        headers[0] = SubmissionRequest.Header(name: "Authorization", value: Self.redactedKey)
        for name in ["Fingerly-Device-Key", "Signature-Input", "Signature"] {
            headers.append(SubmissionRequest.Header(name: name, value: Self.signedAtSending))
        }
        let preview = SubmissionRequest(method: "POST", url: address.identifyURL, headers: headers,
                                        body: String(decoding: body, as: UTF8.self), idempotencyKey: key,
                                        proxy: proxy?.description)
        return PreparedSubmission(outgoing: outgoing, preview: preview)
    }

    /// The headers every attempt shares, in the order sent; the signature's follow.
    func fixedHeaders(key: String, body: [UInt8]) -> [(String, String)] {
        [("Authorization", "Bearer \(apiKeyText ?? "")"),
         ("Content-Type", "application/json"),
         ("Accept", "application/json"),
         ("User-Agent", Self.userAgent),
         ("Idempotency-Key", "\"\(key)\""),
         ("Content-Digest", ContentDigest.fieldValue(for: body))]
    }

    /// The environment this process was started with, for the proxy choice: the live host's,
    /// whatever `root` says.
    func proxyEnvironment() -> [String: String] {
        options.proxyEnvironment ?? (try? ProcessEnvironment.read(from: HostFileSystem()))?.variables ?? [:]
    }

    /// Sends one queued or new request: every attempt the same body and key, each signed anew.
    func deliver(_ outgoing: OutgoingRequest) -> DeliveryReport {
        let address = APIAddress(endpoint: endpoint)
        let signer = deviceKey()
        let settings = options.submission
        var policy = RetryPolicy()
        policy.attempts = settings.attempts
        policy.baseDelayMs = settings.baseDelayMs
        policy.maxDelayMs = settings.maxDelayMs
        policy.deadlineMs = settings.deadlineMs
        policy.attemptTimeoutMs = settings.attemptTimeoutMs
        policy.connectTimeoutMs = settings.attemptTimeoutMs
        policy.retryAfterCapMs = settings.retryAfterCapMs
        policy.rateLimitPauseMs = settings.rateLimitPauseMs
        let idempotencyField = "\"\(outgoing.idempotencyKey)\""
        let report = Delivery(policy: policy).deliver(
            url: address.identifyURL, body: outgoing.body, environment: proxyEnvironment(),
            caFile: settings.caFile, pins: settings.pins
        ) { attempt in
            var headers = fixedHeaders(key: outgoing.idempotencyKey, body: outgoing.body).map { HTTPHeader($0.0, $0.1) }
            guard let signer else { return headers }
            do {
                let fields = try MessageSignature.sign(method: "POST", path: address.identifyPath, body: outgoing.body,
                                                       idempotencyKey: idempotencyField, created: Int64(time(nil)), with: signer)
                headers += fields.headers.filter { $0.name != "Content-Digest" }.map { HTTPHeader($0.name, $0.value) }
            } catch {
                logger?.log(.warning, "request \(outgoing.idempotencyKey): attempt \(attempt) goes unsigned: \(error)")
            }
            return headers
        }
        for record in report.attempts {
            var line = "request \(outgoing.idempotencyKey): attempt \(record.number) of \(max(1, settings.attempts)): \(record.outcome) after \(record.durationMs) ms"
            if let pause = record.pauseMs { line += "; next in \(pause) ms (\(record.pauseReason?.rawValue ?? "backoff"))" }
            if let proxy = report.proxy { line += " via proxy \(proxy)" }
            logger?.log(.info, line)
        }
        return report
    }

    /// This installation's signing key, made at the first submission in the state directory;
    /// when there is none to keep it in, one for this instance, so requests are still signed.
    func deviceKey() -> DeviceKey? {
        signingKey.withLock { cached in
            if let cached { return cached }
            var made: DeviceKey?
            if let directory = stateDirectory {
                do {
                    made = try DeviceKey.loadOrCreate(in: directory)
                } catch {
                    logger?.log(.warning, "device key unavailable (\(error)); this instance signs with a key of its own")
                }
            }
            if made == nil { made = try? DeviceKey.ephemeral() }
            cached = made
            return made
        }
    }

    /// The state directory of this instance: the option, else the default for this process.
    var stateDirectory: String? { options.stateDirectory ?? StateDirectory.defaultPathForThisProcess() }

    /// Submits a collected report: one key, one body, the attempts; a report no attempt
    /// delivered for a retryable reason is queued. Blocking: called off the cooperative pool.
    func submitBlocking(_ report: SignalReport, verdicts: Verdicts) -> (IdentifyResult, TransportError?) {
        let prepared: PreparedSubmission
        do {
            prepared = try prepareSubmission(report)
        } catch {
            return (IdentifyResult.judgedHere(state: .unavailable, report: report, verdicts: verdicts, policy: policy), error)
        }
        let delivery = deliver(prepared.outgoing)
        func local(_ report: SignalReport = report, _ verdicts: Verdicts = verdicts) -> IdentifyResult {
            IdentifyResult.judgedHere(state: .unavailable, report: report, verdicts: verdicts, policy: policy, request: prepared.preview)
        }
        switch delivery.outcome {
        case .delivered(let response):
            do {
                let answer = try JSONDecoder.fingerly.decode(IdentifyAnswer.self, from: Data(response.body))
                return (IdentifyResult.enriched(answer, report: report, localVerdicts: verdicts, policy: policy, request: prepared.preview), nil)
            } catch {
                // A captive portal's page or a hostile network's: nothing says the report was
                // stored. Queued, a later flush asks again under the same key, and a real server
                // replays its answer.
                return queue("HTTP \(response.status) with an answer that is not the API's: \(BoundedText.bounded(String(describing: error), limit: 300))",
                             status: response.status, code: "bad_response")
            }
        case .rejected(let status, let code, _) where Self.blamesReportOrKey(status):
            return (local(), TransportError(message: Self.rejectionMessage(status: status, code: code), status: status, retryable: false, code: code))
        case .rejected(407, _, _):
            // The API does not send 407: a proxy between this host and it (one no variable names,
            // intercepting) asks for credentials. Only whoever configures this host can mend that.
            return (local(), Self.interceptingProxyError(APIAddress(endpoint: endpoint).identifyURL))
        case .rejected(let status, let code, _):
            // A redirect, a 404 or a 501 says the address is wrong, not the report: keep it for a flush.
            return queue("HTTP \(status)\(code.map { " (\($0))" } ?? "") from \(APIAddress(endpoint: endpoint).identifyURL)",
                         status: status, code: code ?? "http_\(status)")
        case .failed(let failure):
            let error = TransportError(message: failure.description, status: nil, retryable: false, code: Self.code(of: failure))
            guard failure == .pinMismatch else { return (local(), error) }
            // The API origin's key is not the pinned one: whoever answers can read the report.
            let evidence = report.addingPinMismatch("\(APIAddress(endpoint: endpoint).identifyURL): the API origin's key matched none of the submission pins")
            return (local(evidence, Verdicts(engine.evaluate(evidence))), error)
        case .exhausted(let last, let stoppedBy):
            var status: Int?
            var code: String?
            switch last {
            case .response(let lastStatus, let lastCode): status = lastStatus; code = lastCode ?? "http_\(lastStatus)"
            case .failure(let failure): code = Self.code(of: failure)
            }
            return queue("\(delivery.attempts.count) attempt(s) failed (last: \(last))\(stoppedBy == .deadline ? ", the deadline came first" : "")",
                         status: status, code: code)
        }

        func queue(_ why: String, status: Int?, code: String?) -> (IdentifyResult, TransportError?) {
            // Consent withdrawn while the attempts were out: the report is dropped, not queued
            // behind the purge that the denial made.
            guard consentState == .granted else {
                return (local(), TransportError(message: "\(why); consent was withdrawn meanwhile, so the report is not kept",
                                                status: status, retryable: false, code: "consent_withdrawn"))
            }
            var queued = prepared.outgoing
            queued.attempts = delivery.attempts.count
            if let problem = enqueue(queued) {
                return (local(), TransportError(message: "\(why); the report could not be queued: \(problem)",
                                                status: status, retryable: true, code: TransportError.notQueuedCode))
            }
            // A denial between the check above and the write: its purge may have run first.
            if consentState == .denied { _ = try? openOutbox()?.purge() }
            return (local(), TransportError(message: "\(why); the report is queued and a later flush sends it under the same key",
                                            status: status, retryable: true, code: code))
        }
    }

    /// The statuses that refuse this report or this key: resending the same bytes cannot help.
    static func blamesReportOrKey(_ status: Int) -> Bool { [400, 401, 402, 403, 413, 422].contains(status) }

    /// nil once queued, else why not.
    func enqueue(_ request: OutgoingRequest) -> String? {
        // A write past a file-size limit raises SIGXFSZ, whose default kills the process. Blocked
        // on this thread alone (the application's signal handling is its own), the write fails
        // with EFBIG instead and the caller learns the report was not queued. The threads the
        // library starts usually inherit a mask that blocks it already (Swift's pool threads);
        // this holds wherever enqueue runs.
        var block = sigset_t()
        var previous = sigset_t()
        sigemptyset(&block)
        sigaddset(&block, SIGXFSZ)
        pthread_sigmask(SIG_BLOCK, &block, &previous)
        defer {
            // The signal a failed write raised is still pending: take it before unblocking, or
            // it would be delivered (and kill) the moment the mask is restored.
            var none = timespec()
            while sigtimedwait(&block, nil, &none) == SIGXFSZ {}
            pthread_sigmask(SIG_SETMASK, &previous, nil)
        }
        guard let outbox = openOutbox() else { return "no usable state directory" }
        do {
            let maintenance = try outbox.enqueue(request)
            if maintenance.dropped.total > 0 {
                logger?.log(.warning, "outbox caps: \(maintenance.dropped.evicted) evicted, \(maintenance.dropped.expired) expired")
            }
            return nil
        } catch {
            return error.description
        }
    }

    func openOutbox() -> Outbox? {
        guard let directory = stateDirectory else { return nil }
        if let problem = StateDirectory.makeDirectories(directory) {
            logger?.log(.warning, "outbox unavailable: \(problem)")
            return nil
        }
        let settings = options.submission
        do {
            return try Outbox.open(directory: directory + "/outbox",
                                   limits: OutboxLimits(maxItems: settings.outboxItems, maxBytes: settings.outboxBytes,
                                                        maxAgeSeconds: Int64(settings.outboxMaxAgeSeconds)))
        } catch {
            logger?.log(.warning, "outbox unavailable: \(error)")
            return nil
        }
    }

    /// A 407 in the API's place: a proxy no variable names stands between this host and the API.
    static func interceptingProxyError(_ url: String) -> TransportError {
        TransportError(message: "HTTP 407 Proxy Authentication Required from \(url): a proxy between this host and the "
                           + "API asks for credentials; name it, with them, in HTTPS_PROXY",
                       status: 407, retryable: false, code: TransportError.proxyAuthenticationCode)
    }

    static func rejectionMessage(status: Int, code: String?) -> String {
        let said = code.map { " (\($0))" } ?? ""
        switch status {
        case 401: return "the API key is wrong or revoked\(said)"
        case 402: return "the organization is not accepting traffic\(said)"
        case 403: return "the API key may not do this\(said)"
        case 413: return "the report is larger than the server accepts\(said)"
        case 422: return "the server refused the report\(said)"
        default: return "the server rejected the report with HTTP \(status)\(said)"
        }
    }

    static func code(of failure: AttemptFailure) -> String {
        switch failure {
        case .network: return "network"
        case .timedOut: return "timeout"
        case .tlsVerification: return "tls_verification"
        case .pinMismatch: return "pin_mismatch"
        case .responseTooLarge: return "response_too_large"
        case .invalidRequest: return "invalid_request"
        case .clientUnavailable: return TransportError.httpClientUnavailableCode
        case .proxyRefused(_, 407), .proxyCredentialsRefused: return TransportError.proxyAuthenticationCode
        case .proxyRefused: return "proxy_refused"
        }
    }
}

extension SignalReport {
    /// The report with one more `tls.pin_mismatches` line, so the policy's mitm rule judges a
    /// failed submission pin as it judges a failed `--check-tls` pin.
    func addingPinMismatch(_ line: String) -> SignalReport {
        var probes = probes
        let signal = "tls.pin_mismatches"
        if let index = probes.firstIndex(where: { $0.id == "tls-pin-check" }) {
            let entry = probes[index]
            var signals = entry.signals
            var lines: [String] = []
            if case .strings(let existing)? = signals[signal] { lines = existing }
            signals[signal] = .strings(lines + [line])
            probes[index] = ProbeEntry(id: entry.id, tier: entry.tier, status: entry.status == .skipped ? .ok : entry.status,
                                       durationMs: entry.durationMs, detail: entry.detail, issues: entry.issues, signals: signals,
                                       identityComponents: entry.identityComponents)
        } else {
            probes.append(ProbeEntry(id: "tls-pin-check", tier: .deferred, status: .ok, durationMs: 0, detail: "the submission's pin check",
                                     issues: [], signals: [signal: .strings([line])], identityComponents: []))
        }
        return SignalReport(schemaVersion: schemaVersion, collectorVersion: collectorVersion, collectedAt: collectedAt, tag: tag,
                            root: root, tiers: tiers, budgetMs: budgetMs, elapsedMs: elapsedMs, probes: probes, identity: identity,
                            identifierKeying: identifierKeying, freeText: freeText)
    }
}
