@testable import FingerlyCatalogue
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
                                       filter: .none, hasher: IdentifierHasher(organization: "acme"))
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

    /// The laptop fixture has only single-valued identifiers (machine-id, DMI), so its device tree
    /// from the umockdev recording (NIC MACs, disk, USB and panel serials) and a VM's partitioned
    /// disk (partition UUIDs) are collected too: each gives list-valued identifiers.
    @Test func identifierSignalsAreHashedNeverRaw() async throws {
        try #require(DeviceFixtures.umockdevAvailable, "umockdev-run is missing: scripts/install-deps --test installs it")
        let laptop = TestPaths.fixture("laptop-baremetal")
        let roots = [laptop, try DeviceFixtures.hostRoot(recordings: [DeviceFixtures.laptop], label: "identifier-devices"),
                     try DeviceFixtures.filesystemRoot(.udevDatabase, label: "identifier-partitions")]
        // Every raw identifier in those trees; the panel's serials are binary EDID fields the recording's text does not show.
        var raw = try DeviceInventoryTests.rawIdentifiers(in: DeviceFixtures.laptop) + ["BOE-PANEL-77A", "16909060"]
        raw += [DeviceFixtures.rootUUID, DeviceFixtures.diskLabelId] + DeviceFixtures.partitionUUIDs
        for path in ["/etc/machine-id", "/var/lib/dbus/machine-id", "/sys/class/dmi/id/product_uuid", "/sys/class/dmi/id/product_serial",
                     "/sys/class/dmi/id/board_serial", "/sys/class/dmi/id/chassis_serial"] {
            if let text = try? String(contentsOfFile: laptop + path, encoding: .utf8) {
                raw.append(text.trimmingCharacters(in: .whitespacesAndNewlines))
            }
        }
        raw = raw.filter { $0.count >= 6 }.map { $0.lowercased() }
        let identifierNames = catalogue.probes.flatMap(\.signals).filter { $0.class == .identifier }.map(\.name)
        #expect(!identifierNames.isEmpty)
        func isDigest(_ text: Substring) -> Bool { text.count == 64 && text.allSatisfy(\.isHexDigit) }
        var listsSeen: Set<String> = []
        for root in roots {
            let result = try await identify(root: root)
            for name in identifierNames {
                switch result.signals[name] {
                case .string(let value)?:
                    #expect(isDigest(value[...]), "\(name) is not a digest: \(value)")
                    #expect(!raw.contains { value.lowercased().contains($0) }, "\(name) holds a raw identifier")
                case .strings(let items)?:
                    // An item is the digest, or a non-identifying label (an interface, disk or vid:pid) and the digest.
                    for item in items {
                        #expect(isDigest(item.split(separator: " ").last ?? ""), "\(name) item is not a digest: \(item)")
                        #expect(!raw.contains { item.lowercased().contains($0) }, "\(name) item holds a raw identifier: \(item)")
                    }
                    if !items.isEmpty { listsSeen.insert(name) }
                default: break
                }
            }
        }
        let listValued = Set(catalogue.probes.flatMap(\.signals).filter { $0.class == .identifier && $0.type == "strings" }.map(\.name))
        #expect(listsSeen.isSuperset(of: ["net.permanent_macs", "block.serials", "drm.monitor_serials", "fs.boot_disk_partition_uuids"]),
                "list-valued identifiers seen: \(listsSeen.sorted()) of \(listValued.sorted())")
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
