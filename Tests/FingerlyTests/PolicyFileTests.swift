import Foundation
import Synchronization
import Testing
@testable import Fingerly
@testable import FingerlyHost
@testable import FingerlyModel
@testable import FingerlyPolicy
@testable import FingerlyProbes

// A policy file named on the command line is the operator's, but the path can still point at
// something that is not a file, and its content is echoed back in errors.

private let minimalPolicy = #"{"policyVersion": 1, "name": "small", "verdicts": {}}"#

/// Nothing a terminal would act on: no C0 or C1 control, no DEL.
private func isInert(_ text: String) -> Bool {
    text.unicodeScalars.allSatisfy { !($0.value < 0x20 || (0x7F...0x9F).contains($0.value)) }
}

/// Opens the FIFO for writing, and writes to it, whenever a reader holds it open: without this
/// a reader that blocks in open(2) would hang the test run instead of failing it.
private final class FIFOWriter: Sendable {
    private let stopped = Atomic<Bool>(false)

    init(_ path: String) {
        Thread { [self] in
            // The reader may close the FIFO between this open and the write: EPIPE then, not a
            // SIGPIPE that ends the whole test process (a clean clone's CI run died of it).
            var pipeSignal = sigset_t()
            sigemptyset(&pipeSignal)
            sigaddset(&pipeSignal, SIGPIPE)
            pthread_sigmask(SIG_BLOCK, &pipeSignal, nil)
            let deadline = Date().addingTimeInterval(15)
            while !stopped.load(ordering: .relaxed) && Date() < deadline {
                let fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC)
                if fd >= 0 {
                    _ = write(fd, "garbage", 7)
                    close(fd)
                    return
                }
                usleep(10_000)
            }
        }.start()
    }

    func stop() { stopped.store(true, ordering: .relaxed) }
}

@Suite(.serialized) struct PolicyFileTests {
    @Test func aFIFOIsRefusedWithoutWaitingForAWriter() throws {
        let directory = try TestPaths.temporaryDirectory("policy-fifo")
        let fifo = directory + "/policy.json"
        #expect(mkfifo(fifo, 0o600) == 0)
        let writer = FIFOWriter(fifo)
        defer { writer.stop() }
        #expect {
            try Policy.load(contentsOf: fifo)
        } throws: { error in
            "\(error)".contains("\(fifo): not a regular file (a FIFO)")
        }
    }

    @Test(arguments: [("/dev/zero", "a character device"), ("/tmp", "a directory")])
    func otherFilesThatAreNotRegularAreRefused(_ path: String, _ kind: String) {
        #expect {
            try Policy.load(contentsOf: path)
        } throws: { error in
            "\(error)".contains("not a regular file (\(kind))")
        }
    }

    @Test func aLinkToARegularFileAndARelativePathStillLoad() throws {
        let directory = try TestPaths.temporaryDirectory("policy-link")
        try minimalPolicy.write(toFile: directory + "/real.json", atomically: true, encoding: .utf8)
        #expect(symlink(directory + "/real.json", directory + "/link.json") == 0)
        #expect(try Policy.load(contentsOf: directory + "/link.json").name == "small")
        let previous = FileManager.default.currentDirectoryPath
        #expect(FileManager.default.changeCurrentDirectoryPath(directory))
        defer { _ = FileManager.default.changeCurrentDirectoryPath(previous) }
        #expect(try Policy.load(contentsOf: "real.json").name == "small")
    }

    @Test func aPolicyOverTheSizeLimitIsRejectedNotTruncated() throws {
        let directory = try TestPaths.temporaryDirectory("policy-size")
        // Valid JSON whose first 4 MiB are valid JSON too: a silent cut would load it.
        let oversized = minimalPolicy + String(repeating: " ", count: 4 * 1024 * 1024)
        try oversized.write(toFile: directory + "/big.json", atomically: true, encoding: .utf8)
        #expect {
            try Policy.load(contentsOf: directory + "/big.json")
        } throws: { error in
            "\(error)".contains("larger than the limit of 4194304 bytes")
        }
        // Exactly at the limit is still read.
        let atLimit = minimalPolicy + String(repeating: " ", count: 4 * 1024 * 1024 - minimalPolicy.utf8.count)
        try atLimit.write(toFile: directory + "/limit.json", atomically: true, encoding: .utf8)
        #expect(try Policy.load(contentsOf: directory + "/limit.json").name == "small")
    }

    @Test(arguments: [
        #"{"policyVersion": 1, "verdicts": {"farm": {"rules": [{"id": "a\u001b[2J\r\nb", "colour": 1}]}}}"#,
        #"{"policyVersion": 1, "verdicts": {"farm": {"rules": [{"id": "a", "\u001b[2J\r\n": 1}]}}}"#,
        #"{"policyVersion": 1, "verdicts": {"farm": {"rules": [{"id": "a", "when": {"signal": "\u001b[2J\r\n", "equals": 1}, "confidence": "low", "reason": "x"}]}}}"#,
        #"{"policyVersion": 1, "verdicts": {"farm": {"rules": [{"id": "a", "when": {"signal": "os.id", "\u001b[2J\r\n": 1}, "confidence": "low", "reason": "x"}]}}}"#,
        #"{"policyVersion": 1, "verdicts": {"farm": {"rules": [{"id": "a", "when": {"signal": "os.id", "inTable": "\u001b[2J\r\n"}, "confidence": "low", "reason": "x"}]}}}"#,
        #"{"policyVersion": 1, "verdicts": {"farm": {"rules": [{"id": "a", "when": {"signal": "os.id", "equals": 1}, "confidence": "\u001b[2J\r\n", "reason": "x"}]}}}"#,
        #"{"policyVersion": 1, "verdicts": {"farm": {"rules": [{"id": "a", "when": {"signal": "os.id", "equals": 1}, "confidence": "low", "reason": "{\u001b[2J\r\n}"}]}}}"#,
        #"{"policyVersion": 1, "verdicts": {"farm": {"rules": [{"id": "a", "when": {"signal": "os.id", "equals": 1}, "confidence": "low", "kindFrom": "\u001b[2J\r\n", "reason": "x"}]}}}"#,
        #"{"policyVersion": 1, "verdicts": {"\u001b[2J\r\n": {"rules": []}}}"#,
        #"{"policyVersion": 1, "verdicts": {"farm": {"rules": [], "\u001b[2J\r\n": 1}}}"#,
        #"{"policyVersion": 1, "verdicts": {}, "suspect": {"weights": {"\u001b[2J\r\n": 1}}}"#,
        #"{"policyVersion": 1, "verdicts": {}, "suspect": {"weights": {}, "confidenceFactors": {"\u001b[2J\r\n": 1}, "levels": {"medium": 30, "high": 60}}}"#,
    ])
    func errorsQuotePolicyTextWithItsControlCharactersEscaped(_ json: String) {
        do {
            _ = try loadPolicy(json)
            Issue.record("accepted: \(json)")
        } catch {
            #expect(isInert(error.description), "\(error.description.debugDescription)")
            #expect(error.description.contains(#"\u001B[2J\r\n"#), "\(error.description.debugDescription)")
        }
    }

    @Test func aFileNameIsEscapedAndAQuotedValueIsShortened() throws {
        do {
            _ = try Policy.load(contentsOf: "/nonexistent/\u{1B}[2J\r\n\u{9B}.json")
            Issue.record("loaded a file that does not exist")
        } catch {
            #expect(isInert(error.description) && error.description.contains(#"/nonexistent/\u001B[2J\r\n\u009B.json"#),
                    "\(error.description.debugDescription)")
        }
        let huge = String(repeating: "s", count: 100_000)
        do {
            _ = try loadPolicy(#"{"policyVersion": 1, "verdicts": {"farm": {"rules": [{"id": "a", "when": {"signal": ""# + huge
                + #"", "equals": 1}, "confidence": "low", "reason": "x"}]}}}"#)
            Issue.record("accepted an unknown signal")
        } catch {
            #expect(error.description.contains("unknown signal 'sss"))
            #expect(error.description.utf8.count < 1024, "\(error.description.utf8.count) bytes of error")
        }
    }

    @Test(arguments: [
        (#"{"policyVersion": 1, "name": "a\u001b[2J", "verdicts": {}}"#, #"field 'name': 'a\u001B[2J' contains control characters"#),
        (#"{"policyVersion": 1, "verdicts": {"farm": {"rules": [{"id": "a", "when": {"signal": "os.id", "equals": "x"}, "confidence": "low", "kind": "\u009b2J", "reason": "x"}]}}}"#,
         #"field 'kind': '\u009B2J' contains control characters"#),
    ])
    func namesTheOutputRepeatsHoldNoControlCharacters(_ json: String, _ expected: String) {
        #expect { try loadPolicy(json) } throws: { "\($0)".contains(expected) }
    }

    @Test func ruleIdsAreShortCodes() throws {
        func policy(id: String) -> String {
            #"{"policyVersion": 1, "verdicts": {"farm": {"rules": [{"id": "\#(id)", "when": {"signal": "os.id", "equals": "x"}, "confidence": "low", "reason": "x"}]}}}"#
        }
        #expect(try loadPolicy(policy(id: String(repeating: "i", count: 128))).verdicts[.farm]?.rules.count == 1)
        #expect {
            try loadPolicy(policy(id: String(repeating: "i", count: 129)))
        } throws: { error in
            "\(error)".contains("field 'id': 'iii") && "\(error)".contains("…' is longer than 128 bytes")
        }
    }

    @Test func duplicateRuleIdsAreFoundAmongFortyTwoThousandRules() throws {
        func rule(_ id: String) -> String {
            #"{"id":"\#(id)","when":{"signal":"os.id","equals":"x"},"confidence":"low","reason":"x"}"#
        }
        let unique = (0..<42_000).map { rule("r\($0)") }
        let loaded = try loadPolicy(#"{"policyVersion":1,"verdicts":{"farm":{"rules":["# + unique.joined(separator: ",") + "]}}}")
        #expect(loaded.verdicts[.farm]?.rules.count == 42_000)
        #expect(loaded.verdicts[.farm]?.rules.last?.id == "r41999")
        do {
            _ = try loadPolicy(#"{"policyVersion":1,"verdicts":{"farm":{"rules":["# + (unique + [rule("r20999")]).joined(separator: ",") + "]}}}")
            Issue.record("a duplicate id was accepted")
        } catch {
            #expect(error.description.contains("rule 42001 ('r20999'): field 'id': duplicate rule id"), "\(error)")
        }
        // The same id under two verdicts is two rules, not a duplicate.
        let twoVerdicts = #"{"policyVersion":1,"verdicts":{"farm":{"rules":["# + rule("same") + #"]},"proxy":{"rules":["# + rule("same") + "]}}}"
        #expect(try loadPolicy(twoVerdicts).verdicts.count == 2)
    }
}

@Suite(.serialized) struct PolicyCommandLineTests {
    @Test func aFIFOGivenAsPolicyExits65Promptly() throws {
        let directory = try TestPaths.temporaryDirectory("cli-policy-fifo")
        let fifo = directory + "/policy.json"
        #expect(mkfifo(fifo, 0o600) == 0)
        // Killed after 20 s: a collector that waits for a writer ends with SIGKILL, not 65.
        let run = try runProcess(TestPaths.cli, ["--no-submit", "--policy", fifo], timeout: 20)
        #expect(run.status == 65, "\(run.status): \(run.standardError)")
        #expect(run.standardError.contains("invalid policy: \(fifo): not a regular file (a FIFO)"), "\(run.standardError)")
        #expect(run.standardOutput.isEmpty)
    }

    @Test func policyErrorsReachTheTerminalWithoutControlCharacters() throws {
        let directory = try TestPaths.temporaryDirectory("cli-policy-escape")
        let policy = directory + "/evil\u{1B}[2J\r\n.json"
        try #"{"policyVersion": 1, "verdicts": {"farm": {"rules": [{"id": "\u001b]0;pwned\u0007\r\n", "when": {"signal": "os.id", "equals": "x"}, "confidence": "low", "reason": "x"}]}}}"#
            .write(toFile: policy, atomically: true, encoding: .utf8)
        let run = try runProcess(TestPaths.cli, ["--no-submit", "--policy", policy], timeout: 60)
        #expect(run.status == 65)
        let message = run.standardError.dropLast() // the final newline is ours
        #expect(isInert(String(message)), "\(run.standardError.debugDescription)")
        #expect(run.standardError.contains(#"evil\u001B[2J\r\n.json: verdict 'farm', rule 1: field 'id': '\u001B]0;pwned\u0007\r\n' contains control characters"#),
                "\(run.standardError.debugDescription)")
    }

    @Test func anOversizedPolicyExits65NamingTheLimit() throws {
        let directory = try TestPaths.temporaryDirectory("cli-policy-size")
        let policy = directory + "/big.json"
        try (minimalPolicy + String(repeating: "\n", count: 5 * 1024 * 1024)).write(toFile: policy, atomically: true, encoding: .utf8)
        let run = try runProcess(TestPaths.cli, ["--no-submit", "--policy", policy], timeout: 60)
        #expect(run.status == 65, "\(run.standardError)")
        #expect(run.standardError.contains("larger than the limit of 4194304 bytes"), "\(run.standardError)")
    }
}
