import Testing
@testable import FingerlyPolicy

/// The policy's substring test answers as the standard library's `String.contains` does:
/// a run of whole Characters. The reference below is that definition spelled out, since a
/// plain `contains` call here may bind to Foundation's, which compares scalars.
@Suite("Character search")
struct CharacterSearchTests {
    private static func reference(_ text: String, _ needle: String) -> Bool {
        let text = Array(text), needle = Array(needle)
        guard needle.count <= text.count else { return false }
        return (0...(text.count - needle.count)).contains { start in text[start..<(start + needle.count)].elementsEqual(needle) }
    }

    /// Every text of up to five and every needle of up to three from an alphabet with CR and
    /// LF, whose pair is the one two-byte Character in ASCII: each answer is String.contains's.
    @Test func asciiAnswersAsStringContainsDoes() {
        let alphabet = ["a", "b", "\r", "\n"]
        func all(upTo length: Int) -> [String] {
            var level = [""], everything = [""]
            for _ in 0..<length {
                level = level.flatMap { prefix in alphabet.map { prefix + $0 } }
                everything += level
            }
            return everything
        }
        let texts = all(upTo: 5)
        let needles = all(upTo: 3).filter { !$0.isEmpty }
        var disagreements: [String] = []
        var found = 0
        for text in texts {
            for needle in needles {
                let expected = Self.reference(text, needle)
                if expected { found += 1 }
                if CharacterSearch.contains(text, needle) != expected {
                    disagreements.append("\(text.debugDescription) ∋ \(needle.debugDescription): expected \(expected)")
                }
            }
        }
        #expect(disagreements.isEmpty, "\(disagreements.prefix(10))")
        // Both answers occur, so the comparison above tested something.
        #expect(found > 0 && found < texts.count * needles.count)
    }

    @Test func splitLineEndingsAreNotMatches() {
        #expect(!CharacterSearch.contains("gdb\r\nserver", "\nserver"))
        #expect(!CharacterSearch.contains("gdb\r\nserver", "gdb\r"))
        #expect(CharacterSearch.contains("gdb\r\nserver", "gdb\r\n"))
        #expect(CharacterSearch.contains("frida-agent", "frida"))
        #expect(!CharacterSearch.contains("fri", "frida"))
    }

    /// Outside ASCII, and for an empty needle, the answer is String.contains's own: canonical
    /// equivalents match, a base letter without its combining mark does not.
    @Test func otherTextAnswersAsStringContainsDoes() {
        let cases: [(String, String)] = [
            ("cafe\u{301}", "cafe"), ("caf\u{E9}", "cafe\u{301}"), ("cafe\u{301}", "caf\u{E9}"),
            ("x\u{1F1FA}\u{1F1F8}y", "\u{1F1FA}"), ("ᴋvm", "kvm"), ("kvm", ""), ("", ""),
            ("qemu\u{200D}", "qemu"), ("A\u{30A}", "\u{C5}"),
        ]
        for (text, needle) in cases {
            #expect(CharacterSearch.contains(text, needle) == Self.reference(text, needle), "\(text.debugDescription) ∋ \(needle.debugDescription)")
        }
    }
}
