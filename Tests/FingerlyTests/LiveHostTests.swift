@testable import FingerlyCatalogue
import Foundation
import Testing
@testable import Fingerly
@testable import FingerlyHost
@testable import FingerlyModel
@testable import FingerlyPolicy
@testable import FingerlyProbes

/// The one place the live host is read: assert only what the test can know independently.
@Suite struct LiveHostTests {
    @Test func liveRunAgreesWithWhatTheTestCanSeeItself() throws {
        let run = try runCLI(["--no-submit", "--json", "--tiers", "fast", "--api-key", TestKeys.key(org: "live-test")])
        #expect(run.status == 0, "\(run.standardError)")
        let result = try run.identifyResult()
        #expect(result.report.root == "/")
        for probe in result.report.probes {
            #expect([.ok, .absent, .denied, .skipped].contains(probe.status), "\(probe.id): \(probe.status)")
        }
        let signals = result.signals

        let osRelease = (try? String(contentsOfFile: "/etc/os-release", encoding: .utf8)) ?? ""
        let id = osRelease.split(separator: "\n").first { $0.hasPrefix("ID=") }.map { String($0.dropFirst(3)).trimmingCharacters(in: CharacterSet(charactersIn: "\"")) }
        #expect(signals["os.id"]?.string == id)
        var names = utsname()
        uname(&names)
        let release = withUnsafeBytes(of: names.release) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        #expect(signals["os.kernel_release"] == .string(release))
        #expect(signals["cpu.logical_cores"] == .int(Int(sysconf(Int32(_SC_NPROCESSORS_CONF)))))
        let total = sysconf(Int32(_SC_PHYS_PAGES)) * sysconf(Int32(_SC_PAGESIZE))
        let reported = try #require(signals["memory.total_bytes"]?.int)
        #expect(abs(reported - total) < 1024 * 1024, "MemTotal \(reported) vs sysconf \(total)")
        #expect(signals["process.uid"] == .int(Int(getuid())))
        #expect(signals["process.euid"] == .int(Int(geteuid())))
        // This test process is the CLI's parent.
        let ownExe = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        #expect(signals["process.parent_exe"] == .string(ownExe))
        #expect(signals["process.stdin_tty"] == .bool(false), "the test gives the CLI /dev/null as stdin")

        // The machine-id appears only as its keyed hash, and the hash is the one this key gives.
        if let machineId = try? String(contentsOfFile: "/etc/machine-id", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines),
           machineId.count == 32 {
            #expect(!run.standardOutput.contains(machineId))
            #expect(signals["machine.machine_id"] == .string(IdentifierHasher(organization: "live-test").hash(machineId)))
        }
        let environmentHasPreload = ProcessInfo.processInfo.environment["LD_PRELOAD"] != nil
        #expect(result.verdicts.tampering.value == environmentHasPreload)
    }
}
