/// Errors of loading and identifying, beside `ConsentError` and `TransportError`.
public enum FingerlyError: Error, Sendable, Hashable, CustomStringConvertible {
    /// An argument of `load` cannot be used: `field` names it (`schedule.budgetMs`,
    /// `options.policy`, …) and `reason` says why.
    case invalidConfiguration(field: String, reason: String)
    /// The local mode's store (`local.sqlite` in the state directory, at `path`) cannot be opened
    /// or read: damaged, or not a database. `fingerly-identify reset` removes it.
    case localStore(path: String, reason: String)

    /// The field and the reason, or what is unavailable.
    public var description: String {
        switch self {
        case .invalidConfiguration(let field, let reason): return "\(field): \(reason)"
        case .localStore(let path, let reason): return "the local store \(path) \(reason)"
        }
    }
}

/// A failed submission. `retryable` is true for network errors, 408, 409, 429 and 5xx (but 501
/// and 505): the report was then queued and a later `flush()` sends it again under the same key.
public struct TransportError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What went wrong, for people.
    public let message: String
    /// The HTTP status, when a server answered.
    public let status: Int?
    /// Whether sending the same request again may succeed.
    public let retryable: Bool
    /// The server's machine-readable error code (`invalid_key`, `organization_not_accepting`…),
    /// or the client's own for failures no server answered (`network`, `timeout`,
    /// `tls_verification`, `pin_mismatch`, `payload_too_large`, `no_api_key`,
    /// `proxy_authentication_required` for a proxy that answered 407, `proxy_refused` for another
    /// status of the proxy, `http_client_unavailable` when this host has no usable libcurl.so.4).
    public let code: String?

    /// - Parameters:
    ///   - message: what went wrong.
    ///   - status: the HTTP status, when a server answered.
    ///   - retryable: whether sending again may succeed.
    ///   - code: the machine-readable error code, when known.
    public init(message: String, status: Int?, retryable: Bool, code: String? = nil) {
        self.message = message
        self.status = status
        self.retryable = retryable
        self.code = code
    }

    /// The status, when there is one, and the message.
    public var description: String { status.map { "HTTP \($0): \(message)" } ?? message }
}
