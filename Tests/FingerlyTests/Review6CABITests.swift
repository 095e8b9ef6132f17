import Foundation
import Testing
@testable import FingerlyModel

/// One line of Tests/CABI/review6.c: a call's outcome and what C saw of its error record.
struct HostileCallerLine: Decodable {
    let caseName: String
    let rc: Int
    let kind: Int
    let length: Int
    let validUTF8: Bool
    let terminated: Bool
    let message: String

    enum CodingKeys: String, CodingKey {
        case caseName = "case", rc, kind, length, validUTF8, terminated, message
    }

    static func lines(_ output: ProcessOutput) throws -> [String: HostileCallerLine] {
        let decoded = try output.standardOutput.split(separator: "\n").map {
            try JSONDecoder().decode(HostileCallerLine.self, from: Data($0.utf8))
        }
        return Dictionary(decoded.map { ($0.caseName, $0) }, uniquingKeysWith: { first, _ in first })
    }
}

/// `fingerly_error` as the C compiler lays it out.
struct ErrorRecordLayout: Decodable, Equatable {
    let kind: Int
    let status: Int
    let retryable: Int
    let message: Int
    let size: Int
    let alignment: Int
}

/// The C ABI under a hostile C caller: stale handles, closes racing calls, malformed and
/// ambiguous configuration, messages cut at the record's limit.
@Suite(.serialized)
struct Review6CABITests {
    static let program: Result<String, any Error> = Result {
        try InstalledLibrary.compile(try String(contentsOfFile: TestPaths.packageRoot + "/Tests/CABI/review6.c", encoding: .utf8),
                                     name: "review6", extraFlags: "-pthread -Wall -Werror")
    }

    static func run(_ arguments: [String]) throws -> ProcessOutput {
        try runProcess(try program.get(), arguments, environment: try InstalledLibrary.environment())
    }

    /// The bridge writes the record by offset (0, 4, 8, 9; 268 bytes): the header's struct must agree.
    @Test func theErrorRecordsLayoutIsTheOneTheBridgeWrites() throws {
        let run = try Self.run(["layout"])
        #expect(run.status == 0, "\(run.standardError)")
        let layout = try JSONDecoder().decode(ErrorRecordLayout.self, from: Data(run.standardOutput.utf8))
        #expect(layout == ErrorRecordLayout(kind: 0, status: 4, retryable: 8, message: 9, size: 268, alignment: 4))
    }

    @Test func aMessageCutAtTheLimitIsTerminatedValidUTF8() throws {
        let run = try Self.run(["truncation"])
        #expect(run.status == 0, "\(run.standardError)")
        let lines = try HostileCallerLine.lines(run)
        #expect(lines.count == 12)
        for line in lines.values {
            #expect(line.rc == -3 && line.terminated && line.validUTF8 && line.length <= 255, "\(line.caseName): \(line)")
            #expect(line.message.hasSuffix("…"), "\(line.caseName): \(line.message)")
        }
    }

    @Test func aClosedHandleIsRefusedAndASecondCloseIsIgnored() throws {
        let run = try Self.run(["closed"])
        #expect(run.status == 0, "the process died (status \(run.status)): \(run.standardError.suffix(2000))")
        let lines = try HostileCallerLine.lines(run)
        #expect(lines["load"]?.rc == 0)
        for name in ["identify after close", "set consent after close"] {
            let line = try #require(lines[name], "no outcome for \(name)")
            #expect(line.rc == -3 && line.message.contains("not open"), "\(name): \(line.message)")
        }
        #expect(lines["async without a callback after close"]?.rc == -3)
        #expect(lines["closed twice"] != nil)
    }

    /// A binding may close on one thread while another identifies (Python's close() and a worker
    /// thread): each call completes or is refused; the process lives.
    @Test func closingWhileEightThreadsIdentifyCrashesNothing() throws {
        for _ in 0..<3 {
            let run = try Self.run(["race", "8", CABITests.fixtureRoot])
            #expect(run.status == 0, "the process died (status \(run.status)): \(run.standardError.suffix(2000))")
            let lines = try HostileCallerLine.lines(run)
            #expect(lines.keys.sorted() == ["race ended"], "\(run.standardOutput)")
        }
    }

    /// Deep nesting, integers at the edge of a double, wrong types, a duplicate member: each a
    /// configuration error naming what is wrong, or a handle that survives an identify.
    @Test func hostileConfigurationsAreNamedErrorsAndNeverAmbiguous() throws {
        let run = try Self.run(["configs", CABITests.fixtureRoot])
        #expect(run.status == 0, "the process died (status \(run.status)): \(run.standardError.suffix(2000))")
        let lines = try HostileCallerLine.lines(run)
        func expectRefused(_ name: String, mentioning text: String, sourceLocation: SourceLocation = #_sourceLocation) {
            guard let line = lines[name] else { Issue.record("no outcome for \(name)", sourceLocation: sourceLocation); return }
            #expect(line.rc == -3 && line.kind == 3, "\(name): \(line.rc) \(line.message)", sourceLocation: sourceLocation)
            #expect(line.message.contains(text), "\(name): \(line.message)", sourceLocation: sourceLocation)
        }
        expectRefused("deep nesting", mentioning: "nested deeper than")
        expectRefused("deep nesting on a 256 KiB thread", mentioning: "nested deeper than")
        // The first of two equal members used to win in silence: a consent nobody can read off the document.
        expectRefused("duplicate consent", mentioning: "duplicate member")
        expectRefused("tiers a string", mentioning: "schedule.tiers: must be an array")
        expectRefused("ignore an object", mentioning: "ignore: must be an array")
        expectRefused("config an array", mentioning: "config: the document must be an object")
        expectRefused("unknown tier", mentioning: "schedule.tiers: unknown tier 'slow'; use fast or deferred")
        expectRefused("apiKey a number", mentioning: "apiKey: must be a string")
        expectRefused("lone surrogate", mentioning: "not valid JSON")
        // Past the CLI's own ranges (issue 23: every binding refuses what the CLI refuses).
        for member in ["budgetMs", "concurrency", "defaultSourceTimeoutMs", "sourceTimeoutOverrideMs", "deadlineMs"] {
            expectRefused("\(member)=9007199254740992", mentioning: member)
        }
        #expect(lines["attemptTimeoutMs=9007199254740992"]?.rc == 0,
                "attemptTimeoutMs: \(lines["attemptTimeoutMs=9007199254740992"]?.message ?? "none")")
        for member in ["budgetMs", "concurrency", "defaultSourceTimeoutMs", "sourceTimeoutOverrideMs", "deadlineMs", "attemptTimeoutMs"] {
            expectRefused("\(member)=1e308", mentioning: member)
            expectRefused("\(member)=-9007199254740992", mentioning: member)
        }
        expectRefused("attempts=9007199254740992", mentioning: "attempts")
        #expect(lines.values.allSatisfy { $0.terminated && $0.validUTF8 })
    }

    /// A child of fork() has none of the parent's runtime threads: its calls are errors at once
    /// instead of waits that never end.
    @Test func aChildOfForkGetsAnErrorNotAHang() throws {
        let run = try Self.run(["fork", CABITests.fixtureRoot])
        #expect(run.status == 0, "\(run.standardError.suffix(2000))")
        let lines = try HostileCallerLine.lines(run)
        #expect(lines["parent"]?.rc == 0)
        for name in ["child identify", "child load"] {
            let line = try #require(lines[name], "no outcome for \(name): the child hung")
            #expect(line.rc == -4 && line.message.contains("fork()"), "\(name): \(line.message)")
        }
        #expect(lines["child exited"] != nil, "\(run.standardOutput)")
    }
}
