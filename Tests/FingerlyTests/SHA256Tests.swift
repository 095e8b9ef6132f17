import CCrypto
import FingerlyHost
import Testing

/// SHA-256 and HMAC-SHA-256 of FingerlyHost, which hash every identifier and body without libcrypto: the
/// standards' own vectors, and libcrypto's answers (opened on first use, as the products open it) for inputs
/// of every length around a block's edges.
@Suite struct SHA256Tests {
    static func hex(_ bytes: [UInt8]) -> String {
        bytes.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
    }

    static func hash(_ message: [UInt8], _ compression: SHA256.Compression) -> [UInt8] {
        var hasher = SHA256(compression: compression)
        hasher.update(message)
        return hasher.finalize()
    }

    static func bytes(hex: String) -> [UInt8] {
        let digits = Array(hex.utf8)
        return stride(from: 0, to: digits.count, by: 2).map { UInt8(String(decoding: digits[$0..<$0 + 2], as: UTF8.self), radix: 16)! }
    }

    /// FIPS 180-4's examples (csrc.nist.gov, SHA256.pdf, SHA2_Additional.pdf) and two of CAVP's SHA256ShortMsg.
    @Test(arguments: [
        ("", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
        ("abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
        ("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"),
        ("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
         "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"),
    ])
    func theStandardsExamples(message: String, digest: String) {
        #expect(Self.hex(SHA256.hash(Array(message.utf8))) == digest)
        for compression in SHA256.Compression.available {
            #expect(Self.hex(Self.hash(Array(message.utf8), compression)) == digest, "\(compression)")
        }
    }

    /// The SHA extensions are used exactly where the kernel sees them: a CPU without them gets Swift's rounds
    /// rather than an illegal instruction.
    @Test func theCPUsSHAExtensionsAreUsedWhereItHasThem() throws {
        let cpuinfo = try #require(String(validating: try HostFileSystem().read("/proc/cpuinfo", limit: 1 << 22),
                                          as: UTF8.self))
        let flags = cpuinfo.split(separator: "\n").first { $0.hasPrefix("flags") }.map { $0.split(separator: " ") } ?? []
        #expect((SHA256.Compression.best == .hardware) == flags.contains("sha_ni"))
        #expect(SHA256.Compression.available.contains(.portable))
    }

    @Test func theValidationSystemsShortMessages() {
        #expect(Self.hex(SHA256.hash([0xd3])) == "28969cdfa74a12c82f3bad960b0b000aca2ac329deea5c2328ebc6f2ba9802c1")
        #expect(Self.hex(SHA256.hash([0x11, 0xaf])) == "5ca7133fa735326081558ac312c620eeca9970d1e70a4b95533d956f072d1f98")
    }

    @Test(arguments: SHA256.Compression.available)
    func aMillionLettersFedInUnevenPieces(compression: SHA256.Compression) {
        let million = [UInt8](repeating: UInt8(ascii: "a"), count: 1_000_000)
        let expected = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"
        #expect(Self.hex(Self.hash(million, compression)) == expected)
        var hasher = SHA256(compression: compression)
        var offset = 0
        var piece = 1
        million.withUnsafeBytes { all in
            while offset < all.count {
                let end = min(all.count, offset + piece)
                hasher.update(UnsafeRawBufferPointer(rebasing: all[offset..<end]))
                offset = end
                piece = piece * 7 % 1021 + 1
            }
        }
        #expect(Self.hex(hasher.finalize()) == expected)
    }

    @Test func finalizingLeavesTheHasherAsItWas() {
        var hasher = SHA256()
        hasher.update(Array("ab".utf8))
        #expect(Self.hex(hasher.finalize()) == Self.hex(SHA256.hash(Array("ab".utf8))))
        hasher.update(Array("c".utf8))
        #expect(Self.hex(hasher.finalize()) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }

    /// RFC 4231, section 4: test cases 1 to 7 (6 and 7 with keys longer than a block); 5's code is cut to 128 bits.
    @Test(arguments: [
        (String(repeating: "0b", count: 20), Array("Hi There".utf8),
         "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"),
        ("4a656665", Array("what do ya want for nothing?".utf8),
         "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"),
        (String(repeating: "aa", count: 20), [UInt8](repeating: 0xdd, count: 50),
         "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"),
        ("0102030405060708090a0b0c0d0e0f10111213141516171819", [UInt8](repeating: 0xcd, count: 50),
         "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"),
        (String(repeating: "0c", count: 20), Array("Test With Truncation".utf8), "a3b6167473100ee06e0c796c2955552b"),
        (String(repeating: "aa", count: 131), Array("Test Using Larger Than Block-Size Key - Hash Key First".utf8),
         "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"),
        (String(repeating: "aa", count: 131),
         Array(("This is a test using a larger than block-size key and a larger than block-size data. The key needs "
                + "to be hashed before being used by the HMAC algorithm.").utf8),
         "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"),
    ])
    func theHMACTestCasesOfRFC4231(key: String, message: [UInt8], code: String) {
        let computed = Self.hex(HMACSHA256.authenticationCode(key: Self.bytes(hex: key), message: message))
        #expect(computed.hasPrefix(code))
    }

    /// The lengths where padding changes shape (55, 56, 63, 64, 65 bytes into a block), multi-block inputs,
    /// and random lengths, against libcrypto's SHA-256.
    @Test(arguments: SHA256.Compression.available)
    func everyLengthAgreesWithLibcrypto(compression: SHA256.Compression) throws {
        try #require(libcryptoProblem() == nil, "libcrypto is needed to compare with")
        var generator = SystemRandomNumberGenerator()
        var lengths = Array(0...300) + [447, 448, 511, 512, 513, 1000, 4096, 4103, 65_536 + 55]
        lengths += (0..<100).map { _ in Int.random(in: 0...20_000, using: &generator) }
        for length in lengths {
            let message = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
            #expect(Self.hex(Self.hash(message, compression)) == Self.hex(try Self.libcryptoSHA256(message)),
                    "\(length) bytes")
            // The same bytes in two pieces, split anywhere.
            let split = length == 0 ? 0 : Int.random(in: 0...length, using: &generator)
            var hasher = SHA256(compression: compression)
            hasher.update(Array(message[..<split]))
            hasher.update(Array(message[split...]))
            #expect(Self.hex(hasher.finalize()) == Self.hex(SHA256.hash(message)), "\(length) bytes split at \(split)")
        }
    }

    /// HMAC by its definition (RFC 2104) over libcrypto's SHA-256, for keys shorter than, as long as and longer
    /// than a block.
    @Test func codesAgreeWithHMACsDefinitionOverLibcrypto() throws {
        try #require(libcryptoProblem() == nil, "libcrypto is needed to compare with")
        var generator = SystemRandomNumberGenerator()
        for keyLength in [0, 1, 31, 32, 63, 64, 65, 131, 200] {
            for messageLength in [0, 1, 55, 56, 63, 64, 65, 119, 120, 1000] {
                let key = (0..<keyLength).map { _ in UInt8.random(in: 0...255, using: &generator) }
                let message = (0..<messageLength).map { _ in UInt8.random(in: 0...255, using: &generator) }
                var block = key.count > 64 ? try Self.libcryptoSHA256(key) : key
                block += [UInt8](repeating: 0, count: 64 - block.count)
                let inner = try Self.libcryptoSHA256(block.map { $0 ^ 0x36 } + message)
                let expected = try Self.libcryptoSHA256(block.map { $0 ^ 0x5c } + inner)
                let computed = HMACSHA256.authenticationCode(key: key, message: message)
                #expect(Self.hex(computed) == Self.hex(expected), "key \(keyLength), message \(messageLength) bytes")
            }
        }
    }

    static func libcryptoSHA256(_ message: [UInt8]) throws -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        let method = try #require(EVP_sha256())
        let done = message.withUnsafeBufferPointer { input in
            EVP_Digest(input.baseAddress, input.count, &digest, &length, method, nil)
        }
        try #require(done == 1 && length == 32)
        return digest
    }
}
