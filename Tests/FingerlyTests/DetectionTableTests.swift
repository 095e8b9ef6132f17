@testable import FingerlyCatalogue
import Foundation
import Testing
@testable import Fingerly
@testable import FingerlyHost
@testable import FingerlyModel
@testable import FingerlyPolicy
@testable import FingerlyProbes

@Suite struct DetectionTableTests {
    private static func context(_ tables: DetectionTables = .embedded) -> ProbeContext {
        ProbeContext(host: HostFileSystem(root: "/"), tables: tables, filter: .none, hasher: IdentifierHasher(organization: "acme"))
    }

    /// The shipped tables with extra members spliced in before the first one.
    private static func embeddedJSON(adding members: String) throws -> [UInt8] {
        let file = TestPaths.packageRoot + "/probes/detection-tables.json"
        var text = try String(decoding: Data(contentsOf: URL(fileURLWithPath: file)), as: UTF8.self)
        let brace = text.firstIndex(of: "{")!
        text.replaceSubrange(brace...brace, with: "{" + members + ",")
        return Array(text.utf8)
    }

    @Test func aTableAddedToTheDataIsUsableByNameWithoutCodeChanges() throws {
        let tables = try DetectionTables(json: Self.embeddedJSON(adding: #"""
            "frobnicatorProcesses": ["frobd", "frob-agent"],
            "frobMarkers": [{"pattern": "/run/frob", "kind": "frob", "cloud": "frobcloud"}],
            "frobPorts": {"4242": "frob server"},
            "frobGroup": {"inner": ["a"], "innerPatterns": [{"pattern": "x", "kind": "y"}]}
            """#))
        let context = Self.context(tables)
        #expect(context.tables.strings("frobnicatorProcesses") == ["frobd", "frob-agent"])
        #expect(context.tables.patterns("frobMarkers").map(\.kind) == ["frob"])
        #expect(context.tables.patterns("frobMarkers").first?.cloud == "frobcloud")
        #expect(context.tables.mapping("frobPorts") == ["4242": "frob server"])
        #expect(context.tables.group("frobGroup").patterns("innerPatterns").map(\.pattern) == ["x"])
        #expect(context.tables.strings("debuggerProcesses").contains("gdb"), "the shipped tables are still there")
        #expect(context.issues.isEmpty)

        // A list of strings is a table a policy's inTable can name, found in the data.
        #expect(tables.stringTables["frobnicatorProcesses"] == ["frobd", "frob-agent"])
        #expect(tables.stringTables["frobGroup.inner"] == ["a"])
        #expect(tables.stringTables["frobPorts"] == nil && tables.stringTables["frobMarkers"] == nil)
        let policy = try PolicyLoader(catalogue: .embedded, tables: tables).load(Data(#"""
            {"policyVersion": 1, "verdicts": {"automation": {"rules": [{"id": "frob", "when": {"signal": "process.parent_comm", "inTable": "frobnicatorProcesses"}, "confidence": "medium", "reason": "parent {value}"}]}}}
            """#.utf8), source: "t.json")
        func verdict(_ parent: String) -> Verdict? {
            let report = SignalReport(schemaVersion: 1, collectorVersion: "t", collectedAt: Date(), tag: nil, root: "/", tiers: [.fast],
                                      budgetMs: 1, elapsedMs: 0,
                                      probes: [ProbeEntry(id: "process-parent", tier: .fast, status: .ok, durationMs: 0, detail: nil, issues: [],
                                                          signals: ["process.parent_comm": .string(parent)], identityComponents: [])],
                                      identity: .derive(from: [], hasher: IdentifierHasher(organization: "acme")))
            return VerdictEngine(policy: policy, catalogue: .embedded).evaluate(report)[.automation]
        }
        #expect(verdict("frobd")?.value == true)
        #expect(verdict("bash")?.value == false)
        // The shipped vocabulary does not know the new table: it is the data that names it.
        #expect(throws: PolicyError.self) {
            try PolicyLoader(catalogue: .embedded, tables: .embedded).load(Data(#"""
                {"policyVersion": 1, "verdicts": {"automation": {"rules": [{"id": "frob", "when": {"signal": "process.parent_comm", "inTable": "frobnicatorProcesses"}, "confidence": "medium", "reason": "x"}]}}}
                """#.utf8), source: "t.json")
        }
    }

    @Test func everyListOfStringsInTheShippedTablesIsAPolicyTable() throws {
        let vocabulary = PolicyVocabulary.embedded
        for name in ["debuggerProcesses", "placeholderUUIDs", "placeholderSerials", "systemTrustPaths", "virtualDisplayProcesses",
                     "inputInjectorProcesses", "bareMetalProductSuffixes", "dlopenPlugins", "sharedMachineIds"] {
            #expect(vocabulary.stringTables[name] == DetectionTables.embedded.strings(name), "\(name)")
            #expect(vocabulary.stringTables[name]?.isEmpty == false, "\(name)")
        }
        #expect(vocabulary.stringTables["chassisTypes"] == nil && vocabulary.stringTables["dmiVendors"] == nil)
    }

    @Test func aBareMetalSuffixCountsOnlyWhereItsNameEnds() {
        #expect(DMIProbe.namesBareMetal("c7i.metal", suffix: ".metal"))
        #expect(DMIProbe.namesBareMetal("m7g.metal-48xl", suffix: ".metal"))
        #expect(DMIProbe.namesBareMetal("x.metallic.metal", suffix: ".metal"))
        #expect(!DMIProbe.namesBareMetal("x.metallic", suffix: ".metal"))
        #expect(!DMIProbe.namesBareMetal("c7i.metal\u{301}", suffix: ".metal"))
        #expect(!DMIProbe.namesBareMetal(".meta", suffix: ".metal"))
        #expect(!DMIProbe.namesBareMetal("c7i.metal", suffix: ""))
    }

    @Test func aMissingOrMisshapenTableIsAnIssueOnceNotACrash() {
        let context = Self.context()
        for _ in 0..<3 { #expect(context.tables.strings("noSuchTable").isEmpty) }
        #expect(context.tables.mapping("debuggerProcesses").isEmpty)
        #expect(context.tables.group("hypervisorMarkers").patterns("noSuchRows").isEmpty)
        #expect(context.tables.group("chassisTypes").strings("x").isEmpty)
        #expect(context.issues.map(\.path) == ["detection-tables.json#noSuchTable", "detection-tables.json#debuggerProcesses",
                                               "detection-tables.json#hypervisorMarkers.noSuchRows", "detection-tables.json#chassisTypes",
                                               "detection-tables.json#chassisTypes.x"])
        #expect(context.issues.allSatisfy { $0.status == .error && $0.status.hidesEvidence })
        #expect(context.issues[1].detail.contains("is a list of strings; an object of strings expected"))
    }

    @Test func tablesThatTwoReadersWouldReadDifferentlyDoNotLoad() throws {
        let cases: [(String, String)] = [
            (#""chassisTypes": {"1": "a"}"#, "$.chassisTypes"), // the shipped file has one too: a duplicate member
            (#""t": [{"pattern": "x", "kidn": "y"}]"#, "$.t[0].kidn"),
            (#""t": [{"kind": "y"}]"#, "$.t[0]"),
            (#""t": [{"pattern": "x", "fields": "product_name"}]"#, "$.t[0].fields"),
            (#""t": [{"pattern": "x", "requires": {"a": 1}}]"#, "$.t[0].requires.a"),
            (#""t": [{"pattern": "x", "smbiosVMBitDecides": "yes"}]"#, "$.t[0].smbiosVMBitDecides"),
            (#""t": ["a", {"pattern": "x"}]"#, "$.t[0]"),
            (#""t": {"a": "b", "c": ["d"]}"#, "$.t.a"),
            (#""t": 3"#, "$.t"),
        ]
        for (member, path) in cases {
            let document = try Self.embeddedJSON(adding: member)
            do {
                _ = try DetectionTables(json: document)
                Issue.record("\(member) loaded")
            } catch {
                #expect(error.path == path, "\(member): \(error)")
            }
        }
    }

    /// Every table a probe asks for, found in the probes' sources, exists in the shipped file
    /// with the shape asked for; names inside a group are looked up in the groups that file opens.
    @Test func everyTableNameInTheSourcesExistsWithItsShape() throws {
        let sources = TestPaths.packageRoot + "/Sources/FingerlyProbes"
        let files = try #require(FileManager.default.enumerator(atPath: sources)?.compactMap { $0 as? String }.filter { $0.hasSuffix(".swift") })
        let call = /tables\.(strings|mapping|patterns|group)\("([A-Za-z0-9_]+)"\)/
        let tables = DetectionTables.embedded.tables
        var checked = 0
        for file in files {
            let text = try String(contentsOfFile: sources + "/" + file, encoding: .utf8)
            let uses = text.matches(of: call).map { (String($0.output.1), String($0.output.2)) }
            var scopes: [[String: DetectionTables.Table]] = [tables]
            for (accessor, name) in uses where accessor == "group" {
                if case .group(let members)? = tables[name] { scopes.append(members) }
            }
            for (accessor, name) in uses {
                let found = scopes.compactMap { $0[name] }
                let shapeMatches = found.contains { table in
                    switch (accessor, table) {
                    case ("strings", .strings), ("mapping", .mapping), ("patterns", .patterns), ("group", .group): return true
                    default: return false
                    }
                }
                #expect(shapeMatches, "\(file) asks for \(accessor)(\"\(name)\"); the file has \(found.map(\.shapeName))")
                checked += 1
            }
        }
        #expect(checked >= 25, "the scan found \(checked) table reads; has the accessor changed?")
    }

    /// Probes report a row's kind (or an interception CA's product and category) as a string: the
    /// rows must carry it, since a missing attribute would read as "".
    @Test func patternRowsCarryTheAttributesTheProbesReport() {
        func check(_ tables: [String: DetectionTables.Table], _ prefix: String) {
            for (name, table) in tables {
                switch table {
                case .patterns(let rows):
                    let needed: Set<String> = name == "interceptionCAs" ? ["product", "category"] : ["kind"]
                    for row in rows {
                        #expect(needed.isSubset(of: row.presentAttributes), "\(prefix + name): \(row.pattern) lacks \(needed.subtracting(row.presentAttributes))")
                    }
                case .group(let members): check(members, prefix + name + ".")
                case .strings, .mapping: break
                }
            }
        }
        check(DetectionTables.embedded.tables, "")
    }
}
