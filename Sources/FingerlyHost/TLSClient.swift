import CFingerlyTLS

/// How a pin check ended.
package enum PinCheckStatus: Sendable, Hashable {
    /// A chain of verified signatures runs from the leaf, valid for the host, up to a pinned key.
    case confirmed
    /// The handshake completed but no verified path leads from the leaf to a pinned key.
    case mismatch
    /// The path to a pinned key holds, but the leaf is not for this host or a certificate is out of date.
    case notValid
    case noConnection
    case noAddress
    case proxyRefused
    case handshakeFailed
    case noCertificate
    case timedOut
    /// Nothing was sent: the host or port is not valid, or the CONNECT request does not fit.
    case invalidRequest
    /// The verification itself could not run.
    case verificationFailed
}

/// What a pin check found.
package struct PinCheckResult: Sendable, Hashable {
    package let status: PinCheckStatus
    /// The presented chain, leaf first, as far as it was described; empty without a handshake.
    package let chain: [CertificateDescription]
    /// Certificates the peer presented, described or not.
    package let chainPresented: Int
    /// Why, in words, when there is more to say than the status.
    package let detail: String
    package let detailTruncated: Bool

    package var chainCut: Bool { chain.count < chainPresented }
}

package enum TLSClient {
    /// The most certificates of a presented chain that are described; real chains hold two to four.
    package static let chainLimit = 64

    /// Connects to host:port (through an HTTP CONNECT proxy when given) and checks the presented
    /// chain against `pins` (SPKI SHA-256, base64). Every wait ends within `timeoutMs`.
    package static func checkPin(host: String, port: Int, proxy: (host: String, port: Int)?, pins: [String],
                                 timeoutMs: Int32, chainLimit: Int = chainLimit) -> PinCheckResult {
        let capacity = max(chainLimit, 0)
        var report = fingerly_pin_check_report()
        var status: Int32 = 0
        let chain = [fingerly_certificate](unsafeUninitializedCapacity: capacity) { buffer, initialized in
            status = fingerly_tls_pin_check(host, String(port), proxy?.host, proxy.map { String($0.port) },
                                            pins.joined(separator: "\n"), timeoutMs, buffer.baseAddress, capacity, &report)
            initialized = report.chain.count
        }
        return PinCheckResult(status: Self.status(status), chain: chain.map(CertificateDescription.init),
                              chainPresented: report.chain.found, detail: text { fingerly_pin_check_detail(&report, $0) },
                              detailTruncated: report.detail_truncated)
    }

    static func status(_ code: Int32) -> PinCheckStatus {
        switch code {
        case FINGERLY_PIN_CONFIRMED.rawValue: return .confirmed
        case FINGERLY_PIN_MISMATCH.rawValue: return .mismatch
        case FINGERLY_PIN_NOT_VALID.rawValue: return .notValid
        case FINGERLY_PIN_NO_CONNECTION.rawValue: return .noConnection
        case FINGERLY_PIN_NO_ADDRESS.rawValue: return .noAddress
        case FINGERLY_PIN_PROXY_REFUSED.rawValue: return .proxyRefused
        case FINGERLY_PIN_HANDSHAKE_FAILED.rawValue: return .handshakeFailed
        case FINGERLY_PIN_NO_CERTIFICATE.rawValue: return .noCertificate
        case FINGERLY_PIN_TIMED_OUT.rawValue: return .timedOut
        case FINGERLY_PIN_INVALID_REQUEST.rawValue: return .invalidRequest
        default: return .verificationFailed
        }
    }
}
