import FingerlyHost
import FingerlyModel

/// Turns raw identifiers (machine-id, serials, MACs, UUIDs) into HMAC-SHA256 values, and
/// personal free text into fingerprints, under one key: the API key's when there is one, so
/// one organisation always sees the same value for a host and two organisations never see the
/// same one; otherwise a secret of this installation, or of this run.
package struct IdentifierHasher: Sendable {
    /// Bytes of a generated key (a run's or an installation's): as long as the HMAC's output.
    package static let keyLength = 32
    /// Keyed once: each identifier then costs its own blocks and two more.
    private let code: HMACSHA256
    package let keying: IdentifierKeying
    package var freeText: FreeTextHandling = .fingerprint

    /// Keyed by the organization alone: rotating a key, or moving between environments, keeps
    /// every identifier; two organizations never share one.
    package init(organization: String, freeText: FreeTextHandling = .fingerprint) {
        code = HMACSHA256(key: Array("fingerly-identifier-key-v1\norganization:\(organization)".utf8))
        keying = .organization
        self.freeText = freeText
    }

    package init(secret: [UInt8], keying: IdentifierKeying, freeText: FreeTextHandling = .fingerprint) {
        code = HMACSHA256(key: secret)
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
        var code = code
        code.update(message)
        return lowercaseHex(code.finalize())
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
        case .fingerprint: return "fp:" + String(hash("fingerly-free-text-v1\n" + text).prefix(16))
        }
    }
}
