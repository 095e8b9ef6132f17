/// Errors of loading and identifying, beside `ConsentError` and `TransportError`.
public enum FingerlyError: Error, Sendable, Hashable, CustomStringConvertible {
    /// An argument of `load` cannot be used: `field` names it (`schedule.budgetMs`,
    /// `options.policy`, …) and `reason` says why.
    case invalidConfiguration(field: String, reason: String)
    /// This build cannot submit reports yet; use `submit: false`.
    case submissionUnavailable

    /// The field and the reason, or what is unavailable.
    public var description: String {
        switch self {
        case .invalidConfiguration(let field, let reason): return "\(field): \(reason)"
        case .submissionUnavailable: return "submission is not implemented in this version; collect locally with submit: false (CLI: --no-submit)"
        }
    }
}

/// A failed submission. `retryable` is true for network errors, 429 and 5xx.
public struct TransportError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What went wrong, for people.
    public let message: String
    /// The HTTP status, when a server answered.
    public let status: Int?
    /// Whether sending the same request again may succeed.
    public let retryable: Bool

    /// - Parameters:
    ///   - message: what went wrong.
    ///   - status: the HTTP status, when a server answered.
    ///   - retryable: whether sending again may succeed.
    public init(message: String, status: Int?, retryable: Bool) {
        self.message = message
        self.status = status
        self.retryable = retryable
    }

    /// The status, when there is one, and the message.
    public var description: String { status.map { "HTTP \($0): \(message)" } ?? message }
}
