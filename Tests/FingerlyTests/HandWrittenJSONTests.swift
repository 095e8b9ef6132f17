import Foundation
import Testing
@testable import Fingerly
@testable import FingerlyModel

/// The hand writer (JSONBuffer, ReportWriter, `IdentifyResult.json`) against its oracle,
/// `JSONEncoder.fingerly`: the same bytes for every fixture host's submission body and printed
/// result, and for strings and numbers from every class JSONEncoder treats apart.
@Suite struct HandWrittenJSONTests {
    /// The roots FixtureHostTests and EnvironmentCorpusTests collect from.
    static let fixtureRoots: [String] = {
        let fixtures = TestPaths.packageRoot + "/Tests/Fixtures"
        let hosts = ((try? FileManager.default.contentsOfDirectory(atPath: fixtures + "/hosts")) ?? [])
            .filter { $0 != "README.md" }.map { fixtures + "/hosts/" + $0 }
        let environments = ((try? FileManager.default.contentsOfDirectory(atPath: fixtures + "/environments")) ?? [])
            .map { fixtures + "/environments/" + $0 + "/root" }
        return (hosts + environments).sorted()
    }()

    private static func oracle(_ value: some Encodable) throws -> String {
        String(decoding: try JSONEncoder.fingerly.encode(value), as: UTF8.self)
    }

    private static func written(_ write: (inout JSONBuffer) -> Void) -> String {
        var buffer = JSONBuffer(capacity: 64)
        write(&buffer)
        return String(decoding: buffer.bytes, as: UTF8.self)
    }

    @Test func everyFixtureFamilyIsFound() {
        #expect(Self.fixtureRoots.contains { $0.hasSuffix("/hosts/laptop-baremetal") })
        #expect(Self.fixtureRoots.count > 100, "\(Self.fixtureRoots.count) roots")
    }

    /// A frozen clock (a whole second, no durations) and the live one (fractions everywhere).
    @Test(arguments: fixtureRoots)
    func fixtureResultAndBodyAreJSONEncodersBytes(_ root: String) async throws {
        for frozenClock in [Date(timeIntervalSince1970: 1_717_171_717), nil] {
            var options = FingerlyOptions(root: root)
            options.frozenClock = frozenClock
            let fingerly = try Fingerly.loadBlocking(apiKey: TestKeys.standard, consent: .granted, options: options)
            let result = try await fingerly.identify(submit: false)
            let printed = try #require(result.json)
            #expect(String(decoding: printed, as: UTF8.self) == (try Self.oracle(result)))
            for proxy in [false, true] {
                let client = ClientInfo(proxy: proxy, sdk: "fingerly-linux", version: Fingerly.version)
                let body = SubmissionBody(client: client, report: result.report)
                let submission = try #require(ReportWriter.submission(body))
                #expect(String(decoding: submission, as: UTF8.self) == (try Self.oracle(body)))
            }
            let request = try #require(result.request)
            let body = try JSONDecoder.fingerly.decode(SubmissionBody.self, from: Data(request.body.utf8))
            #expect(request.body == (try Self.oracle(body)))
        }
    }

    /// Every ASCII byte alone, then seeded strings mixing every byte class: control characters,
    /// the escaped `"` and `\`, `/`, DEL, two- three- and four-byte UTF-8, U+2028 and U+2029.
    @Test func stringsAreEscapedAsJSONEncoderEscapesThem() throws {
        var samples = (0..<0x80).map { String(UnicodeScalar(UInt8($0))) }
        let classes: [[Unicode.Scalar]] = [
            (0..<0x20).map { Unicode.Scalar(UInt8($0)) }, ["\"", "\\", "/", "\u{7F}"],
            (0x20..<0x7F).map { Unicode.Scalar(UInt8($0)) }, ["é", "ß", "\u{80}", "\u{7FF}"],
            ["\u{2028}", "\u{2029}", "\u{FEFF}", "\u{FFFD}", "\u{800}", "€"], ["😀", "\u{10000}", "\u{10FFFF}"],
        ]
        var generator = SeededGenerator(seed: 24)
        for _ in 0..<5_000 {
            var text = String.UnicodeScalarView()
            for _ in 0..<Int.random(in: 0...24, using: &generator) {
                let scalars = classes.randomElement(using: &generator)!
                text.append(scalars.randomElement(using: &generator)!)
            }
            samples.append(String(text))
        }
        for text in samples {
            let expected = try Self.oracle(text)
            #expect(Self.written { $0.string(text) } == expected, "\(Array(text.utf8))")
        }
    }

    /// Seeded bit patterns (every exponent, subnormals), integral values about 2^53 and the
    /// edge of the exponent form, and the fixed points JSONEncoder spells apart.
    @Test func doublesAreSpelledAsJSONEncoderSpellsThem() throws {
        var samples: [Double] = [0, -0.0, 1, -1, 0.1, 1e15, 1e16, 1e17, 1e-4, 1e-5, 123_456_789_012_345_680,
                                 .greatestFiniteMagnitude, -.greatestFiniteMagnitude, .leastNonzeroMagnitude,
                                 .leastNormalMagnitude, .ulpOfOne, 9_007_199_254_740_992, 0.5, 2.5e-308]
        samples += (-30...30).map { pow(10, Double($0)) }
        var generator = SeededGenerator(seed: 2_024)
        while samples.count < 20_000 {
            let bits = Double(bitPattern: generator.next())
            if bits.isFinite { samples.append(bits) }
            samples.append(Double(Int64.random(in: -(1 << 60)...(1 << 60), using: &generator)))
            samples.append(Double.random(in: -1e6...1e6, using: &generator).rounded() / 1_000)
        }
        for value in samples {
            let expected = try Self.oracle(value)
            #expect(Self.written { $0.real(value) } == expected, "\(value.bitPattern)")
        }
    }

    @Test func integersAreJSONEncodersDigits() throws {
        var samples: [Int] = [0, -1, 1, .min, .max, .min + 1, .max - 1]
        var generator = SeededGenerator(seed: 7)
        for _ in 0..<2_000 {
            samples.append(Int(truncatingIfNeeded: generator.next()) >> Int.random(in: 0...63, using: &generator))
        }
        for value in samples {
            #expect(Self.written { $0.integer(value) } == (try Self.oracle(value)))
        }
    }

    /// Whole and fractional seconds across years 1970–9999, times a rounding away from the next
    /// second, and times outside those years (left to JSONEncoder).
    @Test func datesAreTheSecondsISO8601Writes() throws {
        var samples: [Double] = [0, 0.9999999, 0.99999999, 1e-10, -1e-7, -0.5, -86_400.3, 951_782_400, 4_107_542_400,
                                 253_402_300_799.9, 253_402_300_800, -62_135_596_801]
        var generator = SeededGenerator(seed: 1_970)
        for _ in 0..<5_000 {
            let second = Double(Int64.random(in: 0..<253_402_300_800, using: &generator))
            samples.append(second)
            samples.append(second + Double.random(in: 0..<1, using: &generator))
            samples.append(second + 1 - Double.random(in: 0..<1e-6, using: &generator))
        }
        for seconds in samples {
            let date = Date(timeIntervalSince1970: seconds)
            #expect(Self.written { $0.date(date) } == (try Self.oracle(date)), "\(seconds)")
        }
    }

    /// JSONEncoder refuses NaN and the infinities; the writer marks them so its callers refuse
    /// them through JSONEncoder too.
    @Test func nonConformingNumbersAreMarkedRefused() {
        for value in [Double.nan, .infinity, -.infinity] {
            var buffer = JSONBuffer(capacity: 8)
            buffer.real(value)
            #expect(buffer.refused)
            #expect((try? JSONEncoder.fingerly.encode(value)) == nil)
        }
        var buffer = JSONBuffer(capacity: 8)
        buffer.real(1.5)
        #expect(!buffer.refused)
    }
}
