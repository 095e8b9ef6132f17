import Glibc

/// The scheme, host and port of an http(s) URL: what proxy resolution needs, checked before curl sees it.
package struct RequestTarget: Sendable, Hashable {
    package let scheme: String
    /// Lowercased; an IPv6 literal without its brackets.
    package let host: String
    package let port: Int

    /// Longer URLs are refused outright: nothing this SDK sends needs one.
    static let maximumLength = 8192

    /// nil unless `url` is an absolute http or https URL with a host, an optional port and nothing
    /// curl would read differently (no whitespace or control bytes anywhere).
    package init?(url: String) {
        guard url.utf8.count <= Self.maximumLength, !url.utf8.contains(where: { $0 <= 0x20 || $0 == 0x7F }) else { return nil }
        guard let separator = url.firstRange(of: "://") else { return nil }
        let scheme = url[..<separator.lowerBound].lowercased()
        guard scheme == "http" || scheme == "https" else { return nil }
        var authority = url[separator.upperBound...].prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        if let at = authority.lastIndex(of: "@") { authority = authority[authority.index(after: at)...] }
        guard let (host, port) = HostAndPort.parse(authority) else { return nil }
        self.scheme = scheme
        self.host = host
        self.port = port ?? (scheme == "https" ? 443 : 80)
    }
}

/// The proxy that carries a request, as our own resolution decided it. curl is handed exactly this
/// (CURLOPT_PROXY, "" for none) and never looks at the environment itself.
package struct ProxyEndpoint: Sendable, Hashable, CustomStringConvertible {
    /// http, https, socks5 or socks5h.
    package let scheme: String
    package let host: String
    package let port: Int
    /// The variable it came from (`https_proxy`, `ALL_PROXY`…).
    package let variable: String
    /// What curl is given: the value rebuilt with an explicit scheme and port, credentials kept.
    let curlValue: String

    /// Without credentials: safe to log and to put in a report.
    package var description: String {
        let shownHost = host.contains(":") ? "[\(host)]" : host
        return "\(scheme)://\(shownHost):\(port)"
    }
}

package enum ProxyDecision: Sendable, Hashable {
    /// No variable applies, or NO_PROXY exempts the host.
    case direct
    case proxy(ProxyEndpoint)
    /// A variable that applies holds something that is not a proxy URL. The request is not sent
    /// directly instead: whoever set it expects the traffic to leave through the proxy.
    case unusable(variable: String)

    package var endpoint: ProxyEndpoint? {
        if case .proxy(let endpoint) = self { return endpoint }
        return nil
    }
}

/// Proxy resolution from an environment, as curl would do it, but ours, so the report can say
/// whether a proxy carried the submission.
///
/// - https: `https_proxy`, then `HTTPS_PROXY`; http: `http_proxy` only — the upper-case form is not
///   read, as curl does not, since a CGI program receives a request's `Proxy:` header as `HTTP_PROXY`;
///   then `all_proxy`, `ALL_PROXY`. An empty value counts as unset.
/// - `no_proxy`, then `NO_PROXY`: entries split at commas and blanks; `*` exempts every host; a name
///   exempts itself and its subdomains (a leading dot is optional); an IP literal (v6 with or without
///   brackets) matches the same address; `host:port` or `[v6]:port` exempts that port only.
///   CIDR ranges are not supported and match nothing.
package enum ProxyResolution {
    /// A value longer than this is not a proxy URL anyone meant.
    static let maximumProxyLength = 2048
    static let maximumNoProxyLength = 65536
    static let maximumNoProxyEntries = 1024

    package static func decide(for target: RequestTarget, environment: [String: String]) -> ProxyDecision {
        if exempts(target, environment: environment) { return .direct }
        let names = target.scheme == "https"
            ? ["https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"]
            : ["http_proxy", "all_proxy", "ALL_PROXY"]
        guard let name = names.first(where: { !(environment[$0] ?? "").isEmpty }), let value = environment[name] else {
            return .direct
        }
        guard let endpoint = parseProxy(value, variable: name) else { return .unusable(variable: name) }
        return .proxy(endpoint)
    }

    static func exempts(_ target: RequestTarget, environment: [String: String]) -> Bool {
        guard let list = ["no_proxy", "NO_PROXY"].lazy.compactMap({ environment[$0] }).first(where: { !$0.isEmpty }),
              list.utf8.count <= maximumNoProxyLength else { return false }
        let entries = list.utf8.split(whereSeparator: { $0 == UInt8(ascii: ",") || $0 == 0x20 || $0 == 0x09 })
        for entry in entries.prefix(maximumNoProxyEntries) {
            let text = String(decoding: entry, as: UTF8.self)
            if text == "*" { return true }
            if matches(text, target) { return true }
        }
        return false
    }

    private static func matches(_ entry: String, _ target: RequestTarget) -> Bool {
        var entry = Substring(entry)
        if entry.hasPrefix("."), !entry.hasPrefix("..") { entry = entry.dropFirst() }
        let host: String
        let port: Int?
        if !entry.hasPrefix("["), entry.filter({ $0 == ":" }).count > 1 {
            // A bare IPv6 literal: its colons are not a port separator.
            guard let address = IPAddress(String(entry)) else { return false }
            return IPAddress(target.host) == address
        }
        guard let (parsedHost, parsedPort) = HostAndPort.parse(entry) else { return false }
        host = parsedHost
        port = parsedPort
        if let port, port != target.port { return false }
        if let address = IPAddress(host) { return IPAddress(target.host) == address }
        var targetHost = Substring(target.host)
        if targetHost.hasSuffix("."), targetHost.count > 1 { targetHost = targetHost.dropLast() }
        var name = Substring(host)
        if name.hasSuffix("."), name.count > 1 { name = name.dropLast() }
        if name.isEmpty { return false }
        return targetHost == name || targetHost.hasSuffix("." + name)
    }

    /// `[scheme://][user[:password]@]host[:port][/]`. curl's default ports: 1080, 443 for https.
    static func parseProxy(_ value: String, variable: String) -> ProxyEndpoint? {
        guard value.utf8.count <= maximumProxyLength, !value.utf8.contains(where: { $0 <= 0x20 || $0 == 0x7F }) else { return nil }
        var rest = Substring(value)
        var scheme = "http"
        if let separator = rest.firstRange(of: "://") {
            scheme = rest[..<separator.lowerBound].lowercased()
            rest = rest[separator.upperBound...]
        }
        guard ["http", "https", "socks5", "socks5h"].contains(scheme) else { return nil }
        if rest.hasSuffix("/") { rest = rest.dropLast() }
        guard !rest.contains("/"), !rest.contains("?"), !rest.contains("#") else { return nil }
        var userinfo: Substring?
        if let at = rest.lastIndex(of: "@") {
            userinfo = rest[..<at]
            rest = rest[rest.index(after: at)...]
        }
        guard let (host, port) = HostAndPort.parse(rest) else { return nil }
        let resolvedPort = port ?? (scheme == "https" ? 443 : 1080)
        let shownHost = host.contains(":") ? "[\(host)]" : host
        let credentials = userinfo.map { "\($0)@" } ?? ""
        return ProxyEndpoint(scheme: scheme, host: host, port: resolvedPort, variable: variable,
                             curlValue: "\(scheme)://\(credentials)\(shownHost):\(resolvedPort)")
    }
}

/// `host`, `host:port`, `[v6]`, `[v6]:port`; the host lowercased, brackets removed.
enum HostAndPort {
    static func parse(_ text: Substring) -> (host: String, port: Int?)? {
        guard !text.isEmpty, text.utf8.count <= 300 else { return nil }
        var hostPart: Substring
        var portPart: Substring?
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else { return nil }
            hostPart = text[text.index(after: text.startIndex)..<close]
            let after = text[text.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { return nil }
                portPart = after.dropFirst()
            }
            guard IPAddress(String(hostPart))?.isVersion6 == true else { return nil }
        } else {
            if let colon = text.firstIndex(of: ":") {
                hostPart = text[..<colon]
                portPart = text[text.index(after: colon)...]
            } else {
                hostPart = text
            }
            guard !hostPart.isEmpty, hostPart.utf8.count <= 253,
                  hostPart.utf8.allSatisfy({ isNameByte($0) }) else { return nil }
        }
        var port: Int?
        if let portPart {
            guard (1...5).contains(portPart.utf8.count), portPart.utf8.allSatisfy({ (0x30...0x39).contains($0) }),
                  let value = Int(portPart), (1...65535).contains(value) else { return nil }
            port = value
        }
        return (hostPart.lowercased(), port)
    }

    /// RFC 3986 unreserved and sub-delims, less what would end the authority or confuse a proxy list.
    private static func isNameByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
             UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"), UInt8(ascii: "%"):
            return true
        default:
            return false
        }
    }
}

/// An IPv4 or IPv6 address in binary, so `::1` and `0:0::1` compare equal.
struct IPAddress: Hashable {
    let bytes: [UInt8]
    var isVersion6: Bool { bytes.count == 16 }

    init?(_ text: String) {
        guard !text.isEmpty, text.utf8.count <= 64 else { return nil }
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 {
            bytes = withUnsafeBytes(of: v4) { Array($0) }
            return
        }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, text, &v6) == 1 {
            bytes = withUnsafeBytes(of: v6) { Array($0) }
            return
        }
        return nil
    }
}
