import Testing
@testable import FingerlyPolicy

/// CharacterSearch against Character-by-Character search over many seeded random texts: long
/// runs of CR and LF in every combination, the whole ASCII range, and non-ASCII text whose
/// graphemes join across a CR, an LF or an ASCII letter. Needles are mostly cut from the text
/// at byte offsets, so many split a CR LF pair or a grapheme.
@Suite("Character search, differential")
struct CharacterSearchDifferentialTests {
    /// The same texts on every run.
    private typealias Seeded = SubmissionCLITests.SeededGenerator

    private static func reference(_ text: String, _ needle: String) -> Bool {
        let text = Array(text), needle = Array(needle)
        guard needle.count <= text.count else { return false }
        return (0...(text.count - needle.count)).contains { start in text[start..<(start + needle.count)].elementsEqual(needle) }
    }

    private static let lineEndings: [String] = ["\r", "\n", "\r\n", "a", "A", "\n\r"]
    private static let ascii: [String] = (0..<128).map { String(UnicodeScalar(UInt8($0))) }
    private static let mixed: [String] = ["\r", "\n", "a", "e", "\u{301}", "\u{E9}", "\u{200D}", "\u{1F1FA}", "\u{1F1F8}",
                                          "\u{1F468}", "\u{1100}", "\u{1161}", "\u{11A8}", "\u{0600}", "k", "\u{212A}"]

    private static func text(_ random: inout Seeded, from alphabet: [String], length: Int) -> String {
        var text = ""
        for _ in 0..<length { text += alphabet[random.below(alphabet.count)] }
        return text
    }

    /// A needle cut from the text at byte offsets (repaired into valid UTF-8), or a fresh one.
    private static func needle(_ random: inout Seeded, in text: String, from alphabet: [String]) -> String {
        let bytes = Array(text.utf8)
        if bytes.isEmpty || random.below(4) == 0 { return Self.text(&random, from: alphabet, length: 1 + random.below(4)) }
        let start = random.below(bytes.count)
        let end = min(bytes.count, start + 1 + random.below(6))
        return String(decoding: bytes[start..<end], as: UTF8.self)
    }

    @Test(arguments: [0, 1, 2])
    func agreesWithCharacterSearch(alphabetIndex: Int) {
        let alphabet = [Self.lineEndings, Self.ascii, Self.mixed][alphabetIndex]
        var random = Seeded(state: 0x5EED_0000 + UInt64(alphabetIndex))
        var disagreements: [String] = []
        var found = 0, tried = 0
        for _ in 0..<4_000 {
            let text = Self.text(&random, from: alphabet, length: random.below(24))
            for _ in 0..<6 {
                let needle = Self.needle(&random, in: text, from: alphabet)
                guard !needle.isEmpty else { continue }
                let expected = Self.reference(text, needle)
                tried += 1
                if expected { found += 1 }
                if CharacterSearch.contains(text, needle) != expected {
                    disagreements.append("\(text.debugDescription) ∋ \(needle.debugDescription): expected \(expected)")
                }
            }
        }
        let count = disagreements.count, first = Array(disagreements.prefix(8))
        #expect(count == 0, "\(count) of \(tried): \(first)")
        #expect(found > tried / 10 && found < tried)
    }
}

private extension SubmissionCLITests.SeededGenerator {
    mutating func below(_ bound: Int) -> Int { Int(next() % UInt64(bound)) }
}
