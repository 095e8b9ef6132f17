@testable import FingerlyCatalogue
import Foundation
import Testing
@testable import Fingerly
@testable import FingerlyHost
@testable import FingerlyModel
@testable import FingerlyPolicy
@testable import FingerlyProbes

/// Attacks found by the second hostile review, on the fixes of the first (review2-findings.md).
/// Each fails on the code as reviewed (main at bcf9305).
@Suite(.serialized) struct Review2AttackTests {
    /// R1: the home-directory reduction took the component right after "/home/", so an empty or
    /// "." component was reduced and the user's name after it left in clear; other per-user
    /// roots (udisks2 mounts, WSL's Windows profile) were not reduced at all.
    @Test func everySpellingOfAHomeDirectoryIsReduced() {
        let hasher = IdentifierHasher.perRun()
        let reduced = hasher.personalPaths(
            "/home//alice/lib:/home/./bob/lib:/media/carol/usb/lib:/run/media/dave/x:/mnt/c/Users/Erin/lib")
        for name in ["alice", "bob", "carol", "dave", "Erin"] {
            #expect(!reduced.contains(name), "\(name) left in clear: \(reduced)")
        }
    }

    /// R3: the authority was taken to end at the first "/", so a password holding one hid the "@"
    /// and the whole URL, password included, went into the report and a verdict reason.
    @Test func proxyCredentialsAreDroppedWhateverThePasswordHolds() {
        let shown = ProxyEnvironmentProbe.withoutCredentials("http://ivan:pa/ss@proxy.example:3128")
        #expect(!shown.contains("ivan") && !shown.contains("pa/ss"), "credentials kept: \(shown)")
        #expect(shown.contains("proxy.example:3128"))
    }

    /// R2 and R3: an unreadable file under HOME was reported with its path (issue, missing
    /// evidence, human summary) and KDE's PAC URL was quoted with its credentials and home path.
    @Test func homePathsAndPACCredentialsStayOutOfTheReport() async throws {
        let root = try TestPaths.temporaryDirectory("home-paths")
        let fm = FileManager.default
        try fm.createDirectory(atPath: root + "/proc/self", withIntermediateDirectories: true)
        try fm.createDirectory(atPath: root + "/home/alice/.config/dconf", withIntermediateDirectories: true)
        try Data("HOME=/home/alice\0PATH=/usr/bin\0".utf8).write(to: URL(fileURLWithPath: root + "/proc/self/environ"))
        try Data("[Proxy Settings]\nProxyType=2\nProxy Config Script=http://bob:s3cret@pac.example/home/alice/p.pac\n".utf8)
            .write(to: URL(fileURLWithPath: root + "/home/alice/.config/kioslaverc"))
        #expect(mkfifo(root + "/home/alice/.config/dconf/user", 0o644) == 0)

        let result = try await identify(root: root)
        let json = String(decoding: try JSONEncoder.fingerly.encode(result), as: UTF8.self)
        let namesTheUser = json.contains("alice"), carriesThePassword = json.contains("s3cret")
        #expect(!namesTheUser, "the home directory's name is in the report")
        #expect(!carriesThePassword, "the PAC URL's password is in the report")
    }

    /// R5: on the live host a file under HOME was opened before its type was checked, and a
    /// character device was read as if it were the dconf database (1 MiB of /dev/zero, no issue).
    @Test func deviceLinksUnderHomeAreNotRead() throws {
        let home = try TestPaths.temporaryDirectory("home-device")
        try FileManager.default.createDirectory(atPath: home + "/.config/dconf", withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: home + "/.config/dconf/user", withDestinationPath: "/dev/zero")
        var environment = ProcessInfo.processInfo.environment
        environment["HOME"] = home
        let output = try runCLI(["--no-submit", "--json", "--tiers", "all"], environment: environment)
        try #require(output.status == 0, "exit \(output.status): \(output.standardError)")
        let result = try output.identifyResult()
        let probe = try result.probe("proxy-configuration")
        #expect(probe.issues.contains { $0.path.hasSuffix("/.config/dconf/user") && $0.status == .malformed },
                "a character device under HOME was read without a word: \(probe.issues)")
    }

    /// R6: bidi overrides and other invisible format characters reached the terminal raw, so a
    /// host string could show the operator reversed or hidden text.
    @Test func formatCharactersAreEscapedForTheTerminal() {
        for scalar in ["\u{202E}", "\u{2066}", "\u{200B}", "\u{2028}"] {
            let shown = ("QEMU" + scalar + "LAUNAM").escapingControlCharacters
            #expect(!shown.contains(scalar), "U+\(String(scalar.unicodeScalars.first!.value, radix: 16)) passed raw")
        }
    }

    /// R2 and R7: signals that quote file paths but were not marked, so the same hidden library
    /// or PAC file was reduced in one signal and in clear in the next.
    @Test(arguments: ["integrity.view_mismatches", "proxy.desktop"])
    func signalsQuotingPathsAreMarkedPersonal(signal: String) {
        #expect(ProbeContext.personalPathSignals.contains(signal))
    }

    /// R8: a file longer than its read limit was cut silently and the prefix parsed as the whole
    /// file; glibc's loader reads all of /etc/ld.so.preload, so a library listed after 300 KiB
    /// of blanks was preloaded everywhere while the report said the file listed nothing.
    @Test func aPaddedPreloadFileDoesNotHideItsLibrary() async throws {
        let root = try TestPaths.temporaryDirectory("padded-preload")
        try FileManager.default.createDirectory(atPath: root + "/etc", withIntermediateDirectories: true)
        try Data((String(repeating: " ", count: 300 * 1024) + "/usr/lib/evil/libhide.so\n").utf8)
            .write(to: URL(fileURLWithPath: root + "/etc/ld.so.preload"))
        let result = try await identify(root: root)
        let probe = try result.probe("loader-environment")
        let listed = result.signals["loader.preload_file_entries"] == .strings(["/usr/lib/evil/libhide.so"])
        let flagged = probe.issues.contains { $0.path == "/etc/ld.so.preload" }
        #expect(listed || flagged, "the padded preload file read as empty, without an issue")
    }
}
