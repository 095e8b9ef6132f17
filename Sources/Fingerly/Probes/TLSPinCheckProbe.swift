import CFingerlyShims

/// A TLS endpoint and the SPKI pins the caller expects of it.
public struct TLSPinCheck: Sendable, Hashable {
    public let host: String
    public let port: Int
    /// SHA-256 of the SubjectPublicKeyInfo, base64, optionally prefixed "sha256/".
    public let pins: [String]

    public init(host: String, port: Int = 443, pins: [String]) {
        self.host = host
        self.port = port
        self.pins = pins.map { $0.hasPrefix("sha256/") ? String($0.dropFirst(7)) : $0 }
    }
}

/// Opt-in: connects to the caller's endpoints through whatever proxy the environment configures
/// and compares the presented chain with the expected pins. The one check that catches a
/// transparent proxy with no environment variables at all.
struct TLSPinCheckProbe: Probe {
    let id = "tls-pin-check"

    func collect(into context: ProbeContext) throws(ProbeFailure) {
        let checks = context.pinChecks
        guard !checks.isEmpty else { throw ProbeFailure(.skipped, "no endpoint to check (--check-tls HOST:PORT)") }
        guard context.host.isLiveHost else { throw ProbeFailure(.skipped, "connects from this host; meaningless for a root tree") }
        let environment = try? ProcessEnvironment.read(from: context.host)
        let localSubjects = Set(TrustStore.read(context)?.localRoots.map(\.certificate.subject) ?? [])

        var results: [String] = []
        var mismatches: [String] = []
        for check in checks {
            let proxy = Self.proxy(for: check.host, environment: environment)
            var buffer = [CChar](repeating: 0, count: 256 * 1024)
            let status = fingerly_tls_peer_chain(check.host, String(check.port), proxy?.host, proxy.map { String($0.port) },
                                                 5000, &buffer, buffer.count)
            let endpoint = "\(check.host):\(check.port)" + (proxy.map { " via proxy \($0.host):\($0.port)" } ?? "")
            guard status == 0 else {
                results.append("\(endpoint): no TLS handshake (\(status == -2 ? "the proxy refused CONNECT" : status == -1 ? "no connection" : "handshake failed"))")
                continue
            }
            let text = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            let chain = CertificateSummary.lines(text)
            guard let leaf = chain.first else { continue }
            let matched = chain.contains { check.pins.contains($0.pin) }
            let issuer = chain.last.map { $0.issuer } ?? leaf.issuer
            if matched {
                results.append("\(endpoint): pin matches")
            } else {
                let local = localSubjects.contains(issuer) || chain.contains { localSubjects.contains($0.subject) }
                let line = "\(endpoint) presented '\(leaf.subject)' issued by '\(issuer)'\(local ? ", a locally added root" : ""), matching none of the expected pins"
                results.append(line)
                mismatches.append(line)
            }
        }
        context.emit("tls.pin_checks", results)
        context.emit("tls.pin_mismatches", mismatches)
    }

    /// The environment's HTTPS proxy for a host, honouring NO_PROXY.
    static func proxy(for host: String, environment: ProcessEnvironment?) -> (host: String, port: Int)? {
        guard let environment else { return nil }
        let noProxy = (environment["NO_PROXY"] ?? environment["no_proxy"] ?? "").split(separator: ",").map { $0.trimmingWhitespace() }
        if noProxy.contains(where: { $0 == "*" || host == $0 || ($0.hasPrefix(".") && host.hasSuffix($0)) || host.hasSuffix("." + $0) }) { return nil }
        guard let value = environment["HTTPS_PROXY"] ?? environment["https_proxy"] ?? environment["ALL_PROXY"] ?? environment["all_proxy"],
              !value.isEmpty else { return nil }
        var address = Substring(ProxyEnvironmentProbe.withoutCredentials(value))
        if let scheme = address.firstRange(of: "://") { address = address[scheme.upperBound...] }
        address = address.prefix { $0 != "/" }
        guard let colon = address.lastIndex(of: ":"), let port = Int(address[address.index(after: colon)...]) else {
            return address.isEmpty ? nil : (String(address), 8080)
        }
        return (String(address[..<colon]), port)
    }
}
