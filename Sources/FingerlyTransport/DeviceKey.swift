#if canImport(Glibc)
import Glibc
#endif
import CCrypto
import FingerlyHost

package enum DeviceKeyError: Error, Sendable, Hashable, CustomStringConvertible {
    case file(SecretFileError)
    /// libcrypto refused an operation it should not have; `operation` names it.
    case crypto(operation: String)
    /// libcrypto, opened on the first use of a key, could not be: why.
    case libraryUnavailable(String)

    package var description: String {
        switch self {
        case .file(let error): "device key: \(error)"
        case .crypto(let operation): "device key: libcrypto failed to \(operation)"
        case .libraryUnavailable(let problem): "device key: \(problem)"
        }
    }
}

/// This installation's Ed25519 signing key: made at the first submission, kept as its raw 32-byte
/// seed in `<state directory>/device-key` (0600), so a server can tell this installation's
/// requests from forged or replayed ones. The seed only ever lives in buffers this type
/// allocates and wipes, and inside libcrypto's key object; it is never printed.
package final class DeviceKey: @unchecked Sendable, CustomStringConvertible {
    // @unchecked: the EVP_PKEY is never changed after init, and libcrypto allows one key to sign
    // from several threads at once as long as each has its own digest context (each call does).
    package static let fileName = "device-key"
    package static let seedLength = 32
    package static let publicKeyLength = 32
    package static let signatureLength = 64

    private let key: OpaquePointer
    /// The raw 32-byte public key.
    package let publicKey: [UInt8]
    /// Lowercase hex SHA-256 of `publicKey`: the `keyid` of a signature.
    package let keyID: String

    private init(key: OpaquePointer) throws(DeviceKeyError) {
        var publicKey = [UInt8](repeating: 0, count: Self.publicKeyLength)
        var length = publicKey.count
        guard EVP_PKEY_get_raw_public_key(key, &publicKey, &length) == 1, length == Self.publicKeyLength else {
            EVP_PKEY_free(key)
            throw .crypto(operation: "read the public key")
        }
        self.key = key
        self.publicKey = publicKey
        keyID = Self.keyID(of: publicKey)
    }

    /// A key from its seed; `seed` is read, not kept.
    package convenience init(seed: UnsafeRawBufferPointer) throws(DeviceKeyError) {
        try Self.requireLibrary()
        guard seed.count == Self.seedLength,
              let key = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nil, seed.baseAddress?.assumingMemoryBound(to: UInt8.self), seed.count)
        else { throw .crypto(operation: "make a key from its seed") }
        try self.init(key: key)
    }

    deinit { EVP_PKEY_free(key) }

    package var description: String { "device key \(keyID)" }

    package static func keyID(of publicKey: [UInt8]) -> String {
        ContentDigest.sha256(publicKey).map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
    }

    /// The key kept in `directory` (an absolute path), made and stored on first use. Of two
    /// processes making it at once, both end up with the one that reached the disk first.
    package static func loadOrCreate(in directory: String) throws(DeviceKeyError) -> DeviceKey {
        let secrets: SecretDirectory
        do throws(SecretFileError) { secrets = try SecretDirectory(creatingIfMissing: directory) } catch { throw .file(error) }
        let seed = UnsafeMutableRawBufferPointer.allocate(byteCount: seedLength, alignment: 1)
        defer {
            explicit_bzero(seed.baseAddress!, seed.count)
            seed.deallocate()
        }
        if let existing = try load(from: secrets, into: seed) { return existing }

        let generated = try generate()
        var length = seed.count
        guard EVP_PKEY_get_raw_private_key(generated.key, seed.baseAddress?.assumingMemoryBound(to: UInt8.self), &length) == 1,
              length == seedLength
        else { throw .crypto(operation: "read the new key's seed") }
        let created: Bool
        do throws(SecretFileError) { created = try secrets.createSecret(named: fileName, contents: UnsafeRawBufferPointer(seed)) } catch { throw .file(error) }
        if created { return generated }
        // Another process stored its key first: that one is this installation's.
        guard let winner = try load(from: secrets, into: seed) else {
            throw .file(.failed(path: directory + "/" + fileName, action: "read the key another process just stored", nil))
        }
        return winner
    }

    /// Deletes the key (and any half-made copy a crash left) from `directory`: the next
    /// submission makes a new one, unlinkable to the old. A missing directory or key is fine.
    package static func delete(in directory: String) throws(DeviceKeyError) {
        do throws(SecretFileError) {
            let secrets = try SecretDirectory(existing: directory)
            try secrets.removeSecret(named: fileName)
        } catch .directoryUnavailable(_, let error) where error.code == ENOENT {
            return
        } catch {
            throw .file(error)
        }
    }

    private static func load(from secrets: borrowing SecretDirectory, into seed: UnsafeMutableRawBufferPointer) throws(DeviceKeyError) -> DeviceKey? {
        let found: Bool
        do throws(SecretFileError) { found = try secrets.readSecret(named: fileName, into: seed) } catch { throw .file(error) }
        return found ? try DeviceKey(seed: UnsafeRawBufferPointer(seed)) : nil
    }

    /// A key kept nowhere, for an instance without a usable state directory: its requests are
    /// still signed, under a key no later run will have.
    package static func ephemeral() throws(DeviceKeyError) -> DeviceKey { try generate() }

    private static func generate() throws(DeviceKeyError) -> DeviceKey {
        try requireLibrary()
        guard let context = EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, nil) else { throw .crypto(operation: "start key generation") }
        defer { EVP_PKEY_CTX_free(context) }
        var key: OpaquePointer?
        guard EVP_PKEY_keygen_init(context) == 1, EVP_PKEY_keygen(context, &key) == 1, let key else {
            throw .crypto(operation: "generate a key")
        }
        return try DeviceKey(key: key)
    }

    /// libcrypto is opened on first use (CFingerlyTLS's crypto_loader.c); a host without a usable one gets
    /// its reason here, not a failed operation's name.
    private static func requireLibrary() throws(DeviceKeyError) {
        if let problem = libcryptoProblem() { throw .libraryUnavailable(problem) }
    }

    /// The 64-byte Ed25519 signature of `message`.
    package func sign(_ message: [UInt8]) throws(DeviceKeyError) -> [UInt8] {
        guard let context = EVP_MD_CTX_new() else { throw .crypto(operation: "start signing") }
        defer { EVP_MD_CTX_free(context) }
        // Ed25519 hashes internally: no digest is named.
        guard EVP_DigestSignInit(context, nil, nil, nil, key) == 1 else { throw .crypto(operation: "start signing") }
        var signature = [UInt8](repeating: 0, count: Self.signatureLength)
        var length = signature.count
        let signed = Self.withNonNullBytes(message) { bytes in
            EVP_DigestSign(context, &signature, &length, bytes, message.count)
        }
        guard signed == 1, length == Self.signatureLength else { throw .crypto(operation: "sign") }
        return signature
    }

    /// Whether `signature` is `publicKey`'s Ed25519 signature of `message`.
    package static func isValidSignature(_ signature: [UInt8], of message: [UInt8], publicKey: [UInt8]) -> Bool {
        guard signature.count == signatureLength, publicKey.count == publicKeyLength,
              let key = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nil, publicKey, publicKey.count)
        else { return false }
        defer { EVP_PKEY_free(key) }
        guard let context = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestVerifyInit(context, nil, nil, nil, key) == 1 else { return false }
        return withNonNullBytes(message) { bytes in
            EVP_DigestVerify(context, signature, signature.count, bytes, message.count)
        } == 1
    }

    /// An empty array may have no storage, and libcrypto wants a pointer even for zero bytes.
    private static func withNonNullBytes<Result>(_ bytes: [UInt8], _ body: (UnsafePointer<UInt8>) -> Result) -> Result {
        if bytes.isEmpty {
            return withUnsafePointer(to: UInt8(0)) { body($0) }
        }
        return bytes.withUnsafeBufferPointer { body($0.baseAddress!) }
    }
}
