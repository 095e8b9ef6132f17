import Foundation
import Testing
@testable import FingerlyEngine
@testable import FingerlyModel
@testable import FingerlyPolicy
@testable import FingerlyProbes

/// The server's hand-written reader and writer (SubmissionReader, AnswerWriter) against
/// JSONDecoder and JSONEncoder: the same values and the same bytes, or a fall-back to them.
@Suite("Submission reader and answer writer")
struct FastCodingTests {
    private static func body(_ report: SignalReport, proxy: Bool = false) throws -> [UInt8] {
        Array(try JSONEncoder.fingerly.encode(SubmissionBody(client: ClientInfo(proxy: proxy, sdk: "fingerly-linux", version: "0.1.0"),
                                                             report: report)))
    }

    /// JSONDecoder as the server configures it for a submission (dates as SubmissionDate reads them).
    private static func general(_ bytes: [UInt8]) throws -> SubmissionBody {
        try JSONDecoder.submission.decode(SubmissionBody.self, from: Data(bytes))
    }

    /// The reader's value, which must exist and equal JSONDecoder's. A canonical body's report
    /// range is the report's canonical encoding, byte for byte; any other body has none.
    private static func expectSame(_ bytes: [UInt8], canonical: Bool = true,
                                   sourceLocation: SourceLocation = #_sourceLocation) throws {
        let read = try #require(SubmissionReader.read(bytes), sourceLocation: sourceLocation)
        let reference = try general(bytes)
        #expect(read.body.client == reference.client, sourceLocation: sourceLocation)
        #expect(read.body.report == reference.report, sourceLocation: sourceLocation)
        #expect((read.reportRange != nil) == canonical, sourceLocation: sourceLocation)
        if let range = read.reportRange {
            let encoded = Array(try JSONEncoder.fingerly.encode(reference.report))
            #expect(Array(bytes[range]) == encoded, sourceLocation: sourceLocation)
        }
    }

    @Test("every fixture host's report reads as JSONDecoder reads it", arguments: TestPaths.hostFixtures)
    func fixtureHosts(_ host: String) async throws {
        let result = try await identify(root: TestPaths.fixture(host))
        try Self.expectSame(try Self.body(result.report, proxy: host.hasPrefix("v")))
    }

    @Test("escapes, unicode, nulls, unknown members and whitespace read as JSONDecoder reads them")
    func edgesInsideTheSubset() throws {
        let report = EngineFixtures.report(EngineFixtures.host(), tag: "quote \" back\\slash \u{1} tab\t é 😀",
                                           signals: ["env.names": .strings(["A", "b\"c", "ü"]), "n": .int(-42), "b": .bool(true),
                                                     "s": .string("line\nbreak / slash"), "zero": .int(0), "big": .int(999_999_999_999_999_999)])
        // JSONEncoder's own escapes are not told from others: written again, not kept.
        try Self.expectSame(try Self.body(report), canonical: false)
        // A document with members no type knows, explicit nulls and spaces everywhere.
        var text = String(decoding: EngineFixtures.documentedBody, as: UTF8.self)
        text = text.replacingOccurrences(of: #""tag":"checkout""#, with: #""tag" : null , "extra": {"a":[1,2.5,-0.125,true,null,"x"]}"#)
        text = text.replacingOccurrences(of: #""elapsedMs":2.46"#, with: #""elapsedMs": 2 , "prefetchedAgeMs" : null"#)
        text = " \n" + text + "\t\r\n"
        try Self.expectSame(Array(text.utf8), canonical: false)
        let read = try #require(SubmissionReader.read(Array(text.utf8)))
        #expect(read.body.report.tag == nil)
        #expect(read.body.report.elapsedMs == 2)
        // A \u escape of a surrogate pair and of a control character.
        let escaped = String(decoding: EngineFixtures.documentedBody, as: UTF8.self)
            .replacingOccurrences(of: #""tag":"checkout""#, with: #""tag":"\ud83d\ude00\u0007\/""#)
        try Self.expectSame(Array(escaped.utf8), canonical: false)
        #expect(SubmissionReader.read(Array(escaped.utf8))?.body.report.tag == "😀\u{7}/")
    }

    /// Inputs outside the subset: the reader declines, and what JSONDecoder makes of them stands.
    @Test("outside the subset the reader declines and JSONDecoder decides", arguments: [
        (#""budgetMs":1200"#, #""budgetMs":1.2e3"#, true),                          // exponent in an integer
        (#""budgetMs":1200"#, #""budgetMs":1200.0"#, true),                         // fraction in an integer
        (#""budgetMs":1200"#, #""budgetMs":01200"#, false),                         // leading zero: not JSON
        (#""collectedAt":"2026-01-01T00:00:00Z""#, #""collectedAt":"2026-02-30T00:00:00Z""#, false), // no such day
        (#""collectedAt":"2026-01-01T00:00:00Z""#, #""collectedAt":"2026-01-01T05:30:00+05:30""#, true),
        (#""collectedAt":"2026-01-01T00:00:00Z""#, #""collectedAt":"2026-01-01T00:00:00.5Z""#, true),
        (#""collectedAt":"2026-01-01T00:00:00Z""#, #""collectedAt":"1969-12-31T23:59:59Z""#, true),
        (#""budgetMs":1200"#, #""budg\u0065tMs":1200"#, true),                      // escaped member name
        (#""dmi.chassis_type":1"#, #""dmi.chassis_type":1.0"#, true),               // a signal JSONDecoder reads as 1
        (#""dmi.chassis_type":1"#, #""dmi.chassis_type":1e400"#, false),
        (#""budgetMs":1200"#, #""budgetMs":9999999999999999999"#, false),           // 19 digits: past Int, refused by both
        (#""budgetMs":1200"#, #""budgetMs":-9223372036854775808"#, true),           // Int.min: 19 digits, left to JSONDecoder
        (#""tag":"checkout""#, #""tag":"\udc00""#, false),                          // lone surrogate
        (#""tag":"checkout""#, #""tag":"a"#, false),                                // truncated
        (#""tag":"checkout""#, #""tag":"checkout","x":1."#, true),                  // JSONDecoder takes "1." in a member it skips
    ])
    func outsideTheSubset(original: String, replacement: String, generalAccepts: Bool) throws {
        let text = String(decoding: EngineFixtures.documentedBody, as: UTF8.self)
        #expect(text.contains(original))
        let bytes = Array(text.replacingOccurrences(of: original, with: replacement).utf8)
        #expect(SubmissionReader.read(bytes) == nil)
        let decoded = Result { try SubmissionBody.decode(bytes) }
        switch (decoded, Result { try Self.general(bytes) }) {
        case (.success(let value), .success(let reference)):
            #expect(generalAccepts)
            #expect(value.body.report == reference.report)
            #expect(value.reportRange == nil)
        case (.failure, .failure):
            #expect(!generalAccepts)
        default:
            Issue.record("SubmissionBody.decode and JSONDecoder disagree on \(replacement)")
        }
    }

    /// Bytes the reader accepts that JSONEncoder would write otherwise: no report range, so the
    /// stored event writes the canonical encoding itself.
    @Test("a report not in the canonical form has no report range", arguments: [
        (#""tag":"checkout""#, #""tag": "checkout""#), (#""tag":"checkout""#, #""tag":"checkout","tagged":1"#),
        (#""tag":"checkout""#, #""tag":null"#), (#""elapsedMs":2.46"#, #""elapsedMs":2.460"#),
        (#""elapsedMs":2.46"#, #""elapsedMs":2.0"#), (#""budgetMs":1200"#, #""budgetMs":-0"#),
        (#""tag":"checkout""#, #""tag":"check\u006fut""#), (#""tag":"checkout""#, #""tag":"check\/out""#),
        (#""root":"/","schemaVersion":2"#, #""schemaVersion":2,"root":"/""#),
        (#""dmi.bios_vendor":"Bochs","dmi.bios_version":"Bochs""#,
         #""dmi.bios_version":"Bochs","dmi.bios_vendor":"Bochs""#),
        (#""dmi.bios_vendor":"Bochs""#, #""dmi.bios_vendor":"Bochs","é":1"#),
    ])
    func notCanonical(original: String, replacement: String) throws {
        let text = String(decoding: EngineFixtures.documentedBody, as: UTF8.self)
        #expect(text.contains(original))
        try Self.expectSame(EngineFixtures.documentedBody)
        try Self.expectSame(Array(text.replacingOccurrences(of: original, with: replacement).utf8), canonical: false)
    }

    /// JSONDecoder keeps the first of two members, other readers the last: the reader declines,
    /// and the decoding refuses the body, naming where the second one is.
    @Test("a decimal is judged the shortest form from its digits exactly when JSONEncoder writes it so")
    func shortestFormFromDigits() throws {
        var generator = SystemRandomNumberGenerator()
        var decided = 0
        func check(_ text: String) throws {
            let value = try #require(Double(text))
            let encoded = String(decoding: try JSONEncoder.fingerly.encode(value), as: UTF8.self)
            let verdict = Array(text.utf8).withUnsafeBufferPointer { SubmissionReader.isShortestForm($0) }
            if let verdict {
                decided += 1
                #expect(verdict == (encoded == text), "\(text) is written \(encoded)")
            }
        }
        for text in ["0", "-0", "0.0", "1.0", "10", "0.5", "-0.5", "0.001", "0.0001", "0.00123", "12.340", "123456789012345",
                     "1234567890123456", "999999999999999", "0.123456789012345", "9007199254740993"] {
            try check(text)
        }
        for _ in 0..<20_000 {
            let integer = String(UInt64.random(in: 0...UInt64.max, using: &generator) >> UInt64.random(in: 0...63, using: &generator))
            let fractionDigits = Int.random(in: 0...17, using: &generator)
            let fraction = String((0..<fractionDigits).map { _ in Character(String(Int.random(in: 0...9, using: &generator))) })
            let sign = Bool.random(using: &generator) ? "-" : ""
            try check(sign + integer + (fraction.isEmpty ? "" : "." + fraction))
        }
        // Most of what reports carry (durations, sizes) is decided without formatting the value.
        #expect(decided > 5_000)
    }

    @Test("a member given twice anywhere is refused, naming its path", arguments: [
        (#""tag":"checkout""#, #""tag":"checkout","tag":"other""#, "report.tag"),
        (#""dmi.chassis_type":1"#, #""dmi.chassis_type":1,"dmi.chassis_type":2"#, "report.probes[0].signals.dmi.chassis_type"),
        (#""tag":"checkout""#, #""tag":"checkout","t\u0061g":"other""#, "report.tag"),
        (#""tag":"checkout""#, #""tag":"checkout","x":{"a":1,"b":[{"c":1,"c":2}]}"#, "report.x.b[0].c"),
        (#""tag":"checkout""#, #""x":1,"tag":"checkout","x":2"#, "report.x"),
        (#""tag":"checkout""#, #""tag":"checkout","\u00e9":1,"e\u0301":2"#, "report.e?"),
    ])
    func duplicateMembers(original: String, replacement: String, path: String) throws {
        let text = String(decoding: EngineFixtures.documentedBody, as: UTF8.self)
        #expect(text.contains(original))
        let bytes = Array(text.replacingOccurrences(of: original, with: replacement).utf8)
        #expect(SubmissionReader.read(bytes) == nil)
        #expect(throws: DuplicateMember.self) { _ = try SubmissionBody.decode(bytes) }
        do {
            _ = try SubmissionBody.decode(bytes)
        } catch let duplicate as DuplicateMember {
            #expect(duplicate.path == path)
        }
    }

    @Test("members no type reads are counted, by the reader and by the fall-back alike")
    func unknownMembersAreCounted() throws {
        let text = String(decoding: EngineFixtures.documentedBody, as: UTF8.self)
        #expect(try SubmissionBody.decode(EngineFixtures.documentedBody).unknownMembers == 0)
        let extra = text.replacingOccurrences(of: #""tag":"checkout""#, with: #""tag":"checkout","pad":{"a":{"b":1},"c":[{"d":2}]},"q":1"#)
            .replacingOccurrences(of: #""dmi.chassis_type":1"#, with: #""dmi.chassis_type":1},"more":{"x":1"#)
        let fast = try #require(SubmissionReader.read(Array(extra.utf8)))
        #expect(fast.unknownMembers == 3)
        // An escaped name sends the body to JSONDecoder; the scan counts the same members.
        let escaped = extra.replacingOccurrences(of: #""budgetMs""#, with: #""budg\u0065tMs""#)
        #expect(SubmissionReader.read(Array(escaped.utf8)) == nil)
        let general = try SubmissionBody.decode(Array(escaped.utf8))
        #expect(general.unknownMembers == 3 && general.body.report == fast.body.report)
    }

    @Test("the reader declines invalid UTF-8, control characters, a BOM and deep nesting")
    func bytesOutsideTheSubset() throws {
        let documented = EngineFixtures.documentedBody
        var invalid = documented
        let tagAt = try #require(String(decoding: documented, as: UTF8.self).range(of: "checkout")).lowerBound.utf16Offset(in: String(decoding: documented, as: UTF8.self))
        invalid[tagAt] = 0xFF
        #expect(SubmissionReader.read(invalid) == nil)
        var control = documented
        control[tagAt] = 0x01
        #expect(SubmissionReader.read(control) == nil)
        #expect(SubmissionReader.read([0xEF, 0xBB, 0xBF] + documented) == nil)
        let deep = String(repeating: "[", count: 40) + String(repeating: "]", count: 40)
        let nested = String(decoding: documented, as: UTF8.self).replacingOccurrences(of: #""tag":"checkout""#, with: #""x":\#(deep)"#)
        #expect(SubmissionReader.read(Array(nested.utf8)) == nil)
        #expect(try SubmissionBody.decode(Array(nested.utf8)).body.report.tag == nil)
        #expect(SubmissionReader.read([]) == nil)
        #expect(SubmissionReader.read(Array("[]".utf8)) == nil)
    }

    // MARK: ReportWriter

    private static func expectSameEncoding(_ report: SignalReport,
                                           sourceLocation: SourceLocation = #_sourceLocation) throws {
        let written = String(decoding: ReportWriter.report(report), as: UTF8.self)
        let reference = String(decoding: try JSONEncoder.fingerly.encode(report), as: UTF8.self)
        #expect(written == reference, sourceLocation: sourceLocation)
    }

    @Test("every fixture host's report is written as JSONEncoder writes it", arguments: TestPaths.hostFixtures)
    func fixtureReportsAreWrittenAsJSONEncoderWritesThem(_ host: String) async throws {
        try Self.expectSameEncoding(try await identify(root: TestPaths.fixture(host)).report)
    }

    @Test("escapes, unicode, odd numbers, fractions of a second and absent members are written as JSONEncoder does")
    func edgesOfTheReportWriter() throws {
        let numbers: [Double] = [0, -0.0, 2, 2.5, 0.1 + 0.2, 1e-5, 1e-7, 123_456.789, 1e15, 1e16, 1e300, -1.5e-300,
                                 Double.leastNonzeroMagnitude, Double.greatestFiniteMagnitude, 4_503_599_627_370_496.5]
        let signals: [String: SignalValue] = ["é.name": .string("ü\n"), "a\"b": .strings(["x", "\u{7F}", ""]),
                                              "Z": .int(Int.min), "z": .bool(false), "": .int(Int.max),
                                              "\u{1F600}": .strings([])]
        for (index, number) in numbers.enumerated() {
            let even = index.isMultiple(of: 2)
            let base = EngineFixtures.report(EngineFixtures.host(), tag: even ? nil : "t\u{0}\u{1F}\"\\/é😀\u{2028}",
                                             signals: signals)
            let probe = base.probes[0]
            let changed = ProbeEntry(id: probe.id, tier: .deferred, status: .timeout, durationMs: number,
                                     detail: index.isMultiple(of: 3) ? nil : "why \"\t",
                                     issues: [SourceIssue(path: "/p\\q", status: .denied, detail: "é")],
                                     signals: probe.signals, identityComponents: probe.identityComponents)
            let collectedAt = Date(timeIntervalSince1970: 1_767_225_600 + (index == 3 ? 0.25 : 0))
            let report = SignalReport(schemaVersion: 2, collectorVersion: "0.1.0", collectedAt: collectedAt, tag: base.tag,
                                      root: "/r\u{1}", tiers: [.fast, .deferred], budgetMs: -1, elapsedMs: -number,
                                      probes: [changed, probe], identity: base.identity,
                                      identifierKeying: even ? nil : .installationSecret, freeText: even ? .keep : nil,
                                      prefetchedAgeMs: even ? number : nil)
            try Self.expectSameEncoding(report)
        }
        let documented = try JSONDecoder.fingerly.decode(SubmissionBody.self, from: Data(EngineFixtures.documentedBody))
        try Self.expectSameEncoding(documented.report)
    }

    // MARK: AnswerWriter

    private static func answers() -> [IdentifyAnswer] {
        let engine = VerdictEngine(policy: .embedded(), catalogue: .embedded)
        let verdicts = Verdicts(engine.evaluate(EngineFixtures.report(EngineFixtures.host(), signals: [
            "dmi.sys_vendor": .string("QEMU"), "dmi.virtualization_kind": .string("qemu \"quoted\" ü"), "proc.tracer_pid": .int(7),
        ])))
        let triggers = [IdentifyTrigger(signal: "vm_dmi", group: "virtualization", weight: 20, confidence: .high),
                        IdentifyTrigger(signal: "with \"quote\" and é", group: "farm", weight: -3, confidence: .low)]
        return [
            IdentifyAnswer(requestId: "req_1", visitorId: "vis_1", visitorIsNew: true, visitorConfidence: 100, identifiable: true,
                           duplicate: false, suspectScore: 35, suspectLevel: .medium, triggers: triggers, verdicts: verdicts,
                           policy: "default"),
            IdentifyAnswer(requestId: "req_2", visitorId: "vis/2", visitorIsNew: false, visitorConfidence: 0, identifiable: false,
                           duplicate: true, suspectScore: nil, suspectLevel: nil, triggers: nil, verdicts: nil, policy: nil),
            IdentifyAnswer(requestId: "req_3", visitorId: "vis_3\u{7f}", visitorIsNew: false, visitorConfidence: 55, identifiable: true,
                           duplicate: false, suspectScore: 0, suspectLevel: .low, triggers: [], verdicts: verdicts, policy: "ünïcode \"policy\""),
        ]
    }

    @Test("answers and verdicts are JSONEncoder's bytes")
    func answersAreJSONEncoderBytes() throws {
        for answer in Self.answers() {
            let writer = AnswerWriter(policyName: answer.policy)
            let verdicts = answer.verdicts.map(AnswerWriter.verdicts)
            if let value = answer.verdicts {
                #expect(verdicts == Array(try JSONEncoder.fingerly.encode(value)))
            }
            #expect(writer.answer(answer, verdicts: verdicts) == Array(try JSONEncoder.fingerly.encode(answer)))
        }
    }

    @Test("an event decodes as the stored event, with nulls written and the report last")
    func eventsDecode() throws {
        let report = EngineFixtures.report(EngineFixtures.host(), tag: "t\"ag")
        let rawReport = Array(try JSONEncoder.fingerly.encode(report))
        for answer in Self.answers() where !answer.duplicate {
            let writer = AnswerWriter(policyName: answer.policy)
            let document = writer.event(answer, verdicts: answer.verdicts.map(AnswerWriter.verdicts), receivedAt: EngineFixtures.now,
                                        tag: report.tag, signature: StoredEvent.Signature(verified: true, keyId: "ab\"12"),
                                        report: rawReport)
            let event = try JSONDecoder.fingerly.decode(StoredEvent.self, from: Data(document))
            #expect(event.requestId == answer.requestId && event.visitorId == answer.visitorId)
            #expect(event.receivedAt == Date(timeIntervalSince1970: Double(EngineFixtures.now)))
            #expect(event.suspectScore == answer.suspectScore && event.verdicts == answer.verdicts)
            #expect(event.triggers == (answer.triggers ?? []))
            #expect(event.tag == "t\"ag" && event.signature.keyId == "ab\"12" && event.report == report)
            let text = String(decoding: document, as: UTF8.self)
            #expect(text.hasSuffix(#""report":"# + String(decoding: rawReport, as: UTF8.self) + "}"))
            if answer.suspectScore == nil { #expect(text.contains(#""suspectScore":null"#)) }
        }
    }

    @Test("receivedAt is written as JSONEncoder writes the date", arguments: [
        Int64(0), 59, 86_399, 951_782_400, 1_767_225_600, 4_107_542_399, 253_402_300_799, 253_402_300_800, -1, -62_135_596_800,
    ])
    func timestamps(_ seconds: Int64) throws {
        let reference = try JSONEncoder.fingerly.encode(Date(timeIntervalSince1970: Double(seconds)))
        #expect(Array(#"""#.utf8) + Array(JSONBuffer.iso8601(seconds).utf8) + Array(#"""#.utf8) == Array(reference))
    }
}
