/// Severity of a library log message.
public enum LogLevel: Int, Sendable, Comparable {
    case debug, info, warning, error
    public static func < (lhs: LogLevel, rhs: LogLevel) -> Bool { lhs.rawValue < rhs.rawValue }
}

/// Where the library's diagnostics go. The library never creates a backend of its own: the
/// application passes one to `Fingerly.load`, or nothing is logged.
public protocol FingerlyLogHandler: Sendable {
    func log(_ level: LogLevel, _ message: String)
}
