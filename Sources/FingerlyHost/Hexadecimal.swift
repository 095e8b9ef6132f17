/// Bytes as lower-case hexadecimal, two digits each: how every digest and fingerprint is written, in reports, in
/// files and on the wire.
package func lowercaseHex(_ bytes: [UInt8]) -> String {
    let digits: StaticString = "0123456789abcdef"
    return String(unsafeUninitializedCapacity: 2 * bytes.count) { output in
        digits.withUTF8Buffer { digits in
            for (index, byte) in bytes.enumerated() {
                output[2 * index] = digits[Int(byte >> 4)]
                output[2 * index + 1] = digits[Int(byte & 0xF)]
            }
        }
        return 2 * bytes.count
    }
}
