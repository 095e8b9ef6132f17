import Foundation
import Testing
@testable import Fingerly
@testable import FingerlyHost
@testable import FingerlyModel
@testable import FingerlyPolicy
@testable import FingerlyProbes

private func parse(_ text: String) throws(JSONParser.SyntaxError) -> JSONValue {
    try JSONParser.parse(Array(text.utf8))
}

@Suite struct JSONReaderTests {
    @Test func deepNestingIsAnErrorNotAStackOverflow() {
        for opener in ["[", #"{"a":"#] {
            let text = String(repeating: opener, count: 1_000_000)
            #expect { try parse(text) } throws: { "\($0)".contains("nested too deeply") }
        }
        let allowed = String(repeating: "[", count: 128) + String(repeating: "]", count: 128)
        #expect((try? parse(allowed)) != nil)
    }

    @Test(arguments: [#""\u+041""#, #""\u-041""#, #""\u 041""#, #""\u004""#, #""\uD83D\u+E00""#])
    func escapesTakeExactlyFourHexDigits(_ text: String) {
        #expect(throws: JSONParser.SyntaxError.self) { try parse(text) }
    }

    @Test func escapesDecode() throws {
        #expect(try parse(#""\u0041\uD83D\uDE00\u00e9\n""#) == .string("A😀é\n"))
    }

    @Test(arguments: ["+1", "01", "1.", ".5", "1e", "1e+", "--1", "1.e3", "-", "1-2", "0x10"])
    func numbersFollowTheJSONGrammar(_ text: String) {
        #expect(throws: JSONParser.SyntaxError.self) { try parse("[" + text + "]") }
    }

    @Test(arguments: [("0", 0.0), ("-0.5", -0.5), ("12e2", 1200), ("1E-2", 0.01), ("-3.25e+1", -32.5)])
    func validNumbersParse(_ text: String, _ value: Double) throws {
        #expect(try parse(text) == .number(value))
    }

    @Test func aHugeNumberIsRejectedNotConverted() throws {
        let digits = "1" + String(repeating: "0", count: 4 * 1024 * 1024)
        #expect { try parse(digits) } throws: { "\($0)".contains("number longer than") }
        // Out of range but short: infinity, which every whole-number check then refuses.
        #expect(try parse("1e999") == .number(.infinity))
    }
}

/// The error a document must fail with, or nil with an issue recorded when it parses.
private func syntaxError(_ bytes: [UInt8]) -> JSONParser.SyntaxError? {
    do {
        let value = try JSONParser.parse(bytes)
        Issue.record("parsed as \(value)")
        return nil
    } catch {
        return error
    }
}

private func syntaxError(_ text: String) -> JSONParser.SyntaxError? { syntaxError(Array(text.utf8)) }

/// RFC 8259: numbers, duplicate members, UTF-8 and escapes, each error naming the failing value.
@Suite struct JSONReaderStrictnessTests {
    @Test(arguments: ["+1", "01", "-01", "00", "1.", ".5", "1e", "1e+", "1E-", "-", "--1", "1.e3", "1-2", "NaN", "Infinity",
                      "-Infinity", "0x10", "0X1F", "1.5.2", "1e5e5"])
    func numbersJSONDoesNotAllowAreRejectedAtTheirPath(_ text: String) throws {
        let error = try #require(syntaxError(#"{"a": [true, "# + text + "]}"))
        #expect(error.path == "$.a[1]")
        #expect(error.offset == 13)
    }

    @Test func numbersAfterOtherValuesAreCheckedAtTheirOwnPath() throws {
        let error = try #require(syntaxError("01"))
        #expect(error.path == "$")
        #expect(error.offset == 0)
    }

    @Test(arguments: [("0", 0.0), ("-0", -0.0), ("1.5e-3", 0.0015), ("1E+2", 100), ("0.0", 0), ("0e0", 0), ("-0.0E-0", -0.0),
                      ("123456789", 123456789), ("10", 10)])
    func validNumberEdgeCasesParse(_ text: String, _ expected: Double) throws {
        #expect(try parse(text) == .number(expected))
        #expect(try parse("[" + text + "]") == .array([.number(expected)]))
    }

    @Test func negativeZeroKeepsItsSign() throws {
        guard case .number(let value) = try parse("-0") else { Issue.record("not a number"); return }
        #expect(value.sign == .minus)
    }

    @Test(arguments: [
        (#"{"a": 1, "a": 1}"#, "$.a", 9),
        (#"{"a": 1, "b": {"c": 1, "d": [], "c": 2}}"#, "$.b.c", 32),
        (#"{"a": 1, "\u0061": 2}"#, "$.a", 9),
        (#"{"": 1, "": 2}"#, #"$[""]"#, 8),
        (#"[{"x": 0}, {"k y": 1, "k y": 2}]"#, #"$[1]["k y"]"#, 22),
    ])
    func duplicateKeysAreRejectedAtTheDuplicatedMember(_ text: String, _ path: String, _ offset: Int) throws {
        let error = try #require(syntaxError(text))
        #expect(error.path == path)
        #expect(error.offset == offset)
        #expect(error.message.contains("duplicate"))
    }

    @Test func keysThatDifferInAnyByteAreDistinct() throws {
        let value = try parse(#"{"a": 1, "A": 2, "a ": 3, " a": 4, "\u00e9": 5}"#)
        guard case .object(let members) = value else { Issue.record("not an object"); return }
        #expect(members.count == 5)
        #expect(members["A"] == .number(2))
    }

    /// Byte-different keys that Swift's String equality folds together (canonical equivalence)
    /// cannot both live in the reader's dictionary: one would silently replace the other.
    @Test func canonicallyEquivalentKeysAreRefusedNotMerged() throws {
        let error = try #require(syntaxError(#"{"\u00e9": 1, "e\u0301": 2}"#))
        #expect(error.path == #"$["e\u0301"]"#)
        #expect(error.offset == 14)
    }

    @Test(arguments: [
        [0xC0, 0x80], [0xC1, 0xBF], [0xE0, 0x80, 0x80], [0xE0, 0x9F, 0xBF], [0xF0, 0x80, 0x80, 0x80], [0xF0, 0x8F, 0xBF, 0xBF],  // overlong
        [0xED, 0xA0, 0x80], [0xED, 0xBF, 0xBF], [0xED, 0xB0, 0x80],  // surrogates encoded in UTF-8
        [0xF4, 0x90, 0x80, 0x80], [0xF5, 0x80, 0x80, 0x80], [0xF8, 0x88, 0x80, 0x80, 0x80], [0xFE], [0xFF],  // past U+10FFFF
        [0xE2, 0x82], [0xC3], [0xF0, 0x9F, 0x98], [0x80], [0xBF], [0xC3, 0x28], [0xE2, 0x28, 0xA1],  // truncated or stray
    ] as [[UInt8]])
    func invalidUTF8InAStringIsRejectedAtItsPath(_ sequence: [UInt8]) throws {
        let error = try #require(syntaxError(Array(#"{"k": ["ok", "ab"#.utf8) + sequence + Array(#"cd"]}"#.utf8)))
        #expect(error.path == "$.k[1]")
        #expect(error.offset == 16)
        #expect(error.message.contains("UTF-8"))
    }

    @Test func invalidUTF8InAKeyIsRejectedAtItsObject() throws {
        let error = try #require(syntaxError(Array(#"{"a": {"x"#.utf8) + [0xED, 0xA0, 0x80] + Array(#"": 1}}"#.utf8)))
        #expect(error.path == "$.a")
        #expect(error.offset == 9)
    }

    @Test(arguments: [[0xFF], [0xC3, 0xA9], [0xEF, 0xBB, 0xBF]] as [[UInt8]])
    func bytesOutsideStringsAreRejected(_ sequence: [UInt8]) throws {
        let afterDocument = try #require(syntaxError(Array("[1]".utf8) + sequence))
        #expect(afterDocument.path == "$")
        #expect(afterDocument.offset == 3)
        let asValue = try #require(syntaxError(Array(#"{"a": "#.utf8) + sequence + Array("}".utf8)))
        #expect(asValue.path == "$.a")
        #expect(asValue.offset == 6)
    }

    @Test func wellFormedUTF8Parses() throws {
        let sequences: [[UInt8]] = [[0xC2, 0x80], [0xDF, 0xBF], [0xE0, 0xA0, 0x80], [0xED, 0x9F, 0xBF], [0xEE, 0x80, 0x80],
                                    [0xEF, 0xBF, 0xBF], [0xF0, 0x90, 0x80, 0x80], [0xF4, 0x8F, 0xBF, 0xBF], [0x7F]]
        for sequence in sequences {
            let bytes = Array(#"{""#.utf8) + sequence + Array(#"": "x"#.utf8) + sequence + Array(#""}"#.utf8)
            let text = String(decoding: sequence, as: UTF8.self)
            #expect(try JSONParser.parse(bytes) == .object([text: .string("x" + text)]))
        }
        #expect(try parse("\"é€😀\"") == .string("é€😀"))
    }

    @Test(arguments: [
        (#"{"s": "\uD800"}"#, 7), (#"{"s": "ab\uD800x"}"#, 9), (#"{"s": "\uD800\u0041"}"#, 7), (#"{"s": "\uD800\n"}"#, 7),
        (#"{"s": "\uDBFF\uD800"}"#, 7), (#"{"s": "\uD83D\uD83D\uDE00"}"#, 7), (#"{"s": "\uDC00"}"#, 7),
        (#"{"s": "x\uDFFF\uD800"}"#, 8), (#"{"s": "\uD83D\uDE00\uDE00"}"#, 19),
    ])
    func loneSurrogateEscapesAreRejectedAtTheirPath(_ text: String, _ offset: Int) throws {
        let error = try #require(syntaxError(text))
        #expect(error.path == "$.s")
        #expect(error.offset == offset)
        #expect(error.message.contains("surrogate"))
    }

    @Test func pairedSurrogateEscapesDecode() throws {
        #expect(try parse(#"["\uD800\uDC00", "\uDBFF\uDFFF", "\ud83d\ude00"]"#)
                == .array([.string("\u{10000}"), .string("\u{10FFFF}"), .string("😀")]))
    }

    @Test(arguments: 0..<0x20)
    func rawControlCharactersInStringsAreRejected(_ byte: Int) throws {
        let error = try #require(syntaxError(Array(#"{"a": ["x"#.utf8) + [UInt8(byte)] + Array(#""]}"#.utf8)))
        #expect(error.path == "$.a[0]")
        #expect(error.offset == 9)
        let inKey = try #require(syntaxError(Array(#"{"x"#.utf8) + [UInt8(byte)] + Array(#"": 1}"#.utf8)))
        #expect(inKey.path == "$")
    }

    @Test func escapedControlCharactersParse() throws {
        #expect(try parse(#""\u0000\u001f\b\f\n\r\t""#) == .string("\u{0}\u{1F}\u{8}\u{C}\n\r\t"))
    }

    @Test(arguments: [
        (#"{"verdicts": {"debugger": {"rules": [{}, {"id": "a"}, {"id": "b", "when": tru}]}}}"#, "$.verdicts.debugger.rules[2].when", 74),
        (#"{"a b": [0, 01]}"#, #"$["a b"][1]"#, 12),
        (#"{"9a": nul}"#, #"$["9a"]"#, 7),
        (#"{"q\"\\\u001b": [}"#, #"$["q\"\\\u001B"][0]"#, 17),
        (#"{"a": 1 "b": 2}"#, "$", 8),
        (#"{"a": [1 2]}"#, "$.a", 9),
        (#"{"a" 1}"#, "$.a", 5),
        (#"{"a": 1,}"#, "$", 8),
        (#"[1, 2,]"#, "$[2]", 6),
        (#"[truex]"#, "$[0]", 1),
        (#"{"a": [1]} x"#, "$", 11),
        (#"{"a": [1, {"b": "#, "$.a[1].b", 16),
        (#""#, "$", 0),
    ])
    func errorsNameThePathOfTheFailingValue(_ text: String, _ path: String, _ offset: Int) throws {
        let error = try #require(syntaxError(text))
        #expect(error.path == path)
        #expect(error.offset == offset)
        #expect(error.description.contains(path))
        #expect(error.description.contains("byte \(offset)"))
    }

    @Test func aPathQuotingHostileKeysStaysShort() throws {
        let longKey = String(repeating: "k", count: 1_000_000)
        let error = try #require(syntaxError(#"{""# + longKey + #"": ["\uD800"]}"#))
        #expect(error.path.utf8.count < 200)
        #expect(error.path.hasPrefix(#"$["kkk"#))
        #expect(error.path.hasSuffix("[0]"))

        let deep = String(repeating: #"{"member": ["#, count: 200)
        let deepError = try #require(syntaxError(deep))
        #expect(deepError.message.contains("nested too deeply"))
        #expect(deepError.path.utf8.count <= JSONParser.pathByteLimit)
        #expect(deepError.path.hasPrefix("$.member[0].member"))
        #expect(deepError.path.contains("…"))
    }

    @Test func aPolicySyntaxErrorNamesThePath() throws {
        let policy = #"{"policyVersion": 1, "verdicts": {"debugger": {"rules": [{"id": "x", "when": {"a": 01}}]}}}"#
        do {
            _ = try PolicyLoader(catalogue: .embedded, tables: .embedded).load(Data(policy.utf8), source: "p.json")
            Issue.record("loaded")
        } catch {
            #expect(error.location == "$.verdicts.debugger.rules[0].when.a")
            #expect(error.description.contains("$.verdicts.debugger.rules[0].when.a"))
            #expect(error.description.contains("not valid JSON"))
            #expect(error.description.contains("byte 83"))
        }
    }

    @Test func longStringsAndArraysParseInOnePass() throws {
        let escaped = String(repeating: #"\u00e9\n"#, count: 200_000)
        #expect(try parse("\"" + escaped + "\"") == .string(String(repeating: "é\n", count: 200_000)))
        let items = Array(repeating: "0", count: 200_000).joined(separator: ",")
        guard case .array(let values) = try parse("[" + items + "]") else { Issue.record("not an array"); return }
        #expect(values.count == 200_000)
        let members = (0..<50_000).map { #""k\#($0)": \#($0)"# }.joined(separator: ",")
        guard case .object(let object) = try parse("{" + members + "}") else { Issue.record("not an object"); return }
        #expect(object.count == 50_000)
    }
}
