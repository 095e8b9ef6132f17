#if canImport(Glibc)
import Glibc
#endif
import FingerlyHost
import FingerlyModel

/// A TLS endpoint and the SPKI pins the caller expects of it.
package struct TLSPinCheck: Sendable, Hashable {
    package let host: String
    package let port: Int
    /// SHA-256 of the SubjectPublicKeyInfo, base64, optionally prefixed "sha256/".
    package let pins: [String]

    package init(host: String, port: Int = 443, pins: [String]) {
        self.host = host
        self.port = port
        self.pins = Self.bare(pins)
    }

    /// The pins without their optional "sha256/" prefix.
    package static func bare(_ pins: [String]) -> [String] {
        pins.map { $0.hasPrefix("sha256/") ? String($0.dropFirst(7)) : $0 }
    }

    /// Why this check cannot be run as given, or nil. A check with a problem is reported and
    /// never sent: its host would otherwise go into a CONNECT request, SNI and the resolver.
    package var problem: String? {
        if let problem = Self.hostProblem(host) { return problem }
        if !(1...65535).contains(port) { return "port \(port) is not 1-65535" }
        return Self.pinsProblem(pins)
    }

    /// The longest host name DNS can carry (RFC 1035: 255 octets on the wire, 253 written out).
    static let longestHostName = 253

    /// Why `host` is not an RFC 3986 host (reg-name, IPv4 literal or bracketed IPv6 literal), or nil.
    package static func hostProblem(_ host: String) -> String? {
        let bytes = Array(host.utf8)
        let shown = displayed(host)
        guard !bytes.isEmpty else { return "the host is empty" }
        guard bytes.count <= longestHostName else { return "host '\(shown)' is longer than \(longestHostName) characters" }
        if bytes.first == UInt8(ascii: "[") {
            var address = in6_addr()
            guard bytes.count > 2, bytes.last == UInt8(ascii: "]"),
                  inet_pton(AF_INET6, String(decoding: bytes.dropFirst().dropLast(), as: UTF8.self), &address) == 1 else {
                return "host '\(shown)' is not an IPv6 address in brackets"
            }
            return nil
        }
        var index = 0
        var onlyDigitsAndDots = true
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "%") {
                guard index + 2 < bytes.count, isHexDigit(bytes[index + 1]), isHexDigit(bytes[index + 2]) else {
                    return "host '\(shown)' has a '%' that is not followed by two hex digits"
                }
                onlyDigitsAndDots = false
                index += 3
                continue
            }
            guard isRegNameByte(byte) else {
                return "host '\(shown)' holds a character an RFC 3986 host cannot (an IPv6 address goes in brackets)"
            }
            if !(byte == UInt8(ascii: ".") || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)) { onlyDigitsAndDots = false }
            index += 1
        }
        if onlyDigitsAndDots {
            // A dotted run of digits is an IPv4 address or nothing: the resolver would read "127.1" as 127.0.0.1.
            var address = in_addr()
            guard inet_pton(AF_INET, host, &address) == 1 else { return "host '\(shown)' is not an IPv4 address" }
        }
        return nil
    }

    /// Why `pins` are not SPKI SHA-256 hashes in base64 (44 characters, canonical padding), or nil.
    package static func pinsProblem(_ pins: [String]) -> String? {
        guard !pins.isEmpty else { return "no pin given" }
        for pin in pins {
            let bytes = Array(pin.utf8)
            let alphabet = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
            // 32 bytes are 43 base64 digits and one '='; the last digit carries 4 bits, its low 2 zero.
            guard bytes.count == 44, bytes[43] == UInt8(ascii: "="), bytes[..<43].allSatisfy(alphabet.contains),
                  Set("AEIMQUYcgkosw048".utf8).contains(bytes[42]) else {
                return "pin '\(displayed(pin))' is not a SHA-256 in base64 (44 characters, sha256/ prefix optional)"
            }
        }
        return nil
    }

    /// Text from the caller as it may appear in a message: printable ASCII, the rest escaped, cut short.
    static func displayed(_ text: String) -> String {
        var shown = ""
        for scalar in text.unicodeScalars.prefix(80) {
            shown += (0x20..<0x7f).contains(scalar.value) && scalar != "\\" ? String(scalar) : scalar.escaped(asASCII: true)
        }
        return text.unicodeScalars.count > 80 ? shown + "…" : shown
    }

    private static func isHexDigit(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(byte)
            || (UInt8(ascii: "A")...UInt8(ascii: "F")).contains(byte)
    }

    /// RFC 3986 unreserved and sub-delims: what a reg-name holds besides percent escapes.
    private static func isRegNameByte(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
            || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || "-._~!$&'()*+,;=".utf8.contains(byte)
    }
}

/// Opt-in: connects to the caller's endpoints through whatever proxy the environment configures
/// and checks that the presented chain verifies, signature by signature, from a leaf valid for
/// the host up to a pinned key. The one check that catches a transparent proxy with no
/// environment variables at all.
package struct TLSPinCheckProbe: Probe {
    package let id = "tls-pin-check"

    /// What one check found.
    struct Outcome: Sendable, CustomStringConvertible {
        enum Kind: Sendable { case confirmed, mismatch, unconfirmed }
        let kind: Kind
        /// The endpoint, and the proxy it went through.
        let endpoint: String
        /// For a mismatch, what the verification met; for an unconfirmed check, why.
        let reason: String
        /// What was presented, leaf first; empty without a handshake.
        let chain: [CertificateSummary]
        /// What of the chain or the reason is missing or cut, for the probe's issues.
        var cutDetail: String? = nil

        /// The line for tls.pin_checks (and tls.pin_unconfirmed); a mismatch's is written by the probe.
        var line: String {
            switch kind {
            case .confirmed: return "\(endpoint): pin matches"
            case .mismatch: return "\(endpoint): no verified chain to an expected pin (\(reason))"
            case .unconfirmed: return "\(endpoint): could not confirm the pin: \(reason)"
            }
        }

        var description: String { line }
    }

    package func collect(into context: ProbeContext) throws(ProbeFailure) {
        let checks = context.pinChecks
        guard !checks.isEmpty else { throw ProbeFailure(.skipped, "no endpoint to check (--check-tls HOST:PORT)") }
        guard context.host.isLiveHost else { throw ProbeFailure(.skipped, "connects from this host; meaningless for a root tree") }
        // The checks stop short of the probe's deadline so their findings are still reported: an
        // abandoned probe's are lost, and a check that could not confirm its pin is evidence too.
        let now = monotonicMilliseconds()
        let deadline = context.deadline.isFinite ? context.deadline : now + Self.timeoutWithoutDeadlineMs
        let checkDeadline = deadline - min(Self.reportingReserveMs, max(0, deadline - now) / 10)
        let environment = context.attemptIfPresent { () throws(HostReadError) in try ProcessEnvironment.read(from: context.host) }

        var results: [String] = []
        var mismatches: [String] = []
        var unconfirmed: [String] = []
        var localSubjects: Set<String>?
        for check in checks {
            if let problem = check.problem {
                let line = "\(TLSPinCheck.displayed(check.host)):\(check.port): could not confirm the pin: invalid check, not sent: \(problem)"
                results.append(line)
                unconfirmed.append(line)
                continue
            }
            let outcome = Self.run(check, proxy: Self.proxy(for: check.host, environment: environment), deadline: checkDeadline)
            if let detail = outcome.cutDetail { context.recordMalformed(outcome.endpoint, detail) }
            switch outcome.kind {
            case .confirmed:
                results.append(outcome.line)
            case .unconfirmed:
                results.append(outcome.line)
                unconfirmed.append(outcome.line)
            case .mismatch:
                // Read only now, and once: the trust store says whether the issuer seen was added locally.
                // try? justified: it fails only without libcrypto, which the check itself has just used.
                if localSubjects == nil {
                    localSubjects = Set((try? TrustStore.read(context))?.localRoots.map(\.certificate.subject) ?? [])
                }
                let line = Self.mismatchLine(outcome, localSubjects: localSubjects ?? [])
                results.append(line)
                mismatches.append(line)
            }
        }
        context.emit("tls.pin_checks", results)
        context.emit("tls.pin_mismatches", mismatches)
        context.emit("tls.pin_unconfirmed", unconfirmed)
    }

    /// Without a scheduler's deadline (a context made by hand), a check still ends.
    static let timeoutWithoutDeadlineMs = 5000.0
    /// At most this much of the probe's time is kept back for reporting.
    static let reportingReserveMs = 200.0

    static func mismatchLine(_ outcome: Outcome, localSubjects: Set<String>) -> String {
        guard let leaf = outcome.chain.first else { return outcome.line }
        let issuer = outcome.chain.last?.issuer ?? leaf.issuer
        let local = localSubjects.contains(issuer) || outcome.chain.contains { localSubjects.contains($0.subject) }
        return "\(outcome.endpoint) presented '\(leaf.subject)' issued by '\(issuer)'\(local ? ", a locally added root" : ""), "
            + "with no verified chain to any of the expected pins (\(outcome.reason))"
    }

    /// Runs one check, which the caller has validated, until `deadline` (monotonic ms).
    static func run(_ check: TLSPinCheck, proxy: (host: String, port: Int)?, deadline: Double) -> Outcome {
        let endpoint = "\(TLSPinCheck.displayed(check.host)):\(check.port)"
            + (proxy.map { " via proxy \(TLSPinCheck.displayed($0.host)):\($0.port)" } ?? "")
        let remaining = deadline - monotonicMilliseconds()
        guard remaining >= 1 else {
            return Outcome(kind: .unconfirmed, endpoint: endpoint, reason: "timed out before it could start", chain: [])
        }
        let result = TLSClient.checkPin(host: check.host, port: check.port, proxy: proxy, pins: check.pins,
                                        timeoutMs: Int32(min(remaining, 600_000)))
        let detail = result.detail
        let withDetail = { (reason: String) in detail.isEmpty ? reason : "\(reason): \(detail)" }
        var cut: [String] = []
        if result.chainCut { cut.append("the first \(result.chain.count) of \(result.chainPresented) presented certificates described") }
        if result.chain.contains(where: \.hasTruncatedName) { cut.append("a subject or issuer longer than \(Certificates.nameLimit) bytes shown cut") }
        if result.detailTruncated { cut.append("the reason shown cut") }
        func outcome(_ kind: Outcome.Kind, _ reason: String) -> Outcome {
            Outcome(kind: kind, endpoint: endpoint, reason: reason, chain: result.chain,
                    cutDetail: cut.isEmpty ? nil : cut.joined(separator: "; "))
        }
        switch result.status {
        case .confirmed: return outcome(.confirmed, "")
        case .mismatch: return outcome(.mismatch, detail.isEmpty ? "no pinned key on a verified path" : detail)
        case .notValid: return outcome(.unconfirmed, withDetail("the chain reaches a pinned key but is not valid"))
        case .noConnection: return outcome(.unconfirmed, "no connection")
        case .noAddress: return outcome(.unconfirmed, "the host name did not resolve")
        case .proxyRefused: return outcome(.unconfirmed, "the proxy refused CONNECT")
        case .handshakeFailed: return outcome(.unconfirmed, withDetail("the TLS handshake failed"))
        case .noCertificate: return outcome(.unconfirmed, "no certificate was presented")
        case .timedOut: return outcome(.unconfirmed, "timed out at the probe's deadline")
        case .invalidRequest: return outcome(.unconfirmed, withDetail("not sent"))
        case .verificationFailed: return outcome(.unconfirmed, withDetail("the verification could not run"))
        }
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
