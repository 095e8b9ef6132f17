import CCrypto
import FingerlyHost
import FingerlyModel

/// Turns raw identifiers (machine-id, serials, MACs, UUIDs) into HMAC-SHA256 values, and
/// personal free text into fingerprints, under one key: the API key's when there is one, so
/// one organisation always sees the same value for a host and two organisations never see the
/// same one; otherwise a secret of this installation, or of this run.
package struct IdentifierHasher: Sendable {
    /// Bytes of a generated key (a run's or an installation's): as long as the HMAC's output.
    package static let keyLength = 32
    private let key: [UInt8]
    package let keying: IdentifierKeying
    package var freeText: FreeTextHandling = .fingerprint
    /// Fetched once: OpenSSL 3 otherwise looks the digest up in its provider tables on every call.
    /// Immutable after the fetch and thread-safe to use.
    nonisolated(unsafe) private static let sha256: OpaquePointer? = {
        // HMAC-SHA256 needs nothing from the system's openssl.cnf; parsing it was most of the
        // cost of starting libcrypto. No atexit cleanup: a process that exits while the warm-up
        // thread is still inside libcrypto would otherwise free the tables under it (SIGSEGV at
        // exit, seen with a CLI that fails fast on a bad policy).
        OPENSSL_init_crypto(UInt64(OPENSSL_INIT_NO_LOAD_CONFIG) | UInt64(OPENSSL_INIT_NO_ATEXIT), nil)
        return EVP_MD_fetch(nil, "SHA256", nil)
    }()

    /// Starts libcrypto (a few hundred microseconds of table setup) on a thread of its own, so
    /// the first probe that hashes does not wait for it.
    package static func warmUp() {
        _ = startDetachedThread { _ = sha256 }
    }

    /// Keyed by the organization alone: rotating a key, or moving between environments, keeps
    /// every identifier; two organizations never share one.
    package init(organization: String, freeText: FreeTextHandling = .fingerprint) {
        key = Array("fingerly-identifier-key-v1\norganization:\(organization)".utf8)
        keying = .organization
        self.freeText = freeText
    }

    package init(secret: [UInt8], keying: IdentifierKeying, freeText: FreeTextHandling = .fingerprint) {
        key = secret
        self.keying = keying
        self.freeText = freeText
    }

    /// A hasher whose key nobody keeps: identifiers of two such runs cannot be linked.
    package static func perRun(freeText: FreeTextHandling = .fingerprint) -> IdentifierHasher {
        IdentifierHasher(secret: randomBytes(Self.keyLength), keying: .perRun, freeText: freeText)
    }

    /// Identifiers are normalised first (white space trimmed, ASCII lower-cased) so that a
    /// trailing newline or upper-case hex in one source does not split a host in two.
    package func hash(_ raw: String) -> String {
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

    /// Personal free text as the policy wants it in the report. The fingerprint is keyed like
    /// the identifiers and domain-separated from them, so it never equals an identifier hash;
    /// 64 bits are plenty to tell texts apart and say nothing more about them.
    /// Where a user's own name is the next path component: home directories (/home, /var/home),
    /// udisks2 mounts (/media/<user>, /run/media/<user>) and WSL's Windows profiles (/mnt/c/Users).
    static let perUserDirectories = ["/home/", "/media/", "/Users/"]

    /// A text with the user's name in every per-user directory in it fingerprinted, the rest as
    /// it is: the path still says what was loaded or preloaded, not whose account it is. Empty
    /// and "." components after the directory are skipped, so `/home//alice` and `/home/./alice`
    /// are reduced too.
    package func personalPaths(_ text: String) -> String {
        guard freeText == .fingerprint, Self.perUserDirectories.contains(where: { text.containsUTF8($0) }) else { return text }
        var result = ""
        var rest = Substring(text)
        // One forward scan over the slashes: searching the whole rest for every marker on every
        // pass would make a long LD_LIBRARY_PATH of /home entries quadratic.
        func nextMarker(in text: Substring) -> Range<Substring.Index>? {
            var from = text.startIndex
            while let slash = text[from...].firstIndex(of: "/") {
                let tail = text[slash...]
                if let marker = Self.perUserDirectories.first(where: { tail.hasPrefix($0) }) {
                    return slash..<text.index(slash, offsetBy: marker.count)
                }
                from = text.index(after: slash)
            }
            return nil
        }
        let ends: Set<Character> = ["/", ":", " ", "\t", ",", ")", ";", "'", "\""]
        while let marker = nextMarker(in: rest) {
            result += rest[..<marker.upperBound]
            rest = rest[marker.upperBound...]
            // "//" and "/./" name the same directory: the name is the first real component.
            while true {
                if rest.hasPrefix("/") { result += "/"; rest = rest.dropFirst() }
                else if rest.hasPrefix("./") { result += "./"; rest = rest.dropFirst(2) }
                else { break }
            }
            let nameEnd = rest.firstIndex { ends.contains($0) } ?? rest.endIndex
            let name = rest[..<nameEnd]
            if !name.isEmpty && name != "." && name != ".." { result += personal(String(name)) } else { result += name }
            rest = rest[nameEnd...]
        }
        return result + rest
    }

    package func personal(_ text: String) -> String {
        switch freeText {
        case .keep: return text
        case .fingerprint: return "fp:" + hash("fingerly-free-text-v1\n" + text).prefix(16)
        }
    }
}
