@testable import FingerlyCatalogue
import Foundation
import Testing
@testable import Fingerly
@testable import FingerlyHost
@testable import FingerlyModel
@testable import FingerlyPolicy
@testable import FingerlyProbes

/// The 32 machines of virt-what's own test suite, read from ../shared at test time: every one
/// must give the answer its expected.json names for Fingerly.
@Suite(.serialized) struct EnvironmentCorpusTests {
    static let corpus = TestPaths.packageRoot + "/../shared/fixtures/virt-what"
    static let cases: [String] = ((try? FileManager.default.contentsOfDirectory(atPath: corpus)) ?? [])
        .filter { FileManager.default.fileExists(atPath: corpus + "/" + $0 + "/expected.json") }.sorted()

    struct Answer: Equatable, CustomStringConvertible {
        let virtualization: Bool
        let virtualizationKind: String?
        let container: Bool
        let containerKind: String?
        let cloud: String?
        let xenDom0: Bool

        var description: String {
            "vm=\(virtualization)/\(virtualizationKind ?? "-") container=\(container)/\(containerKind ?? "-") cloud=\(cloud ?? "-") dom0=\(xenDom0)"
        }
    }

    /// A corpus machine's expected.json: test data, not the collector's output.
    struct Expected: Decodable {
        struct Finding: Decodable {
            let value: Bool
            let kind: String?
            /// Checked only where the fixture names it: the hardened-VM fixtures hold their evidence's strength.
            let confidence: String?
        }
        struct Answer: Decodable {
            let virtualization: Finding
            let container: Finding
            let cloud: String?
            let xenDom0: Bool?
            let hardened: Bool?
            let confidential: String?
        }
        let fingerly: Answer
    }

    static func answer(fromExpected path: String) throws -> Answer {
        let expected = try JSONDecoder().decode(Expected.self, from: Data(contentsOf: URL(fileURLWithPath: path))).fingerly
        return Answer(virtualization: expected.virtualization.value, virtualizationKind: expected.virtualization.kind,
                      container: expected.container.value, containerKind: expected.container.kind,
                      cloud: expected.cloud, xenDom0: expected.xenDom0 ?? false)
    }

    static func answer(fromResult result: IdentifyResult) -> Answer {
        Answer(virtualization: result.verdicts.virtualization.value, virtualizationKind: result.verdicts.virtualization.kind,
               container: result.verdicts.container.value, containerKind: result.verdicts.container.kind,
               cloud: result.environment.cloud, xenDom0: result.environment.xenDom0)
    }

    @Test(.enabled(if: !cases.isEmpty, "../shared/fixtures/virt-what is not beside this checkout"))
    func corpusHasAllThirtyTwoMachines() {
        #expect(Self.cases.count == 32)
    }

    @Test(.enabled(if: !cases.isEmpty, "../shared/fixtures/virt-what is not beside this checkout"), arguments: cases)
    func machineGivesTheExpectedAnswer(_ name: String) throws {
        try Self.check(Self.corpus + "/" + name)
    }

    static let ownCorpus = TestPaths.packageRoot + "/Tests/Fixtures/environments"
    static let ownCases: [String] = ((try? FileManager.default.contentsOfDirectory(atPath: ownCorpus)) ?? []).sorted()

    /// What the peer corpus lacks: VirtualBox, EC2 Nitro and .metal, Firecracker, QEMU TCG,
    /// nspawn, WSL2, flatpak, a KVM host that is not a guest, and one fixture for each method
    /// systemd-detect-virt and virt-what use (the README's table lists them).
    @Test(arguments: ownCases)
    func ownFixtureGivesTheExpectedAnswer(_ name: String) throws {
        try Self.check(Self.ownCorpus + "/" + name)
    }

    @Test func ownFixturesCoverWhatTheIssueAsksFor() {
        #expect(Set(Self.ownCases).isSuperset(of: ["virtualbox", "ec2-nitro", "ec2-metal", "firecracker", "qemu-tcg", "nspawn", "wsl2", "flatpak"]))
    }

    /// The README's table of peer methods (systemd-detect-virt, virt-what) names a fixture for
    /// each; every fixture it names exists, and every fixture is named.
    @Test func readmeTableNamesEveryMethodFixture() throws {
        let readme = try String(contentsOfFile: TestPaths.packageRoot + "/README.md", encoding: .utf8)
        let section = try #require(readme.components(separatedBy: "### Detection methods of systemd-detect-virt and virt-what").dropFirst().first)
        let table = section.components(separatedBy: "\n#").first ?? section
        var named: Set<String> = []
        for line in table.split(separator: "\n") where line.hasPrefix("|") {
            let cells = line.split(separator: "|", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count >= 4, let fixtureCell = cells.dropLast().last else { continue }
            // Fixture names are the backticked lowercase words of the last column.
            for piece in fixtureCell.split(separator: "`") where piece.contains(where: \.isLetter)
                && piece.allSatisfy({ ($0.isASCII && ($0.isLowercase || $0.isNumber)) || $0 == "-" || $0 == "." }) {
                named.insert(String(piece))
            }
        }
        named.remove("fixture")
        #expect(named.count >= 100, "only \(named.count) fixtures named")
        for name in named {
            #expect(Self.ownCases.contains(name), "README names \(name), which is not in Tests/Fixtures/environments")
        }
        for name in Self.ownCases {
            #expect(named.contains(name), "\(name) is not in the README's method table")
        }
    }

    /// New environment fixtures read paths the host fixtures never touch (/proc/<tracer>/comm,
    /// device-tree nodes, the SMBIOS entry): the catalogue must list each of them.
    @Test(arguments: ownCases)
    func environmentProbesReadOnlyDeclaredPaths(_ name: String) throws {
        let root = Self.ownCorpus + "/" + name + "/root"
        let catalogue = ProbeCatalogue.embedded
        for probe in ProbeRegistry.builtIn where Self.environmentProbes.contains(probe.id) {
            let entry = try #require(catalogue.entry(probe.id))
            let log = HostAccessLog()
            let context = ProbeContext(host: HostFileSystem(root: root, log: log), tables: .embedded,
                                       filter: .none, hasher: IdentifierHasher(organization: "acme"))
            try? probe.collect(into: context)
            for path in log.recorded {
                #expect(entry.reads.contains { CatalogueTests.matches(pattern: $0, path: path) },
                        "\(probe.id) on \(name) read \(path), which the catalogue does not list")
            }
            let declared = Set(entry.signals.map(\.name))
            for signal in context.signals.keys {
                #expect(declared.contains(signal), "\(probe.id) on \(name) emitted undeclared \(signal)")
            }
        }
    }

    static let environmentProbes: Set<String> = ["cpuid", "cpu", "dmi", "hypervisor-markers", "container-markers",
                                                 "container-runtime", "os", "pci", "usb", "block", "net", "vm-exit-timing"]

    static func check(_ directory: String) throws {
        let name = (directory as NSString).lastPathComponent
        let expected = try Self.answer(fromExpected: directory + "/expected.json")
        // The fixtures run at once, some 140 processes on the build machine's CPUs: with the catalogue's 50 ms a
        // probe can time out there, and this test judges answers, not timeouts (SchedulerTests judge those).
        let run = try runCLI(["--no-submit", "--json", "--root", directory + "/root",
                              "--probe-timeout-ms", "10000", "--budget-ms", "30000"])
        #expect(run.status == 0, "\(run.standardError)")
        let result = try run.identifyResult()
        let actual = Self.answer(fromResult: result)
        #expect(actual == expected, "\(name): got \(actual), expected \(expected)")
        let written = try JSONDecoder().decode(Expected.self, from: Data(contentsOf: URL(fileURLWithPath: directory + "/expected.json"))).fingerly
        if let confidence = written.virtualization.confidence {
            #expect(result.verdicts.virtualization.confidence.rawValue == confidence,
                    "\(name): confidence \(result.verdicts.virtualization.confidence), expected \(confidence)")
        }
        if let hardened = written.hardened {
            #expect(result.environment.hardened == hardened, "\(name): hardened \(result.environment.hardened)")
        }
        if let confidential = written.confidential {
            #expect(result.environment.confidential == confidential, "\(name): confidential \(result.environment.confidential ?? "nil")")
        }
        // A fixture that replays no timing is judged without it.
        if !FileManager.default.fileExists(atPath: directory + "/root/.fingerly/timing.json") {
            #expect(try result.report.probe("vm-exit-timing").status == .skipped)
        }
        // Under --root the CPUID probe replays the tree's file; it never reads the live CPU.
        let hasReplay = FileManager.default.fileExists(atPath: directory + "/root/.fingerly/cpuid.json")
        #expect(try result.report.probe("cpuid").status == (hasReplay ? .ok : .skipped))
    }
}
