import CCrypto
import FingerlyHost

/// The `Content-Digest` field (RFC 9530) of a body: `sha-256=:<base64 of SHA-256(body)>:`. It
/// ties the signature, which covers the field, to the exact body bytes.
package enum ContentDigest {
    package static let algorithm = "sha-256"

    /// What a received field says of a body.
    package enum Check: Sendable, Hashable {
        /// Every digest of an algorithm this side knows matches the body.
        case matches
        /// One of them does not.
        case mismatch
        /// The field is not a dictionary of digests, or holds none of a known algorithm: the reason, for people.
        case refused(String)
    }

    /// The algorithms read, with their digest lengths. RFC 9530's others (md5, sha, crc32c…) are
    /// deprecated or insecure: ignored like any name this side does not know.
    static let known: [(name: String, length: Int)] = [("sha-256", 32), ("sha-512", 64)]

    /// The field value for `body`.
    package static func fieldValue(for body: [UInt8]) -> String {
        "\(algorithm)=:\(StrictBase64.encode(sha256(body))):"
    }

    /// Judges a received field value (an RFC 8941 dictionary: `sha-512=:…:, sha-256=:…:`) against
    /// `body`: each known algorithm's digest must be a byte sequence of its length and match.
    package static func check<Field: Collection<UInt8>>(_ field: Field, body: [UInt8]) -> Check {
        guard let members = StructuredField.dictionary(field) else {
            return .refused("Content-Digest is not a Structured Fields dictionary of digests")
        }
        var checked = 0
        for (name, length) in known {
            guard let member = members.first(where: { $0.key == name }) else { continue }
            guard case .item(let item) = member.value, case .byteSequence(let claimed) = item.value,
                  claimed.count == length else {
                return .refused("Content-Digest's \(name) is not a byte sequence of \(length) bytes")
            }
            guard let computed = digest(body, algorithm: name) else {
                return .refused("Content-Digest's \(name) cannot be checked: \(libcryptoProblem() ?? "libcrypto failed")")
            }
            guard claimed == computed else { return .mismatch }
            checked += 1
        }
        return checked > 0 ? .matches : .refused("Content-Digest holds no sha-256 or sha-512 digest")
    }

    package static func sha256(_ bytes: [UInt8]) -> [UInt8] { SHA256.hash(bytes) }

    /// nil when libcrypto, which sha-512 alone needs and which is opened on first use, cannot be.
    private static func digest(_ bytes: [UInt8], algorithm: String) -> [UInt8]? {
        guard algorithm == "sha-512" else { return sha256(bytes) }
        guard let method = EVP_sha512() else { return nil }
        var digest = [UInt8](repeating: 0, count: 64)
        var length: UInt32 = 0
        let hashed = bytes.withUnsafeBufferPointer { input in
            EVP_Digest(input.baseAddress, input.count, &digest, &length, method, nil)
        }
        // A digest of bytes in memory has no failure mode short of allocation failure.
        precondition(hashed == 1 && length == 64, "sha-512 failed")
        return digest
    }
}
