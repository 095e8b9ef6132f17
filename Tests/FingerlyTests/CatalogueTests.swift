import Foundation
import Testing
@testable import Fingerly
@testable import FingerlyHost
@testable import FingerlyModel
@testable import FingerlyPolicy
@testable import FingerlyProbes

/// The catalogue in probes/ is the contract: the code must do exactly what it says.
@Suite struct CatalogueTests {
    let catalogue = ProbeCatalogue.embedded

    @Test func everyProbeInCodeHasOneCatalogueEntryAndViceVersa() {
        let codeIds = ProbeRegistry.builtIn.map(\.id)
        // The registry has no order: the catalogue orders the report.
        #expect(codeIds.sorted() == catalogue.probes.map(\.id).sorted())
        #expect(Set(codeIds).count == codeIds.count)
    }

    @Test func embeddedCatalogueIsTheFileInProbes() throws {
        let onDisk = try Data(contentsOf: URL(fileURLWithPath: TestPaths.packageRoot + "/probes/catalogue.json"))
        #expect(try JSONDecoder().decode(ProbeCatalogue.self, from: onDisk) == catalogue)
    }

    @Test func signalNamesAreDottedAndUnique() {
        let names = catalogue.probes.flatMap { $0.signals.map(\.name) }
        #expect(Set(names).count == names.count)
        for name in names {
            #expect(name.contains(".") && name == name.lowercased() && !name.contains(" "), "\(name)")
        }
        for entry in catalogue.probes {
            for signal in entry.signals {
                #expect(catalogue.stabilityClasses[signal.stability] != nil, "\(signal.name): unknown stability \(signal.stability)")
                #expect(["bool", "int", "string", "strings"].contains(signal.type), "\(signal.name): type \(signal.type)")
            }
        }
    }

    /// Runs every probe over every fixture and the live host, and checks that each signal it
    /// emitted is declared with its type, and that each path it touched is one the catalogue lists.
    @Test(arguments: TestPaths.hostFixtures + ["/", "umockdev:laptop", "umockdev:server", "blkid"])
    func probesEmitOnlyDeclaredSignalsAndReadOnlyDeclaredPaths(_ fixture: String) throws {
        let root: String
        switch fixture {
        case "/": root = "/"
        case "umockdev:laptop": root = try DeviceFixtures.hostRoot(recordings: [DeviceFixtures.laptop, DeviceFixtures.peripherals], label: "catalogue")
        case "umockdev:server": root = try DeviceFixtures.hostRoot(fixture: "kvm-qemu", recordings: [DeviceFixtures.server], label: "catalogue")
        case "blkid": root = try DeviceFixtures.filesystemRoot(.images(worldReadable: true), label: "catalogue")
        default: root = TestPaths.fixture(fixture)
        }
        for probe in ProbeRegistry.builtIn {
            let entry = try #require(catalogue.entry(probe.id))
            let log = HostAccessLog()
            let context = ProbeContext(host: HostFileSystem(root: root, log: log), tables: .embedded,
                                       filter: .none, hasher: IdentifierHasher(apiKey: "k"))
            try? probe.collect(into: context)
            let declared = Dictionary(uniqueKeysWithValues: entry.signals.map { ($0.name, $0) })
            for (name, value) in context.signals {
                let spec = declared[name]
                #expect(spec != nil, "\(probe.id) on \(fixture) emitted undeclared signal \(name)")
                #expect(spec?.type == value.typeName, "\(probe.id): \(name) is \(value.typeName), declared \(spec?.type ?? "-")")
            }
            // Offered identity components are the ones the catalogue documents, with their readability.
            for component in context.components {
                let spec = entry.identityComponents?.first { $0.name == component.name && $0.scope == component.scope }
                #expect(spec != nil, "\(probe.id) offered undocumented component \(component.scope)/\(component.name)")
                if let fixed = spec?.worldReadable { #expect(fixed == component.worldReadable, "\(component.name) readability") }
            }
            for path in log.recorded {
                #expect(entry.reads.contains { Self.matches(pattern: $0, path: path) },
                        "\(probe.id) on \(fixture) read \(path), which the catalogue does not list")
            }
        }
    }

    @Test func identifierSignalsAreHashedNeverRaw() async throws {
        let result = try await identify(root: TestPaths.fixture("laptop-baremetal"))
        let identifierNames = catalogue.probes.flatMap(\.signals).filter { $0.class == .identifier }.map(\.name)
        #expect(!identifierNames.isEmpty)
        for name in identifierNames {
            guard case .string(let value)? = result.signals[name] else { continue }
            #expect(value.count == 64 && value.allSatisfy(\.isHexDigit), "\(name) is not a digest")
        }
    }

    /// `*` matches one path component, `**` any number of them.
    static func matches(pattern: String, path: String) -> Bool {
        matches(pattern.split(separator: "/")[...], path.split(separator: "/")[...])
    }

    private static func matches(_ pattern: ArraySlice<Substring>, _ path: ArraySlice<Substring>) -> Bool {
        guard let head = pattern.first else { return path.isEmpty }
        if head == "**" {
            return (0...path.count).contains { matches(pattern.dropFirst(), path.dropFirst($0)) }
        }
        guard let component = path.first, head == "*" || head == component else { return false }
        return matches(pattern.dropFirst(), path.dropFirst())
    }
}
