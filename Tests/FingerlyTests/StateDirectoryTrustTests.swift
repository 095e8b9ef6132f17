import Foundation
import Glibc
import Testing
@testable import Fingerly
@testable import FingerlyTransport

/// The installation secret's rule for everything the client keeps: the state directory, the
/// outbox and its items, the device key, the consent record and the local store must be this
/// user's and written by nobody else. The real `fingerly-identify`, the Swift library and Python
/// through the C ABI refuse one that is not on the first run, before anything is written there.
@Suite(.serialized) struct StateDirectoryTrustTests {
    static func names(_ directory: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).sorted()
    }

    /// A state directory as a careless installation leaves it: 0777, no sticky bit, empty.
    static func openStateDirectory(_ label: String) throws -> String {
        let state = try TestPaths.temporaryDirectory("trust-\(label)")
        try #require(chmod(state, 0o777) == 0)
        return state
    }

    @Test func aStateDirectoryOthersMayWriteIsRefusedOnTheFirstRunAndNothingIsWrittenThere() throws {
        let state = try Self.openStateDirectory("0777")
        let closed = try SubmissionCLITests.closedPort()
        let environment = SubmissionCLITests.environment(state: state)
        var noKey = environment
        noKey["FINGERLY_API_KEY"] = nil
        // A submission that would queue, a local run that would make the secret and the store,
        // and the commands that write consent, flush and reset.
        let runs: [(label: String, arguments: [String], environment: [String: String])] = [
            ("identify", SubmissionCLITests.identifyArguments(closed, attempts: 1), environment),
            ("no-submit", ["--no-submit", "--root", SubmissionCLITests.fixture, "--tiers", "fast"], noKey),
            ("local", ["--root", SubmissionCLITests.fixture, "--tiers", "fast"], noKey),
            ("consent", ["consent", "granted"], environment),
            ("flush", SubmissionCLITests.flushArguments(closed), environment),
            ("reset", ["reset"], environment),
            ("visitors", ["visitors"], noKey),
        ]
        for run in runs {
            let output = try runCLI(run.arguments, environment: run.environment)
            #expect(output.status == 78, "\(run.label): \(output.status) \(output.standardError)")
            #expect(output.standardError.contains("\(state): writable by another user (mode 777)"),
                    "\(run.label): \(output.standardError)")
            #expect(output.standardError.contains("--state-dir"), "\(run.label): \(output.standardError)")
            #expect(Self.names(state).isEmpty, "\(run.label) wrote \(Self.names(state))")
        }
    }

    @Test func anOutboxOthersMayWriteIsRefused() throws {
        let state = try SubmissionCLITests.freshState("trust-outbox")
        let outbox = state + "/outbox"
        try FileManager.default.createDirectory(atPath: outbox, withIntermediateDirectories: false)
        try #require(chmod(outbox, 0o777) == 0)
        let run = try runCLI(SubmissionCLITests.identifyArguments(try SubmissionCLITests.closedPort(), attempts: 1),
                             environment: SubmissionCLITests.environment(state: state))
        #expect(run.status == 78, "\(run.status): \(run.standardError)")
        #expect(run.standardError.contains("\(outbox): writable by another user (mode 777)"), "\(run.standardError)")
        #expect(Self.names(state) == ["outbox"] && Self.names(outbox).isEmpty,
                "\(Self.names(state)) \(Self.names(outbox))")
    }

    @Test func aQueuedItemOthersMayWriteIsRefused() throws {
        let state = try SubmissionCLITests.freshState("trust-item")
        try SubmissionCLITests.queueOne(state: state)
        let item = try #require(SubmissionCLITests.itemFiles(state).first)
        try #require(chmod(SubmissionCLITests.outboxPath(state) + "/" + item, 0o664) == 0)
        let server = try FaultServer([SubmissionCLITests.accepted()])
        let flush = try runCLI(SubmissionCLITests.flushArguments(server.url), environment: SubmissionCLITests.environment(state: state))
        #expect(flush.status == 78, "\(flush.status): \(flush.standardError)")
        #expect(flush.standardError.contains("\(item): writable by another user (mode 664)"), "\(flush.standardError)")
        #expect(server.requests.isEmpty)
    }

    @Test func aGroupWritableDeviceKeyIsRefused() throws {
        let state = try SubmissionCLITests.freshState("trust-key")
        let key = state + "/" + DeviceKey.fileName
        #expect(FileManager.default.createFile(atPath: key, contents: Data(count: 32), attributes: [.posixPermissions: 0o620]))
        let run = try runCLI(SubmissionCLITests.identifyArguments(try SubmissionCLITests.closedPort(), attempts: 1),
                             environment: SubmissionCLITests.environment(state: state))
        #expect(run.status == 78, "\(run.status): \(run.standardError)")
        #expect(run.standardError.contains("\(key): readable or writable by others (mode 620)"), "\(run.standardError)")
        #expect(Self.names(state) == [DeviceKey.fileName], "\(Self.names(state))")
    }

    /// A link another user owns could be pointed elsewhere between runs: refused though the
    /// directory it names today is this user's and private.
    @Test func aStateDirectoryReachedThroughAnotherUsersLinkIsRefused() throws {
        let scratch = try TestPaths.temporaryDirectory("trust-link")
        let real = scratch + "/real"
        try FileManager.default.createDirectory(atPath: real, withIntermediateDirectories: false,
                                                attributes: [.posixPermissions: 0o700])
        let link = scratch + "/link"
        try #require(symlink(real, link) == 0 && lchown(link, 1234, 1234) == 0)
        let run = try runCLI(["--no-submit", "--root", SubmissionCLITests.fixture, "--tiers", "fast"],
                             environment: ProcessInfo.processInfo.environment.merging(["FINGERLY_STATE_DIR": link]) { $1 },
                             removing: ["FINGERLY_API_KEY"])
        #expect(run.status == 78, "\(run.status): \(run.standardError)")
        #expect(run.standardError.contains("\(link): a symbolic link owned by uid 1234"), "\(run.standardError)")
        #expect(Self.names(real).isEmpty, "\(Self.names(real))")
    }

    @Test func theSwiftLibraryRefusesTheSameDirectoryAtLoad() throws {
        let state = try Self.openStateDirectory("swift")
        do {
            _ = try Fingerly.loadBlocking(apiKey: nil, options: FingerlyOptions(stateDirectory: state))
            Issue.record("load accepted a state directory of mode 777")
        } catch {
            guard case .invalidConfiguration(let field, let reason) = error else { throw error }
            #expect(field == "options.stateDirectory")
            #expect(reason.contains("\(state): writable by another user (mode 777)"), "\(reason)")
        }
        #expect(Self.names(state).isEmpty)
    }

    @Test func pythonThroughTheCLibraryRefusesTheSameDirectory() throws {
        let state = try Self.openStateDirectory("python")
        let venv = try CABITests.freshVirtualEnvironment("trust-venv")
        let script = """
            import sys, fingerly
            try:
                fingerly.load(api_key=None, state_directory=sys.argv[1])
            except fingerly.ConfigurationError as error:
                print("refused:", error)
            else:
                print("loaded")
            """
        let run = try runProcess(venv + "/bin/python", ["-c", script, state],
                                 environment: try InstalledLibrary.environment(["FINGERLY_LIBRARY": try InstalledLibrary.library]))
        #expect(run.status == 0, "\(run.standardError)")
        #expect(run.standardOutput.hasPrefix("refused:"), "\(run.standardOutput)")
        #expect(run.standardOutput.contains("\(state): writable by another user (mode 777)"), "\(run.standardOutput)")
        #expect(Self.names(state).isEmpty)
    }
}
