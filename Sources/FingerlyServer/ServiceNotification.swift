#if canImport(Glibc)
import Glibc
#endif
import FingerlyHost

/// systemd's readiness protocol (sd_notify(3)) without libsystemd: when the service manager sets
/// `NOTIFY_SOCKET`, one datagram per state change goes to that AF_UNIX socket, a path or, written
/// with a leading `@`, an abstract name. Without the variable, nothing is sent.
package struct ServiceNotification: Sendable {
    private let socketName: [UInt8]

    /// nil when `NOTIFY_SOCKET` is unset or empty; a name that cannot be an AF_UNIX address is an error.
    package init?(environment: [String: String]) throws(ConfigurationError) {
        guard let name = environment["NOTIFY_SOCKET"], !name.isEmpty else { return nil }
        var bytes = Array(name.utf8)
        guard bytes.first == UInt8(ascii: "/") || bytes.first == UInt8(ascii: "@") else {
            throw ConfigurationError("NOTIFY_SOCKET must be an absolute path or an @abstract name, not '\(name)'")
        }
        if bytes[0] == UInt8(ascii: "@") { bytes[0] = 0 }
        guard bytes.count < MemoryLayout.size(ofValue: sockaddr_un().sun_path) else {
            throw ConfigurationError("NOTIFY_SOCKET is longer than an AF_UNIX address can be")
        }
        socketName = bytes
    }

    /// Sends `state` (`READY=1`, `STOPPING=1`, …, newline-separated); the error says why it could not.
    package func send(_ state: String) throws(ConfigurationError) {
        let descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw Self.failure("socket") }
        defer { close(descriptor) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { path in
            for (index, byte) in socketName.enumerated() { path[index] = byte }
        }
        // An abstract name is exactly its bytes, so the length counts no terminating NUL.
        let length = socklen_t(MemoryLayout<sa_family_t>.size + socketName.count + (socketName[0] == 0 ? 0 : 1))
        let payload = Array(state.utf8)
        let sent = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { socketAddress in
                payload.withUnsafeBytes { bytes in
                    retryingOnInterrupt {
                        sendto(descriptor, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL), socketAddress, length)
                    }
                }
            }
        }
        switch sent {
        case .success(let count) where count == payload.count: return
        case .success: throw Self.failure("sendto", "the datagram was cut short")
        case .failure(let error): throw Self.failure("sendto", error.description)
        }
    }

    private static func failure(_ call: String, _ reason: String = SystemError(errno).description) -> ConfigurationError {
        ConfigurationError("cannot notify the service manager (\(call)): \(reason)", exit: .unavailable)
    }
}
