@testable import FingerlyCatalogue
import Foundation
import Testing
@testable import Fingerly
@testable import FingerlyHost
@testable import FingerlyModel
@testable import FingerlyPolicy
@testable import FingerlyProbes

/// What a report says about the people and machines behind it: identifiers keyed by a secret
/// of the installation, no OUIs, personal free text fingerprinted.
@Suite struct PrivacyTests {
    /// The CLI's result, decoded into the library's own type.
    static func result(_ output: ProcessOutput) throws -> IdentifyResult {
        try #require(output.status == 0, "exit \(output.status): \(output.standardError)")
        return try output.identifyResult()
    }

    /// Every hash a report carries that could link it to another report of the same host.
    static func linkableValues(_ result: IdentifyResult) -> [String] {
        let identity = result.report.identity
        var values = [identity.hardwareId, identity.instanceId].compactMap { $0 }
        values += (identity.hardwareComponents + identity.instanceComponents + identity.rootOnlyEvidence)
            .map { String($0.split(separator: ":").last ?? "") }
        let identifiers = ProbeCatalogue.embedded.probes.flatMap(\.signals).filter { $0.class == .identifier }.map(\.name)
        for name in identifiers {
            switch result.signals[name] {
            case .string(let hash)?: values.append(hash)
            case .strings(let items)?: values += items.map { String($0.split(separator: " ").last ?? "") }
            default: break
            }
        }
        return values
    }

    static func noKeyDryRun(root: String, stateDirectory: String) throws -> IdentifyResult {
        try result(try runCLI(["--no-submit", "--json", "--tiers", "fast", "--root", root, "--state-dir", stateDirectory],
                              removing: ["FINGERLY_API_KEY"]))
    }

    /// Two machines cloned from one image share the machine-id; without an API key their
    /// identifiers were keyed by a constant that ships in every client, so anyone could link
    /// their reports (and tell they are clones). Two installations = two state directories.
    @Test func twoNoKeyDryRunsOnTwoMachinesWithTheSameMachineIdAreUnlinkable() throws {
        let root = TestPaths.fixture("laptop-baremetal")
        let scratch = try TestPaths.temporaryDirectory("state")
        let first = try Self.noKeyDryRun(root: root, stateDirectory: scratch + "/machine-a")
        let second = try Self.noKeyDryRun(root: root, stateDirectory: scratch + "/machine-b")
        #expect(first.report.identifierKeying == .installationSecret && second.report.identifierKeying == .installationSecret)
        #expect(first.report.identity.instanceId != nil && first.report.identity.hardwareId != nil)
        #expect(first.signals["machine.machine_id"] != nil)
        let a = Self.linkableValues(first), b = Self.linkableValues(second)
        #expect(a.count >= 4 && a.count == b.count)
        #expect(Set(a).isDisjoint(with: b), "values shared across installations: \(Set(a).intersection(b))")

        // One installation stays stable from run to run.
        let again = try Self.noKeyDryRun(root: root, stateDirectory: scratch + "/machine-a")
        #expect(Self.linkableValues(again) == a)
        #expect(again.report.identity == first.report.identity)

        // The secret: 32 bytes, this user's alone, nothing left half-written beside it.
        var info = stat()
        #expect(lstat(scratch + "/machine-a/identifier-key", &info) == 0)
        #expect(info.st_mode & S_IFMT == S_IFREG && info.st_mode & 0o777 == 0o600 && info.st_size == 32 && info.st_uid == geteuid())
        #expect(try FileManager.default.contentsOfDirectory(atPath: scratch + "/machine-a") == ["identifier-key"])
    }

    /// A default state directory (here systemd's STATE_DIRECTORY) that cannot be made must not
    /// fall back to a shared key: the run is keyed by a key of its own, and the report says so.
    /// One the user names is refused instead (Python and C refuse it too), and one that another
    /// user may write is refused outright, named or not (StateDirectoryTrustTests): nothing is
    /// written there.
    @Test func anUnusableStateDirectoryKeysPerRunAndTheReportSaysSo() throws {
        let scratch = try TestPaths.temporaryDirectory("state")
        try DeviceFixtures.write("not a directory", to: scratch + "/file")
        let worldWritable = scratch + "/shared"
        try FileManager.default.createDirectory(atPath: worldWritable, withIntermediateDirectories: true)
        chmod(worldWritable, 0o777)
        let root = TestPaths.fixture("laptop-baremetal")
        func byDefault(_ directory: String) -> [String: String] {
            ProcessInfo.processInfo.environment.merging(["STATE_DIRECTORY": directory]) { $1 }
        }
        let arguments = ["--no-submit", "--json", "--tiers", "fast", "--root", root]
        let unset = ["FINGERLY_API_KEY", "FINGERLY_STATE_DIR"]
        let unmade = scratch + "/file/state"
        let first = try Self.result(try runCLI(arguments, environment: byDefault(unmade), removing: unset))
        let second = try Self.result(try runCLI(arguments, environment: byDefault(unmade), removing: unset))
        #expect(first.report.identifierKeying == .perRun && second.report.identifierKeying == .perRun)
        #expect(Set(Self.linkableValues(first)).isDisjoint(with: Self.linkableValues(second)))
        let named = try runCLI(arguments + ["--state-dir", unmade], removing: ["FINGERLY_API_KEY"])
        #expect(named.status == 64 && named.standardError.contains("--state-dir: cannot be used: "),
                "\(named.standardError)")
        let human = try runCLI(["--no-submit", "--tiers", "fast", "--root", root],
                               environment: byDefault(unmade), removing: unset)
        #expect(human.standardOutput.contains("keyed for this run only"), "\(human.standardOutput)")
        let refused = try runCLI(["--no-submit", "--tiers", "fast", "--root", root, "--state-dir", worldWritable],
                                 removing: ["FINGERLY_API_KEY"])
        #expect(refused.status == 78 && refused.standardError.contains("writable by another user"), "\(refused.standardError)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: worldWritable).isEmpty)
    }

    @Test func anAPIKeyStillKeysIdentifiersAndTouchesNoStateDirectory() throws {
        let scratch = try TestPaths.temporaryDirectory("state")
        let run = try Self.result(try runCLI(["--no-submit", "--json", "--tiers", "fast", "--api-key", TestKeys.key(org: "org-a"),
                                              "--root", TestPaths.fixture("laptop-baremetal"), "--state-dir", scratch + "/s"]))
        #expect(run.report.identifierKeying == .organization)
        let machineId = try String(contentsOfFile: TestPaths.fixture("laptop-baremetal") + "/etc/machine-id", encoding: .utf8)
        #expect(run.signals["machine.machine_id"] == .string(IdentifierHasher(organization: "org-a").hash(machineId)))
        #expect(!FileManager.default.fileExists(atPath: scratch + "/s"))
    }

    /// The state belongs to the collector's own host: a `--root` tree neither supplies it
    /// (its environment names no state directory of ours) nor receives it.
    @Test func theStateDirectoryIsTheRealHostsEvenUnderRoot() throws {
        let scratch = try TestPaths.temporaryDirectory("state")
        let root = scratch + "/tree"
        try TestPaths.copyTree(TestPaths.fixture("laptop-baremetal"), to: root)
        try DeviceFixtures.write("STATE_DIRECTORY=/tree-state\0HOME=/home/tree\0", to: root + "/proc/self/environ")
        var environment = ProcessInfo.processInfo.environment
        environment["STATE_DIRECTORY"] = scratch + "/host-state"
        environment["FINGERLY_API_KEY"] = nil
        let run = try Self.result(try runCLI(["--no-submit", "--json", "--tiers", "fast", "--root", root], environment: environment))
        #expect(run.report.identifierKeying == .installationSecret)
        #expect(FileManager.default.fileExists(atPath: scratch + "/host-state/identifier-key"))
        #expect(!FileManager.default.fileExists(atPath: root + "/tree-state"))
        #expect(!FileManager.default.fileExists(atPath: root + "/home"))
    }

    @Test func defaultStateDirectory() {
        #expect(StateDirectory.defaultPath(environment: ["STATE_DIRECTORY": "/var/lib/svc:/var/lib/other", "HOME": "/h"], effectiveUID: 1000) == "/var/lib/svc")
        #expect(StateDirectory.defaultPath(environment: ["HOME": "/root"], effectiveUID: 0) == "/var/lib/fingerly")
        #expect(StateDirectory.defaultPath(environment: ["XDG_STATE_HOME": "/x/state", "HOME": "/h"], effectiveUID: 1000) == "/x/state/fingerly")
        // The XDG specification ignores a relative path.
        #expect(StateDirectory.defaultPath(environment: ["XDG_STATE_HOME": "state", "HOME": "/h"], effectiveUID: 1000) == "/h/.local/state/fingerly")
        #expect(StateDirectory.defaultPath(environment: [:], effectiveUID: 1000) == nil)
    }

    /// A secret someone else could know or have planted is refused, never adopted.
    @Test func aSecretFileThatOthersCouldKnowIsRefused() throws {
        let scratch = try TestPaths.temporaryDirectory("secret")
        func directory(_ name: String, secret: String? = nil, mode: mode_t = 0o600) throws -> String {
            let path = scratch + "/" + name
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            chmod(path, 0o700)
            if let secret {
                try DeviceFixtures.write(secret, to: path + "/identifier-key")
                chmod(path + "/identifier-key", mode)
            }
            return path
        }
        let known = String(repeating: "k", count: 32)
        let cases: [(String, String)] = [
            ("readable", try directory("readable", secret: known, mode: 0o644)),
            ("short", try directory("short", secret: "k", mode: 0o600)),
            ("long", try directory("long", secret: known + "k", mode: 0o600)),
        ]
        let linked = try directory("linked")
        try DeviceFixtures.write(known, to: scratch + "/planted")
        chmod(scratch + "/planted", 0o600)
        try DeviceFixtures.link(linked + "/identifier-key", to: scratch + "/planted")
        for (label, path) in cases + [("symlink", linked)] {
            guard case .unavailable(let why) = InstallationSecret.loadOrCreate(in: path) else {
                Issue.record("\(label): the secret was adopted")
                continue
            }
            #expect(!why.isEmpty)
        }
        // A good one is read back as is.
        let good = try directory("good", secret: known, mode: 0o600)
        #expect(InstallationSecret.loadOrCreate(in: good) == .secret(Array(known.utf8)))
    }

    /// A secret another user owns could have been planted by that user, whatever its mode.
    @Test(.enabled(if: geteuid() == 0, "needs root: chown hands the secret file to another user"))
    func aSecretFileOwnedBySomeoneElseIsRefused() throws {
        let foreign = try TestPaths.temporaryDirectory("secret-foreign") + "/state"
        try FileManager.default.createDirectory(atPath: foreign, withIntermediateDirectories: true)
        #expect(chmod(foreign, 0o700) == 0)
        try DeviceFixtures.write(String(repeating: "k", count: 32), to: foreign + "/identifier-key")
        #expect(chmod(foreign + "/identifier-key", 0o600) == 0)
        #expect(chown(foreign + "/identifier-key", 65534, 65534) == 0)
        guard case .unavailable(let why) = InstallationSecret.loadOrCreate(in: foreign) else {
            Issue.record("a secret owned by nobody was adopted")
            return
        }
        #expect(!why.isEmpty)
    }

    /// Several first runs at once end up with one secret between them.
    @Test func racingFirstRunsAgreeOnOneSecret() async throws {
        let path = try TestPaths.temporaryDirectory("race") + "/state"
        let outcomes = await withTaskGroup(of: InstallationSecret.Outcome.self) { group in
            for _ in 0..<8 { group.addTask { InstallationSecret.loadOrCreate(in: path) } }
            var all: [InstallationSecret.Outcome] = []
            for await outcome in group { all.append(outcome) }
            return all
        }
        #expect(Set(outcomes.map { "\($0)" }).count == 1)
        guard case .secret(let bytes)? = outcomes.first else { Issue.record("no secret: \(outcomes)"); return }
        #expect(bytes.count == 32)
        #expect(try FileManager.default.contentsOfDirectory(atPath: path) == ["identifier-key"])
    }

    // MARK: NIC vendors

    @Test func nicVendorClassesNameVirtualNICsAndNothingElse() throws {
        let table = try #require(DetectionTables.embedded.mapping("nicVendorClasses"))
        #expect(NetworkInterfacesProbe.vendorClass(of: "52:54:00:12:34:56", table: table) == "qemu")
        #expect(NetworkInterfacesProbe.vendorClass(of: "00:50:56:aa:bb:cc", table: table) == "vmware")
        #expect(NetworkInterfacesProbe.vendorClass(of: "08:00:27:aa:bb:cc", table: table) == "virtualbox")
        #expect(NetworkInterfacesProbe.vendorClass(of: "00:16:3e:aa:bb:cc", table: table) == "xen")
        #expect(NetworkInterfacesProbe.vendorClass(of: "00:15:5d:aa:bb:cc", table: table) == "hyper-v")
        #expect(NetworkInterfacesProbe.vendorClass(of: "02:42:ac:11:00:02", table: table) == "docker")
        #expect(NetworkInterfacesProbe.vendorClass(of: "06:1f:2e:3d:4c:5b", table: table) == "locally-administered")
        #expect(NetworkInterfacesProbe.vendorClass(of: "3c:a9:f4:5e:21:b7", table: table) == "physical-or-unknown")
        #expect(NetworkInterfacesProbe.vendorClass(of: "zz:a9:f4:5e:21:b7", table: table) == nil)
        #expect(NetworkInterfacesProbe.vendorClass(of: "3c:a9:f4", table: table) == nil)
        // Only the kernel's form: six ASCII pairs and five colons.
        #expect(NetworkInterfacesProbe.vendorClass(of: "52:54:00:12:34:5", table: table) == nil)
        #expect(NetworkInterfacesProbe.vendorClass(of: "52-54-00-12-34-56", table: table) == nil)
        #expect(NetworkInterfacesProbe.vendorClass(of: "52:54:00:12:34:56:", table: table) == nil)
        #expect(NetworkInterfacesProbe.vendorClass(of: "52:54:00:12:34:\u{FF15}\u{FF16}", table: table) == nil)
        #expect(NetworkInterfacesProbe.vendorClass(of: "52:54:00:12:34:5g", table: table) == nil)
        #expect(NetworkInterfacesProbe.vendorClass(of: "00:00:00:00:00:00", table: table) == nil)
        #expect(NetworkInterfacesProbe.vendorClass(of: "52:54:00:AB:CD:EF", table: table) == "qemu")
    }

    /// With the OUI beside the hash, the MAC fell to a search of 2^24 values; the report now
    /// says only whether the NIC is a known virtual one.
    @Test(.enabled(if: DeviceFixtures.umockdevAvailable, "umockdev-run is missing: scripts/install-deps --test installs it"))
    func aVMwareNICIsNamedByClassAndItsOUIIsNowhere() throws {
        let root = try DeviceFixtures.hostRoot(recordings: [DeviceFixtures.laptop], label: "nic")
        let address = try #require(FileManager.default.subpaths(atPath: root + "/sys/devices")?.first { $0.hasSuffix("net/wlp0s20f3/address") })
        try DeviceFixtures.write("00:50:56:12:34:56\n", to: root + "/sys/devices/" + address)
        let output = try runCLI(["--no-submit", "--json", "--tiers", "deferred", "--api-key", TestKeys.standard, "--root", root])
        let run = try Self.result(output)
        #expect(run.signals["net.nic_vendor_classes"] == .strings(["vmware"]))
        #expect(run.signals["net.ouis"] == nil)
        #expect(!output.standardOutput.contains("00:50:56"))
        #expect(run.signals["net.permanent_macs"] == .strings(["wlp0s20f3 " + IdentifierHasher(organization: "acme").hash("00:50:56:12:34:56")]))
    }

    // MARK: Personal free text

    static let person = "alice@alice-laptop (Alice Example)"

    /// A tree whose trust store holds a CA that a person made on their laptop, and whose
    /// keyboard carries their name.
    static func personalRoot() throws -> String {
        let root = try DeviceFixtures.hostRoot(recordings: [DeviceFixtures.laptop], label: "personal")
        let made = try TestPaths.temporaryDirectory("ca")
        let openssl = try runProcess("/usr/bin/openssl", ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30",
                                                          "-subj", "/CN=\(person)", "-keyout", made + "/ca.key", "-out", made + "/ca.crt"])
        try #require(openssl.status == 0, "\(openssl.standardError)")
        try DeviceFixtures.write(try String(contentsOfFile: made + "/ca.crt", encoding: .utf8), to: root + "/etc/ssl/certs/ca-certificates.crt")
        let name = try #require(FileManager.default.subpaths(atPath: root + "/sys/devices")?.first { $0.hasSuffix("input/input0/name") })
        try DeviceFixtures.write("Alice Example's Keyboard\n", to: root + "/sys/devices/" + name)
        return root
    }

    static func policy(privacy: String) throws -> String {
        var text = try String(contentsOfFile: TestPaths.packageRoot + "/policies/default.json", encoding: .utf8)
        text = text.replacingOccurrences(of: #""freeText": "fingerprint""#, with: #""freeText": "\#(privacy)""#)
        let path = try TestPaths.temporaryDirectory("policy") + "/policy.json"
        try text.write(toFile: path, atomically: false, encoding: .utf8)
        return path
    }

    /// A locally added CA and a keyboard named after their owner went into the report, and
    /// into the mitm verdict's reason, in clear.
    @Test func personalFreeTextLeavesOnlyAsAFingerprint() throws {
        let root = try Self.personalRoot()
        let base = ["--no-submit", "--tiers", "all", "--api-key", TestKeys.standard, "--root", root]
        let json = try runCLI(base + ["--json"])
        let human = try runCLI(base)
        for output in [json, human] {
            #expect(output.status == 0, "\(output.standardError)")
            #expect(!output.standardOutput.lowercased().contains("alice"), "\(output.standardOutput)")
        }
        let run = try Self.result(json)
        #expect(run.report.freeText == .fingerprint)
        let hasher = IdentifierHasher(organization: "acme")
        let subjectPrint = try #require(run.signals["tls.local_roots"].flatMap { value -> String? in
            if case .strings(let items) = value { return items.first } else { return nil } })
        #expect(subjectPrint.hasPrefix("fp:") && subjectPrint.hasSuffix(" (the bundle only)"))
        let mitm = run.verdicts[.mitm]
        #expect(mitm.value && mitm.reasons.contains { $0.code == "locally_added_root" && $0.message.contains(subjectPrint) })
        #expect(run.signals["input.devices"].map { "\($0)" }?.contains("'\(hasher.personal("Alice Example's Keyboard"))' bus=serio") == true)

        // The same text gives the same fingerprint only under the same key.
        let otherKey = try Self.result(try runCLI(["--no-submit", "--json", "--tiers", "all", "--api-key", TestKeys.key(org: "other"), "--root", root]))
        #expect(otherKey.signals["tls.local_roots"] != run.signals["tls.local_roots"])
    }

    /// The policy decides; `keep` is for an operator looking at their own machine. Every
    /// signal that then carries the person's text is one the catalogue marks personal.
    @Test func aPolicyThatKeepsFreeTextKeepsItAndOnlyPersonalSignalsCarryIt() throws {
        let root = try Self.personalRoot()
        let kept = try Self.result(try runCLI(["--no-submit", "--json", "--tiers", "all", "--api-key", TestKeys.standard, "--root", root,
                                               "--policy", try Self.policy(privacy: "keep")]))
        #expect(kept.report.freeText == .keep)
        #expect(kept.signals["tls.local_roots"] == .strings(["CN=\(Self.person) (the bundle only)"]))
        let personal = Set(ProbeCatalogue.embedded.probes.flatMap(\.signals).filter { $0.personal == true }.map(\.name))
        var carriers: Set<String> = []
        for (name, value) in kept.signals where "\(value)".lowercased().contains("alice") { carriers.insert(name) }
        #expect(carriers == ["tls.local_roots", "input.devices"], "\(carriers)")
        #expect(carriers.isSubset(of: personal))

        // The flag overrides the policy either way.
        let flagged = try Self.result(try runCLI(["--no-submit", "--json", "--tiers", "all", "--api-key", TestKeys.standard, "--root", root,
                                                  "--policy", try Self.policy(privacy: "keep"), "--free-text", "fingerprint"]))
        #expect(flagged.report.freeText == .fingerprint)
        #expect(!"\(flagged.signals)".lowercased().contains("alice"))
    }

    @Test func aPolicyWithAnUnknownPrivacySettingIsRejected() throws {
        let output = try runCLI(["--no-submit", "--json", "--policy", try Self.policy(privacy: "publish")])
        #expect(output.status == 65)
        #expect(output.standardError.contains("privacy") && output.standardError.contains("freeText"), "\(output.standardError)")
        #expect(try runCLI(["--no-submit", "--free-text", "publish"]).status == 64)
        #expect(try runCLI(["--no-submit", "--state-dir", "relative/dir"]).status == 64)
    }

    @Test func theEmbeddedPolicyFingerprintsFreeText() throws {
        #expect(FreeTextHandling.embeddedDefault == .fingerprint)
        #expect(FreeTextHandling.embeddedDefault == Policy.embeddedFreeText, "the SDK's default must be what policies/default.json says")
        #expect(try Fingerly.loadBlocking(apiKey: TestKeys.standard).identifierHasher().freeText == .fingerprint)
        #expect(try PolicyLoader(catalogue: .embedded, tables: .embedded).load(Data(#"{"policyVersion": 1, "verdicts": {}, "privacy": {"freeText": "keep"}}"#.utf8), source: "t").freeText == .keep)
        #expect(try FreeTextHandling.fromPolicy(Array(#"{"policyVersion": 1, "verdicts": {}}"#.utf8), source: "t") == .fingerprint)
        #expect(throws: PolicyError.self) { try FreeTextHandling.fromPolicy(Array(#"{"privacy": {"freeText": "keep", "x": 1}}"#.utf8), source: "t") }
        #expect(throws: PolicyError.self) { try FreeTextHandling.fromPolicy(Array(#"{"privacy": "keep"}"#.utf8), source: "t") }
    }

    // MARK: Catalogue

    /// A key that ships inside clients is no secret: the catalogue says how far each
    /// identifier resists a search by whoever holds it, and marks personal free text.
    @Test func everyIdentifierHasAnEntropyEstimateAndEveryFreeTextSignalIsMarked() throws {
        let signals = ProbeCatalogue.embedded.probes.flatMap(\.signals)
        for signal in signals {
            if signal.class == .identifier {
                #expect((1...128).contains(signal.entropyBits ?? 0), "\(signal.name): no entropy estimate")
                #expect((signal.entropyNote ?? "").count > 20, "\(signal.name): no note on the estimate")
                #expect(signal.personal != true, "\(signal.name): identifiers are hashed, not fingerprinted")
            } else {
                #expect(signal.entropyBits == nil && signal.entropyNote == nil, "\(signal.name): entropy is for identifiers")
            }
            if signal.personal == true { #expect(["string", "strings"].contains(signal.type), "\(signal.name)") }
        }
        // Text that people choose or that names them: a CA someone made on their laptop, a
        // Bluetooth keyboard named after its owner (uhid devices have no physical parent either).
        let personal = Set(signals.filter { $0.personal == true }.map(\.name))
        #expect(personal.isSuperset(of: ["tls.local_roots", "tls.interception_cas", "input.devices", "input.virtual_devices"]))
    }

    /// The marks and the code agree: exactly the signals marked personal change between
    /// `keep` and `fingerprint`, probe by probe, on a tree full of a person's text.
    @Test(.enabled(if: DeviceFixtures.umockdevAvailable, "umockdev-run is missing: scripts/install-deps --test installs it"))
    func exactlyThePersonalSignalsAreReduced() throws {
        let root = try Self.personalRoot()
        let personal = Set(ProbeCatalogue.embedded.probes.flatMap(\.signals).filter { $0.personal == true }.map(\.name))
        var reduced: Set<String> = []
        for probe in ProbeRegistry.builtIn {
            var runs: [[String: SignalValue]] = []
            for handling in [FreeTextHandling.keep, .fingerprint] {
                let context = ProbeContext(host: HostFileSystem(root: root), tables: .embedded, filter: .none,
                                           hasher: IdentifierHasher(organization: "acme", freeText: handling))
                try? probe.collect(into: context)
                runs.append(context.signals)
            }
            for (name, value) in runs[0] where runs[1][name] != value { reduced.insert(name) }
            for (name, value) in runs[1] where personal.contains(name) {
                #expect(!"\(value)".lowercased().contains("alice"), "\(name): \(value)")
            }
        }
        #expect(reduced == ["tls.local_roots", "input.devices"], "\(reduced)")
        #expect(reduced.isSubset(of: personal))
    }
}
