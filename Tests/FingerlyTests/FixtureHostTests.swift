@testable import FingerlyCatalogue
import Foundation
import Testing
@testable import Fingerly
@testable import FingerlyHost
@testable import FingerlyModel
@testable import FingerlyPolicy
@testable import FingerlyProbes

/// What a fixture host must yield; values are the ground truth in Tests/Fixtures/hosts/README.md.
struct HostExpectation: Sendable, CustomTestStringConvertible {
    let fixture: String
    let signals: [String: SignalValue]
    let absentSignals: [String]
    let statuses: [String: ProbeStatus]
    /// verdict -> (value, confidence, kind, reason codes)
    let verdicts: [VerdictName: (Bool, Confidence?, String?, [String])]

    var testDescription: String { fixture }
}

let hostExpectations: [HostExpectation] = [
    HostExpectation(
        fixture: "laptop-baremetal",
        signals: ["os.id": .string("ubuntu"), "os.version_id": .string("22.04"), "os.kernel_release": .string("6.5.0-28-generic"),
                  "os.architecture": .string("x86_64"),
                  "cpu.model": .string("11th Gen Intel(R) Core(TM) i7-1165G7 @ 2.80GHz"), "cpu.logical_cores": .int(8),
                  "cpu.physical_cores": .int(4), "cpu.hypervisor_flag": .bool(false), "cpu.hypervisor_bit": .bool(false),
                  "memory.total_bytes": .int(16_107_348 * 1024),
                  "dmi.sys_vendor": .string("LENOVO"), "dmi.product_name": .string("20XWCTO1WW"), "dmi.chassis_type": .int(10),
                  "dmi.chassis_kind": .string("notebook"), "machine.machine_id_state": .string("valid"),
                  "machine.dbus_machine_id_matches": .bool(true), "machine.dmi_product_uuid_state": .string("valid"),
                  "process.uid": .int(1000), "process.euid": .int(1000), "process.tracer_pid": .int(0), "process.thread_count": .int(2),
                  "process.parent_comm": .string("bash"), "process.parent_exe": .string("/usr/bin/bash"),
                  "proxy.env.https_proxy": .string("http://proxy.corp.example:3128"),
                  "proxy.env.no_proxy": .string("localhost,127.0.0.1"),
                  "proxy.env_variables": .strings(["HTTPS_PROXY", "no_proxy"]), "loader.env_variables": .strings([]),
                  "container.markers": .strings([])],
        absentSignals: ["cpu.hypervisor_vendor", "dmi.virtualization_kind", "process.stdin_tty", "loader.ld_preload"],
        statuses: ["cpuid": .ok],
        verdicts: [.virtualization: (false, .medium, nil, []), .container: (false, .medium, nil, []),
                   .debugger: (false, .medium, nil, []), .proxy: (true, .high, nil, ["proxy_environment"]),
                   .tampering: (false, .medium, nil, []), .farm: (false, .medium, nil, [])]),
    HostExpectation(
        fixture: "kvm-qemu",
        signals: ["os.id": .string("debian"), "cpu.logical_cores": .int(4), "cpu.hypervisor_flag": .bool(true),
                  "cpu.hypervisor_vendor": .string("KVMKVMKVM"), "cpu.hypervisor_kind": .string("kvm"),
                  "dmi.sys_vendor": .string("QEMU"), "dmi.virtualization_kind": .string("qemu"),
                  "memory.total_bytes": .int(4_010_128 * 1024),
                  "process.tracer_pid": .int(1690), "process.tracer_pids": .strings(["1690"]),
                  "process.tracer_comm": .string("gdb"), "process.tracer_exe": .string("/usr/bin/gdb"),
                  "process.uid": .int(0)],
        absentSignals: [],
        statuses: [:],
        verdicts: [.virtualization: (true, .high, "kvm", ["cpuid_hypervisor_vendor", "dmi_vendor_names_hypervisor", "cpuid_hypervisor_bit", "cpuinfo_hypervisor_flag"]),
                   .debugger: (true, .high, nil, ["tracer_pid"]), .container: (false, .medium, nil, [])]),
    HostExpectation(
        fixture: "vmware",
        signals: ["os.id": .string("rocky"), "cpu.hypervisor_kind": .string("vmware"), "dmi.virtualization_kind": .string("vmware"),
                  "loader.ld_preload": .string("/usr/lib/x86_64-linux-gnu/libfaketime.so.1"),
                  "loader.ld_library_path": .string("/opt/app/lib"),
                  "loader.env_variables": .strings(["LD_PRELOAD", "LD_LIBRARY_PATH"])],
        absentSignals: ["machine.dmi_board_serial", "machine.dmi_chassis_serial"],
        statuses: [:],
        verdicts: [.virtualization: (true, .high, "vmware", ["cpuid_hypervisor_vendor", "dmi_vendor_names_hypervisor", "cpuid_hypervisor_bit", "cpuinfo_hypervisor_flag"]),
                   .tampering: (true, .medium, nil, ["ld_preload"])]),
    HostExpectation(
        fixture: "virtualbox",
        signals: ["os.id": .string("fedora"), "cpu.hypervisor_kind": .string("virtualbox"), "dmi.virtualization_kind": .string("virtualbox"),
                  "tls.env_verification_disabled": .bool(true), "tls.env_trust_overrides": .strings(["SSL_CERT_FILE"]),
                  "process.parent_comm": .string("zsh")],
        absentSignals: [],
        statuses: [:],
        verdicts: [.virtualization: (true, .high, "virtualbox", ["cpuid_hypervisor_vendor", "dmi_vendor_names_hypervisor", "cpuid_hypervisor_bit", "cpuinfo_hypervisor_flag"]),
                   .mitm: (true, .medium, nil, ["node_tls_verification_disabled", "trust_store_override"])]),
    HostExpectation(
        fixture: "hyperv",
        signals: ["cpu.hypervisor_kind": .string("hyperv"), "dmi.sys_vendor": .string("Microsoft Corporation"),
                  "dmi.bios_version": .string("Hyper-V UEFI Release v4.1"), "dmi.virtualization_kind": .string("hyperv"),
                  "machine.dmi_product_uuid_state": .string("placeholder"),
                  "loader.preload_file_entries": .strings(["/usr/local/lib/libprocesshider.so"])],
        absentSignals: ["machine.dmi_product_uuid", "machine.dbus_machine_id"],
        statuses: [:],
        verdicts: [.virtualization: (true, .high, "hyperv", ["cpuid_hypervisor_vendor", "dmi_vendor_names_hypervisor", "cpuid_hypervisor_bit", "cpuinfo_hypervisor_flag"]),
                   .tampering: (true, .high, nil, ["ld_so_preload"]), .farm: (true, .low, nil, ["dmi_uuid_placeholder"])]),
    HostExpectation(
        fixture: "firecracker",
        signals: ["os.id": .string("amzn"), "cpu.hypervisor_kind": .string("kvm")],
        absentSignals: ["dmi.sys_vendor"],
        statuses: ["dmi": .absent],
        verdicts: [.virtualization: (true, .high, "kvm", ["cpuid_hypervisor_vendor", "cpuid_hypervisor_bit", "cpuinfo_hypervisor_flag"])]),
    HostExpectation(
        fixture: "docker",
        signals: ["os.id": .string("alpine"), "container.markers": .strings(["/.dockerenv"]), "container.marker_kind": .string("docker"),
                  "dmi.sys_vendor": .string("Dell Inc."), "dmi.chassis_kind": .string("rack-mount-chassis"),
                  "machine.dmi_product_uuid_state": .string("placeholder"), "cpu.hypervisor_flag": .bool(false)],
        absentSignals: ["cpu.hypervisor_bit"],
        statuses: ["cpuid": .skipped],
        verdicts: [.container: (true, .high, "docker", ["container_marker_file", "cgroup_names_manager", "cgroup_namespace"]), .virtualization: (false, .medium, nil, [])]),
    HostExpectation(
        fixture: "podman",
        signals: ["os.id": .string("rhel"), "container.markers": .strings(["/run/.containerenv"]), "container.marker_kind": .string("podman")],
        absentSignals: [],
        statuses: ["cpuid": .skipped, "dmi": .absent],
        verdicts: [.container: (true, .high, "podman", ["container_marker_file"]), .virtualization: (false, .medium, nil, [])]),
    HostExpectation(
        fixture: "runit-baremetal",
        signals: ["os.id": .string("void"), "os.kernel_release": .string("6.6.32_1"), "cpu.model": .string("AMD GX-412TC SOC"),
                  "cpu.logical_cores": .int(4), "cpu.physical_cores": .int(4), "cpu.hypervisor_flag": .bool(false),
                  "cpu.hypervisor_bit": .bool(false), "dmi.sys_vendor": .string("PC Engines"), "dmi.product_name": .string("apu2"),
                  "process.uid": .int(0), "process.parent_comm": .string("bash"), "container.markers": .strings([]),
                  "container.cgroup_kinds": .strings([]), "container.cgroup_namespace": .bool(false),
                  "container.overlay_root": .bool(false), "container.user_namespace": .bool(false),
                  "container.pid_namespace": .bool(false), "fs.root_type": .string("ext4")],
        absentSignals: ["container.pid1_container_variable", "container.platform_kind", "cpu.hypervisor_vendor",
                        "dmi.virtualization_kind"],
        statuses: ["cpuid": .ok, "container-runtime": .ok],
        verdicts: [.container: (false, .medium, nil, []), .virtualization: (false, .medium, nil, [])]),
    HostExpectation(
        fixture: "wsl2",
        signals: ["os.kernel_release": .string("5.15.153.1-microsoft-standard-WSL2"), "cpu.hypervisor_flag": .bool(true)],
        absentSignals: [],
        statuses: ["cpuid": .skipped],
        verdicts: [.container: (true, .high, "wsl2", ["wsl_kernel", "wsl1_kernel", "wsl_environment"]),
                   .virtualization: (true, .medium, nil, ["cpuinfo_hypervisor_flag_not_dom0"])]),
]

@Suite struct FixtureHostTests {
    @Test(arguments: hostExpectations)
    func fixtureYieldsItsGroundTruth(_ expected: HostExpectation) async throws {
        // A fresh checkout's files are minutes old: provisioning ages are tested on their own.
        let result = try await identify(root: TestPaths.fixture(expected.fixture), ignore: ["provisioning"])
        let signals = result.signals
        for (name, value) in expected.signals {
            #expect(signals[name] == value, "\(expected.fixture): \(name)")
        }
        for name in expected.absentSignals {
            #expect(signals[name] == nil, "\(expected.fixture): \(name) should be absent")
        }
        for (probe, status) in expected.statuses {
            #expect(try result.probe(probe).status == status, "\(expected.fixture): probe \(probe)")
        }
        for (name, (value, confidence, kind, codes)) in expected.verdicts {
            let verdict = result.verdicts[name]
            #expect(verdict.value == value, "\(expected.fixture): \(name)")
            if let confidence { #expect(verdict.confidence == confidence, "\(expected.fixture): \(name) confidence") }
            #expect(verdict.kind == kind, "\(expected.fixture): \(name) kind")
            #expect(verdict.reasons.map(\.code) == codes, "\(expected.fixture): \(name) reasons")
        }
        // Every probe ran to a definite status; nothing vanished from the report.
        #expect(result.report.probes.map(\.id) == ProbeCatalogue.embedded.probes.map(\.id))
    }

    @Test func reasonsNameTheEvidence() async throws {
        let kvm = try await identify(root: TestPaths.fixture("kvm-qemu"))
        let debugger = try #require(kvm.verdicts[.debugger].reasons.first?.message)
        #expect(debugger.contains("1690") && debugger.contains("gdb") && debugger.contains("/usr/bin/gdb"))

        let vmware = try await identify(root: TestPaths.fixture("vmware"))
        #expect(vmware.verdicts[.tampering].reasons.first?.message.contains("libfaketime.so.1") == true)

        let laptop = try await identify(root: TestPaths.fixture("laptop-baremetal"))
        let proxy = try #require(laptop.verdicts[.proxy].reasons.first?.message)
        #expect(proxy.contains("HTTPS_PROXY") && proxy.contains("http://proxy.corp.example:3128"))
        #expect(!proxy.contains("s3cret") && !proxy.contains("alice:"))
    }

    @Test func malformedHostIsRecordedProbeByProbeAndNothingAborts() async throws {
        let result = try await identify(root: TestPaths.fixture("malformed"))
        #expect(try result.probe("os").issues.contains { $0.path == "/etc/os-release" && $0.status == .malformed })
        #expect(try result.probe("cpu").status == .malformed)
        #expect(try result.probe("memory").status == .malformed)
        #expect(try result.probe("memory").detail?.contains("MemTotal") == true)
        #expect(try result.probe("loader-environment").issues.contains { $0.path == "/proc/self/environ" && $0.status == .malformed })
        let process = try result.probe("process-context")
        #expect(process.issues.contains { $0.status == .malformed && $0.detail.contains("Uid") })
        #expect(process.issues.contains { $0.status == .malformed && $0.detail.contains("TracerPid") })
        let dmi = try result.probe("dmi")
        #expect(dmi.issues.contains { $0.path == "/sys/class/dmi/id/chassis_type" && $0.status == .malformed })
        #expect(result.signals["os.kernel_release"] == .string("6.6.0-malformed"))
        #expect(result.signals["machine.machine_id_state"] == .string("uninitialized"))
        #expect(result.signals["machine.dmi_product_uuid_state"] == .string("placeholder"))
        let farm = result.verdicts[.farm]
        #expect(farm.value && farm.reasons.map(\.code).contains("machine_id_not_initialised"))
        // The CPU probe's failure is said in the verdicts that needed it.
        let virtualization = result.verdicts[.virtualization]
        #expect(virtualization.missingEvidence.contains { $0.probe == "cpu" && $0.status == .malformed })
        #expect(virtualization.confidence == .low)
    }

    @Test func identifiersAreKeyedPerAPIKeyAndStableForOne() async throws {
        let root = TestPaths.fixture("laptop-baremetal")
        let first = try await identify(root: root, apiKey: TestKeys.key(org: "org-one"))
        let again = try await identify(root: root, apiKey: TestKeys.key(org: "org-one"))
        let other = try await identify(root: root, apiKey: TestKeys.key(org: "org-two"))
        for name in ["machine.machine_id", "machine.dmi_product_uuid", "machine.dmi_product_serial", "machine.dmi_board_serial"] {
            let value = try #require(first.signals[name], "\(name) missing")
            #expect(value == again.signals[name], "\(name) is not stable for one key")
            #expect(value != other.signals[name], "\(name) is the same for two keys")
            guard case .string(let hex) = value else { Issue.record("\(name) is not a string"); continue }
            #expect(hex.count == 64 && hex.allSatisfy(\.isHexDigit))
        }
    }

    @Test func hashIsHMACSHA256OfTheNormalisedValue() {
        // RFC 4231 test case 2: key "Jefe", data "what do ya want for nothing?".
        #expect(IdentifierHasher(secret: Array("Jefe".utf8), keying: .perRun).hash("what do ya want for nothing?")
                == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
        let hasher = IdentifierHasher(organization: "acme")
        #expect(hasher.hash("ABCDEF\n") == hasher.hash("abcdef"))
    }

    @Test func ignoredAttributesAreNeitherReadNorReported() async throws {
        let root = TestPaths.fixture("laptop-baremetal")
        let log = HostAccessLog()
        let fingerly = try Fingerly.loadBlocking(apiKey: TestKeys.standard, consent: .granted,
                                         options: FingerlyOptions(root: root, attributesToIgnore: ["machine.machine_id", "machine.machine_id_state", "dmi.*", "memory"]))
        let report = fingerly.collectBlocking(tag: nil, tiers: [.fast], log: log)
        #expect(report.signals["machine.machine_id"] == nil)
        #expect(report.signals.keys.allSatisfy { !$0.hasPrefix("dmi.") })
        #expect(report.probes.first { $0.id == "memory" }?.status == .skipped)
        #expect(report.probes.first { $0.id == "dmi" }?.status == .skipped)
        let read = log.recorded
        #expect(!read.contains("/etc/machine-id"))
        #expect(!read.contains("/proc/meminfo"))
        #expect(!read.contains { $0.hasPrefix("/sys/class/dmi/id/") && !$0.hasSuffix("serial") && !$0.hasSuffix("uuid") })
        #expect(read.contains("/var/lib/dbus/machine-id"))
    }

    /// The emulated-serial judgement reads the serial: ignoring the serials leaves them unread and it unmade.
    @Test func ignoredDiskSerialsAreNotReadForTheirShapeEither() throws {
        let root = TestPaths.packageRoot + "/Tests/Fixtures/environments/device-strings-only/root"
        func collect(ignoring ignored: Set<String>) throws -> (SignalReport, [String]) {
            let log = HostAccessLog()
            let fingerly = try Fingerly.loadBlocking(apiKey: TestKeys.standard, consent: .granted,
                                                     options: FingerlyOptions(root: root, attributesToIgnore: ignored))
            return (fingerly.collectBlocking(tag: nil, tiers: [.fast, .deferred], log: log), log.recorded)
        }
        let (judged, _) = try collect(ignoring: [])
        #expect(judged.signals["block.emulated_disk_serial_kind"] == .string("qemu"))
        let (report, read) = try collect(ignoring: ["block.serials", "block.wwns"])
        #expect(report.signals["block.emulated_disk_serial_kind"] == nil)
        #expect(report.signals["block.virtual_disk_kind"] == .string("qemu"))
        // The disk and its SCSI device sit under the ATA port; USB's and DMI's serials are other signals'.
        let diskIdentifiers = read.filter { $0.contains("/ata1/") && ($0.hasSuffix("/serial") || $0.hasSuffix("/wwid")) }
        #expect(diskIdentifiers.isEmpty, "\(diskIdentifiers)")
        let (_, readWhenWanted) = try collect(ignoring: [])
        #expect(readWhenWanted.contains { $0.contains("/ata1/") && $0.hasSuffix("/serial") })
    }

    @Test func unknownIgnoredAttributeIsRejected() {
        #expect(throws: FingerlyError.self) {
            try Fingerly.loadBlocking(apiKey: nil, options: FingerlyOptions(attributesToIgnore: ["no.such.signal"]))
        }
    }

    @Test func nothingIsReadBeforeConsent() async throws {
        let log = HostAccessLog()
        var options = FingerlyOptions(root: TestPaths.fixture("laptop-baremetal"))
        options.accessLog = log
        let fingerly = try Fingerly.loadBlocking(apiKey: TestKeys.standard, consent: .pending, options: options)
        await #expect(throws: ConsentError.self) { try await fingerly.identify(submit: false) }
        await #expect(throws: ConsentError.self) { try await fingerly.identify() }
        await #expect(throws: ConsentError.self) { try await fingerly.checkIntegrity(tiers: [.fast, .deferred]) }
        fingerly.setConsent(.denied)
        await #expect(throws: ConsentError.self) { try await fingerly.collect() }
        await #expect(throws: ConsentError.self) { try await fingerly.flush() }
        #expect(log.recorded.isEmpty, "read before consent: \(log.recorded.prefix(5))")
        fingerly.setConsent(.granted)
        let report = try await fingerly.collect(tiers: [.fast])
        #expect(report.signals["os.id"] == .string("ubuntu"))
    }

    @Test func submittingWithoutAKeyIsRefusedBeforeAnythingIsRead() async throws {
        let log = HostAccessLog()
        var options = FingerlyOptions(root: TestPaths.fixture("laptop-baremetal"))
        options.accessLog = log
        // An endpoint is a server, which needs a key (without both, the local mode resolves here).
        let fingerly = try Fingerly.loadBlocking(apiKey: nil, endpoint: "https://fp.example.com", consent: .granted, options: options)
        do {
            _ = try await fingerly.identify()
            Issue.record("identify(submit: true) to an endpoint without a key went through")
        } catch let error as FingerlyError {
            guard case .invalidConfiguration(let field, _) = error else { Issue.record("\(error)"); return }
            #expect(field == "apiKey")
        }
        #expect(log.recorded.isEmpty)
        // The log does see a collection: its silence above means something.
        _ = try await fingerly.collect(tiers: [.fast])
        #expect(!log.recorded.isEmpty)
    }

    /// A path reaches the kernel as a C string: one with a NUL would be read cut short there.
    @Test func pathOptionsWithANulAreRefused() throws {
        var cases: [(FingerlyOptions, String)] = []
        cases.append((FingerlyOptions(root: TestPaths.fixture("laptop-baremetal") + "\u{0}/etc"), "options.root"))
        var state = FingerlyOptions(root: "/")
        state.stateDirectory = "/tmp/state\u{0}x"
        cases.append((state, "options.stateDirectory"))
        var policy = FingerlyOptions(root: "/")
        policy.policy = .file(path: "/etc/fingerly/policy.json\u{0}.bak")
        cases.append((policy, "options.policy"))
        for (options, expected) in cases {
            #expect {
                _ = try Fingerly.loadBlocking(apiKey: nil, consent: .granted, options: options)
            } throws: { error in
                guard case .invalidConfiguration(let field, let reason)? = error as? FingerlyError else { return false }
                return field == expected && reason.contains("NUL")
            }
        }
    }

    @Test func regionFollowsTheKeyPrefix() throws {
        #expect(APIKey(TestKeys.key(region: "eu"))?.region == .eu)
        #expect(APIKey(TestKeys.key(region: "ap"))?.region == .ap)
        #expect(try Fingerly.loadBlocking(apiKey: TestKeys.key(region: "eu")).endpoint == "https://eu.api.fingerly.io")
        #expect(try Fingerly.loadBlocking(apiKey: TestKeys.key(region: "eu"), endpoint: "https://fingerly.internal:8443/prefix").endpoint
                == "https://fingerly.internal:8443/prefix")
        #expect(try Fingerly.loadBlocking(apiKey: nil).region == .us)
    }
}
