@testable import FingerlyCatalogue
import Foundation
import Testing
@testable import Fingerly
@testable import FingerlyModel
@testable import FingerlyPolicy
@testable import FingerlyProbes

/// Every verdict is decidable from the tiers that ran: evidence a left-out tier would have read is
/// said in `missingEvidence`, so the fast tier alone never answers `false` with confidence where
/// both tiers find the condition; and virtualization is decided in the fast tier from CPUID and
/// /proc/cpuinfo. Serialized: two hundred collections at once would starve the suites beside it.
@Suite(.serialized) struct TierConsistencyTests {
    /// A machine's root tree and the name it is reported under.
    struct FixtureRoot: Sendable, CustomTestStringConvertible {
        let name: String
        let path: String
        var testDescription: String { name }
    }

    static let peerCorpus = TestPaths.packageRoot + "/../shared/fixtures/virt-what"
    static let environmentCorpus = TestPaths.packageRoot + "/Tests/Fixtures/environments"

    /// The `root/` of every case directory of a corpus, sorted; none when the corpus is absent.
    static func roots(in corpus: String, label: String) -> [FixtureRoot] {
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: corpus)) ?? []).sorted()
        return names.compactMap { name in
            let root = corpus + "/" + name + "/root"
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: root, isDirectory: &isDirectory), isDirectory.boolValue else {
                return nil
            }
            return FixtureRoot(name: label + "/" + name, path: root)
        }
    }

    static let hostRoots = TestPaths.hostFixtures.map { FixtureRoot(name: "hosts/" + $0, path: TestPaths.fixture($0)) }
    static let environmentRoots = roots(in: environmentCorpus, label: "environments")
    static let peerRoots = roots(in: peerCorpus, label: "virt-what")

    static let deferredProbes = Set(ProbeCatalogue.embedded.probes.filter { $0.tier == .deferred }.map(\.id))

    /// Timeouts far above what a fixture needs: a probe cut short on a loaded machine would make
    /// the full run weaker and hide what this suite compares.
    static func schedule(_ tiers: Set<Tier>) -> ScheduleOptions {
        ScheduleOptions(budgetMs: 30_000, tiers: tiers, sourceTimeoutOverrideMs: 10_000)
    }

    static func fastAndFull(_ root: String) async throws -> (fast: IdentifyResult, full: IdentifyResult) {
        let fast = try await identify(root: root, schedule: schedule([.fast]))
        let full = try await identify(root: root, schedule: schedule(Set(Tier.allCases)))
        return (fast, full)
    }

    /// Fails for a verdict the fast tier calls `false` at medium or high confidence while both
    /// tiers call it `true` at high; a low `false` must name the deferred probes it could not see.
    static func checkFastTierAgreesWithFullRun(_ fixture: FixtureRoot) async throws {
        let (fast, full) = try await fastAndFull(fixture.path)
        try #require(fast.report.tiers == [.fast], "\(fixture.name): the fast run declared \(fast.report.tiers)")
        #expect(fast.report.probes.allSatisfy { !deferredProbes.contains($0.id) },
                "\(fixture.name): a deferred probe ran")
        for name in VerdictName.allCases {
            let whole = full.verdicts[name]
            let alone = fast.verdicts[name]
            guard whole.value, whole.confidence == .high, !alone.value else { continue }
            let contradiction = "\(fixture.name): \(name) is true (high) with both tiers, "
                + "false (\(alone.confidence)) with the fast tier"
            #expect(alone.confidence == .low, "\(contradiction)")
            #expect(alone.missingEvidence.contains { $0.status == .skipped && deferredProbes.contains($0.probe) },
                    "\(fixture.name): \(name) says nothing of the deferred evidence behind the full run's answer")
        }
    }

    @Test(arguments: hostRoots + environmentRoots)
    func fastTierNeverDeniesWithConfidenceWhatBothTiersFind(_ fixture: FixtureRoot) async throws {
        try await Self.checkFastTierAgreesWithFullRun(fixture)
    }

    @Test(.enabled(if: !peerRoots.isEmpty, "../shared/fixtures/virt-what is not beside this checkout"),
          arguments: peerRoots)
    func fastTierNeverDeniesWithConfidenceWhatBothTiersFindOnPeerCorpus(_ fixture: FixtureRoot) async throws {
        try await Self.checkFastTierAgreesWithFullRun(fixture)
    }

    /// The issue's case: a KVM guest (Firecracker) whose CPUID says KVMKVMKVM was "not a VM" in the
    /// fast tier, because every CPUID rule waited on the deferred tier's Xen dom0 test.
    @Test(arguments: [("firecracker", "kvm"), ("kvm-qemu", "kvm"), ("vmware", "vmware"), ("virtualbox", "virtualbox"),
                      ("hyperv", "hyperv")])
    func fastTierAloneFindsAGuestByCPUID(_ fixture: String, _ kind: String) async throws {
        let fast = try await identify(root: TestPaths.fixture(fixture), schedule: Self.schedule([.fast]))
        let virtualization = fast.verdicts.virtualization
        #expect(virtualization.value && virtualization.confidence == .high, "\(fixture): \(virtualization)")
        #expect(virtualization.kind == kind)
        let codes = virtualization.reasons.map(\.code)
        let fastRules = ["cpuid_hypervisor_vendor", "cpuid_hypervisor_bit", "cpuinfo_hypervisor_flag"]
        #expect(fastRules.allSatisfy(codes.contains), "\(codes)")
        // Still honest about what the fast tier did not look at.
        #expect(virtualization.missingEvidence.map(\.probe).sorted()
                == ["block", "hypervisor-markers", "net", "pci", "usb", "vm-exit-timing"])
    }

    @Test func theIssuesCommandLineSaysAFirecrackerGuestIsAVM() throws {
        let run = try runCLI(["--no-submit", "--json", "--tiers", "fast", "--root", TestPaths.fixture("firecracker")])
        #expect(run.status == 0, "\(run.standardError)")
        let virtualization = try run.identifyResult().verdicts.virtualization
        #expect(virtualization.value && virtualization.confidence == .high && virtualization.kind == "kvm",
                "\(virtualization)")
    }

    /// A tree of one of the Xen environment fixtures, with the CPU a Xen domain sees: Xen's vendor
    /// leaf, the hypervisor bit and the cpuinfo flag, which a dom0 shares with its guests.
    static func xenDomain(_ fixture: String) throws -> String {
        let root = try TestPaths.copyOfTree(environmentCorpus + "/" + fixture + "/root", label: "tiers-" + fixture)
        try FileManager.default.createDirectory(atPath: root + "/.fingerly", withIntermediateDirectories: true)
        try #"{"vendor": "XenVMMXenVMM", "hypervisorBit": true}"#.write(toFile: root + "/.fingerly/cpuid.json",
                                                                       atomically: true, encoding: .utf8)
        try FileManager.default.createDirectory(atPath: root + "/proc", withIntermediateDirectories: true)
        let cpuinfo = ["processor\t: 0", "vendor_id\t: GenuineIntel",
                       "model name\t: Intel(R) Xeon(R) CPU E5-2680 v4 @ 2.40GHz", "physical id\t: 0", "core id\t\t: 0",
                       "flags\t\t: fpu de tsc msr pae cx8 apic sep cmov pat clflush mmx fxsr sse sse2 ht syscall nx lm "
                           + "cpuid pni ssse3 cx16 sse4_1 sse4_2 popcnt hypervisor lahf_lm", "", ""]
        try cpuinfo.joined(separator: "\n").write(toFile: root + "/proc/cpuinfo", atomically: true, encoding: .utf8)
        return root
    }

    /// CPUID cannot tell a Xen dom0 (a host) from a Xen guest: without the deferred tier's dom0 test,
    /// neither is called a VM, and both say which probe would have decided.
    @Test(arguments: [("xen-dom0-features", false), ("xen-domu-features", true)])
    func xenIsDecidedOnlyWithTheDom0Test(_ fixture: String, _ isGuest: Bool) async throws {
        let root = try Self.xenDomain(fixture)
        defer { try? FileManager.default.removeItem(atPath: root) }
        let (fast, full) = try await Self.fastAndFull(root)
        #expect(full.signals["cpu.hypervisor_vendor_is_xen"] == .bool(true))
        #expect(full.signals["cpu.hypervisor_flag"] == .bool(true) && full.signals["cpu.hypervisor_bit"] == .bool(true))
        #expect(full.verdicts.virtualization.value == isGuest, "\(full.verdicts.virtualization)")
        #expect(full.environment.xenDom0 == !isGuest)
        if isGuest {
            #expect(full.verdicts.virtualization.confidence == .high && full.verdicts.virtualization.kind == "xen")
            #expect(full.verdicts.virtualization.reasons.map(\.code).contains("cpuid_xen_vendor"))
        }
        let alone = fast.verdicts.virtualization
        #expect(!alone.value && alone.confidence == .low, "\(alone)")
        #expect(alone.missingEvidence.contains { $0.probe == "hypervisor-markers" && $0.status == .skipped })
    }

    /// The message a verdict gives for a probe whose tier the report left out.
    static func skippedTierMessage(_ probe: String, _ tier: Tier) -> String {
        "probe '\(probe)' is in the \(tier.rawValue) tier, which this run did not include; its evidence is missing"
    }

    @Test func aProbeOfATierNotRunIsMissingEvidence() throws {
        let engine = VerdictEngine(policy: .embedded(), catalogue: .embedded)
        let fastOnly = engine.evaluate(singleProbeReport(["process.tracer_pid": .int(0)], probe: "process-context",
                                                         tiers: [.fast]))
        let debugger = try #require(fastOnly[.debugger])
        #expect(!debugger.value && debugger.confidence == .low)
        // Only the deferred probes the debugger rules read; the fast ones this report leaves out
        // (as checkIntegrity leaves out what its verdicts do not read) are not said to be missing.
        #expect(debugger.missingEvidence == ["ptrace-self-test", "code-integrity"].map {
            MissingEvidence(probe: $0, status: .skipped, message: Self.skippedTierMessage($0, .deferred))
        })

        let bothTiers = engine.evaluate(singleProbeReport(["process.tracer_pid": .int(0)], probe: "process-context"))
        #expect(bothTiers[.debugger]?.missingEvidence == [] && bothTiers[.debugger]?.confidence == .medium)

        // A deferred probe the report does carry is judged, whatever the tiers say.
        let carried = engine.evaluate(singleProbeReport(["debug.traceme": .string("ok")], probe: "ptrace-self-test",
                                                        tiers: [.fast]))
        #expect(carried[.debugger]?.missingEvidence.map(\.probe) == ["code-integrity"])
    }

    @Test func aTrueVerdictStillNamesTheTierItDidNotSee() {
        let engine = VerdictEngine(policy: .embedded(), catalogue: .embedded)
        let report = singleProbeReport(["process.tracer_pid": .int(77)], probe: "process-context", tiers: [.fast])
        let verdict = engine.evaluate(report)[.debugger]
        #expect(verdict?.value == true && verdict?.confidence == .high)
        #expect(verdict?.missingEvidence.map(\.probe) == ["ptrace-self-test", "code-integrity"])
    }

    /// `checkIntegrity` in the fast tier computes four verdicts; each names the deferred probes its
    /// rules read rather than claiming a clean host at medium confidence.
    @Test func fastIntegrityCheckNamesTheDeferredProbesItsVerdictsRead() async throws {
        let fingerly = try Fingerly.loadBlocking(apiKey: nil, consent: .granted)
        let result = try await fingerly.checkIntegrity()
        let policy = Policy.embedded()
        let catalogue = ProbeCatalogue.embedded
        for name in IntegrityResult.verdictNames {
            let verdict = try #require(result[name])
            var expected: [String] = []
            for signal in policy.signals(of: name) {
                guard let owner = catalogue.signalOwners[signal], catalogue.entry(owner)?.tier == .deferred,
                      !expected.contains(owner) else { continue }
                expected.append(owner)
            }
            #expect(!expected.isEmpty, "\(name) reads no deferred probe; this test would prove nothing for it")
            #expect(verdict.missingEvidence.filter { $0.status == .skipped }.map(\.probe) == expected, "\(name)")
            if !verdict.value { #expect(verdict.confidence == .low, "\(name): \(verdict)") }
        }
    }

    /// The live host, whatever it is: where its own CPUID names a hypervisor other than Xen, the
    /// fast tier says VM; where the hypervisor bit is clear, it says not, and that the deferred
    /// evidence is missing.
    @Test func liveHostFastTierFollowsItsOwnCPUID() async throws {
        let fingerly = try Fingerly.loadBlocking(apiKey: nil, schedule: Self.schedule([.fast]), consent: .granted)
        let result = try await fingerly.identify(submit: false)
        let virtualization = result.verdicts.virtualization
        let codes = virtualization.reasons.map(\.code)
        switch (result.signals["cpu.hypervisor_bit"], result.signals["cpu.hypervisor_vendor_is_xen"]) {
        case (.bool(true)?, .bool(false)?):
            #expect(virtualization.value && codes.contains("cpuid_hypervisor_bit"), "\(virtualization)")
        case (.bool(false)?, _):
            #expect(!codes.contains { $0.hasPrefix("cpuid_") || $0.hasPrefix("cpuinfo_") }, "\(codes)")
            if !virtualization.value {
                #expect(virtualization.confidence == .low)
                #expect(virtualization.missingEvidence.contains {
                    $0.probe == "hypervisor-markers" && $0.status == .skipped
                })
            }
        default:
            // No CPUID here (not x86), or a Xen domain, which may be dom0: CPUID decides nothing.
            #expect(!codes.contains { $0.hasPrefix("cpuid_") || $0.hasPrefix("cpuinfo_") }, "\(codes)")
        }
    }
}
