import Foundation
import Testing
@testable import FingerlyModel

/// The environment verdicts on this very machine, and inside namespaces made on it.
@Suite(.serialized) struct LiveEnvironmentTests {
    /// What the test can see for itself decides what the collector must say.
    static var hostIsAVirtualMachine: Bool {
        let cpuinfo = (try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8)) ?? ""
        return cpuinfo.contains(" hypervisor")
    }

    static var hostIsFirecracker: Bool {
        guard let dsdt = FileManager.default.contents(atPath: "/sys/firmware/acpi/tables/DSDT"), dsdt.count >= 16 else { return false }
        return String(decoding: dsdt[10..<16], as: UTF8.self) == "FIRECK"
    }

    @Test func thisHostIsReportedAsVMAndContainerTogether() throws {
        let found = try verdicts(in: try runCLI(["--no-submit", "--json"]))
        let virtualization = found.virtualization
        #expect(virtualization.value == Self.hostIsAVirtualMachine)
        if Self.hostIsFirecracker {
            #expect(virtualization.kind == "firecracker" && virtualization.confidence == .high)
            #expect(virtualization.codes.contains("acpi_names_microvm"))
            #expect(virtualization.messages.contains { $0.contains("FIRECK") })
        }
        if FileManager.default.fileExists(atPath: "/.dockerenv") {
            let container = found.container
            #expect(container.value && container.kind == "docker")
            #expect(container.messages.contains { $0.contains("/.dockerenv") })
        }
    }

    @Test(.enabled(if: IntegrityScenarioTests.installed("unshare"), "unshare is not installed"))
    func unshareNamespacesAreReportedAndTheVMStillIs() throws {
        let output = try runProcess("/usr/bin/unshare", ["-Urpf", "--mount-proc", TestPaths.cli, "--no-submit", "--json"])
        let found = try verdicts(in: output)
        let container = found.container
        #expect(container.value && container.codes.contains("user_namespace"), "\(container.messages)")
        #expect(found.virtualization.value == Self.hostIsAVirtualMachine)
    }

    @Test(.enabled(if: IntegrityScenarioTests.installed("bwrap"), "bwrap (bubblewrap) is not installed"))
    func bubblewrapIsReportedAndTheVMStillIs() throws {
        let output = try runProcess("/usr/bin/bwrap", ["--dev-bind", "/", "/", "--proc", "/proc", "--unshare-pid", "--unshare-user",
                                                       TestPaths.cli, "--no-submit", "--json"])
        let found = try verdicts(in: output)
        let container = found.container
        #expect(container.value && container.codes.contains("user_namespace"), "\(container.messages)")
        #expect(found.virtualization.value == Self.hostIsAVirtualMachine)
    }
}
