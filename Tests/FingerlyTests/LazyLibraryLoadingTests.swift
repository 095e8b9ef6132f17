import Foundation
import Glibc
import Testing
@testable import Fingerly

/// libsqlite3 and libssl are opened on the first call into them, not by the loader at start: a dry run
/// and the integrity check never store or speak TLS themselves, and the two libraries' relocations were
/// a third of what the loader did before the CLI's first instruction. The local mode opens libsqlite3;
/// a store that finds no usable libsqlite3 says so and takes nothing down.
@Suite(.serialized) struct LazyLibraryLoadingTests {
    @Test func noProductNamesLibsqlite3OrLibsslAmongItsNeededLibraries() throws {
        for object in [TestPaths.cli, ServerProcess.executable, try InstalledLibrary.library] {
            let dynamic = try runProcess("/usr/bin/readelf", ["-d", object])
            try #require(dynamic.status == 0, "readelf \(object): \(dynamic.standardError)")
            #expect(dynamic.standardOutput.contains("(NEEDED)"), "\(object): \(dynamic.standardOutput)")
            for library in ["libsqlite3", "libssl"] {
                #expect(!dynamic.standardOutput.contains(library), "\(object) needs \(library)")
            }
        }
    }

    @Test func aDryRunAndTheIntegrityCheckLoadNeitherAndTheLocalModeLoadsLibsqlite3() throws {
        let state = try LazyHTTPClientLoadingTests.freshState("lazy-libraries")
        let dryRun = try LazyHTTPClientLoadingTests.runTracedCLI(["--no-submit", "--json"], state: state,
                                                                 apiKey: TestKeys.standard)
        #expect(dryRun.status == 0, "\(dryRun.standardError.suffix(2000))")
        let integrity = try LazyHTTPClientLoadingTests.runTracedCLI(["integrity", "--json"], state: state,
                                                                    apiKey: TestKeys.standard)
        #expect(integrity.status == 0, "\(integrity.standardError.suffix(2000))")
        for (name, run) in [("--no-submit", dryRun), ("integrity", integrity)] {
            // The loader's trace is there, so its silence on the two libraries means something. The
            // symbol-interposition probe asks for libssl with RTLD_NOLOAD, which searches and loads nothing.
            let initialized = run.standardError.split(separator: "\n").filter { $0.contains("calling init:") }
            #expect(!initialized.isEmpty, "\(name): no loader trace")
            for library in ["libsqlite3", "libssl"] {
                #expect(!initialized.contains { $0.contains(library) }, "\(name) loaded \(library)")
            }
        }
        let local = try LazyHTTPClientLoadingTests.runTracedCLI(["--tiers", "fast", "--json"], state: state,
                                                                apiKey: nil)
        #expect(local.status == 0, "\(local.standardError.suffix(2000))")
        #expect(try local.identifyResult().state == .local)
        let initialized = local.standardError.split(separator: "\n").filter { $0.contains("calling init:") }
        #expect(initialized.contains { $0.contains("libsqlite3.so.0") }, "the local mode did not load libsqlite3")
    }

    /// A libsqlite3.so.0 of the test's making, without any of SQLite's functions, first on the path.
    @Test func aLocalModeWithoutAUsableLibsqlite3IsAClearError() throws {
        let directory = try TestPaths.temporaryDirectory("broken-libsqlite3")
        let source = directory + "/empty.c"
        try "int fingerly_test_placeholder;\n".write(toFile: source, atomically: true, encoding: .utf8)
        let made = try runShell("cc -shared -fPIC -Wl,-soname,libsqlite3.so.0 \"$1\" -o \"$2/libsqlite3.so.0\"",
                                source, directory)
        try #require(made.status == 0, "\(made.standardError)")
        let state = try LazyHTTPClientLoadingTests.freshState("broken-libsqlite3")
        var environment = SubmissionCLITests.environment(state: state, apiKey: nil)
        environment["LD_LIBRARY_PATH"] = directory
        let local = try runProcess(TestPaths.cli, ["--tiers", "fast", "--json"], environment: environment)
        #expect(local.status != 0, "the local mode ran without SQLite: \(local.standardOutput.prefix(500))")
        #expect(local.status < 128, "ended by a signal: \(local.status)")
        #expect(local.standardError.contains("libsqlite3.so.0 lacks a function"), "\(local.standardError)")
        // A dry run needs no store: the same environment is no obstacle to it.
        let dryRun = try runProcess(TestPaths.cli, ["--no-submit", "--json"], environment: environment)
        #expect(dryRun.status == 0, "\(dryRun.standardError.suffix(2000))")
    }

    // libcrypto: a dry run of the fast tier hashes with FingerlyHost's SHA-256 and needs nothing else of it.

    @Test func noProductNamesLibcryptoAmongItsNeededLibraries() throws {
        for object in [TestPaths.cli, ServerProcess.executable, try InstalledLibrary.library] {
            let dynamic = try runProcess("/usr/bin/readelf", ["-d", object])
            try #require(dynamic.status == 0, "readelf \(object): \(dynamic.standardError)")
            #expect(dynamic.standardOutput.contains("(NEEDED)"), "\(object): \(dynamic.standardOutput)")
            #expect(!dynamic.standardOutput.contains("libcrypto"), "\(object) needs libcrypto")
        }
    }

    static func loadsLibcrypto(_ run: ProcessOutput) -> Bool {
        run.standardError.split(separator: "\n").contains { $0.contains("calling init:") && $0.contains("libcrypto.so") }
    }

    @Test func aFastDryRunAndTheIntegrityCheckDoNotLoadLibcryptoAndAFullRunOrTheLocalModeDo() throws {
        let state = try LazyHTTPClientLoadingTests.freshState("lazy-libcrypto")
        let fastDryRun = try LazyHTTPClientLoadingTests.runTracedCLI(["--no-submit", "--json", "--tiers", "fast"],
                                                                     state: state, apiKey: TestKeys.standard)
        let integrity = try LazyHTTPClientLoadingTests.runTracedCLI(["integrity", "--json"], state: state,
                                                                    apiKey: TestKeys.standard)
        for (name, run) in [("--no-submit --tiers fast", fastDryRun), ("integrity", integrity)] {
            #expect(run.status == 0, "\(name): \(run.standardError.suffix(2000))")
            #expect(run.standardError.contains("calling init:"), "\(name): no loader trace")
            #expect(!Self.loadsLibcrypto(run), "\(name) loaded libcrypto")
        }
        // The trust-store probe hashes packaged roots itself and describes a local root written the plain way; it
        // opens libcrypto for one that may share a packaged root's name (there, a variant of it) or is not plain.
        let packagedOnly = try TrustStoreCacheTests.trustTree(bundleHoldsLocalRoot: false).root
        let withLocalRoot = try TrustStoreCacheTests.trustTree(bundleHoldsLocalRoot: true).root
        let shipped = try PlainCertificateTests.made(subject: "/CN=Shipped Root")
        func tree(local: String) throws -> String {
            try ShimOverflowTests.tree(["/usr/share/ca-certificates/mozilla/shipped.crt": shipped,
                                        "/etc/ssl/certs/ca-certificates.crt": shipped + local])
        }
        let plainLocalRoot = try tree(local: try PlainCertificateTests.made(subject: "/CN=Household Root/O=Home"))
        let otherLocalRoot = try tree(local: try PlainCertificateTests.made(subject: "/CN=Stammzertifikat Müller"))
        for (root, loads, locals) in [(packagedOnly, false, 0), (withLocalRoot, true, 1), (plainLocalRoot, false, 1),
                                      (otherLocalRoot, true, 1)] {
            let fullDryRun = try LazyHTTPClientLoadingTests.runTracedCLI(["--no-submit", "--json", "--root", root],
                                                                         state: state, apiKey: TestKeys.standard)
            #expect(fullDryRun.status == 0, "\(fullDryRun.standardError.suffix(2000))")
            #expect(Self.loadsLibcrypto(fullDryRun) == loads, "\(root): libcrypto loaded: \(!loads)")
            let trustStore = try fullDryRun.identifyResult().report.probe("trust-store")
            #expect(trustStore.status == .ok, "\(trustStore.status): \(trustStore.detail ?? "")")
            #expect(trustStore.signals["tls.local_roots"]?.strings?.count == locals, "\(trustStore.signals)")
        }
        // The local mode signs its request with the device key: Ed25519 is libcrypto's.
        let local = try LazyHTTPClientLoadingTests.runTracedCLI(["--tiers", "fast", "--json"], state: state, apiKey: nil)
        #expect(local.status == 0, "\(local.standardError.suffix(2000))")
        #expect(try local.identifyResult().state == .local)
        #expect(Self.loadsLibcrypto(local), "the local mode did not load libcrypto")
    }

    /// A libcrypto.so.3 of the test's making, without any of libcrypto's functions, first on the path.
    @Test func aFullRunWithoutAUsableLibcryptoNamesItInTheTrustStoreProbe() throws {
        let directory = try TestPaths.temporaryDirectory("broken-libcrypto")
        let source = directory + "/empty.c"
        try "int fingerly_test_placeholder;\n".write(toFile: source, atomically: true, encoding: .utf8)
        let made = try runShell("cc -shared -fPIC -Wl,-soname,libcrypto.so.3 \"$1\" -o \"$2/libcrypto.so.3\"",
                                source, directory)
        try #require(made.status == 0, "\(made.standardError)")
        let state = try LazyHTTPClientLoadingTests.freshState("broken-libcrypto")
        var environment = SubmissionCLITests.environment(state: state, apiKey: TestKeys.standard)
        environment["LD_LIBRARY_PATH"] = directory
        // A local root is what the probe needs libcrypto for.
        let root = try TrustStoreCacheTests.trustTree(bundleHoldsLocalRoot: true).root
        let run = try runProcess(TestPaths.cli, ["--no-submit", "--json", "--root", root], environment: environment)
        #expect(run.status == 0, "\(run.standardError.suffix(2000))")
        let trustStore = try run.identifyResult().report.probe("trust-store")
        #expect(trustStore.status == .error)
        #expect(trustStore.detail?.contains("libcrypto.so.3 lacks a function") == true, "\(trustStore.detail ?? "")")
        // Without a key to sign with, the local mode resolves the visitor unsigned, as it does without a state
        // directory's key: the request binds no key, and nothing ends by a signal.
        var localEnvironment = SubmissionCLITests.environment(state: state, apiKey: nil)
        localEnvironment["LD_LIBRARY_PATH"] = directory
        let local = try runProcess(TestPaths.cli, ["--tiers", "fast", "--json"], environment: localEnvironment)
        #expect(local.status == 0, "\(local.standardError.suffix(2000))")
        #expect(try local.identifyResult().state == .local)
    }
}

/// libudev and libblkid are opened on the first call into them too: only the deferred tier's device probes
/// use them, so a fast-tier run, the integrity check and the server map neither. A host whose copy cannot be
/// opened gets device probes that say why, and a run that goes on.
extension LazyLibraryLoadingTests {
    static let deviceLibraries = ["libudev.so.1", "libblkid.so.1"]

    /// A library of the test's making under `soname`, without any of the real one's functions.
    static func emptyLibraries(_ sonames: [String], label: String) throws -> String {
        let directory = try TestPaths.temporaryDirectory(label)
        let source = directory + "/empty.c"
        try "int fingerly_test_placeholder;\n".write(toFile: source, atomically: true, encoding: .utf8)
        for soname in sonames {
            let made = try runShell("cc -shared -fPIC -Wl,-soname,\"$3\" \"$1\" -o \"$2/$3\"",
                                    source, directory, soname)
            try #require(made.status == 0, "\(made.standardError)")
        }
        return directory
    }

    @Test func noProductNamesLibudevOrLibblkidAmongItsNeededLibraries() throws {
        for object in [TestPaths.cli, ServerProcess.executable, try InstalledLibrary.library] {
            let dynamic = try runProcess("/usr/bin/readelf", ["-d", object])
            try #require(dynamic.status == 0, "readelf \(object): \(dynamic.standardError)")
            #expect(dynamic.standardOutput.contains("(NEEDED)"), "\(object): \(dynamic.standardOutput)")
            for library in ["libudev", "libblkid"] {
                #expect(!dynamic.standardOutput.contains(library), "\(object) needs \(library)")
            }
        }
    }

    @Test func aFastTierRunAndTheIntegrityCheckLoadNeitherDeviceLibraryAndAFullRunLoadsLibudev() throws {
        let state = try LazyHTTPClientLoadingTests.freshState("lazy-device-libraries")
        let fast = try LazyHTTPClientLoadingTests.runTracedCLI(["--no-submit", "--json", "--tiers", "fast"],
                                                               state: state, apiKey: TestKeys.standard)
        #expect(fast.status == 0, "\(fast.standardError.suffix(2000))")
        let integrity = try LazyHTTPClientLoadingTests.runTracedCLI(["integrity", "--json"], state: state,
                                                                    apiKey: TestKeys.standard)
        #expect(integrity.status == 0, "\(integrity.standardError.suffix(2000))")
        for (name, run) in [("--tiers fast", fast), ("integrity", integrity)] {
            let initialized = run.standardError.split(separator: "\n").filter { $0.contains("calling init:") }
            #expect(!initialized.isEmpty, "\(name): no loader trace")
            for library in Self.deviceLibraries {
                #expect(!initialized.contains { $0.contains(library) }, "\(name) loaded \(library)")
            }
        }
        // The device probes enumerate the live host's devices through libudev. libblkid is reached only
        // where udev's database and /dev/disk name no root filesystem, which a test host need not be.
        let full = try LazyHTTPClientLoadingTests.runTracedCLI(["--no-submit", "--json"], state: state,
                                                               apiKey: TestKeys.standard)
        #expect(full.status == 0, "\(full.standardError.suffix(2000))")
        let initialized = full.standardError.split(separator: "\n").filter { $0.contains("calling init:") }
        #expect(initialized.contains { $0.contains("libudev.so.1") }, "the full run did not load libudev")
    }

    @Test func withoutAUsableLibudevTheDeviceProbesSayWhyAndTheRunGoesOn() throws {
        let directory = try Self.emptyLibraries(Self.deviceLibraries, label: "broken-device-libraries")
        let state = try LazyHTTPClientLoadingTests.freshState("broken-libudev")
        var environment = SubmissionCLITests.environment(state: state, apiKey: TestKeys.standard)
        environment["LD_LIBRARY_PATH"] = directory
        let run = try runProcess(TestPaths.cli, ["--no-submit", "--json"], environment: environment)
        #expect(run.status == 0, "\(run.standardError.suffix(2000))")
        let report = try run.identifyResult().report
        for id in ["pci", "usb", "block", "net", "input", "drm", "sound", "tpm"] {
            let probe = try report.probe(id)
            #expect(probe.status == .error, "\(id): \(probe.status)")
            #expect(probe.detail?.contains("libudev.so.1 lacks a function") == true, "\(id): \(probe.detail ?? "")")
        }
        #expect(report.probes.contains { $0.tier == .fast && $0.status == .ok }, "the fast tier needs neither library")
    }

    @Test func withoutAUsableLibblkidTheFilesystemProbeSaysWhyAndTheRunGoesOn() throws {
        let directory = try Self.emptyLibraries(["libblkid.so.1"], label: "broken-libblkid")
        // An image as the root's device node, which only libblkid can read: no udev database, no /dev/disk.
        let root = try DeviceFixtures.filesystemRoot(.images(worldReadable: true), label: "broken-libblkid")
        var environment = ProcessInfo.processInfo.environment
        environment["LD_LIBRARY_PATH"] = directory
        let run = try runCLI(["--no-submit", "--json", "--root", root], environment: environment)
        #expect(run.status == 0, "\(run.standardError.suffix(2000))")
        let probe = try run.identifyResult().report.probe("filesystem")
        #expect(probe.signals["fs.root_type"] == .string("ext4"))
        #expect(probe.signals["fs.root_uuid"] == nil)
        let issues = probe.issues.filter { $0.detail.contains("libblkid.so.1 lacks a function") }
        #expect(!issues.isEmpty && issues.allSatisfy { $0.status == .error }, "\(probe.issues)")
    }
}
