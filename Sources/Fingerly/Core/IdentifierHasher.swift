import CCrypto

/// Turns raw identifiers (machine-id, serials, MACs, UUIDs) into HMAC-SHA256 values keyed per
/// API key: one organisation always sees the same value for a host, two organisations never
/// see the same one, and nobody can recover the raw identifier.
struct IdentifierHasher: Sendable {
    private let key: [UInt8]

    /// The key used when no API key was given (a `--no-submit` run): stable on this host,
    /// but never equal to what any organisation receives.
    static let localKey = "fingerly-local-no-submit"

    init(apiKey: String?) {
        key = Array((apiKey ?? Self.localKey).utf8)
    }

    /// Identifiers are normalised first so that a trailing newline or upper-case hex in one
    /// source does not split a host in two.
    func hash(_ raw: String) -> String {
        let message = Array(raw.trimmingWhitespace().lowercased().utf8)
        var digest = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        let ok = key.withUnsafeBufferPointer { keyBytes in
            message.withUnsafeBufferPointer { messageBytes in
                digest.withUnsafeMutableBufferPointer { out in
                    HMAC(EVP_sha256(), keyBytes.baseAddress, Int32(keyBytes.count),
                         messageBytes.baseAddress, messageBytes.count, out.baseAddress, &length)
                }
            }
        }
        precondition(ok != nil && length == 32, "HMAC-SHA256 failed in libcrypto")
        return digest.prefix(Int(length)).map { byte in
            let hex = Array("0123456789abcdef".utf8)
            return String(decoding: [hex[Int(byte >> 4)], hex[Int(byte & 0xf)]], as: UTF8.self)
        }.joined()
    }
}
