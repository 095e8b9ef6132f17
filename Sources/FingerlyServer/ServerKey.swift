import FingerlyHost
import FingerlyTransport

/// A key as presented in `Authorization: Bearer …`: `fly_<pk|sk>_<region>_<env>_<org>_<random>`
/// (docs/api.md, the same grammar as the client's APIKey). Only the form is checked here; the
/// store says whether it exists.
package struct ServerKey: Sendable, Hashable {
    package enum Kind: String, Sendable { case publicKey = "pk", secretKey = "sk" }
    package static let regions = ["us", "eu", "ap"]

    package let kind: Kind
    package let region: String
    package let environment: String
    package let organization: String
    package let text: String

    package init?(_ text: String) {
        guard text.utf8.count <= 330 else { return nil }
        let parts = text.split(separator: "_", omittingEmptySubsequences: false)
        guard parts.count == 6, parts[0] == "fly", let kind = Kind(rawValue: String(parts[1])),
              Self.regions.contains(String(parts[2])), Self.isName(parts[3]), Self.isName(parts[4]),
              (16...128).contains(parts[5].utf8.count), parts[5].utf8.allSatisfy(Self.isAlphanumeric) else { return nil }
        self.kind = kind
        region = String(parts[2])
        environment = String(parts[3])
        organization = String(parts[4])
        self.text = text
    }

    /// An organization or environment name: 1–64 of a-z, 0-9 and -.
    package static func isName<Text: StringProtocol>(_ part: Text) -> Bool {
        (1...64).contains(part.utf8.count) && part.utf8.allSatisfy { (97...122).contains($0) || (48...57).contains($0) || $0 == 45 }
    }

    private static func isAlphanumeric(_ byte: UInt8) -> Bool {
        (65...90).contains(byte) || (97...122).contains(byte) || (48...57).contains(byte)
    }

    /// A new pair for an organization: 32 random letters and digits each (about 190 bits), drawn
    /// without modulo bias.
    package static func generatePair(region: String, environment: String, organization: String) -> (publicKey: String, secretKey: String) {
        ("fly_pk_\(region)_\(environment)_\(organization)_\(randomPart())", "fly_sk_\(region)_\(environment)_\(organization)_\(randomPart())")
    }

    private static func randomPart() -> String {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789".utf8)
        var characters: [UInt8] = []
        while characters.count < 32 {
            for byte in randomBytes(64) where byte < 248 && characters.count < 32 {
                characters.append(alphabet[Int(byte) % 62])
            }
        }
        return String(decoding: characters, as: UTF8.self)
    }

    /// What the store keeps of a secret key.
    package static func secretHash(_ secretKey: String) -> [UInt8] {
        ContentDigest.sha256(Array(secretKey.utf8))
    }

    /// Equal bytes, in a time that depends only on the length.
    package static func constantTimeEqual(_ left: [UInt8], _ right: [UInt8]) -> Bool {
        guard left.count == right.count else { return false }
        var difference: UInt8 = 0
        for index in left.indices { difference |= left[index] ^ right[index] }
        return difference == 0
    }
}
