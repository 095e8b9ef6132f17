import CFingerlySHA256

/// SHA-256 (FIPS 180-4), in Swift or on the CPU's SHA extensions: identifiers are hashed by every run, the Content-Digest of every body, and
/// libcrypto, which did it before, cost a start 3.4 MiB of memory and 4,200 relocations just by being mapped.
/// Fed in pieces (`update`) or whole (`hash`); a copy of a part-fed value goes on independently.
package struct SHA256: Sendable {
    package static let digestLength = 32
    package static let blockLength = 64

    /// How blocks are compressed: the CPU's SHA extensions are some ten times faster than Swift's arithmetic,
    /// which matters for the trust store's quarter of a megabyte each run.
    package enum Compression: Sendable, CaseIterable {
        case portable
        case hardware

        /// What this CPU has.
        package static let best: Compression = fingerly_sha256_hardware_available() ? .hardware : .portable
        package static var available: [Compression] { best == .hardware ? [.portable, .hardware] : [.portable] }
    }

    private let compression: Compression

    private var state: (UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32) =
        (0x6a09_e667, 0xbb67_ae85, 0x3c6e_f372, 0xa54f_f53a, 0x510e_527f, 0x9b05_688c, 0x1f83_d9ab, 0x5be0_cd19)
    /// The start of a block not yet complete; `pendingCount` of its bytes are set.
    private var pending: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0, 0, 0, 0, 0)
    private var pendingCount = 0
    /// Bytes fed so far; the padding holds it in bits, modulo 2^64 as the standard says.
    private var length: UInt64 = 0

    package init() { compression = .best }

    /// `compression` must be one of `Compression.available`: the tests compare the two.
    package init(compression: Compression) {
        precondition(Compression.available.contains(compression), "this CPU has no SHA extensions")
        self.compression = compression
    }

    package static func hash(_ bytes: UnsafeRawBufferPointer) -> [UInt8] {
        var hasher = SHA256()
        hasher.update(bytes)
        return hasher.finalize()
    }

    package static func hash(_ bytes: [UInt8]) -> [UInt8] {
        bytes.withUnsafeBytes { hash($0) }
    }

    package static func hash(_ bytes: ArraySlice<UInt8>) -> [UInt8] {
        bytes.withUnsafeBytes { hash($0) }
    }

    package mutating func update(_ bytes: UnsafeRawBufferPointer) {
        // An empty buffer may have no base address.
        guard let start = bytes.baseAddress, !bytes.isEmpty else { return }
        length &+= UInt64(bytes.count)
        var offset = 0
        if pendingCount > 0 {
            let taken = min(Self.blockLength - pendingCount, bytes.count)
            let filled = pendingCount
            withUnsafeMutableBytes(of: &pending) { block in
                block.baseAddress!.advanced(by: filled).copyMemory(from: start, byteCount: taken)
            }
            pendingCount += taken
            offset = taken
            guard pendingCount == Self.blockLength else { return }
            let block = pending
            withUnsafeBytes(of: block) { compress($0.baseAddress!, blocks: 1) }
            pendingCount = 0
        }
        let whole = (bytes.count - offset) / Self.blockLength
        if whole > 0 {
            compress(start.advanced(by: offset), blocks: whole)
            offset += whole * Self.blockLength
        }
        let rest = bytes.count - offset
        if rest > 0 {
            withUnsafeMutableBytes(of: &pending) { block in
                block.baseAddress!.copyMemory(from: start.advanced(by: offset), byteCount: rest)
            }
            pendingCount = rest
        }
    }

    package mutating func update(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { update($0) }
    }

    /// The digest of everything fed; `self` is left as it was, so more may be fed after.
    package func finalize() -> [UInt8] {
        [UInt8](unsafeUninitializedCapacity: Self.digestLength) { output, initialized in
            finalize(into: UnsafeMutableRawBufferPointer(output))
            initialized = Self.digestLength
        }
    }

    /// Writes the digest into the first 32 bytes of `output`.
    package func finalize(into output: UnsafeMutableRawBufferPointer) {
        precondition(output.count >= Self.digestLength, "a SHA-256 digest is 32 bytes")
        var copy = self
        let bits = length &* 8
        // 0x80, zeros up to 56 bytes into a block, then the length in bits, big-endian: one block or two.
        let paddingCount = (pendingCount < 56 ? 56 : 120) - pendingCount + 8
        withUnsafeTemporaryAllocation(byteCount: 128, alignment: 8) { padding in
            padding.initializeMemory(as: UInt8.self, repeating: 0)
            padding[0] = 0x80
            padding.storeBytes(of: bits.bigEndian, toByteOffset: paddingCount - 8, as: UInt64.self)
            copy.update(UnsafeRawBufferPointer(rebasing: padding[..<paddingCount]))
        }
        withUnsafeBytes(of: copy.state) { words in
            for index in 0..<8 {
                let word = words.load(fromByteOffset: index * 4, as: UInt32.self)
                output.storeBytes(of: word.bigEndian, toByteOffset: index * 4, as: UInt32.self)
            }
        }
    }

    private static let roundConstants: [UInt32] = [
        0x428a_2f98, 0x7137_4491, 0xb5c0_fbcf, 0xe9b5_dba5, 0x3956_c25b, 0x59f1_11f1, 0x923f_82a4, 0xab1c_5ed5,
        0xd807_aa98, 0x1283_5b01, 0x2431_85be, 0x550c_7dc3, 0x72be_5d74, 0x80de_b1fe, 0x9bdc_06a7, 0xc19b_f174,
        0xe49b_69c1, 0xefbe_4786, 0x0fc1_9dc6, 0x240c_a1cc, 0x2de9_2c6f, 0x4a74_84aa, 0x5cb0_a9dc, 0x76f9_88da,
        0x983e_5152, 0xa831_c66d, 0xb003_27c8, 0xbf59_7fc7, 0xc6e0_0bf3, 0xd5a7_9147, 0x06ca_6351, 0x1429_2967,
        0x27b7_0a85, 0x2e1b_2138, 0x4d2c_6dfc, 0x5338_0d13, 0x650a_7354, 0x766a_0abb, 0x81c2_c92e, 0x9272_2c85,
        0xa2bf_e8a1, 0xa81a_664b, 0xc24b_8b70, 0xc76c_51a3, 0xd192_e819, 0xd699_0624, 0xf40e_3585, 0x106a_a070,
        0x19a4_c116, 0x1e37_6c08, 0x2748_774c, 0x34b0_bcb5, 0x391c_0cb3, 0x4ed8_aa4a, 0x5b9c_ca4f, 0x682e_6ff3,
        0x748f_82ee, 0x78a5_636f, 0x84c8_7814, 0x8cc7_0208, 0x90be_fffa, 0xa450_6ceb, 0xbef9_a3f7, 0xc671_78f2,
    ]

    @inline(__always)
    private static func rotate(_ word: UInt32, _ count: UInt32) -> UInt32 {
        (word >> count) | (word << (32 - count))
    }

    private mutating func compress(_ input: UnsafeRawPointer, blocks: Int) {
        switch compression {
        case .portable: Self.compressPortably(&state, input, blocks: blocks)
        case .hardware:
            Self.roundConstants.withUnsafeBufferPointer { constants in
                withUnsafeMutableBytes(of: &state) { words in
                    fingerly_sha256_compress_hardware(words.baseAddress!.assumingMemoryBound(to: UInt32.self),
                                                      input.assumingMemoryBound(to: UInt8.self), blocks,
                                                      constants.baseAddress!)
                }
            }
        }
    }

    /// Runs `blocks` 64-byte blocks from `input` (any alignment) through the compression function.
    private static func compressPortably(_ state: inout (UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32),
                                 _ input: UnsafeRawPointer, blocks: Int) {
        roundConstants.withUnsafeBufferPointer { constants in
            withUnsafeTemporaryAllocation(of: UInt32.self, capacity: 64) { schedule in
                for block in 0..<blocks {
                    let base = input.advanced(by: block * blockLength)
                    for index in 0..<16 {
                        schedule[index] = UInt32(bigEndian: base.loadUnaligned(fromByteOffset: index * 4, as: UInt32.self))
                    }
                    for index in 16..<64 {
                        let early = schedule[index - 15], late = schedule[index - 2]
                        let sigma0 = rotate(early, 7) ^ rotate(early, 18) ^ (early >> 3)
                        let sigma1 = rotate(late, 17) ^ rotate(late, 19) ^ (late >> 10)
                        schedule[index] = schedule[index - 16] &+ sigma0 &+ schedule[index - 7] &+ sigma1
                    }
                    var (a, b, c, d, e, f, g, h) = state
                    for index in 0..<64 {
                        let sum1 = rotate(e, 6) ^ rotate(e, 11) ^ rotate(e, 25)
                        let choice = (e & f) ^ (~e & g)
                        let first = h &+ sum1 &+ choice &+ constants[index] &+ schedule[index]
                        let sum0 = rotate(a, 2) ^ rotate(a, 13) ^ rotate(a, 22)
                        let majority = (a & b) ^ (a & c) ^ (b & c)
                        let second = sum0 &+ majority
                        h = g
                        g = f
                        f = e
                        e = d &+ first
                        d = c
                        c = b
                        b = a
                        a = first &+ second
                    }
                    state.0 &+= a
                    state.1 &+= b
                    state.2 &+= c
                    state.3 &+= d
                    state.4 &+= e
                    state.5 &+= f
                    state.6 &+= g
                    state.7 &+= h
                }
            }
        }
    }
}

/// HMAC-SHA-256 (RFC 2104) under one key. The key's two padded blocks are hashed once, at init: each message
/// then costs its own blocks and two more, however many messages a key authenticates.
package struct HMACSHA256: Sendable {
    private var inner = SHA256()
    private var outer = SHA256()

    package init(key: UnsafeRawBufferPointer) {
        withUnsafeTemporaryAllocation(byteCount: SHA256.blockLength, alignment: 8) { block in
            block.initializeMemory(as: UInt8.self, repeating: 0)
            // A key longer than a block is replaced by its digest.
            if key.count > SHA256.blockLength {
                SHA256.hash(key).withUnsafeBytes { block.copyMemory(from: $0) }
            } else if !key.isEmpty {
                block.copyMemory(from: key)
            }
            for index in 0..<SHA256.blockLength { block[index] ^= 0x36 }
            inner.update(UnsafeRawBufferPointer(block))
            // 0x36 ^ 0x5c: from the inner pad to the outer one.
            for index in 0..<SHA256.blockLength { block[index] ^= 0x6a }
            outer.update(UnsafeRawBufferPointer(block))
            block.initializeMemory(as: UInt8.self, repeating: 0)
        }
    }

    package init(key: [UInt8]) {
        self = key.withUnsafeBytes { HMACSHA256(key: $0) }
    }

    package mutating func update(_ bytes: UnsafeRawBufferPointer) {
        inner.update(bytes)
    }

    package mutating func update(_ bytes: [UInt8]) {
        inner.update(bytes)
    }

    /// The code of everything fed; `self` is left as it was.
    package func finalize() -> [UInt8] {
        var outer = outer
        withUnsafeTemporaryAllocation(byteCount: SHA256.digestLength, alignment: 8) { digest in
            inner.finalize(into: digest)
            outer.update(UnsafeRawBufferPointer(digest))
        }
        return outer.finalize()
    }

    package static func authenticationCode(key: [UInt8], message: UnsafeRawBufferPointer) -> [UInt8] {
        var code = HMACSHA256(key: key)
        code.update(message)
        return code.finalize()
    }

    package static func authenticationCode(key: [UInt8], message: [UInt8]) -> [UInt8] {
        message.withUnsafeBytes { authenticationCode(key: key, message: $0) }
    }
}
