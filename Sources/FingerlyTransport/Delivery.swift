import FingerlyHost
import Glibc

/// How hard one delivery tries. The defaults are the wire contract's.
package struct RetryPolicy: Sendable, Hashable {
    /// Attempts in all, the first included.
    package var attempts = 3
    package var baseDelayMs = 500
    package var maxDelayMs = 8_000
    /// No attempt starts after it, none runs past it; counted from the start of the delivery.
    package var deadlineMs = 20_000
    package var attemptTimeoutMs = 10_000
    package var connectTimeoutMs = 10_000
    package var retryAfterCapMs = 10_000
    /// The pause after a 429 that carries no usable Retry-After.
    package var rateLimitPauseMs = 1_000

    package init() {}

    /// Attempts beyond this are not "retries" any more; a hostile option cannot make a loop of it.
    static let maximumAttempts = 20
}

/// What one attempt got.
package enum AttemptOutcome: Sendable, Hashable, CustomStringConvertible {
    /// `code`: the server's machine-readable error code, when the body carried one.
    case response(status: Int, code: String?)
    case failure(AttemptFailure)

    package var description: String {
        switch self {
        case .response(let status, let code): return "HTTP \(status)" + (code.map { " (\($0))" } ?? "")
        case .failure(let failure): return failure.description
        }
    }
}

package enum PauseReason: String, Sendable, Hashable {
    case backoff
    case retryAfter
    /// A 429 without a usable Retry-After.
    case rateLimited
}

/// One attempt, for logging: no header, no body.
package struct AttemptRecord: Sendable, Hashable {
    /// 1 for the first.
    package let number: Int
    package let outcome: AttemptOutcome
    package let durationMs: Int
    /// The pause taken before the next attempt; nil when none followed.
    package var pauseMs: Int?
    package var pauseReason: PauseReason?
}

package enum DeliveryOutcome: Sendable, Hashable {
    /// A 2xx.
    case delivered(HTTPResponse)
    /// A status that is never retried (400, 401, 402, 403, 413, 422, any other 4xx, 3xx, 501, 505).
    /// `code` is parsed from the body with `ServerErrorCode`; the body is there for anything else.
    case rejected(status: Int, code: String?, body: [UInt8])
    /// A failure no retry can mend (TLS verification, pin mismatch, a request that cannot be sent):
    /// nothing to queue.
    case failed(AttemptFailure)
    /// Every attempt failed retryably, or the deadline came first: worth queuing for later.
    case exhausted(last: AttemptOutcome, stoppedBy: StopReason)
}

package enum StopReason: String, Sendable, Hashable {
    case attempts
    /// The next attempt could not have started (or waited as the server asked) before the deadline.
    case deadline
}

package struct DeliveryReport: Sendable, Hashable {
    package let outcome: DeliveryOutcome
    package let attempts: [AttemptRecord]
    /// The proxy every attempt went through; nil when direct.
    package let proxy: ProxyEndpoint?

    /// Whether a proxy carried the request that reached the server (or would have).
    package var carriedByProxy: Bool { proxy != nil && !attempts.isEmpty }

    package var isRetryable: Bool {
        if case .exhausted = outcome { return true }
        return false
    }
}

/// The delivery loop: attempts, backoff, Retry-After, the deadline. Time and chance are injected so
/// that tests assert the pauses without waiting for them.
package struct Delivery: Sendable {
    package var policy: RetryPolicy
    /// A uniform draw in `0...upper`.
    package var random: @Sendable (Int) -> Int
    /// Pauses this many milliseconds.
    package var sleep: @Sendable (Int) -> Void
    package var monotonicMs: @Sendable () -> Double
    /// Seconds since the epoch, for Retry-After's HTTP-date.
    package var wallClockSeconds: @Sendable () -> Int64
    package var perform: @Sendable (HTTPRequest, AttemptSettings) -> Result<HTTPResponse, AttemptFailure>

    package init(policy: RetryPolicy = RetryPolicy(),
                 random: @escaping @Sendable (Int) -> Int = { Int.random(in: 0...max(0, $0)) },
                 sleep: @escaping @Sendable (Int) -> Void = Delivery.sleepMilliseconds,
                 monotonicMs: @escaping @Sendable () -> Double = { monotonicMilliseconds() },
                 wallClockSeconds: @escaping @Sendable () -> Int64 = { Int64(time(nil)) },
                 perform: @escaping @Sendable (HTTPRequest, AttemptSettings) -> Result<HTTPResponse, AttemptFailure> = HTTPClient.perform) {
        self.policy = policy
        self.random = random
        self.sleep = sleep
        self.monotonicMs = monotonicMs
        self.wallClockSeconds = wallClockSeconds
        self.perform = perform
    }

    /// Sends `body` until it is delivered, rejected, or the attempts or the deadline run out.
    /// `headers(n)` gives attempt n's headers (n from 1): a signature may change per attempt; the body,
    /// and whatever idempotency key the caller puts in the headers, must not.
    package func deliver(url: String, method: String = "POST", body: [UInt8], environment: [String: String],
                         caFile: String? = nil, pins: [String] = [], headers: (Int) -> [HTTPHeader]) -> DeliveryReport {
        let start = monotonicMs()
        guard let target = RequestTarget(url: url) else {
            return DeliveryReport(outcome: .failed(.invalidRequest("the URL is not an absolute http(s) URL")), attempts: [], proxy: nil)
        }
        let proxy: ProxyEndpoint?
        switch ProxyResolution.decide(for: target, environment: environment) {
        case .direct: proxy = nil
        case .proxy(let endpoint): proxy = endpoint
        case .unusable(let variable):
            return DeliveryReport(outcome: .failed(.invalidRequest("\(variable) is not a usable proxy URL")), attempts: [], proxy: nil)
        }

        let attempts = max(1, min(policy.attempts, RetryPolicy.maximumAttempts))
        let deadline = start + Double(max(0, policy.deadlineMs))
        var records: [AttemptRecord] = []
        for number in 1...attempts {
            let remaining = Int(max(0, (deadline - monotonicMs()).rounded(.down)))
            guard remaining >= 1 else {
                // Only reachable after a first attempt: the deadline is checked before each pause too.
                return finish(records, proxy, stoppedBy: .deadline)
            }
            let timeout = min(max(1, policy.attemptTimeoutMs), remaining)
            let settings = AttemptSettings(timeoutMs: timeout, connectTimeoutMs: min(max(1, policy.connectTimeoutMs), timeout),
                                           caFile: caFile, pins: pins, proxy: proxy)
            let began = monotonicMs()
            let result = perform(HTTPRequest(url: url, method: method, headers: headers(number), body: body), settings)
            let duration = Int(max(0, min(Double(Int32.max), monotonicMs() - began)))

            let outcome: AttemptOutcome
            var retryAfter: String?
            switch result {
            case .success(let response):
                let code = (200...299).contains(response.status) ? nil : ServerErrorCode.parse(response.body)
                outcome = .response(status: response.status, code: code)
                records.append(AttemptRecord(number: number, outcome: outcome, durationMs: duration))
                switch Self.classify(status: response.status) {
                case .delivered:
                    return DeliveryReport(outcome: .delivered(response), attempts: records, proxy: proxy)
                case .rejected:
                    return DeliveryReport(outcome: .rejected(status: response.status, code: code, body: response.body),
                                          attempts: records, proxy: proxy)
                case .retried:
                    retryAfter = response.header("retry-after")
                }
            case .failure(let failure):
                outcome = .failure(failure)
                records.append(AttemptRecord(number: number, outcome: outcome, durationMs: duration))
                guard failure.isRetryable else {
                    return DeliveryReport(outcome: .failed(failure), attempts: records, proxy: proxy)
                }
            }
            if number == attempts { break }

            let (pause, reason) = pause(after: number, outcome: outcome, retryAfter: retryAfter)
            let left = deadline - monotonicMs()
            // A pause that reaches the deadline leaves no time for the attempt it waits for; and
            // coming back before a server's Retry-After is up would only be refused again.
            guard Double(pause) < left else { return finish(records, proxy, stoppedBy: .deadline) }
            records[records.count - 1].pauseMs = pause
            records[records.count - 1].pauseReason = reason
            if pause > 0 { sleep(pause) }
        }
        return finish(records, proxy, stoppedBy: .attempts)
    }

    private func finish(_ records: [AttemptRecord], _ proxy: ProxyEndpoint?, stoppedBy reason: StopReason) -> DeliveryReport {
        DeliveryReport(outcome: .exhausted(last: records.last?.outcome ?? .failure(.timedOut), stoppedBy: reason),
                       attempts: records, proxy: proxy)
    }

    /// The pause after attempt `number` failed retryably.
    func pause(after number: Int, outcome: AttemptOutcome, retryAfter: String?) -> (Int, PauseReason) {
        if let retryAfter, let asked = RetryAfter.delayMilliseconds(retryAfter, now: wallClockSeconds()) {
            return (Int(min(Int64(max(0, policy.retryAfterCapMs)), asked)), .retryAfter)
        }
        if case .response(429, _) = outcome { return (max(0, policy.rateLimitPauseMs), .rateLimited) }
        return (random(backoffCeiling(after: number)), .backoff)
    }

    /// min(maxDelay, base · 2^(number-1)), without overflow for any policy.
    func backoffCeiling(after number: Int) -> Int {
        let ceiling = max(0, policy.maxDelayMs)
        var delay = max(0, policy.baseDelayMs)
        for _ in 1..<max(1, number) {
            let (doubled, overflow) = delay.multipliedReportingOverflow(by: 2)
            if overflow || doubled >= ceiling { return ceiling }
            delay = doubled
        }
        return min(ceiling, delay)
    }

    enum StatusClass { case delivered, retried, rejected }

    /// The wire contract's table: 408, 409, 429 and 5xx but 501 and 505 are worth another try.
    static func classify(status: Int) -> StatusClass {
        switch status {
        case 200...299: return .delivered
        case 408, 409, 429: return .retried
        case 501, 505: return .rejected
        case 500...599: return .retried
        default: return .rejected
        }
    }

    package static let sleepMilliseconds: @Sendable (Int) -> Void = { milliseconds in
        var request = timespec(tv_sec: milliseconds / 1000, tv_nsec: (milliseconds % 1000) * 1_000_000)
        var remaining = timespec()
        while nanosleep(&request, &remaining) == -1, errno == EINTR { request = remaining }
    }
}
