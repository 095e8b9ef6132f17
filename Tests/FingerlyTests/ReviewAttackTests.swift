import CFingerlyFiles
import Foundation
import Testing
@testable import Fingerly
@testable import FingerlyHost
@testable import FingerlyModel
@testable import FingerlyPolicy
@testable import FingerlyProbes

/// Attacks found by the hostile review of the issue-9 fixes (review-findings.md). Each fails on
/// the code as reviewed.
@Suite(.serialized) struct ReviewAttackTests {
    /// F3: the walk copied a whole component into a 4,097-byte stack buffer before checking its
    /// length. A tree's uevent puts an 8,000-byte MAJOR into one component of the udev database
    /// path; the copy overwrote the return address (SIGSEGV at 0x4141414141414141).
    /// Before a fix this crashes the test process: run it alone.
    @Test func walkRefusesAComponentLongerThanItsBuffer() throws {
        let root = try TestPaths.temporaryDirectory("long-component")
        try FileManager.default.createDirectory(atPath: root + "/run/udev/data", withIntermediateDirectories: true)
        let component = "b" + String(repeating: "A", count: 8000) + ":0"
        let fd = try #require(open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC) as Int32?)
        defer { close(fd) }
        let result = fingerly_open_beneath(fd, "/run/udev/data/" + component, O_RDONLY, true, fingerly_resolution_walk)
        #expect(result == -ENAMETOOLONG)
        let host = HostFileSystem(root: root, log: nil, resolution: fingerly_resolution_walk)
        #expect(throws: HostReadError.self) { try host.read("/run/udev/data/" + component) }
    }

    /// F2: a character device node in the tree was opened for reading (the driver ran: an
    /// unregistered number answers ENXIO) before its type was checked. It must be refused as
    /// not a regular file without being opened.
    @Test(.enabled(if: geteuid() == 0, "needs root: mknod makes a character device node"),
          arguments: [fingerly_resolution_automatic, fingerly_resolution_walk])
    func deviceNodesInTheTreeAreNotOpened(resolution: fingerly_resolution) throws {
        let root = try TestPaths.temporaryDirectory("device-node")
        try FileManager.default.createDirectory(atPath: root + "/etc", withIntermediateDirectories: true)
        // No driver has major 4000: opening it, and only opening it, fails with ENXIO.
        let made = try runShell("mknod -m 644 \"$1\" c 4000 4000", root + "/etc/os-release")
        try #require(made.status == 0, "mknod needs root: \(made.standardError)")
        let host = HostFileSystem(root: root, log: nil, resolution: resolution)
        #expect { try host.read("/etc/os-release") } throws: { ($0 as? HostReadError)?.failure == .malformed }
    }

    /// F1: a block device node in the tree names a live disk by its number; libblkid read the
    /// live device (and the live /sys/dev/block) and its UUID went into the report.
    @Test(.enabled(if: geteuid() == 0, "needs root: losetup attaches a loop device and mknod makes its block node"))
    func blockDeviceNodesInTheTreeDoNotReadLiveDisks() throws {
        let outside = try TestPaths.temporaryDirectory("live-disk")
        let image = outside + "/disk.img"
        let made = try runShell("truncate -s 8M \"$1\" && mkfs.ext4 -q -F -U 0fedcba9-8765-4321-0fed-cba987654321 \"$1\"", image)
        try #require(made.status == 0, "mkfs.ext4: \(made.standardError)")
        let attached = try runShell("losetup -f --show \"$1\"", image)
        try #require(attached.status == 0, "losetup needs root: \(attached.standardError)")
        let loop = attached.standardOutput.trimmingCharacters(in: .whitespacesAndNewlines)
        defer { _ = try? runShell("losetup -d \"$1\"", loop) }

        let root = try TestPaths.temporaryDirectory("device-tree")
        try FileManager.default.createDirectory(atPath: root + "/dev", withIntermediateDirectories: true)
        let node = try runShell("mknod -m 644 \"$1\" b $((0x$(stat -c %t \"$2\"))) $((0x$(stat -c %T \"$2\")))", root + "/dev/vda1", loop)
        try #require(node.status == 0, "mknod: \(node.standardError)")
        let host = HostFileSystem(root: root)
        let uuid = (try? Blkid.superblock(at: "/dev/vda1", on: host))?.values["UUID"]
        #expect(uuid == nil, "read the live device's UUID \(uuid ?? "")")
    }

    /// F4: names from the tree reached the terminal summary raw: a FIFO named with an OSC and a
    /// clear-screen sequence retitled and cleared the operator's terminal.
    @Test func fileNamesFromTheTreeReachTheTerminalEscaped() throws {
        let root = try TestPaths.temporaryDirectory("escape-names")
        try FileManager.default.createDirectory(atPath: root + "/etc/ssl/certs", withIntermediateDirectories: true)
        let hostile = "a\u{1B}]0;PWNED\u{07}\u{1B}[2Jb.pem"
        #expect(mkfifo(root + "/etc/ssl/certs/" + hostile, 0o644) == 0)
        let run = try runCLI(["--no-submit", "--root", root])
        #expect(run.status == 0, "\(run.standardError)")
        #expect(run.standardOutput.contains("PWNED"), "the name is reported, escaped")
        #expect(!run.standardOutput.contains("\u{1B}]0;"))
        #expect(!run.standardOutput.contains("\u{07}"))
        #expect(!run.standardOutput.contains("\u{1B}[2J"))
    }

    /// F5: home-directory names in reported paths (LD_LIBRARY_PATH, SSLKEYLOGFILE, trust
    /// overrides) went out in clear; they are fingerprinted unless the policy keeps free text.
    @Test func homeDirectoryNamesInPathsLeaveOnlyAsFingerprints() throws {
        var environment = ProcessInfo.processInfo.environment
        environment["LD_LIBRARY_PATH"] = "/home/alice.example/lib:/usr/lib"
        environment["SSLKEYLOGFILE"] = "/home/alice.example/keys.log"
        environment["SSL_CERT_FILE"] = "/home/alice.example/certs.pem"
        let reduced = try runCLI(["--no-submit", "--json", "--tiers", "fast,deferred"], environment: environment)
        #expect(reduced.status == 0, "\(reduced.standardError)")
        #expect(!reduced.standardOutput.contains("alice"))
        let result = try reduced.identifyResult()
        guard case .string(let path)? = result.signals["loader.ld_library_path"] else {
            Issue.record("no loader.ld_library_path")
            return
        }
        #expect(path.hasPrefix("/home/fp:") && path.hasSuffix("/lib:/usr/lib"), "\(path)")
        let kept = try runCLI(["--no-submit", "--json", "--free-text", "keep"], environment: environment)
        #expect(kept.standardOutput.contains("/home/alice.example/lib"))
    }

    /// F6: one containsAny condition with hundreds of thousands of needles, against a long host
    /// value, ran seconds past the budget. Long lists belong in tables.
    @Test func aContainsAnyWithTooManyNeedlesIsRejected() throws {
        let needles = (0..<(PolicyLoader.needleLimit + 1)).map { "\"n\($0)\"" }.joined(separator: ",")
        let policy = #"{"policyVersion": 1, "verdicts": {"debugger": {"rules": [{"id": "many", "confidence": "low", "reason": "r", "when": {"signal": "loader.ld_library_path", "containsAny": ["# + needles + #"]}}]}}}"#
        let file = try TestPaths.temporaryDirectory("needles") + "/policy.json"
        try policy.write(toFile: file, atomically: true, encoding: .utf8)
        let run = try runCLI(["--no-submit", "--policy", file])
        #expect(run.status == 65)
        #expect(run.standardError.contains("at most \(PolicyLoader.needleLimit)"), "\(run.standardError)")
    }
}
