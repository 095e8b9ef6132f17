import FoundationEssentials
import Testing
@testable import FingerlyCatalogue
@testable import FingerlyEngine
@testable import FingerlyHost
@testable import FingerlyModel
@testable import FingerlyPolicy

/// The products carry the catalogue, the detection tables and the default policy as Swift that
/// scripts/generate-embedded-data writes from the JSON files; each value must be what the file's own
/// loader makes of the file, or an edit of the JSON would never reach a binary.
@Suite struct CompiledDataTests {
    private static let regenerate: Comment = "the generated Swift is stale: run scripts/generate-embedded-data"

    private static func sourceFile(_ relativePath: String) throws -> [UInt8] {
        try OperatorFile.readRegularFile(TestPaths.packageRoot + "/" + relativePath, limit: 4 * 1024 * 1024)
    }

    private static func decodedCatalogue() throws -> ProbeCatalogue {
        try JSONDecoder.fingerly.decode(ProbeCatalogue.self, from: Data(sourceFile("probes/catalogue.json")))
    }

    private static func loadedTables() throws -> DetectionTables {
        try DetectionTables(json: sourceFile("probes/detection-tables.json"))
    }

    @Test func theCompiledCatalogueIsTheDecodedCatalogueFile() throws {
        let decoded = try Self.decodedCatalogue()
        #expect(ProbeCatalogue.embedded == decoded, Self.regenerate)
        #expect(ProbeCatalogue.embedded.probes.map(\.id) == decoded.probes.map(\.id), "the report's probe order")
    }

    @Test func theCompiledDetectionTablesAreTheLoadedTablesFile() throws {
        let loaded = try Self.loadedTables()
        #expect(DetectionTables.embedded == loaded, Self.regenerate)
        for (name, table) in loaded.tables {
            #expect(DetectionTables.embedded.table(name) == table, "\(name)")
        }
    }

    /// The loader checks the policy against the catalogue and the tables (signal and table names,
    /// operand types, limits) and lowers the needles: the compiled policy must be that result.
    @Test func theCompiledDefaultPolicyIsThePolicyFileAsTheLoaderValidatesIt() throws {
        let bytes = try Self.sourceFile("policies/default.json")
        let fromFiles = try PolicyLoader(catalogue: Self.decodedCatalogue(), tables: Self.loadedTables())
            .load(bytes, source: Policy.embeddedSource)
        #expect(Policy.compiledDefault == fromFiles, Self.regenerate)
        let shipped = try PolicyLoader(vocabulary: .embedded).load(bytes, source: Policy.embeddedSource)
        #expect(Policy.embedded() == shipped)
        #expect(FreeTextHandling.embeddedDefault == fromFiles.freeText)
        for verdict in VerdictName.allCases {
            #expect(Policy.compiledDefault.signals(of: verdict) == fromFiles.signals(of: verdict), "\(verdict)")
        }
    }
}
