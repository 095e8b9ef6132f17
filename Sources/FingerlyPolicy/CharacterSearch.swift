/// Substring search with `String.contains`'s answers, fast for ASCII.
///
/// `String.contains` compares Characters: it finds "\r\n" in "a\r\nb" but not "\n", since CR LF
/// is one grapheme. In ASCII that pair is the only Character of two scalars, so a byte match
/// is a Character match unless it starts on the LF or ends on the CR of a pair. Anything else
/// (a non-ASCII byte on either side, an empty needle) goes to `String.contains` itself.
enum CharacterSearch {
    static func contains(_ text: String, _ needle: String) -> Bool {
        var text = text
        var needle = needle
        let answer: Bool? = text.withUTF8 { textBytes in
            needle.withUTF8 { needleBytes in asciiContains(textBytes, needleBytes) }
        }
        return answer ?? text.contains(needle)
    }

    /// nil when either side is not ASCII or the needle is empty.
    private static func asciiContains(_ text: UnsafeBufferPointer<UInt8>, _ needle: UnsafeBufferPointer<UInt8>) -> Bool? {
        guard let first = needle.first, isASCII(needle), isASCII(text) else { return nil }
        let carriageReturn = UInt8(ascii: "\r"), lineFeed = UInt8(ascii: "\n")
        guard needle.count <= text.count else { return false }
        let last = needle[needle.count - 1]
        var start = 0
        while start + needle.count <= text.count {
            defer { start += 1 }
            guard text[start] == first else { continue }
            var offset = 1
            while offset < needle.count && text[start + offset] == needle[offset] { offset += 1 }
            guard offset == needle.count else { continue }
            let end = start + needle.count
            if first == lineFeed && start > 0 && text[start - 1] == carriageReturn { continue }
            if last == carriageReturn && end < text.count && text[end] == lineFeed { continue }
            return true
        }
        return false
    }

    private static func isASCII(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        var combined: UInt8 = 0
        for byte in bytes { combined |= byte }
        return combined < 0x80
    }
}
