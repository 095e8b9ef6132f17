import Foundation
import Synchronization
import Testing
@testable import FingerlyHost
@testable import FingerlyTransport

/// Request signatures (RFC 9421, ed25519) over Content-Digest (RFC 9530), the device key kept in
/// the state directory, and the verifier a server uses. Signatures are checked by the openssl
/// command line as well as by our own verifier, so the two cannot agree on a shared mistake.
@Suite struct SigningTests {
    // RFC 8032 §7.1, test 1: the seed whose key signs the request known answer below.
    static let rfc8032Seed1 = hex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
    static let body = Array(#"{"client":{"proxy":false,"sdk":"fingerly-linux","version":"1.0.0"},"report":{}}"#.utf8)
    static let idempotencyKey = #""0b6c2f38-8c53-4b4d-9d0e-3f5b6a1c2d7e""#
    static let created: Int64 = 1_767_225_600

    // MARK: Content-Digest

    @Test func contentDigestMatchesTheRFC9530Example() {
        // Checked with: printf '{"hello": "world"}\n' | openssl dgst -sha256 -binary | base64
        #expect(ContentDigest.fieldValue(for: Array("{\"hello\": \"world\"}\n".utf8))
                == "sha-256=:RK/0qy18MlBSVnWgjwz6lZEWjP/lF5HF9bvEF8FabDg=:")
        #expect(ContentDigest.fieldValue(for: []) == "sha-256=:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=:")
    }

    @Test func base64RoundTripsAndAcceptsOnlyTheCanonicalSpelling() {
        for length in 0...40 {
            let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
            let text = StrictBase64.encode(bytes)
            #expect(text == Data(bytes).base64EncodedString())
            #expect(StrictBase64.decode(Array(text.utf8)) == bytes)
        }
        // Unpadded, stray bits under the padding, padding in the middle, too much padding,
        // white space, the URL-safe alphabet.
        for bad in ["QQ", "QR==", "QUJ=QUJD", "QQ=A", "Q===", "====", "QUJD QUJD", "QUJ\n", "-_-_", "QUI=QUI="] {
            #expect(StrictBase64.decode(Array(bad.utf8)) == nil, "\(bad)")
        }
    }

    // MARK: The key

    @Test func ed25519MatchesRFC8032() throws {
        // RFC 8032 §7.1, test 2 (one-byte message 0x72).
        let seed = Self.hex("4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb")
        let key = try seed.withUnsafeBytes { try DeviceKey(seed: $0) }
        #expect(key.publicKey == Self.hex("3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c"))
        #expect(try key.sign([0x72]) == Self.hex(
            "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00"))
        #expect(DeviceKey.isValidSignature(try key.sign([]), of: [], publicKey: key.publicKey))
        // Neither the description nor a dump carries the seed.
        #expect("\(key)" == "device key \(key.keyID)")
        var dumped = ""
        dump(key, to: &dumped)
        #expect(!dumped.contains("4ccd089b") && !dumped.contains("76, 205, 8, 155"))
    }

    @Test func theKeyFileIsPrivateAndReusedAcrossLoads() throws {
        let parent = try TestPaths.temporaryDirectory("device-key")
        defer { try? FileManager.default.removeItem(atPath: parent) }
        let state = parent + "/state/fingerly"
        let first = try DeviceKey.loadOrCreate(in: state)
        let file = state + "/" + DeviceKey.fileName
        let attributes = try FileManager.default.attributesOfItem(atPath: file)
        #expect((attributes[.posixPermissions] as? Int) == 0o600)
        #expect((attributes[.size] as? Int) == 32)
        #expect(((try FileManager.default.attributesOfItem(atPath: state))[.posixPermissions] as? Int) == 0o700)
        let second = try DeviceKey.loadOrCreate(in: state)
        #expect(second.keyID == first.keyID && second.publicKey == first.publicKey)
        #expect(first.keyID == DeviceKey.keyID(of: first.publicKey) && first.keyID.count == 64)
        // The file holds the seed: a key made from its bytes is the same key.
        let seed = try [UInt8](Data(contentsOf: URL(fileURLWithPath: file)))
        #expect(try seed.withUnsafeBytes { try DeviceKey(seed: $0) }.publicKey == first.publicKey)
        // Only the key: no temporary file left behind.
        #expect(try FileManager.default.contentsOfDirectory(atPath: state) == [DeviceKey.fileName])
    }

    @Test func processesRacingToCreateTheKeyEndUpWithOne() throws {
        let state = try TestPaths.temporaryDirectory("device-key-race")
        defer { try? FileManager.default.removeItem(atPath: state) }
        let keyIDs = Mutex<[String]>([])
        DispatchQueue.concurrentPerform(iterations: 16) { _ in
            let keyID = (try? DeviceKey.loadOrCreate(in: state))?.keyID ?? "failed"
            keyIDs.withLock { $0.append(keyID) }
        }
        let seen = keyIDs.withLock { $0 }
        #expect(seen.count == 16 && Set(seen).count == 1 && seen[0] != "failed", "\(Set(seen))")
        #expect(try DeviceKey.loadOrCreate(in: state).keyID == seen[0])
        #expect(try FileManager.default.contentsOfDirectory(atPath: state) == [DeviceKey.fileName])
    }

    @Test func deletingMakesTheNextKeyANewOne() throws {
        let state = try TestPaths.temporaryDirectory("device-key-delete")
        defer { try? FileManager.default.removeItem(atPath: state) }
        let old = try DeviceKey.loadOrCreate(in: state)
        // What a crash between writing and linking leaves behind holds a seed too.
        let leftover = state + "/.device-key.0123456789abcdef"
        #expect(FileManager.default.createFile(atPath: leftover, contents: Data(count: 32), attributes: [.posixPermissions: 0o600]))
        try DeviceKey.delete(in: state)
        #expect(try FileManager.default.contentsOfDirectory(atPath: state) == [])
        try DeviceKey.delete(in: state)
        try DeviceKey.delete(in: state + "/never-made")
        #expect(try DeviceKey.loadOrCreate(in: state).keyID != old.keyID)
    }

    enum Tampering: String, CaseIterable, Sendable {
        case symbolicLink, worldReadable, groupReadable, short, long, directory, fifo
    }

    @Test(arguments: Tampering.allCases)
    func aKeyFileOthersCouldKnowIsRefused(_ tampering: Tampering) throws {
        let state = try TestPaths.temporaryDirectory("device-key-refused")
        defer { try? FileManager.default.removeItem(atPath: state) }
        let file = state + "/" + DeviceKey.fileName
        let manager = FileManager.default
        let expected: SecretFileRefusal
        switch tampering {
        case .symbolicLink:
            _ = try DeviceKey.loadOrCreate(in: state + "/elsewhere")
            try manager.createSymbolicLink(atPath: file, withDestinationPath: state + "/elsewhere/" + DeviceKey.fileName)
            expected = .symbolicLink
        case .worldReadable, .groupReadable:
            _ = try DeviceKey.loadOrCreate(in: state)
            let mode = tampering == .worldReadable ? 0o644 : 0o640
            try manager.setAttributes([.posixPermissions: mode], ofItemAtPath: file)
            expected = .accessibleByOthers(mode: UInt32(mode))
        case .short, .long:
            let size = tampering == .short ? 31 : 33
            #expect(manager.createFile(atPath: file, contents: Data(count: size), attributes: [.posixPermissions: 0o600]))
            expected = .wrongSize(bytes: Int64(size), expected: 32)
        case .directory:
            try manager.createDirectory(atPath: file, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
            expected = .notRegularFile
        case .fifo:
            // Opening a FIFO for reading would wait for a writer forever.
            #expect(mkfifo(file, 0o600) == 0)
            expected = .notRegularFile
        }
        #expect(throws: DeviceKeyError.file(.refused(path: file, expected))) { try DeviceKey.loadOrCreate(in: state) }
        // Refused, not replaced: whatever was there is still there.
        #expect(manager.fileExists(atPath: file))
    }

    @Test(.enabled(if: geteuid() == 0, "changing a file's owner needs root"))
    func aKeyFileOwnedByAnotherUserIsRefused() throws {
        let state = try TestPaths.temporaryDirectory("device-key-owner")
        defer { try? FileManager.default.removeItem(atPath: state) }
        _ = try DeviceKey.loadOrCreate(in: state)
        let file = state + "/" + DeviceKey.fileName
        #expect(chown(file, 65534, 65534) == 0)
        #expect(throws: DeviceKeyError.file(.refused(path: file, .ownedByAnotherUser(uid: 65534)))) {
            try DeviceKey.loadOrCreate(in: state)
        }
    }

    @Test func aDirectoryOthersMayWriteIsRefused() throws {
        let state = try TestPaths.temporaryDirectory("device-key-open-directory")
        defer { try? FileManager.default.removeItem(atPath: state) }
        #expect(chmod(state, 0o777) == 0)
        #expect(throws: DeviceKeyError.file(.directoryWritableByOthers(path: state))) { try DeviceKey.loadOrCreate(in: state) }
        #expect(throws: DeviceKeyError.file(.relativeDirectory("state"))) { try DeviceKey.loadOrCreate(in: "state") }
        #expect(try FileManager.default.contentsOfDirectory(atPath: state) == [])
    }

    // MARK: Signing

    @Test func aRequestSignatureMatchesTheWireContractByteForByte() throws {
        let key = try Self.rfc8032Seed1.withUnsafeBytes { try DeviceKey(seed: $0) }
        let keyID = "21fe31dfa154a261626bf854046fd2271b7bed4b6abe45aa58877ef47f9721b9"
        #expect(key.keyID == keyID)
        // The base as wire.md spells it; the signature below is openssl's over these bytes
        // (openssl pkeyutl -sign -rawin with the RFC 8032 test 1 key).
        let base = """
            "@method": POST
            "@path": /fingerly/v1/identify
            "content-digest": sha-256=:ue7aC0gqM24kIrZ7xm3SWoJfI48BSptog/3y4qAyDhc=:
            "idempotency-key": "0b6c2f38-8c53-4b4d-9d0e-3f5b6a1c2d7e"
            "@signature-params": ("@method" "@path" "content-digest" "idempotency-key");created=1767225600;keyid="\(keyID)";alg="ed25519"
            """
        #expect(MessageSignature.signatureBase(method: "POST", path: "/fingerly/v1/identify",
                                               contentDigest: ContentDigest.fieldValue(for: Self.body),
                                               idempotencyKey: Self.idempotencyKey, created: Self.created, keyID: keyID)
                == Array(base.utf8))
        let fields = try MessageSignature.sign(method: "POST", path: "/fingerly/v1/identify", body: Self.body,
                                               idempotencyKey: Self.idempotencyKey, created: Self.created, with: key)
        #expect(fields.contentDigest == "sha-256=:ue7aC0gqM24kIrZ7xm3SWoJfI48BSptog/3y4qAyDhc=:")
        #expect(fields.deviceKey == ":11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=:")
        #expect(fields.signatureInput == #"fingerly=("@method" "@path" "content-digest" "idempotency-key");created=1767225600;keyid="\#(keyID)";alg="ed25519""#)
        #expect(fields.signature == "fingerly=:3JJ9iIWSpwBfQb69sQ3cJZ03MEx48ARctXygLDVYO1++AN6yofVAqg1RkCJzf/NEnZHGJxgRIQllrHW/gkggAQ==:")
        #expect(fields.headers.map(\.name) == ["Content-Digest", "Fingerly-Device-Key", "Signature-Input", "Signature"])
    }

    @Test func valuesThatWouldBreakTheBaseAreNotSigned() throws {
        let key = try Self.rfc8032Seed1.withUnsafeBytes { try DeviceKey(seed: $0) }
        func sign(method: String = "POST", path: String = "/v1/identify", idempotencyKey: String = SigningTests.idempotencyKey,
                  created: Int64 = SigningTests.created) throws(SigningError) {
            _ = try MessageSignature.sign(method: method, path: path, body: [], idempotencyKey: idempotencyKey, created: created, with: key)
        }
        #expect(throws: SigningError.invalidComponent("@method")) { try sign(method: "POST\n\"@path\": /x") }
        #expect(throws: SigningError.invalidComponent("@path")) { try sign(path: "v1/identify") }
        #expect(throws: SigningError.invalidComponent("@path")) { try sign(path: "/v1/identify?x=1") }
        #expect(throws: SigningError.invalidComponent("idempotency-key")) { try sign(idempotencyKey: "0b6c2f38") }
        #expect(throws: SigningError.invalidComponent("idempotency-key")) { try sign(idempotencyKey: "\"a\nb\"") }
        #expect(throws: SigningError.invalidComponent("created")) { try sign(created: -1) }
        #expect(throws: SigningError.invalidComponent("created")) { try sign(created: 1_000_000_000_000_000) }
    }

    /// What an independent verifier says: openssl, given the raw public key wrapped as an
    /// Ed25519 SubjectPublicKeyInfo, the signature base and the signature.
    static func opensslVerifies(publicKey: [UInt8], base: [UInt8], signature: [UInt8]) throws -> Bool {
        let directory = try TestPaths.temporaryDirectory("openssl-verify")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let spki = hex("302a300506032b6570032100") + publicKey
        let pem = "-----BEGIN PUBLIC KEY-----\n\(Data(spki).base64EncodedString())\n-----END PUBLIC KEY-----\n"
        try Data(pem.utf8).write(to: URL(fileURLWithPath: directory + "/pub.pem"))
        try Data(base).write(to: URL(fileURLWithPath: directory + "/base"))
        try Data(signature).write(to: URL(fileURLWithPath: directory + "/sig"))
        let result = try runProcess("/usr/bin/openssl", ["pkeyutl", "-verify", "-pubin", "-inkey", directory + "/pub.pem",
                                                         "-rawin", "-in", directory + "/base", "-sigfile", directory + "/sig"])
        // 0 verified, 1 did not; anything else (or a message other than these) is a broken invocation.
        try #require(result.status == 0 || result.status == 1, "openssl: \(result.standardError)")
        let said = result.standardOutput + result.standardError
        try #require(said.contains(result.status == 0 ? "Signature Verified Successfully" : "Signature Verification Failure"), "\(said)")
        return result.status == 0
    }

    /// The fields a received request carries, as a server would list them.
    static func received(_ fields: RequestSignatureFields, idempotencyKey: String = SigningTests.idempotencyKey) -> [(name: String, value: String)] {
        [("Idempotency-Key", idempotencyKey)] + fields.headers
    }

    @Test func opensslVerifiesTheSignatureAndRefusesATamperedBody() throws {
        let state = try TestPaths.temporaryDirectory("device-key-openssl")
        defer { try? FileManager.default.removeItem(atPath: state) }
        let key = try DeviceKey.loadOrCreate(in: state)
        let path = "/v1/identify"
        let fields = try MessageSignature.sign(method: "POST", path: path, body: Self.body, idempotencyKey: Self.idempotencyKey,
                                               created: Self.created, with: key)
        // Everything openssl needs comes off the wire, as a server would have it.
        let publicKey = try #require(StrictBase64.decode(Array(fields.deviceKey.utf8.dropFirst().dropLast())))
        let signature = try #require(StrictBase64.decode(Array(fields.signature.utf8.dropFirst("fingerly=:".count).dropLast())))
        let keyIDStart = try #require(fields.signatureInput.range(of: "keyid=\"")).upperBound
        let keyID = String(fields.signatureInput[keyIDStart...].prefix(64))
        #expect(publicKey == key.publicKey && keyID == key.keyID)
        let base = MessageSignature.signatureBase(method: "POST", path: path, contentDigest: fields.contentDigest,
                                                  idempotencyKey: Self.idempotencyKey, created: Self.created, keyID: keyID)
        #expect(try Self.opensslVerifies(publicKey: publicKey, base: base, signature: signature))
        let verified = try MessageSignature.verify(method: "POST", path: path, fields: Self.received(fields), body: Self.body,
                                                   now: Self.created + 30, window: 300)
        #expect(verified == VerifiedSignature(keyID: key.keyID, publicKey: key.publicKey, created: Self.created))

        // One byte changed: with the digest recomputed to match, the base changes and the
        // signature no longer covers it.
        var tampered = Self.body
        tampered[tampered.count - 3] = UInt8(ascii: "1")
        let tamperedDigest = ContentDigest.fieldValue(for: tampered)
        let tamperedBase = MessageSignature.signatureBase(method: "POST", path: path, contentDigest: tamperedDigest,
                                                          idempotencyKey: Self.idempotencyKey, created: Self.created, keyID: keyID)
        #expect(try !Self.opensslVerifies(publicKey: publicKey, base: tamperedBase, signature: signature))
        let forged = Self.received(fields).map { $0.name == "Content-Digest" ? ($0.name, tamperedDigest) : $0 }
        #expect(throws: SignatureVerificationError.badSignature) {
            try MessageSignature.verify(method: "POST", path: path, fields: forged, body: tampered, now: Self.created, window: 300)
        }
        // The digest left as signed: the body no longer matches it.
        #expect(throws: SignatureVerificationError.digestMismatch) {
            try MessageSignature.verify(method: "POST", path: path, fields: Self.received(fields), body: tampered, now: Self.created, window: 300)
        }
    }

    // MARK: Verifying

    static func signedFields() throws -> (DeviceKey, RequestSignatureFields) {
        let key = try rfc8032Seed1.withUnsafeBytes { try DeviceKey(seed: $0) }
        return (key, try MessageSignature.sign(method: "POST", path: "/v1/identify", body: body, idempotencyKey: idempotencyKey,
                                               created: created, with: key))
    }

    static func verify(_ fields: [(name: String, value: String)], method: String = "POST", path: String = "/v1/identify",
                       now: Int64 = SigningTests.created, window: Int64 = 300) throws(SignatureVerificationError) -> VerifiedSignature {
        try MessageSignature.verify(method: method, path: path, fields: fields, body: body, now: now, window: window)
    }

    /// The received fields with `name`'s value replaced.
    static func replacing(_ name: String, with value: String, in fields: [(name: String, value: String)]) -> [(name: String, value: String)] {
        fields.map { $0.name == name ? ($0.name, value) : $0 }
    }

    @Test func theVerifierAcceptsFieldNamesInAnyCaseAndTrimsOuterSpace() throws {
        let (key, fields) = try Self.signedFields()
        let received = Self.received(fields).map { ($0.name.uppercased(), " \t\($0.value) ") }
            + [("X-Other", "anything"), ("Signature-Inputs", "ignored")]
        #expect(try Self.verify(received).keyID == key.keyID)
    }

    @Test func eachMissingOrRepeatedFieldIsNamed() throws {
        let (_, fields) = try Self.signedFields()
        let received = Self.received(fields)
        for field in received {
            let name = field.name.lowercased()
            #expect(throws: SignatureVerificationError.missingField(name)) {
                try Self.verify(received.filter { $0.name != field.name })
            }
            #expect(throws: SignatureVerificationError.duplicateField(name)) {
                try Self.verify(received + [(name, field.value)])
            }
        }
    }

    @Test(arguments: [
        ("Content-Digest", "sha-512=:ue7aC0gqM24kIrZ7xm3SWoJfI48BSptog/3y4qAyDhc=:"),
        ("Content-Digest", "sha-256=:ue7aC0gqM24kIrZ7xm3SWoJfI48BSptog/3y4qAyDh=:"),
        ("Content-Digest", "sha-256=:ue7aC0gqM24kIrZ7xm3SWoJfI48BSptog/3y4qAyDhc=:, sha-512=:AAAA:"),
        ("Content-Digest", "sha-256=:ue7aC0gqM24kIrZ7xm3SWoJfI48BSptog/3y4qA=:"),
        ("Idempotency-Key", "0b6c2f38-8c53-4b4d-9d0e-3f5b6a1c2d7e"),
        ("Fingerly-Device-Key", "11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo="),
        ("Fingerly-Device-Key", ":11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHUR=:"),
        ("Fingerly-Device-Key", ":11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURoA:"),
        ("Signature", "other=:3JJ9iIWSpwBfQb69sQ3cJZ03MEx48ARctXygLDVYO1++AN6yofVAqg1RkCJzf/NEnZHGJxgRIQllrHW/gkggAQ==:"),
        ("Signature", "fingerly=:3JJ9iIWSpwBfQb69sQ3cJZ03MEx48ARctXygLDVYO1++AN6yofVAqg1RkCJzf/NEnZHGJxgRIQllrHW/gkgg:"),
        ("Signature-Input", #"other=("@method" "@path" "content-digest" "idempotency-key");created=1767225600;keyid="21fe31dfa154a261626bf854046fd2271b7bed4b6abe45aa58877ef47f9721b9";alg="ed25519""#),
        ("Signature-Input", #"fingerly=("@method" "@path" "content-digest");created=1767225600;keyid="21fe31dfa154a261626bf854046fd2271b7bed4b6abe45aa58877ef47f9721b9";alg="ed25519""#),
        ("Signature-Input", #"fingerly=("@method" "@path" "content-digest" "idempotency-key");created=01767225600;keyid="21fe31dfa154a261626bf854046fd2271b7bed4b6abe45aa58877ef47f9721b9";alg="ed25519""#),
        ("Signature-Input", #"fingerly=("@method" "@path" "content-digest" "idempotency-key");created=-1;keyid="21fe31dfa154a261626bf854046fd2271b7bed4b6abe45aa58877ef47f9721b9";alg="ed25519""#),
        ("Signature-Input", #"fingerly=("@method" "@path" "content-digest" "idempotency-key");created=1767225600;keyid="21FE31DFA154A261626BF854046FD2271B7BED4B6ABE45AA58877EF47F9721B9";alg="ed25519""#),
        ("Signature-Input", #"fingerly=("@method" "@path" "content-digest" "idempotency-key");keyid="21fe31dfa154a261626bf854046fd2271b7bed4b6abe45aa58877ef47f9721b9";created=1767225600;alg="ed25519""#),
        ("Signature-Input", #"fingerly=("@method" "@path" "content-digest" "idempotency-key");created=1767225600;keyid="21fe31dfa154a261626bf854046fd2271b7bed4b6abe45aa58877ef47f9721b9";alg="rsa-pss-sha512""#),
        ("Signature-Input", #"fingerly=("@method" "@path" "content-digest" "idempotency-key");created=1767225600;keyid="21fe31dfa154a261626bf854046fd2271b7bed4b6abe45aa58877ef47f9721b9";alg="ed25519";expires=1"#),
        ("Signature-Input", #"fingerly=("@method" "@path" "content-digest" "idempotency-key");created=9999999999999999;keyid="21fe31dfa154a261626bf854046fd2271b7bed4b6abe45aa58877ef47f9721b9";alg="ed25519""#),
        ("Signature-Input", String(repeating: "x", count: 513)),
    ])
    func aFieldNotExactlyInOurFormIsMalformed(_ name: String, _ value: String) throws {
        let (_, fields) = try Self.signedFields()
        do {
            _ = try Self.verify(Self.replacing(name, with: value, in: Self.received(fields)))
            Issue.record("accepted \(name): \(value)")
        } catch {
            guard case .malformed(let field, _) = error else { Issue.record("\(error)"); return }
            #expect(field == name.lowercased())
        }
    }

    /// RFC 8941 spellings that are not ours but valid: an escaped quote in the key, an unpadded byte
    /// sequence. They are read, not refused for their form; what the signature covers decides.
    @Test func aValidStructuredFieldSpellingIsReadNotRefused() throws {
        let (key, fields) = try Self.signedFields()
        let received = Self.received(fields)
        let unpadded = { (value: String) in
            value.replacingOccurrences(of: "=+:$", with: ":", options: .regularExpression)
        }
        // Not covered, bound by keyid or by the bytes: the unpadded spelling verifies.
        for name in ["Signature", "Fingerly-Device-Key"] {
            let value = try #require(received.first { $0.name == name }).value
            let verified = try Self.verify(Self.replacing(name, with: unpadded(value), in: received))
            #expect(verified.keyID == key.keyID, "\(name)")
        }
        // Covered as sent: another spelling of the digest, or another key, is another base.
        #expect(throws: SignatureVerificationError.badSignature) {
            try Self.verify(Self.replacing("Content-Digest", with: unpadded(fields.contentDigest), in: received))
        }
        #expect(throws: SignatureVerificationError.badSignature) {
            try Self.verify(Self.replacing("Idempotency-Key", with: "\"0b6c2f38\\\"\"", in: received))
        }
    }

    @Test func theRequestTargetIsChecked() throws {
        let (_, fields) = try Self.signedFields()
        let received = Self.received(fields)
        #expect(throws: SignatureVerificationError.badSignature) { try Self.verify(received, method: "PUT") }
        #expect(throws: SignatureVerificationError.badSignature) { try Self.verify(received, path: "/v1/identify/") }
        #expect(throws: SignatureVerificationError.badSignature) {
            try Self.verify(Self.replacing("Idempotency-Key", with: "\"0b6c2f38-8c53-4b4d-9d0e-3f5b6a1c2d7f\"", in: received))
        }
        for (method, path, field) in [("PO ST", "/v1/identify", "@method"), ("POST", "/v1/identify?x=1", "@path"), ("POST", "v1", "@path")] {
            do {
                _ = try Self.verify(received, method: method, path: path)
                Issue.record("accepted \(method) \(path)")
            } catch {
                guard case .malformed(let named, _) = error else { Issue.record("\(error)"); continue }
                #expect(named == field)
            }
        }
    }

    @Test func aKeyIDThatIsNotTheSentKeysIsRefused() throws {
        let (_, fields) = try Self.signedFields()
        // Another key's public key, with the first key's keyid and signature.
        let other = try Self.hex("4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb").withUnsafeBytes { try DeviceKey(seed: $0) }
        let swapped = Self.replacing("Fingerly-Device-Key", with: ":\(StrictBase64.encode(other.publicKey)):", in: Self.received(fields))
        #expect(throws: SignatureVerificationError.keyIDMismatch) { try Self.verify(swapped) }
    }

    @Test func createdMustLieWithinTheWindow() throws {
        let (_, fields) = try Self.signedFields()
        let received = Self.received(fields)
        let created = Self.created
        #expect(try Self.verify(received, now: created - 300).created == created)
        #expect(try Self.verify(received, now: created + 300).created == created)
        #expect(throws: SignatureVerificationError.createdInFuture(created: created, now: created - 301)) {
            try Self.verify(received, now: created - 301)
        }
        #expect(throws: SignatureVerificationError.createdTooOld(created: created, now: created + 301)) {
            try Self.verify(received, now: created + 301)
        }
        // Extremes of the clock do not overflow.
        #expect(throws: SignatureVerificationError.createdTooOld(created: created, now: .max)) { try Self.verify(received, now: .max) }
        #expect(throws: SignatureVerificationError.createdInFuture(created: created, now: .min)) { try Self.verify(received, now: .min) }
        #expect(throws: SignatureVerificationError.createdInFuture(created: created, now: created)) {
            try Self.verify(received, now: created, window: -1)
        }
    }

    static func hex(_ text: String) -> [UInt8] {
        var bytes: [UInt8] = []
        var index = text.startIndex
        while index < text.endIndex {
            let next = text.index(index, offsetBy: 2)
            bytes.append(UInt8(text[index..<next], radix: 16)!)
            index = next
        }
        return bytes
    }

    @Test func aRotationStatementProvesTheOldKeyForTheNewOneOnly() throws {
        let old = try DeviceKey.ephemeral(), new = try DeviceKey.ephemeral(), other = try DeviceKey.ephemeral()
        let field = try KeyRotation.field(rotatingTo: new, from: old)
        #expect(KeyRotation.verify(field, newKeyID: new.keyID) == old.keyID)
        #expect(KeyRotation.verify("  " + field + "\t", newKeyID: new.keyID) == old.keyID)
        // For another key, by itself, truncated, re-encoded or padded past the bound: nothing.
        #expect(KeyRotation.verify(field, newKeyID: other.keyID) == nil)
        #expect(KeyRotation.verify(try KeyRotation.field(rotatingTo: old, from: old), newKeyID: old.keyID) == nil)
        #expect(KeyRotation.verify(String(field.dropLast(2)) + ":", newKeyID: new.keyID) == nil)
        #expect(KeyRotation.verify(field.replacingOccurrences(of: ";sig=", with: ";sig= "), newKeyID: new.keyID) == nil)
        #expect(KeyRotation.verify(field + String(repeating: " ", count: 600), newKeyID: new.keyID) == nil)
        for junk in ["", ":", "::", ":;sig=::", ":AAAA:;sig=:AAAA:", "x" + field] {
            #expect(KeyRotation.verify(junk, newKeyID: new.keyID) == nil, "\(junk)")
        }
        // A request signature cannot pass for a statement: the statement is domain-separated.
        let request = try MessageSignature.sign(method: "POST", path: "/v1/identify", body: [], idempotencyKey: "\"k\"", created: 1, with: old)
        let requestSignature = request.signature.dropFirst("fingerly=:".count).dropLast()
        #expect(KeyRotation.verify(":\(StrictBase64.encode(old.publicKey)):;sig=:\(requestSignature):", newKeyID: new.keyID) == nil)
    }
}
