import CCurl
import CFingerlyCurl
import Glibc

package struct HTTPHeader: Sendable, Hashable {
    package let name: String
    package let value: String

    package init(_ name: String, _ value: String) {
        self.name = name
        self.value = value
    }
}

/// One request as sent by one attempt.
package struct HTTPRequest: Sendable {
    package var url: String
    package var method: String
    /// In the order they are sent. Values are never logged, nor put in an error.
    package var headers: [HTTPHeader]
    package var body: [UInt8]

    package init(url: String, method: String, headers: [HTTPHeader], body: [UInt8]) {
        self.url = url
        self.method = method
        self.headers = headers
        self.body = body
    }
}

/// How one attempt connects.
package struct AttemptSettings: Sendable, Hashable {
    /// The whole transfer, connection included.
    package var timeoutMs: Int
    package var connectTimeoutMs: Int
    /// A PEM bundle trusted instead of the system's; nil for the system store.
    package var caFile: String?
    /// SPKI SHA-256 pins, each the base64 of the 32-byte digest (a `sha256/` or `sha256//` prefix is
    /// accepted); empty for none. Any one matching is enough. curl compares them with the server's own
    /// (leaf) key only, never with an intermediate's or a CA's: a pin must name the leaf key.
    package var pins: [String]
    package var proxy: ProxyEndpoint?

    package init(timeoutMs: Int = 10_000, connectTimeoutMs: Int = 10_000, caFile: String? = nil, pins: [String] = [],
                 proxy: ProxyEndpoint? = nil) {
        self.timeoutMs = timeoutMs
        self.connectTimeoutMs = connectTimeoutMs
        self.caFile = caFile
        self.pins = pins
        self.proxy = proxy
    }
}

package struct HTTPResponse: Sendable, Hashable {
    package let status: Int
    /// Names lowercased, in the order received.
    package let headers: [HTTPHeader]
    package let body: [UInt8]

    package func header(_ name: String) -> String? {
        let lowered = name.lowercased()
        return headers.first { $0.name == lowered }?.value
    }
}

/// Why an attempt got no HTTP response.
package enum AttemptFailure: Error, Sendable, Hashable, CustomStringConvertible {
    /// Refused, reset, unreachable, closed without an answer, a proxy that would not connect.
    case network(String)
    case timedOut
    /// The certificate did not verify (chain, name, dates).
    case tlsVerification(String)
    /// The certificate verified but no pinned key matched it.
    case pinMismatch
    /// More than `HTTPClient.maximumResponseBytes` of body, or of headers.
    case responseTooLarge
    /// Refused before anything was sent: a URL, header, pin or CA file that cannot be used.
    case invalidRequest(String)
    /// libcurl, opened at the first send, is not on this host or not whole: the loader's words.
    case clientUnavailable(String)
    /// The proxy answered CONNECT with `status` instead of opening the tunnel.
    case proxyRefused(ProxyEndpoint, status: Int)
    /// A SOCKS proxy refused the credentials of its variable, or asked for some it does not hold.
    case proxyCredentialsRefused(ProxyEndpoint)

    package var isRetryable: Bool {
        switch self {
        // An answer too large to read says nothing of whether the request was stored (a proxy's
        // error page, a hostile network): sending again, under the same key, loses nothing.
        case .network, .timedOut, .responseTooLarge: return true
        // A library missing from the host does not come back between two attempts.
        case .tlsVerification, .pinMismatch, .invalidRequest, .clientUnavailable: return false
        // 407 asks for credentials the proxy variable does not hold, or refuses the ones it does:
        // only the person who set it can mend that. A proxy's 502 or 503 may pass.
        case .proxyRefused(_, let status): return status != 407
        case .proxyCredentialsRefused: return false
        }
    }

    package var description: String {
        switch self {
        case .network(let detail): return "network failure: \(detail)"
        case .timedOut: return "timed out"
        case .tlsVerification(let detail): return "TLS verification failed: \(detail)"
        case .pinMismatch: return "no pinned key matched the server's certificate chain"
        case .responseTooLarge: return "the response was larger than \(HTTPClient.maximumResponseBytes) bytes"
        case .invalidRequest(let detail): return "request not sent: \(detail)"
        case .clientUnavailable(let detail):
            return "request not sent: \(detail); sending needs libcurl (Debian's libcurl4)"
        case .proxyRefused(let proxy, 407):
            return "the proxy \(proxy) (from \(proxy.variable)) answered 407 Proxy Authentication Required: "
                + "the credentials in \(proxy.variable) are missing or refused"
        case .proxyRefused(let proxy, let status):
            return "the proxy \(proxy) (from \(proxy.variable)) answered HTTP \(status) instead of opening a tunnel"
        case .proxyCredentialsRefused(let proxy):
            return "the proxy \(proxy) (from \(proxy.variable)) refused to connect without other credentials: "
                + "the credentials in \(proxy.variable) are missing or refused"
        }
    }
}

/// One HTTP exchange over libcurl: one easy handle per attempt (a handle is not Sendable, and a
/// fresh one carries no connection or state over from a failed attempt). libcurl is opened by the
/// first attempt, not at start: what never sends never maps it.
package enum HTTPClient {
    package static let maximumResponseBytes = 1 << 20
    static let maximumHeaderBytes = 64 << 10
    static let maximumHeaders = 100

    package static func perform(_ request: HTTPRequest, settings: AttemptSettings) -> Result<HTTPResponse, AttemptFailure> {
        if let problem = problem(with: request, settings: settings) { return .failure(.invalidRequest(problem)) }
        if let problem = fingerly_curl_load() { return .failure(.clientUnavailable(String(cString: problem))) }
        guard let handle = fingerly_curl_easy_init() else {
            return .failure(.invalidRequest("libcurl could not make a handle"))
        }
        defer { fingerly_curl_easy_cleanup(handle) }

        var headerList: UnsafeMutablePointer<curl_slist>?
        defer { fingerly_curl_slist_free_all(headerList) }
        // What curl would add on its own is removed ("Name:" with no value), so that the fields sent
        // are the caller's plus Host and Content-Length: the dry run can show the exact request.
        // `Expect: 100-continue` would also cost a second of waiting with a server that ignores it.
        let given = Set(request.headers.map { $0.name.lowercased() })
        let removed = ["Accept", "Content-Type", "Expect"].filter { !given.contains($0.lowercased()) }.map { $0 + ":" }
        for line in request.headers.map({ "\($0.name): \($0.value)" }) + removed {
            guard let appended = fingerly_curl_slist_append(headerList, line) else {
                return .failure(.invalidRequest("out of memory"))
            }
            headerList = appended
        }

        let collector = ResponseCollector()
        let context = Unmanaged.passRetained(collector)
        defer { context.release() }

        var configured = true
        func set(_ option: CURLoption, _ value: Int) { configured = configured && fingerly_curl_setopt_long(handle, option, value) == CURLE_OK }
        func set(_ option: CURLoption, _ value: String) { configured = configured && fingerly_curl_setopt_string(handle, option, value) == CURLE_OK }

        set(CURLOPT_URL, request.url)
        set(CURLOPT_PROTOCOLS_STR, "http,https")
        set(CURLOPT_REDIR_PROTOCOLS_STR, "http,https")
        set(CURLOPT_FOLLOWLOCATION, 0)
        // Signals are the host application's; timeouts without them need a threaded resolver, which Debian's curl has.
        set(CURLOPT_NOSIGNAL, 1)
        set(CURLOPT_TIMEOUT_MS, max(1, settings.timeoutMs))
        set(CURLOPT_CONNECTTIMEOUT_MS, max(1, min(settings.connectTimeoutMs, settings.timeoutMs)))
        // Our resolution decided: "" tells curl to use no proxy and to read no variable itself.
        set(CURLOPT_PROXY, settings.proxy?.curlValue ?? "")
        set(CURLOPT_NOPROXY, "")
        // Through an HTTP proxy, always a tunnel, for http origins too: the proxy relays bytes and
        // never forwards (or caches, or rewrites) the request itself.
        if settings.proxy != nil { set(CURLOPT_HTTPPROXYTUNNEL, 1) }
        set(CURLOPT_SUPPRESS_CONNECT_HEADERS, 1)
        set(CURLOPT_SSL_VERIFYPEER, 1)
        set(CURLOPT_SSL_VERIFYHOST, 2)
        if let caFile = settings.caFile { set(CURLOPT_CAINFO, caFile) }
        if !settings.pins.isEmpty {
            set(CURLOPT_PINNEDPUBLICKEY, settings.pins.map { "sha256//" + bareDigest($0) }.joined(separator: ";"))
        }
        set(CURLOPT_HTTP_VERSION, Int(CURL_HTTP_VERSION_1_1))

        switch request.method {
        case "GET":
            set(CURLOPT_HTTPGET, 1)
        case "HEAD":
            set(CURLOPT_NOBODY, 1)
        default:
            configured = configured && fingerly_curl_setopt_offset(handle, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(request.body.count)) == CURLE_OK
            // COPYPOSTFIELDS: curl keeps its own copy, so nothing here must outlive the call.
            // An empty body still needs a valid pointer; curl copies POSTFIELDSIZE bytes of it, here none.
            let bytes = request.body.isEmpty ? [0] : request.body
            configured = configured && bytes.withUnsafeBytes { buffer in
                fingerly_curl_setopt_pointer(handle, CURLOPT_COPYPOSTFIELDS, UnsafeMutableRawPointer(mutating: buffer.baseAddress)) == CURLE_OK
            }
            if request.method != "POST" { set(CURLOPT_CUSTOMREQUEST, request.method) }
        }
        configured = configured && fingerly_curl_setopt_pointer(handle, CURLOPT_HTTPHEADER, UnsafeMutableRawPointer(headerList)) == CURLE_OK
        configured = configured && fingerly_curl_setopt_write_callback(handle, CURLOPT_WRITEFUNCTION, receiveBody) == CURLE_OK
        configured = configured && fingerly_curl_setopt_pointer(handle, CURLOPT_WRITEDATA, context.toOpaque()) == CURLE_OK
        configured = configured && fingerly_curl_setopt_write_callback(handle, CURLOPT_HEADERFUNCTION, receiveHeader) == CURLE_OK
        configured = configured && fingerly_curl_setopt_pointer(handle, CURLOPT_HEADERDATA, context.toOpaque()) == CURLE_OK
        guard configured else { return .failure(.invalidRequest("libcurl refused an option")) }

        let code = fingerly_curl_easy_perform(handle)
        if collector.overflowed { return .failure(.responseTooLarge) }
        guard code == CURLE_OK else {
            // curl reports a refused CONNECT as a receive error (56); the proxy's own status tells
            // a configuration to fix from a network to wait for.
            var connectStatus = 0
            if let proxy = settings.proxy,
               fingerly_curl_getinfo_long(handle, CURLINFO_HTTP_CONNECTCODE, &connectStatus) == CURLE_OK,
               (300...999).contains(connectStatus) {
                return .failure(.proxyRefused(proxy, status: connectStatus))
            }
            // A SOCKS proxy has no status: curl names what went wrong in the handshake instead.
            var proxyError = 0
            if let proxy = settings.proxy,
               fingerly_curl_getinfo_long(handle, CURLINFO_PROXY_ERROR, &proxyError) == CURLE_OK,
               [Int(CURLPX_USER_REJECTED.rawValue), Int(CURLPX_NO_AUTH.rawValue)].contains(proxyError) {
                return .failure(.proxyCredentialsRefused(proxy))
            }
            return .failure(classify(code))
        }
        var status = 0
        guard fingerly_curl_getinfo_long(handle, CURLINFO_RESPONSE_CODE, &status) == CURLE_OK, (100...999).contains(status) else {
            return .failure(.network("no HTTP status"))
        }
        return .success(HTTPResponse(status: status, headers: collector.headers, body: collector.body))
    }

    /// What curl would read differently from what we mean, or could carry a second header or request.
    static func problem(with request: HTTPRequest, settings: AttemptSettings) -> String? {
        guard RequestTarget(url: request.url) != nil else { return "the URL is not an absolute http(s) URL" }
        guard !request.method.isEmpty, request.method.utf8.count <= 32, request.method.utf8.allSatisfy(isTokenByte) else {
            return "the method is not a token"
        }
        guard request.body.count <= maximumRequestBytes else { return "the body is larger than \(maximumRequestBytes) bytes" }
        for header in request.headers {
            guard !header.name.isEmpty, header.name.utf8.count <= 128, header.name.utf8.allSatisfy(isTokenByte) else {
                return "a header name is not a token"
            }
            // The name only: a value may be a credential.
            guard header.value.utf8.count <= 8192, header.value.utf8.allSatisfy({ $0 == 0x09 || ($0 >= 0x20 && $0 != 0x7F) }) else {
                return "the value of header \(header.name) holds a control character or is too long"
            }
        }
        if let caFile = settings.caFile, caFile.isEmpty || caFile.utf8.contains(0) || caFile.utf8.count > 4096 {
            return "the CA file path is unusable"
        }
        guard settings.pins.count <= 64, settings.pins.allSatisfy(isPin) else {
            return "a pin is not the base64 of a SHA-256 digest"
        }
        return nil
    }

    /// Requests are bounded like responses, plus room for the envelope around the report.
    static let maximumRequestBytes = 2 << 20

    /// The base64 without its prefix. By length, not by the first prefix that fits: in the CLI's
    /// "sha256/<base64>" the digest may itself start with '/', which reads as curl's "sha256//".
    static func bareDigest(_ pin: String) -> Substring {
        let digest = Substring(pin)
        for prefix in ["sha256//", "sha256/"] where digest.hasPrefix(prefix) && digest.utf8.count - prefix.utf8.count == 44 {
            return digest.dropFirst(prefix.count)
        }
        return digest
    }

    /// 43 base64 characters and one `=`: exactly 32 bytes, and nothing that could split curl's list.
    static func isPin(_ pin: String) -> Bool {
        let digest = bareDigest(pin).utf8
        guard digest.count == 44, digest.last == UInt8(ascii: "=") else { return false }
        return digest.dropLast().allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "+"), UInt8(ascii: "/"): return true
            default: return false
            }
        }
    }

    static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return true
        default:
            return "!#$%&'*+-.^_`|~".utf8.contains(byte)
        }
    }

    static func classify(_ code: CURLcode) -> AttemptFailure {
        let text = fingerly_curl_easy_strerror(code).map { String(cString: $0) } ?? "curl error"
        let detail = "\(text) (curl \(code.rawValue))"
        switch code {
        case CURLE_OPERATION_TIMEDOUT:
            return .timedOut
        case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
            return .pinMismatch
        case CURLE_PEER_FAILED_VERIFICATION:
            return .tlsVerification(detail)
        case CURLE_UNSUPPORTED_PROTOCOL, CURLE_URL_MALFORMAT, CURLE_NOT_BUILT_IN, CURLE_BAD_FUNCTION_ARGUMENT,
             CURLE_UNKNOWN_OPTION, CURLE_SSL_CACERT_BADFILE, CURLE_SSL_CERTPROBLEM, CURLE_SSL_ENGINE_NOTFOUND,
             CURLE_OUT_OF_MEMORY, CURLE_FAILED_INIT:
            return .invalidRequest(detail)
        default:
            // Refused, reset, nothing received, a handshake cut short, a proxy that failed: all worth another try.
            return .network(detail)
        }
    }
}

/// Filled by curl's callbacks during one transfer, on the thread that called perform.
private final class ResponseCollector {
    var headers: [HTTPHeader] = []
    var headerBytes = 0
    var body: [UInt8] = []
    var overflowed = false

    func header(_ line: UnsafeBufferPointer<UInt8>) {
        var bytes = line[...]
        while let last = bytes.last, last == 0x0A || last == 0x0D { bytes = bytes.dropLast() }
        if bytes.starts(with: Array("HTTP/".utf8)) {
            // A new status line: an interim (1xx) response's fields do not belong to the final one.
            headers = []
            return
        }
        guard let colon = bytes.firstIndex(of: UInt8(ascii: ":")) else { return }
        let name = String(decoding: bytes[..<colon], as: UTF8.self).lowercased()
        let value = bytes[(colon + 1)...].drop { $0 == 0x20 || $0 == 0x09 }
        guard headers.count < HTTPClient.maximumHeaders else { return }
        headers.append(HTTPHeader(name, String(decoding: value, as: UTF8.self)))
    }
}

private let receiveBody: curl_write_callback = { data, size, count, context in
    guard let context, let data else { return 0 }
    let collector = Unmanaged<ResponseCollector>.fromOpaque(context).takeUnretainedValue()
    let (length, overflow) = size.multipliedReportingOverflow(by: count)
    guard !overflow, collector.body.count + length <= HTTPClient.maximumResponseBytes else {
        collector.overflowed = true
        return 0
    }
    data.withMemoryRebound(to: UInt8.self, capacity: length) {
        collector.body.append(contentsOf: UnsafeBufferPointer(start: $0, count: length))
    }
    return length
}

private let receiveHeader: curl_write_callback = { data, size, count, context in
    guard let context, let data else { return 0 }
    let collector = Unmanaged<ResponseCollector>.fromOpaque(context).takeUnretainedValue()
    let (length, overflow) = size.multipliedReportingOverflow(by: count)
    guard !overflow, collector.headerBytes + length <= HTTPClient.maximumHeaderBytes else {
        collector.overflowed = true
        return 0
    }
    collector.headerBytes += length
    data.withMemoryRebound(to: UInt8.self, capacity: length) {
        collector.header(UnsafeBufferPointer(start: $0, count: length))
    }
    return length
}
