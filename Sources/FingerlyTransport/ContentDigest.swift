import CCrypto

/// The `Content-Digest` field (RFC 9530) of a body: `sha-256=:<base64 of SHA-256(body)>:`. It
/// ties the signature, which covers the field, to the exact body bytes.
package enum ContentDigest {
    package static let algorithm = "sha-256"

    /// The field value for `body`.
    package static func fieldValue(for body: [UInt8]) -> String {
        "\(algorithm)=:\(StrictBase64.encode(sha256(body))):"
    }

    package static func sha256(_ bytes: [UInt8]) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        let hashed = bytes.withUnsafeBufferPointer { input in
            EVP_Digest(input.baseAddress, input.count, &digest, &length, EVP_sha256(), nil)
        }
        // SHA-256 of bytes in memory has no failure mode short of allocation failure.
        precondition(hashed == 1 && length == 32, "SHA-256 failed")
        return Array(digest.prefix(32))
    }
}
