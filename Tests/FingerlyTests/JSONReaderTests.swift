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
