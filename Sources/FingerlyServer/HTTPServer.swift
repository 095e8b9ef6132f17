import CFingerlyHTTPD
import CMicroHTTPD
import FingerlyHost
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// What arrived before the body: the request line and the header fields.
package struct HTTPRequestHead: Sendable {
    package let method: String
    /// The path without query, as libmicrohttpd hands it over (percent-decoded): what routes.
    package let path: String
    package let fields: [(name: String, value: String)]
    /// The request-target exactly as received, query included: what a signature covers.
    package let target: String
    /// The client's address (an IPv6 one cut to its /64), empty when unknown.
    package let peer: String

    package init(method: String, path: String, fields: [(name: String, value: String)], target: String? = nil, peer: String = "") {
        self.method = method
        self.path = path
        self.fields = fields
        self.target = target ?? path
        self.peer = peer
    }

    /// The target's path as received, before any query: `@path` of RFC 9421 §2.2.6.
    package var receivedPath: Substring { target.prefix { $0 != "?" } }
    /// Whether the target carries a query (or an empty `?`).
    package var hasQuery: Bool { target.contains("?") }

    /// Every value of a field, names compared without case.
    package func values(_ name: String) -> [String] {
        fields.filter { $0.name.lowercased() == name }.map(\.value)
    }
}

package struct HTTPResponse: Sendable {
    package var status: Int
    package var headers: [(name: String, value: String)]
    package var body: [UInt8]

    package init(status: Int, headers: [(name: String, value: String)] = [], body: [UInt8]) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    package static func json(_ status: Int, _ body: [UInt8], headers: [(name: String, value: String)] = []) -> HTTPResponse {
        HTTPResponse(status: status, headers: [("Content-Type", "application/json")] + headers, body: body)
    }

    /// The wire contract's error shape, `{"error":{"code":…,"message":…}}`.
    package static func error(_ status: Int, _ code: String, _ message: String,
                              headers: [(name: String, value: String)] = []) -> HTTPResponse {
        json(status, Array("{\"error\":{\"code\":\(jsonString(code)),\"message\":\(jsonString(message))}}".utf8), headers: headers)
    }
}

/// A JSON string literal of `text`.
func jsonString(_ text: String) -> String {
    var out = "\""
    for scalar in text.unicodeScalars {
        switch scalar {
        case "\"": out += "\\\""
        case "\\": out += "\\\\"
        case "\n": out += "\\n"
        case "\r": out += "\\r"
        case "\t": out += "\\t"
        case _ where scalar.value < 0x20:
            let hex = String(scalar.value, radix: 16)
            out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
        default: out.unicodeScalars.append(scalar)
        }
    }
    return out + "\""
}

/// What the HTTP layer asks of the application: an answer to the head alone (an error, or a
/// request without body), else an answer once the whole body is in.
package protocol HTTPApplication: AnyObject, Sendable {
    /// Largest body read; a larger one is answered 413 and never held in memory.
    var bodyLimit: Int { get }
    func respond(toHead head: HTTPRequestHead) -> HTTPResponse?
    func respond(to head: HTTPRequestHead, body: [UInt8]) -> HTTPResponse
    /// The request is over: `status` 0 when no answer went out (timeout, client gone).
    func finished(_ head: HTTPRequestHead, status: Int, seconds: Double)
}

/// One request between its first and last callback.
private final class RequestState {
    let head: HTTPRequestHead
    let started = monotonicNanoseconds()
    var body: [UInt8] = []
    var received = 0
    var tooLarge = false
    var status = 0

    init(head: HTTPRequestHead) { self.head = head }
}

func monotonicNanoseconds() -> UInt64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return UInt64(now.tv_sec) &* 1_000_000_000 &+ UInt64(now.tv_nsec)
}

/// libmicrohttpd with its own pool of threads in front of an `HTTPApplication`.
package final class HTTPServer: @unchecked Sendable {
    package struct Settings: Sendable {
        package var listen: ListenAddress
        package var threads: Int
        package var connectionLimit: Int
        package var connectionsPerAddress: Int
        package var connectionTimeout: Int
        package var connectionMemoryLimit: Int
        package var tlsCertificatePEM: [UInt8]?
        package var tlsKeyPEM: [UInt8]?
    }

    /// After a body this much past the limit, the connection is closed instead of drained.
    static let drainAllowance = 16 * 1_048_576

    private let application: any HTTPApplication
    // Written once in init, read by shutdown; libmicrohttpd's threads never touch it.
    private var daemon: OpaquePointer?
    private let inFlight = Atomic<Int>(0)
    package private(set) var port: UInt16 = 0

    package static var supportsTLS: Bool { fingerly_httpd_supports_tls() != 0 }

    package init(settings: Settings, application: any HTTPApplication) throws(ConfigurationError) {
        self.application = application
        let context = Unmanaged.passUnretained(self).toOpaque()
        let certificate = settings.tlsCertificatePEM.map { $0 + [0] }
        let key = settings.tlsKeyPEM.map { $0 + [0] }
        if certificate != nil, !Self.supportsTLS {
            throw ConfigurationError("this libmicrohttpd was built without TLS; run behind a TLS proxy instead")
        }
        let started: OpaquePointer? = settings.listen.withSocketAddress { address, _ in
            withOptionalCString(certificate) { certificateText in
                withOptionalCString(key) { keyText in
                    var options = fingerly_httpd_settings(
                        address: address, threads: UInt32(settings.threads), connection_limit: UInt32(settings.connectionLimit),
                        connections_per_address: UInt32(settings.connectionsPerAddress),
                        connection_timeout: UInt32(settings.connectionTimeout), connection_memory_limit: settings.connectionMemoryLimit,
                        // poll(), not epoll: libmicrohttpd's quiesce (our graceful stop) removes the
                        // listen socket from each worker's epoll set while the worker may remove it
                        // too, and the loser's epoll_ctl fails into MHD_PANIC, an abort (seen in
                        // shutdownLetsARequestInFlightFinish under load). Its poll path signals the
                        // workers instead.
                        tls_certificate: certificateText, tls_key: keyText, use_epoll: 0)
                    // NULL when it cannot listen: kept optional here, never unwrapped into a trap.
                    let daemon: OpaquePointer? = fingerly_httpd_start(&options, accessHandler, completedHandler, context)
                    return daemon
                }
            }
        } ?? nil
        guard let started else {
            let reason = String(cString: strerror(errno))
            throw ConfigurationError("cannot listen on \(settings.listen): \(reason)", exit: .unavailable)
        }
        daemon = started
        port = fingerly_httpd_bound_port(started)
    }

    deinit {
        if let daemon { fingerly_httpd_stop(daemon) }
    }

    /// Requests between their head and their completion.
    package var requestsInFlight: Int { inFlight.load(ordering: .acquiring) }

    /// Stops accepting, lets the requests in flight finish (at most `grace` seconds), then stops
    /// the threads and closes what connections are left (idle keep-alives).
    package func shutdown(graceSeconds: Int) {
        guard let daemon else { return }
        let listener = MHD_quiesce_daemon(fingerly_httpd_daemon(daemon))
        if listener >= 0 { close(listener) }
        let deadline = monotonicNanoseconds() &+ UInt64(graceSeconds) &* 1_000_000_000
        while inFlight.load(ordering: .acquiring) > 0 && monotonicNanoseconds() < deadline {
            usleep(10_000)
        }
        fingerly_httpd_stop(daemon)
        self.daemon = nil
    }

    fileprivate func handle(connection: OpaquePointer?, url: UnsafePointer<CChar>?, method: UnsafePointer<CChar>?,
                            uploadData: UnsafePointer<CChar>?, uploadSize: UnsafeMutablePointer<Int>?,
                            requestState: UnsafeMutablePointer<UnsafeMutableRawPointer?>?) -> MHD_Result {
        // The request-start callback made it; nil only when it ran out of memory.
        guard let requestState, let uploadSize, let started = requestState.pointee?.assumingMemoryBound(to: fingerly_httpd_request.self),
              let target = started.pointee.target else { return .NO }
        guard let stored = started.pointee.state else {
            let peer = withUnsafeBytes(of: started.pointee.peer) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            let head = HTTPRequestHead(method: method.map { String(cString: $0) } ?? "", path: url.map { String(cString: $0) } ?? "",
                                       fields: Self.fields(of: connection), target: String(cString: target), peer: peer)
            let state = RequestState(head: head)
            started.pointee.state = Unmanaged.passRetained(state).toOpaque()
            inFlight.add(1, ordering: .acquiringAndReleasing)
            let limit = application.bodyLimit
            if head.values("content-length").contains(where: { Self.exceeds(declaredLength: $0, limit: limit) }) {
                return queue(Self.tooLarge(application.bodyLimit), state, connection)
            }
            if let response = application.respond(toHead: head) { return queue(response, state, connection) }
            return .YES
        }
        let state = Unmanaged<RequestState>.fromOpaque(stored).takeUnretainedValue()
        let size = uploadSize.pointee
        if size > 0 {
            uploadSize.pointee = 0
            if state.status != 0 { return .YES }
            let (total, overflow) = state.received.addingReportingOverflow(size)
            if overflow || total > application.bodyLimit &+ Self.drainAllowance { return .NO }
            state.received = total
            if total > application.bodyLimit {
                // Counted as it streams in, never kept: the answer waits for the end of the body,
                // since libmicrohttpd takes no answer while it is reading one.
                state.tooLarge = true
                state.body = []
            } else if let uploadData {
                uploadData.withMemoryRebound(to: UInt8.self, capacity: size) { state.body.append(contentsOf: UnsafeBufferPointer(start: $0, count: size)) }
            }
            return .YES
        }
        if state.status != 0 { return .YES }
        if state.tooLarge { return queue(Self.tooLarge(application.bodyLimit), state, connection) }
        let body = state.body
        state.body = []
        return queue(application.respond(to: state.head, body: body), state, connection)
    }

    fileprivate func completed(requestState: UnsafeMutablePointer<UnsafeMutableRawPointer?>?) {
        guard let requestState, let started = requestState.pointee?.assumingMemoryBound(to: fingerly_httpd_request.self) else { return }
        requestState.pointee = nil
        let stored = started.pointee.state
        fingerly_httpd_request_free(started)
        // A request refused before its head was complete never reached the application.
        guard let stored else { return }
        let state = Unmanaged<RequestState>.fromOpaque(stored).takeRetainedValue()
        let seconds = Double(monotonicNanoseconds() &- state.started) / 1e9
        application.finished(state.head, status: state.status, seconds: seconds)
        inFlight.subtract(1, ordering: .acquiringAndReleasing)
    }

    /// Whether a `Content-Length` value is digits that count more than `limit` bytes, whatever their
    /// number: `18446744073709551615` is refused from the head, as is any length no integer holds, and
    /// the body is never read.
    static func exceeds(declaredLength value: String, limit: Int) -> Bool {
        let digits = Substring(value).trimmingSpaces.utf8
        guard !digits.isEmpty, digits.allSatisfy({ (48...57).contains($0) }) else { return false }
        var length = 0
        for digit in digits {
            length = length * 10 + Int(digit - 48)
            if length > limit { return true }
        }
        return false
    }

    private static func tooLarge(_ limit: Int) -> HTTPResponse {
        .error(413, "payload_too_large", "The body is larger than \(limit) bytes.")
    }

    private func queue(_ response: HTTPResponse, _ state: RequestState, _ connection: OpaquePointer?) -> MHD_Result {
        let made = response.body.withUnsafeBytes { bytes in
            MHD_create_response_from_buffer(bytes.count, UnsafeMutableRawPointer(mutating: bytes.baseAddress), MHD_ResponseMemoryMode(rawValue: 2)!)
        }
        guard let made else { return .NO }
        defer { MHD_destroy_response(made) }
        for header in response.headers { _ = MHD_add_response_header(made, header.name, header.value) }
        let result = MHD_queue_response(connection, UInt32(response.status), made)
        if result == .YES { state.status = response.status }
        return result
    }

    private static func fields(of connection: OpaquePointer?) -> [(name: String, value: String)] {
        var fields: [(name: String, value: String)] = []
        withUnsafeMutablePointer(to: &fields) { pointer in
            _ = MHD_get_connection_values(connection, .HEADER_KIND, { context, _, key, value in
                guard let context, let key else { return .YES }
                let fields = context.assumingMemoryBound(to: [(name: String, value: String)].self)
                fields.pointee.append((String(cString: key), value.map { String(cString: $0) } ?? ""))
                return .YES
            }, pointer)
        }
        return fields
    }
}

private func withOptionalCString<Result>(_ bytes: [UInt8]?, _ body: (UnsafePointer<CChar>?) -> Result) -> Result {
    guard let bytes else { return body(nil) }
    return bytes.withUnsafeBufferPointer { $0.withMemoryRebound(to: CChar.self) { body($0.baseAddress) } }
}

private let accessHandler: MHD_AccessHandlerCallback = { context, connection, url, method, _, uploadData, uploadSize, requestState in
    guard let context else { return .NO }
    return Unmanaged<HTTPServer>.fromOpaque(context).takeUnretainedValue()
        .handle(connection: connection, url: url, method: method, uploadData: uploadData, uploadSize: uploadSize, requestState: requestState)
}

private let completedHandler: MHD_RequestCompletedCallback = { context, _, requestState, _ in
    guard let context else { return }
    Unmanaged<HTTPServer>.fromOpaque(context).takeUnretainedValue().completed(requestState: requestState)
}
