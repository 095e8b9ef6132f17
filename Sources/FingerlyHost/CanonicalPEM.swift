/// The certificate blocks of PEM text written the one way update-ca-certificates and `openssl x509` write them,
/// decoded without libcrypto: loading it costs a run more than decoding a whole bundle does.
///
/// The measured host writes these files, and whatever a TLS client trusts is what libcrypto reads from them, so
/// this reader must never see less than libcrypto would. It accepts only canonical text and gives nil for
/// anything else (a header, a short line before the last, CR, another label, a stray run of dashes, a missing
/// final newline), and the caller then lets libcrypto read the text itself. Any line holding "-----" is either an
/// exact BEGIN or END line here or the end of this reader: libcrypto starts a block at such a line, even at one
/// its line buffer split off a longer line.
package enum CanonicalPEM {
    /// The labels libcrypto reads a certificate from (PEM_STRING_X509, _TRUSTED and _OLD).
    package static let certificateLabels = ["CERTIFICATE", "TRUSTED CERTIFICATE", "X509 CERTIFICATE"]
    static let lineLength = 64

    /// Every block's decoded bytes, one after another in `bytes`, and where each one lies.
    package struct Blocks: Sendable, Equatable {
        package var bytes: [UInt8] = []
        package var ranges: [Range<Int>] = []

        package var count: Int { ranges.count }
        package func block(_ index: Int) -> ArraySlice<UInt8> { bytes[ranges[index]] }
    }

    private static let beginLines = certificateLabels.map { Array("-----BEGIN \($0)-----".utf8) }
    private static let endLines = certificateLabels.map { Array("-----END \($0)-----".utf8) }

    /// The decoded certificate blocks of `pem`, or nil when any of it is not canonical.
    package static func certificateBlocks(_ pem: [UInt8]) -> Blocks? {
        guard pem.isEmpty || pem.last == UInt8(ascii: "\n") else { return nil }
        var blocks = Blocks()
        blocks.bytes.reserveCapacity(pem.count / 4 * 3)
        let accepted = pem.withUnsafeBufferPointer { text -> Bool in
            var open: Int?  // the label of the block being read
            var blockStart = 0
            var sawShortLine = false
            var quantum: (UInt32, Int) = (0, 0)
            var lineStart = 0
            while lineStart < text.count {
                // Most of a bundle: a full line of sixteen groups of four plain digits, no padding.
                if open != nil, !sawShortLine, quantum.1 == 0, text.count - lineStart > lineLength,
                   text[lineStart + lineLength] == UInt8(ascii: "\n"),
                   decodeFullLine(UnsafeBufferPointer(rebasing: text[lineStart..<lineStart + lineLength]),
                                  into: &blocks.bytes) {
                    lineStart += lineLength + 1
                    continue
                }
                var lineEnd = lineStart
                while text[lineEnd] != UInt8(ascii: "\n") { lineEnd += 1 }
                let line = UnsafeBufferPointer(rebasing: text[lineStart..<lineEnd])
                lineStart = lineEnd + 1
                let dashed = holdsDashRun(line)
                guard let label = open else {
                    guard dashed else { continue }
                    guard let index = beginLines.firstIndex(where: { line.elementsEqual($0) }) else { return false }
                    open = index
                    blockStart = blocks.bytes.count
                    sawShortLine = false
                    continue
                }
                if dashed {
                    // A block ends whole, under its own label, and holds something.
                    guard line.elementsEqual(endLines[label]), quantum.1 == 0,
                          blocks.bytes.count > blockStart else { return false }
                    blocks.ranges.append(blockStart..<blocks.bytes.count)
                    open = nil
                    continue
                }
                // Full lines, then at most one shorter line (with the padding, if any) right before END.
                guard !sawShortLine, (1...lineLength).contains(line.count),
                      decode(line, into: &blocks.bytes, quantum: &quantum) else { return false }
                sawShortLine = line.count < lineLength || line.last == UInt8(ascii: "=")
            }
            return open == nil
        }
        return accepted ? blocks : nil
    }

    private static func holdsDashRun(_ line: UnsafeBufferPointer<UInt8>) -> Bool {
        var run = 0
        for byte in line {
            run = byte == UInt8(ascii: "-") ? run + 1 : 0
            if run == 5 { return true }
        }
        return false
    }

    /// The six bits of each base64 digit; 64 for "=", 255 for any other byte.
    private static let digitValues: [UInt8] = (0...255).map { byte -> UInt8 in
        switch UInt8(byte) {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"): UInt8(byte) - UInt8(ascii: "A")
        case UInt8(ascii: "a")...UInt8(ascii: "z"): UInt8(byte) - UInt8(ascii: "a") + 26
        case UInt8(ascii: "0")...UInt8(ascii: "9"): UInt8(byte) - UInt8(ascii: "0") + 52
        case UInt8(ascii: "+"): 62
        case UInt8(ascii: "/"): 63
        case UInt8(ascii: "="): 64
        default: 255
        }
    }

    /// Decodes a line of exactly `lineLength` digits none of which is "=", or leaves `output` as it was and gives
    /// false for the general path to judge.
    private static func decodeFullLine(_ line: UnsafeBufferPointer<UInt8>, into output: inout [UInt8]) -> Bool {
        digitValues.withUnsafeBufferPointer { values in
            withUnsafeTemporaryAllocation(of: UInt8.self, capacity: lineLength / 4 * 3) { decoded in
                // Any value above 63 (padding, or not a digit) sets one of the top two bits.
                var outside: UInt8 = 0
                for group in 0..<lineLength / 4 {
                    let first = values[Int(line[4 * group])], second = values[Int(line[4 * group + 1])]
                    let third = values[Int(line[4 * group + 2])], fourth = values[Int(line[4 * group + 3])]
                    outside |= first | second | third | fourth
                    let bits = UInt32(first) << 18 | UInt32(second) << 12 | UInt32(third) << 6 | UInt32(fourth)
                    decoded[3 * group] = UInt8(truncatingIfNeeded: bits >> 16)
                    decoded[3 * group + 1] = UInt8(truncatingIfNeeded: bits >> 8)
                    decoded[3 * group + 2] = UInt8(truncatingIfNeeded: bits)
                }
                guard outside & 0xC0 == 0 else { return false }
                output.append(contentsOf: decoded)
                return true
            }
        }
    }

    /// Decodes one line into `output`, carrying a part-filled group of four digits over to the next line.
    /// Padding is taken only where it ends a group and with unused bits zero, as an encoder writes it.
    private static func decode(_ line: UnsafeBufferPointer<UInt8>, into output: inout [UInt8],
                               quantum: inout (UInt32, Int)) -> Bool {
        digitValues.withUnsafeBufferPointer { values in
            var (bits, digits) = quantum
            var index = 0
            while index < line.count {
                let value = values[Int(line[index])]
                if value == 255 { return false }
                if value == 64 {
                    // "=" or "==" closing this line's last group: two or three digits before it, nothing after.
                    let padding = line.count - index
                    guard padding <= 2, digits + padding == 4,
                          line[index...].allSatisfy({ $0 == UInt8(ascii: "=") }) else { return false }
                    if digits == 2 {
                        guard bits & 0xF == 0 else { return false }
                        output.append(UInt8(truncatingIfNeeded: bits >> 4))
                    } else {
                        guard bits & 0x3 == 0 else { return false }
                        output.append(UInt8(truncatingIfNeeded: bits >> 10))
                        output.append(UInt8(truncatingIfNeeded: bits >> 2))
                    }
                    quantum = (0, 0)
                    return true
                }
                bits = bits << 6 | UInt32(value)
                digits += 1
                if digits == 4 {
                    output.append(UInt8(truncatingIfNeeded: bits >> 16))
                    output.append(UInt8(truncatingIfNeeded: bits >> 8))
                    output.append(UInt8(truncatingIfNeeded: bits))
                    bits = 0
                    digits = 0
                }
                index += 1
            }
            quantum = (bits, digits)
            return true
        }
    }
}
