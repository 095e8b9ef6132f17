import FingerlyHost
import FingerlyModel

/// Proxy and TLS trust settings in the process environment.
package struct ProxyEnvironmentProbe: Probe {
    package let id = "proxy-environment"

    /// Both spellings are honoured by different clients (curl reads only lower-case http_proxy).
    static let proxyVariables = ["HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy",
                                 "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy"]
    static let trustVariables = ["SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE",
                                 "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS"]

    package func collect(into context: ProbeContext) throws(ProbeFailure) {
        let environment: ProcessEnvironment
        do { environment = try ProcessEnvironment.read(from: context.host) } catch { throw ProbeFailure(error) }

        var proxyNames: [String] = []
        for name in Self.proxyVariables {
            guard let value = environment[name], !value.isEmpty else { continue }
            proxyNames.append(name)
            let signal = "proxy.env." + name.lowercased()
            // The upper-case spelling is listed first and wins when both are set.
            if context.signals[signal] == nil {
                context.emit(signal, name.lowercased() == "no_proxy" ? value : Self.withoutCredentials(value))
            }
        }
        context.emit("proxy.env_variables", proxyNames)

        var overrides: [String] = []
        for name in Self.trustVariables {
            guard let value = environment[name], !value.isEmpty else { continue }
            context.emit("tls.env." + name.lowercased(), value)
            if !context.tables.strings("systemTrustPaths").contains(Self.normalised(value)) { overrides.append(name) }
        }
        context.emit("tls.env_trust_overrides", overrides)
        if let keylog = environment["SSLKEYLOGFILE"], !keylog.isEmpty { context.emit("tls.env.sslkeylogfile", keylog) }
        if let reject = environment["NODE_TLS_REJECT_UNAUTHORIZED"] {
            context.emit("tls.env.node_tls_reject_unauthorized", reject)
            context.emit("tls.env_verification_disabled", reject == "0")
        } else {
            context.emit("tls.env_verification_disabled", false)
        }
    }

    /// Drops `user:password@` from a proxy URL: the address is evidence, the credentials are not ours.
    static func withoutCredentials(_ value: String) -> String {
        let schemeEnd = value.firstRange(of: "://")?.upperBound ?? value.startIndex
        // A password may hold a raw "/" (invalid, yet clients take it), which would end the
        // authority early and hide its "@": the last "@" anywhere ends the credentials. Losing a
        // path that holds an "@" is the cheaper mistake.
        guard let at = value[schemeEnd...].lastIndex(of: "@") else { return value }
        return String(value[..<schemeEnd]) + String(value[value.index(after: at)...])
    }

    static func normalised(_ path: String) -> String {
        var path = path
        while path.count > 1 && path.hasSuffix("/") { path.removeLast() }
        return path
    }
}
