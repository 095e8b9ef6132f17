import FingerlyHost

/// A device-key rotation: the old key's signature over the new key's id, sent as the
/// `Fingerly-Key-Rotation` field of a request signed by the new key (docs/api.md). It is how a
/// new key joins a visitor bound to the old one; a new key that merely shows up never does.
///
/// The field is an RFC 8941 byte sequence with one parameter: the old raw public key, then
/// `sig`, the old key's Ed25519 signature of `fingerly-key-rotation-v1` LF new-keyid:
/// `:<base64 old public key>:;sig=:<base64 signature>:`. The statement names the new key, and
/// the request carrying it must verify under that key, so a captured field serves no other key.
package enum KeyRotation {
    package static let fieldName = "Fingerly-Key-Rotation"

    /// What the old key signs: domain-separated from a request's signature base, which starts
    /// with `"@method"`.
    static func statement(newKeyID: String) -> [UInt8] { Array("fingerly-key-rotation-v1\n\(newKeyID)".utf8) }

    /// The field an old key gives a new one.
    package static func field(rotatingTo newKey: DeviceKey, from oldKey: DeviceKey) throws(DeviceKeyError) -> String {
        let signature = try oldKey.sign(statement(newKeyID: newKey.keyID))
        return ":\(StrictBase64.encode(oldKey.publicKey)):;sig=:\(StrictBase64.encode(signature)):"
    }

    /// The old key's id when `field` is its valid statement for `newKeyID`; nil otherwise.
    package static func verify(_ field: String, newKeyID: String) -> String? {
        var bytes = Array(field.utf8)
        guard bytes.count <= MessageSignature.maximumFieldLength else { return nil }
        while let first = bytes.first, first == 0x20 || first == 0x09 { bytes.removeFirst() }
        while let last = bytes.last, last == 0x20 || last == 0x09 { bytes.removeLast() }
        let separator = Array(":;sig=:".utf8)
        guard bytes.first == UInt8(ascii: ":"), bytes.last == UInt8(ascii: ":"), bytes.count > separator.count + 2,
              let split = (1..<(bytes.count - separator.count)).first(where: { bytes[$0..<($0 + separator.count)].elementsEqual(separator) }),
              let publicKey = StrictBase64.decode(bytes[1..<split]), publicKey.count == DeviceKey.publicKeyLength,
              let signature = StrictBase64.decode(bytes[(split + separator.count)..<(bytes.count - 1)]),
              signature.count == DeviceKey.signatureLength
        else { return nil }
        let oldKeyID = DeviceKey.keyID(of: publicKey)
        guard oldKeyID != newKeyID,
              DeviceKey.isValidSignature(signature, of: statement(newKeyID: newKeyID), publicKey: publicKey) else { return nil }
        return oldKeyID
    }
}
