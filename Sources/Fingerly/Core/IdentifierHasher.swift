import CCrypto

/// Turns raw identifiers (machine-id, serials, MACs, UUIDs) into HMAC-SHA256 values keyed per
/// API key: one organisation always sees the same value for a host, two organisations never
/// see the same one, and nobody can recover the raw identifier.
struct IdentifierHasher: Sendable {
    private let key: [UInt8]
    /// Fetched once: OpenSSL 3 otherwise looks the digest up in its provider tables on every call.
    /// Immutable after the fetch and thread-safe to use.
    nonisolated(unsafe) private static let sha256: OpaquePointer? = {
        // HMAC-SHA256 needs nothing from the system's openssl.cnf; parsing it was most of the
        // cost of starting libcrypto.
        OPENSSL_init_crypto(UInt64(OPENSSL_INIT_NO_LOAD_CONFIG), nil)
        return EVP_MD_fetch(nil, "SHA256", nil)
    }()

    /// The key used when no API key was given (a `--no-submit` run): stable on this host,
    /// but never equal to what any organisation receives.
    static let localKey = "fingerly-local-no-submit"

    /// Starts libcrypto (a few hundred microseconds of table setup) on a thread of its own, so
    /// the first probe that hashes does not wait for it.
    static func warmUp() {
        _ = startDetachedThread { _ = sha256 }
    }

    init(apiKey: String?) {
        key = Array((apiKey ?? Self.localKey).utf8)
    }

    /// Identifiers are normalised first (white space trimmed, ASCII lower-cased) so that a
    /// trailing newline or upper-case hex in one source does not split a host in two.
    func hash(_ raw: String) -> String {
        let message = raw.trimmingWhitespace().utf8.map { (65...90).contains($0) ? $0 + 32 : $0 }
        var digest = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        let ok = key.withUnsafeBufferPointer { keyBytes in
            message.withUnsafeBufferPointer { messageBytes in
                digest.withUnsafeMutableBufferPointer { out in
                    HMAC(Self.sha256 ?? EVP_sha256(), keyBytes.baseAddress, Int32(keyBytes.count),
                         messageBytes.baseAddress, messageBytes.count, out.baseAddress, &length)
                }
            }
        }
        precondition(ok != nil && length == 32, "HMAC-SHA256 failed in libcrypto")
        let hex = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        text.reserveCapacity(Int(length) * 2)
        for byte in digest.prefix(Int(length)) {
            text.append(hex[Int(byte >> 4)])
            text.append(hex[Int(byte & 0xf)])
        }
        return String(decoding: text, as: UTF8.self)
    }
}
