/// Severity of a library log message.
public enum LogLevel: Int, Sendable, Comparable {
    /// Per-probe detail: failures and fallbacks of single sources.
    case debug
    /// What the library decided (how identifiers are keyed, say).
    case info
    /// Something degraded that the application may want to fix.
    case warning
    /// Something failed.
    case error

    /// Orders by severity.
    public static func < (lhs: LogLevel, rhs: LogLevel) -> Bool { lhs.rawValue < rhs.rawValue }
}

/// Where the library's diagnostics go. The library never creates a backend of its own: the
/// application passes one in `FingerlyOptions.logger`, or nothing is logged.
public protocol FingerlyLogHandler: Sendable {
    /// Receives one message; called from the library's threads.
    func log(_ level: LogLevel, _ message: String)
}
