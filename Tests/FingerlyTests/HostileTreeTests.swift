@testable import FingerlyCatalogue
import Foundation
import Testing
@testable import Fingerly
@testable import FingerlyHost
@testable import FingerlyModel
@testable import FingerlyPolicy
@testable import FingerlyProbes

/// The tree under --root is written by the party being judged. These runs build trees from the
/// catalogue's own list of what is read, so a probe that starts reading something new is
/// attacked too, and hold the built CLI to the bounds a collector must keep on any input.
@Suite(.serialized) struct HostileTreeTests {
    enum Variant: String, CaseIterable, CustomTestStringConvertible {
        /// Every path, at a varying depth, a link (absolute or climbing) to a copy outside the root.
        case linksToOutside
        /// The top-level directories linked to the live host's own.
        case linksToLiveHost
        /// Every file a FIFO: an open that waits for a writer would hang the probe.
        case fifos
        /// Every file a 1 GiB sparse file, and 600 of them among the trusted certificates.
        case sparseFiles
        /// Every file huge text: long lines, numbers past Int.max, placeholders, invalid UTF-8;
        /// directories with hundreds of long names.
        case giantContent
        /// Eight directories the probes list, 20,000 names of 240 bytes in each.
        case hugeDirectories

        var testDescription: String { rawValue }
    }

    static let budgetMs = 1500
    static let canary = "CANARY-FROM-OUTSIDE-THE-ROOT"

    @Test(arguments: Variant.allCases)
    func hostileTreeStaysWithinBounds(_ variant: Variant) throws {
        let root = try TestPaths.temporaryDirectory("hostile-\(variant.rawValue)")
        let outside = try TestPaths.temporaryDirectory("hostile-outside")
        defer {
            try? FileManager.default.removeItem(atPath: root)
            try? FileManager.default.removeItem(atPath: outside)
        }
        try HostileTree.build(variant, root: root, outside: outside)

        let timing = root + ".time"
        defer { try? FileManager.default.removeItem(atPath: timing) }
        // The README's release build: a debug build is slow enough that its probes time out
        // before they have read (and held) everything, which would flatter the memory bound.
        try #require(FileManager.default.isExecutableFile(atPath: IntegrityScenarioTests.releaseCLI),
                     "\(IntegrityScenarioTests.releaseCLI) is missing: scripts/test builds it")
        let run = try runProcess("/usr/bin/time", ["-f", "%M", "-o", timing, IntegrityScenarioTests.releaseCLI, "--root", root, "--no-submit", "--json",
                                                   "--api-key", TestKeys.standard, "--budget-ms", String(Self.budgetMs), "--tiers", "fast,deferred"],
                                 timeout: 60)
        #expect(run.status == 0 || run.status == 3, "exit \(run.status): \(run.standardError.suffix(2000))")
        let peakKiB = Int(try String(contentsOfFile: timing, encoding: .utf8).split(separator: "\n").last ?? "") ?? .max
        #expect(peakKiB < 64 * 1024, "peak RSS \(peakKiB) KiB")
        #expect(run.wallMs < Double(Self.budgetMs + 1000), "took \(run.wallMs) ms for a \(Self.budgetMs) ms budget")
        #expect(run.standardOutput.utf8.count < 1024 * 1024, "output of \(run.standardOutput.utf8.count) bytes")
        #expect(!run.standardOutput.contains(Self.canary))
        print("hostile tree \(variant.rawValue): peak RSS \(peakKiB) KiB, \(Int(run.wallMs)) ms, \(run.standardOutput.utf8.count) bytes of output")

        let result = try run.identifyResult()
        #expect(result.report.probes.count == ProbeCatalogue.embedded.probes.count)
        // Nothing of the live host: its machine-id hash, its NICs' MAC hashes.
        let hasher = IdentifierHasher(organization: "acme")
        var liveValues: [String] = []
        if let machineId = try? String(contentsOfFile: "/etc/machine-id", encoding: .utf8) {
            liveValues.append(hasher.hash(machineId.trimmingCharacters(in: .whitespacesAndNewlines)))
        }
        for interface in (try? FileManager.default.contentsOfDirectory(atPath: "/sys/class/net")) ?? [] {
            if let mac = try? String(contentsOfFile: "/sys/class/net/\(interface)/address", encoding: .utf8) {
                liveValues.append(hasher.hash(mac.trimmingCharacters(in: .whitespacesAndNewlines)))
            }
        }
        for value in liveValues { #expect(!run.standardOutput.contains(value)) }
        #expect(result.report.identity.instanceComponents.allSatisfy { !$0.hasPrefix("machine-id") } || variant == .giantContent)
    }
}

/// Builds the hostile trees from the catalogue's paths.
enum HostileTree {
    /// Every path the catalogue says is read, with each wildcard made concrete a few ways.
    static func concretePaths() -> [String] {
        var paths: Set<String> = []
        for probe in ProbeCatalogue.embedded.probes {
            for pattern in probe.reads where pattern.hasPrefix("/") && pattern.count > 1 {
                for expanded in expand(pattern.replacingOccurrences(of: "/**", with: "/root")) { paths.insert(expanded) }
            }
        }
        // HOME is read from the process environment of the tree.
        paths.insert("/proc/self/environ")
        return paths.sorted()
    }

    private static func expand(_ pattern: String) -> [String] {
        guard let star = pattern.range(of: "*") else { return [pattern] }
        let names = pattern.hasPrefix("/proc/") ? ["1", "self"] : ["sda", "n0"]
        return names.flatMap { expand(pattern.replacingCharacters(in: star, with: $0)) }
    }

    /// Paths that are a prefix of another are directories; the rest are files.
    static func split(_ paths: [String]) -> (files: [String], directories: Set<String>) {
        var directories: Set<String> = []
        for path in paths {
            var parts = path.split(separator: "/").dropLast()
            while !parts.isEmpty {
                directories.insert("/" + parts.joined(separator: "/"))
                parts = parts.dropLast()
            }
        }
        return (paths.filter { !directories.contains($0) }, directories)
    }

    static func build(_ variant: HostileTreeTests.Variant, root: String, outside: String) throws {
        let (files, directories) = split(concretePaths())
        let manager = FileManager.default
        func makeParent(_ path: String) throws {
            try manager.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        }
        switch variant {
        case .linksToOutside:
            for file in files {
                try DeviceFixtures.write(HostileTreeTests.canary + "\nMemTotal: 1 kB\nID=canary\n", to: outside + file)
            }
            for (index, file) in files.enumerated() {
                let parts = file.split(separator: "/").map(String.init)
                // A link at depth 0 for the first path, 1 for the next, and so on, down to the file itself.
                let depth = index % parts.count
                let prefix = "/" + parts[0...depth].joined(separator: "/")
                if manager.fileExists(atPath: root + prefix) || (try? manager.destinationOfSymbolicLink(atPath: root + prefix)) != nil { continue }
                let climbing = String(repeating: "../", count: depth + 20) + (outside + prefix).dropFirst()
                try DeviceFixtures.link(root + prefix, to: index % 2 == 0 ? outside + prefix : climbing)
            }
        case .linksToLiveHost:
            for name in ["etc", "proc", "sys", "run", "var", "usr", "dev", "root", "home", "lib", "lib64"] {
                try DeviceFixtures.link(root + "/" + name, to: "/" + name)
            }
        case .fifos:
            for file in files {
                try makeParent(root + file)
                #expect(mkfifo(root + file, 0o644) == 0, "mkfifo \(file)")
            }
        case .sparseFiles:
            for file in files { try sparse(root + file, bytes: 1 << 30) }
            for index in 0..<600 { try sparse(root + "/etc/ssl/certs/hostile-\(index).pem", bytes: 1 << 30) }
        case .hugeDirectories:
            for directory in ["/proc", "/sys/class/net", "/sys/class/block", "/etc/ssl/certs", "/sys/bus/pci/devices",
                              "/sys/class/input", "/etc/ssh", "/sys/module"] {
                try manager.createDirectory(atPath: root + directory, withIntermediateDirectories: true)
                let padding = String(repeating: "x", count: 240)
                for index in 0..<20_000 {
                    _ = symlink("target", root + directory + "/" + String(index) + padding)
                }
            }
        case .giantContent:
            let text = giantText()
            for file in files {
                try makeParent(root + file)
                try text.write(to: URL(fileURLWithPath: root + file))
            }
            // Directories with many long names: every device list walks them.
            for directory in ["/sys/bus/pci/devices", "/sys/class/net", "/sys/class/input", "/sys/firmware/acpi/tables", "/etc/ssl/certs"]
            where directories.contains(directory) {
                for index in 0..<300 {
                    let name = String(repeating: "x", count: 200) + "\(index)" + (directory.hasSuffix("certs") ? ".pem" : "")
                    try makeParent(root + directory + "/" + name + "/uevent")
                    try text.prefix(64 * 1024).write(to: URL(fileURLWithPath: root + directory + "/" + name + (directory.hasSuffix("certs") || directory.hasSuffix("tables") ? "/../" + name + ".bin" : "/vendor")))
                }
            }
        }
    }

    private static func sparse(_ path: String, bytes: off_t) throws {
        try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        let fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0o644)
        try #require(fd >= 0, "create \(path)")
        defer { close(fd) }
        try #require(ftruncate(fd, bytes) == 0)
    }

    /// About 512 KiB of everything a parser may choke on, in the shapes the probes parse.
    static func giantText() -> Data {
        var text = ""
        let huge = "9223372036854775807"
        let lines = [
            "MemTotal:       \(huge)\(huge) kB", "MemTotal:       \(huge) kB", "TracerPid:\t\(huge)", "PPid:\t-\(huge)",
            "Uid:\t\(huge)\t\(huge)\t\(huge)\t\(huge)", "Seccomp:\t\(huge)", "model name\t: " + String(repeating: "{cpu.model}", count: 2000),
            "flags\t\t: " + Array(repeating: "hypervisor", count: 5000).joined(separator: " "),
            "ID=" + String(repeating: "A", count: 100_000), "PRETTY_NAME=\"" + String(repeating: "{os.id}", count: 5000) + "\"",
            "36 35 98:0 / / rw - ext4 /dev/root rw", "\(huge):\(huge) 0 / / rw - " + String(repeating: "z", count: 50_000) + " x y",
            "0::/" + String(repeating: "docker/", count: 10_000),
            "7f0000000000-7f0000001000 r-xp 00000000 \(huge):\(huge) \(huge) /" + String(repeating: "lib", count: 10_000),
            "   0: 00000000:" + String(repeating: "F", count: 40) + " 00000000:0000 0A",
            "E:ID_FS_UUID=" + String(repeating: "u", count: 100_000), "P:" + String(repeating: "/x", count: 20_000),
            "-----BEGIN CERTIFICATE-----", String(repeating: "QUFB", count: 30_000), "-----END CERTIFICATE-----",
            "HOME=/root", "LD_PRELOAD=" + String(repeating: "/tmp/x.so:", count: 3000),
        ]
        while text.utf8.count < 512 * 1024 { text += lines.joined(separator: "\n") + "\n" }
        var data = Data(text.utf8)
        data.append(contentsOf: [0xFF, 0xFE, 0x00, 0xC3, 0x28, 0x0A])
        return data
    }
}
