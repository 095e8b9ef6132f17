#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// An errno value with a readable description.
package struct SystemError: Error, Sendable, Hashable, CustomStringConvertible {
    package let code: Int32

    package init(_ code: Int32) { self.code = code }

    static var current: SystemError { SystemError(errno) }

    package var description: String {
        guard let text = strerror(code) else { return "errno \(code)" }
        return String(cString: text)
    }
}

/// The one place that retries a system call interrupted by a signal: every raw call goes
/// through here so no caller can forget EINTR.
@inline(__always)
package func retryingOnInterrupt<T: BinaryInteger>(_ call: () -> T) -> Result<T, SystemError> {
    while true {
        let result = call()
        if result >= 0 { return .success(result) }
        let error = errno
        if error != EINTR { return .failure(SystemError(error)) }
    }
}
