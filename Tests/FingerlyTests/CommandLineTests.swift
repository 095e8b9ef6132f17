@testable import FingerlyCatalogue
import Foundation
import Testing
@testable import Fingerly
@testable import FingerlyHost
@testable import FingerlyModel
@testable import FingerlyPolicy
@testable import FingerlyProbes
@testable import FingerlyIdentifyCommand

/// The built `fingerly-identify` binary, end to end.
@Suite(.serialized) struct CommandLineTests {
    @Test func jsonHasTheDocumentedShapeWithSortedKeys() throws {
        let run = try runCLI(["--no-submit", "--json", "--root", TestPaths.fixture("kvm-qemu"), "--tag", "login"])
        #expect(run.status == 0, "\(run.standardError)")
        // Decoding checks every field's type, and Verdicts refuses an object that lacks a verdict.
        let result = try run.identifyResult()
        #expect(result.state == .collected)
        #expect(!result.requestId.isEmpty)
        // The optional fields a scored, unsent run has; an absent key would decode as nil.
        #expect(result.suspectScore != nil && result.suspectLevel != nil)
        #expect(result.report.schemaVersion == SignalReport.currentSchemaVersion)
        #expect(result.report.tag == "login")
        #expect(result.report.probes.map(\.id) == ProbeCatalogue.embedded.probes.map(\.id))
        for probe in result.report.probes {
            #expect(probe.tier == ProbeCatalogue.embedded.entry(probe.id)?.tier)
        }
        // Sorted keys: the top-level keys appear in lexical order in the bytes themselves.
        let positions = ["identifiable", "policy", "report", "requestId", "state", "suspectLevel", "suspectScore", "triggers", "verdicts"]
            .map { try! #require(run.standardOutput.range(of: "\"\($0)\":{", options: []) ?? run.standardOutput.range(of: "\"\($0)\":")).lowerBound }
        #expect(positions == positions.sorted())
        #expect(!run.standardOutput.contains("\\/"), "slashes must not be escaped")
    }

    @Test func failOnExitsThreeAtOrAboveTheConfidence() throws {
        let kvm = TestPaths.fixture("kvm-qemu"), hyperv = TestPaths.fixture("hyperv")
        let matched = try runCLI(["--no-submit", "--root", kvm, "--fail-on", "debugger,tampering:medium"])
        #expect(matched.status == 3)
        #expect(matched.standardError.contains("debugger (high)"))
        #expect(try runCLI(["--no-submit", "--root", kvm, "--fail-on", "tampering"]).status == 0)
        // The checkout's fresh files would add fresh-install clues: leave provisioning out here.
        #expect(try runCLI(["--no-submit", "--root", hyperv, "--ignore", "provisioning", "--fail-on", "farm"]).status == 3)
        #expect(try runCLI(["--no-submit", "--root", hyperv, "--ignore", "provisioning", "--fail-on", "farm:medium"]).status == 0)
        #expect(try runCLI(["--no-submit", "--root", hyperv, "--fail-on=tampering:high"]).status == 3)
    }

    @Test(arguments: [
        (["--no-submit", "--bogus"], "unknown option '--bogus'"),
        (["--no-submit", "-x"], "unknown option '-x'"),
        (["--no-submit", "--tiers", "slow"], "unknown tier 'slow'"),
        (["--no-submit", "--budget-ms", "soon"], "--budget-ms must be a whole number"),
        (["--no-submit", "--budget-ms", "0"], "--budget-ms must be a whole number"),
        (["--no-submit", "--concurrency"], "--concurrency needs a value"),
        (["--no-submit", "--fail-on", "psychic"], "'psychic' is not VERDICT[:CONFIDENCE]"),
        (["--no-submit", "--fail-on", "debugger:certain"], "confidence 'certain'"),
        (["--no-submit", "--ignore", "no.such.signal"], "unknown attribute(s) to ignore: no.such.signal"),
        (["--no-submit", "--json=yes"], "--json takes no value"),
        (["--no-submit", "extra"], "unexpected argument 'extra'"),
        (["--no-submit", "--tag", "a", "--tag", "b"], "--tag is given twice"),
    ])
    func usageErrorsExit64WithAMessageOnStderr(_ arguments: [String], _ message: String) throws {
        let run = try runCLI(arguments)
        #expect(run.status == 64)
        #expect(run.standardError.contains(message), "\(run.standardError)")
        #expect(run.standardOutput.isEmpty)
    }

    @Test func badInputExits65() throws {
        let directory = try TestPaths.temporaryDirectory("policy")
        let policy = directory + "/broken.json"
        try #"{"policyVersion": 1, "verdicts": {"debugger": {"rules": [{"id": "x", "when": {"signal": "process.tracerpid", "equals": 1}, "confidence": "high", "reason": "r"}]}}}"#
            .write(toFile: policy, atomically: true, encoding: .utf8)
        let run = try runCLI(["--no-submit", "--policy", policy])
        #expect(run.status == 65)
        #expect(run.standardError.contains("\(policy): verdict 'debugger', rule 1 ('x'): field 'when.signal': unknown signal 'process.tracerpid'"))
        let missingPolicy = try runCLI(["--no-submit", "--policy", directory + "/absent.json"])
        #expect(missingPolicy.status == 65 && missingPolicy.standardError.contains("absent"))
        let missingRoot = try runCLI(["--no-submit", "--root", directory + "/no-such-root"])
        #expect(missingRoot.status == 65 && missingRoot.standardError.contains("not a directory"))
    }

    @Test func policyOverrideChangesTheVerdicts() throws {
        let directory = try TestPaths.temporaryDirectory("policy-override")
        let policy = directory + "/strict.json"
        try #"{"policyVersion": 1, "name": "strict", "verdicts": {"automation": {"rules": [{"id": "runs_as_root", "when": {"signal": "process.uid", "equals": 0}, "confidence": "medium", "reason": "uid {value}"}]}}}"#
            .write(toFile: policy, atomically: true, encoding: .utf8)
        let run = try runCLI(["--no-submit", "--json", "--policy", policy, "--root", TestPaths.fixture("kvm-qemu")])
        #expect(run.status == 0)
        let result = try run.identifyResult()
        #expect(result.policy == "strict")
        #expect(result.verdicts.automation.value)
        #expect(!result.verdicts.debugger.value, "the override replaces the default rules")
    }

    @Test func anInstalledCopyNeedsNothingFromTheBuildTree() throws {
        // Policy, catalogue and tables are compiled in: a copy far from the sources still runs.
        let directory = try TestPaths.temporaryDirectory("installed")
        let installed = directory + "/fingerly-identify"
        try FileManager.default.copyItem(atPath: TestPaths.cli, toPath: installed)
        let run = try runProcess(installed, ["--no-submit", "--json", "--tiers", "fast", "--root", TestPaths.fixture("kvm-qemu")])
        #expect(run.status == 0, "\(run.standardError)")
        #expect(try run.identifyResult().policy == "default")
        #expect(try runProcess(installed, ["probes"]).standardOutput.contains("machine-identity  [fast"))
    }

    @Test func anEndpointWithoutAKeyIsAUsageErrorAndNothingIsSent() throws {
        // An endpoint nobody listens on: had it tried to send, it would exit 75 or 74.
        let run = try runCLI(["--root", TestPaths.fixture("laptop-baremetal"), "--tiers", "fast", "--json", "--endpoint", "http://127.0.0.1:9"],
                             removing: ["FINGERLY_API_KEY"])
        #expect(run.status == 64, "\(run.standardError)")
        #expect(run.standardError.contains("needs an API key"))
        #expect(run.standardOutput.isEmpty)
    }

    @Test func withNeitherKeyNorEndpointTheVisitorIsResolvedHere() throws {
        let state = try TestPaths.temporaryDirectory("local-mode")
        let environment = ProcessInfo.processInfo.environment.merging(["FINGERLY_STATE_DIR": state]) { $1 }
        let arguments = ["--root", TestPaths.fixture("laptop-baremetal"), "--tiers", "fast", "--json"]
        // --no-submit reads the probes and keeps nothing of the local mode.
        let dry = try runCLI(arguments + ["--no-submit"], environment: environment, removing: ["FINGERLY_API_KEY", "FINGERLY_ENDPOINT"])
        #expect(dry.status == 0 && !FileManager.default.fileExists(atPath: state + "/local.sqlite"), "\(dry.standardError)")

        let first = try runCLI(arguments, environment: environment, removing: ["FINGERLY_API_KEY", "FINGERLY_ENDPOINT"])
        #expect(first.status == 0, "\(first.standardError)")
        let firstResult = try first.identifyResult()
        #expect(firstResult.state == .local && firstResult.visitorIsNew == true)
        let second = try runCLI(arguments, environment: environment, removing: ["FINGERLY_API_KEY", "FINGERLY_ENDPOINT"])
        let secondResult = try second.identifyResult()
        #expect(secondResult.state == .local && secondResult.visitorIsNew == false)
        #expect(secondResult.visitorId == firstResult.visitorId && secondResult.visitorId != nil)
        #expect((secondResult.visitorConfidence ?? 0) >= 90)
        #expect(secondResult.requestId != firstResult.requestId)

        let event = try runCLI(["events", "show", secondResult.requestId], environment: environment)
        #expect(event.status == 0, "\(event.standardError)")
        #expect(event.standardOutput.contains(secondResult.requestId) && event.standardOutput.contains(secondResult.visitorId ?? "-"))
        let unknown = try runCLI(["events", "show", "req_unknown"], environment: environment)
        #expect(unknown.status == 65)
        let visitors = try runCLI(["visitors"], environment: environment)
        #expect(visitors.status == 0 && visitors.standardOutput.contains(firstResult.visitorId ?? "-"))
    }

    @Test func helpVersionAndProbes() throws {
        let help = try runCLI(["--help"])
        #expect(help.status == 0 && help.standardOutput.contains("EXIT CODES") && help.standardOutput.contains("--fail-on"))
        let version = try runCLI(["--version"])
        #expect(version.status == 0 && version.standardOutput == "fingerly-identify \(Fingerly.version)\n")
        let probes = try runCLI(["probes"])
        #expect(probes.status == 0)
        for entry in ProbeCatalogue.embedded.probes { #expect(probes.standardOutput.contains(entry.id + "  [")) }
        let probesJSON = try runCLI(["probes", "--json"])
        #expect(try probesJSON.decoded(ProbeCatalogue.self) == .embedded)
    }

    @Test func tiersSelectWhichProbesRun() throws {
        let fast = try runCLI(["--no-submit", "--json", "--tiers", "fast", "--root", TestPaths.fixture("docker")]).identifyResult().report
        #expect(fast.tiers == [.fast])
        #expect(fast.probes.count == ProbeCatalogue.embedded.probes.filter { $0.tier == .fast }.count)
        let deferredProbes = try runCLI(["--no-submit", "--json", "--tiers", "deferred", "--root", TestPaths.fixture("docker")])
            .identifyResult().report.probes
        // The collector's own entry (how starved the run was) comes with every run, whatever the tiers.
        #expect(deferredProbes.filter { $0.id != "collector" }.allSatisfy { $0.tier == .deferred })
        #expect(deferredProbes.contains { $0.id == "collector" })
    }

    @Test func aFIFOUnderRootIsRefusedNotWaitedOn() throws {
        let root = try TestPaths.temporaryDirectory("cli-fifo")
        try FileManager.default.createDirectory(atPath: root + "/proc", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: root + "/etc", withIntermediateDirectories: true)
        #expect(mkfifo(root + "/proc/cpuinfo", 0o644) == 0)
        #expect(mkfifo(root + "/etc/os-release", 0o644) == 0)
        let run = try runCLI(["--no-submit", "--json", "--root", root, "--budget-ms", "80", "--probe-timeout-ms", "10000"])
        #expect(run.status == 0, "\(run.standardError)")
        let report = try run.identifyResult().report
        // Opened without blocking and refused as no regular file: nothing waits for a writer.
        #expect(try report.probe("cpu").status == .malformed)
        #expect(try report.probe("os").issues.contains { $0.detail.contains("FIFO") })
        #expect(try report.probe("memory").status == .absent)
        let elapsed = report.elapsedMs
        // A read waiting on the FIFO would hold its probe until the budget (statuses above tell);
        // the bound, with room for a loaded machine, shows the collection itself never waits past the budget.
        #expect(elapsed < 80 + 500, "collection took \(elapsed) ms for an 80 ms budget")
    }

    @Test func rawIdentifiersNeverAppearInTheOutput() throws {
        for fixture in TestPaths.hostFixtures {
            let root = TestPaths.fixture(fixture)
            var raw: [String] = []
            for path in ["/etc/machine-id", "/var/lib/dbus/machine-id", "/sys/class/dmi/id/product_uuid",
                         "/sys/class/dmi/id/product_serial", "/sys/class/dmi/id/board_serial", "/sys/class/dmi/id/chassis_serial"] {
                guard let text = try? String(contentsOfFile: root + path, encoding: .utf8) else { continue }
                let value = text.trimmingCharacters(in: .whitespacesAndNewlines)
                // Placeholders ("None", "uninitialized", all zeros) identify nothing.
                if value.count >= 8 && !value.allSatisfy({ $0 == "0" || $0 == "-" }) && value != "uninitialized" { raw.append(value) }
            }
            for arguments in [["--json"], []] {
                let run = try runCLI(["--no-submit", "--root", root] + arguments)
                #expect(run.status == 0 || fixture == "malformed")
                let output = (run.standardOutput + run.standardError).lowercased()
                for value in raw {
                    #expect(!output.contains(value.lowercased()), "\(fixture): raw identifier \(value) leaked")
                }
            }
        }
    }

    @Test func humanOutputIsColourlessUnlessATerminalWithoutNoColor() throws {
        func render(terminal: Bool, environment: [String: String]) -> String {
            let buffer = Locked("")
            let io = CommandIO(standardOutput: { text in buffer.set(buffer.value + text) }, standardError: { _ in },
                               environment: environment, outputIsTerminal: terminal)
            let status = FingerlyIdentify.main(["--no-submit", "--root", TestPaths.fixture("kvm-qemu")], io: io)
            #expect(status == 0)
            return buffer.value
        }
        let coloured = render(terminal: true, environment: [:])
        #expect(coloured.contains("\u{1B}["))
        #expect(!(render(terminal: true, environment: ["NO_COLOR": "1"])).contains("\u{1B}["))
        let plain = render(terminal: false, environment: [:])
        #expect(!plain.contains("\u{1B}["))
        // Verdicts with reasons first, then probe statuses and timings.
        let verdictsAt = try #require(plain.range(of: "Verdicts")), probesAt = try #require(plain.range(of: "Probes"))
        #expect(verdictsAt.lowerBound < probesAt.lowerBound)
        #expect(plain.contains("debugger        TRUE"))
        #expect(plain.contains("[tracer_pid, high]"))
        #expect(plain.contains("dmi                     fast      ok"))
    }

    @Test(.enabled(if: geteuid() == 0, "needs root: files owned by root, and setpriv switches to nobody to be denied them"))
    func unreadableFilesAreRecordedAsDeniedForAnUnprivilegedUser() throws {
        let root = try TestPaths.copyOfTree(TestPaths.fixture("laptop-baremetal"), label: "denied")
        // Root-owned and 0400, as sysfs serves the serials; /proc/meminfo made unreadable too.
        for path in ["/etc/machine-id", "/sys/class/dmi/id/product_uuid", "/sys/class/dmi/id/product_serial", "/proc/meminfo"] {
            #expect(chmod(root + path, 0o400) == 0)
        }
        #expect(chmod(root, 0o755) == 0)
        let run = try runProcess("/usr/bin/setpriv", ["--reuid=nobody", "--regid=nogroup", "--clear-groups", TestPaths.cli,
                                                     "--no-submit", "--json", "--root", root])
        #expect(run.status == 0, "\(run.standardError)")
        let report = try run.identifyResult().report
        #expect(try report.probe("memory").status == .denied)
        let identity = try report.probe("machine-identity")
        #expect(identity.issues.contains { $0.path == "/etc/machine-id" && $0.status == .denied })
        #expect(identity.issues.contains { $0.path == "/sys/class/dmi/id/product_uuid" && $0.status == .denied })
        // What could be read still is: the D-Bus copy of machine-id is world-readable.
        #expect(identity.signals["machine.dbus_machine_id"]?.string != nil)
        #expect(report.probes.count == ProbeRegistry.builtIn.count, "a denied probe must not drop out of the report")
    }
}
