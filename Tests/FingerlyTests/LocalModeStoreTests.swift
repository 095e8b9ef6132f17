import Foundation
import Glibc
import Testing
@testable import Fingerly
@testable import FingerlyEngine

/// The embedded local mode's store, `local.sqlite` in the state directory, through the real
/// `fingerly-identify`: a damaged one is a store error naming the file (74, as the server's
/// database failure), `reset` clears it, `visitors` never hands a stored control byte to the
/// terminal, and old events and idempotency records are purged as a server purges them. The
/// store is read and changed behind the CLI's back with python3's sqlite3.
@Suite(.serialized) struct LocalModeStoreTests {
    static let root = TestPaths.fixture("laptop-baremetal")

    static func state(_ label: String) throws -> String {
        let path = try TestPaths.temporaryDirectory("localstore-\(label)")
        try #require(chmod(path, 0o700) == 0)
        return path
    }

    static func run(_ arguments: [String], state: String) throws -> ProcessOutput {
        let environment = ProcessInfo.processInfo.environment.merging(["FINGERLY_STATE_DIR": state]) { $1 }
        return try runCLI(arguments, environment: environment, removing: ["FINGERLY_API_KEY", "FINGERLY_ENDPOINT"])
    }

    static func identify(_ state: String) throws -> ProcessOutput {
        try run(["--root", root, "--tiers", "fast", "--json"], state: state)
    }

    /// Runs `sql` on the store with python3 and returns what it prints (one line per row of the
    /// last statement, values separated by spaces).
    @discardableResult
    static func sqlite(_ state: String, _ sql: String) throws -> String {
        let script = """
            import sqlite3, sys
            connection = sqlite3.connect(sys.argv[1])
            rows = []
            for statement in sys.argv[2].split(";\\n"):
                rows = connection.execute(statement).fetchall()
            connection.commit()
            for row in rows: print(" ".join(str(value) for value in row))
            """
        let output = try runProcess("/usr/bin/python3", ["-c", script, state + "/local.sqlite", sql])
        try #require(output.status == 0, "python3 sqlite3: \(output.standardError)")
        return output.standardOutput
    }

    @Test func aDamagedStoreIsAStoreErrorNamingTheFile() throws {
        let state = try Self.state("damaged")
        try #require(try Self.identify(state).status == 0)
        // The whole store damaged: pages still in an uncheckpointed WAL would otherwise stand in
        // for the main file's.
        for suffix in ["-wal", "-shm"] { unlink(state + "/local.sqlite" + suffix) }
        try Data(String(repeating: "not a database ", count: 400).utf8).write(to: URL(fileURLWithPath: state + "/local.sqlite"))
        for arguments in [["--root", Self.root, "--tiers", "fast"], ["visitors"]] {
            let run = try Self.run(arguments, state: state)
            #expect(run.status == 74, "\(arguments): \(run.status) \(run.standardError)")
            #expect(run.standardError.contains("the local store \(state)/local.sqlite cannot be opened"),
                    "\(run.standardError)")
            #expect(run.standardError.contains("'fingerly-identify reset' removes it"), "\(run.standardError)")
            #expect(!run.standardError.contains("options.stateDirectory"), "\(run.standardError)")
        }
        // reset clears the damage: the next run starts a new store.
        let reset = try Self.run(["reset"], state: state)
        #expect(reset.status == 0 && reset.standardOutput.contains("the local store"),
                "\(reset.standardOutput)\(reset.standardError)")
        let fresh = try Self.identify(state)
        #expect(fresh.status == 0, "\(fresh.standardError)")
        #expect(try fresh.identifyResult().visitorIsNew == true)
    }

    @Test func resetRemovesTheStoreAndItsJournalFiles() throws {
        let state = try Self.state("reset")
        try #require(try Self.identify(state).status == 0)
        for suffix in ["-wal", "-shm", "-journal"] where !FileManager.default.fileExists(atPath: state + "/local.sqlite" + suffix) {
            #expect(FileManager.default.createFile(atPath: state + "/local.sqlite" + suffix, contents: Data(), attributes: [.posixPermissions: 0o600]))
        }
        let reset = try Self.run(["reset"], state: state)
        #expect(reset.status == 0, "\(reset.standardError)")
        #expect(reset.standardOutput.contains("the local store"), "\(reset.standardOutput)")
        let left = try FileManager.default.contentsOfDirectory(atPath: state).filter { $0.hasPrefix("local.sqlite") }
        #expect(left.isEmpty, "\(left)")
        let visitors = try Self.run(["visitors"], state: state)
        #expect(visitors.status == 0 && visitors.standardOutput.contains("no visitors yet"),
                "\(visitors.standardOutput)")
    }

    @Test func visitorsShowStoredControlBytesEscaped() throws {
        let state = try Self.state("escape")
        try #require(try Self.identify(state).status == 0)
        // ESC [2J (clear screen), BEL, DEL and C1 CSI, as a store someone wrote to might hold them.
        let now = Int(time(nil))
        try Self.sqlite(state, "INSERT INTO visitors (id, organization, first_seen, last_seen) "
            + "VALUES ('evil' || char(27) || '[2J' || char(7) || char(127) || char(155) || 'x', 'local', \(now), \(now))")
        let human = try Self.run(["visitors"], state: state)
        #expect(human.status == 0, "\(human.standardError)")
        let controls = human.standardOutput.unicodeScalars.filter { $0.value < 0x20 && $0 != "\n" || (0x7F...0x9F).contains($0.value) }
        #expect(controls.isEmpty, "\(controls.map(\.value))")
        #expect(human.standardOutput.contains(#"evil\u{1B}[2J\u{07}\u{7F}\u{009B}x"#), "\(human.standardOutput)")

        let json = try Self.run(["visitors", "--json"], state: state)
        #expect(json.status == 0, "\(json.standardError)")
        #expect(!json.standardOutput.unicodeScalars.contains { $0.value < 0x20 && $0 != "\n" || (0x7F...0x9F).contains($0.value) })
        // Still the same document to a JSON reader.
        let visitors = try JSONDecoder.fingerly.decode([VisitorSummary].self, from: Data(json.standardOutput.utf8))
        #expect(visitors.contains { $0.visitorId == "evil\u{1B}[2J\u{07}\u{7F}\u{9B}x" },
                "\(visitors.map(\.visitorId))")
    }

    @Test func oldEventsAndIdempotencyRecordsArePurgedAsTheServerPurgesThem() throws {
        let state = try Self.state("purge")
        let first = try Self.identify(state)
        try #require(first.status == 0, "\(first.standardError)")
        let firstRequest = try #require(try first.identifyResult().requestId)
        let now = Int(time(nil))
        // Past the server's default retention (30 days) and the 24 h key lifetime.
        let eventAge = (Retention.defaultEventDays + 1) * 86_400
        try Self.sqlite(state,
                        "UPDATE events SET received_at = \(now - eventAge);\nUPDATE idempotency SET created_at = \(now - 2 * 86_400)")
        let second = try Self.identify(state)
        try #require(second.status == 0, "\(second.standardError)")
        let secondRequest = try #require(try second.identifyResult().requestId)
        let events = try Self.sqlite(state, "SELECT request_id FROM events").split(separator: "\n").map(String.init)
        #expect(events == [secondRequest], "\(events), first \(firstRequest)")
        let keys = try Self.sqlite(state, "SELECT count(*) FROM idempotency WHERE created_at < \(now - 86_400)")
        #expect(keys == "0\n", "\(keys)")
        #expect(try Self.sqlite(state, "SELECT count(*) FROM idempotency") == "1\n")
        // The visitor was seen now: its own retention (90 days) keeps it.
        #expect(try Self.sqlite(state, "SELECT count(*) FROM visitors") == "1\n")
        let show = try Self.run(["events", "show", firstRequest], state: state)
        #expect(show.status == 65 && show.standardError.contains("no local event"),
                "\(show.status) \(show.standardError)")
    }

    /// A host program may keep one instance for weeks: its store is purged hourly as the server's
    /// is, not only when it was first opened.
    @Test func aLongLivedInstancePurgesItsStoreHourly() async throws {
        let state = try Self.state("hourly")
        let fingerly = try Fingerly.loadBlocking(apiKey: nil, schedule: ScheduleOptions(tiers: [.fast]), consent: .granted,
                                                 options: FingerlyOptions(root: Self.root, stateDirectory: state))
        let first = try #require(try await fingerly.identify().requestId)
        let eventAge = (Retention.defaultEventDays + 1) * 86_400
        try Self.sqlite(state, "UPDATE events SET received_at = \(Int(time(nil)) - eventAge)")
        let second = try #require(try await fingerly.identify().requestId)
        // Within the hour of the last pass: the aged event is still there.
        #expect(try Self.sqlite(state, "SELECT count(*) FROM events") == "2\n")
        fingerly.localPurgedAt.withLock { $0 -= Fingerly.localPurgeIntervalSeconds }
        let third = try #require(try await fingerly.identify().requestId)
        let events = Set(try Self.sqlite(state, "SELECT request_id FROM events").split(separator: "\n").map(String.init))
        #expect(events == [second, third], "\(events), first \(first)")
    }
}
