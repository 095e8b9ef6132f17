import Foundation
import Testing

/// The layers are targets, so the compiler keeps them apart; this checks that the target graph and
/// the imports say what the layers promise: the policy engine reads no file and knows no probe, a
/// probe cannot reach the policy engine or the CLI.
@Suite struct LayeringTests {
    private static func targetGraph() throws -> [String: Set<String>] {
        Dictionary(uniqueKeysWithValues: try PackageManifest.dump().targets.map { ($0.name, Set($0.dependencyNames)) })
    }

    private static func closure(of target: String, in graph: [String: Set<String>]) -> Set<String> {
        var seen: Set<String> = []
        var pending = Array(graph[target] ?? [])
        while let next = pending.popLast() {
            if seen.insert(next).inserted { pending += graph[next] ?? [] }
        }
        return seen
    }

    /// Modules named by `import` lines of a target's sources.
    private static func imports(of target: String) throws -> Set<String> {
        let directory = TestPaths.packageRoot + "/Sources/" + target
        let files = try #require(FileManager.default.enumerator(atPath: directory)?.allObjects as? [String])
        var modules: Set<String> = []
        for file in files where file.hasSuffix(".swift") {
            let text = try String(contentsOfFile: directory + "/" + file, encoding: .utf8)
            for line in text.split(separator: "\n") {
                // `@testable import X`, `internal import X`, `import struct X.Y`: the module is the
                // first word after `import` that is not a declaration kind, up to its first dot.
                var words = line.split(separator: " ").filter { !$0.hasPrefix("@") }[...]
                while let first = words.first, ["public", "package", "internal", "fileprivate", "private"].contains(first) {
                    words = words.dropFirst()
                }
                guard words.first == "import" else { continue }
                words = words.dropFirst()
                while let first = words.first, ["struct", "class", "enum", "protocol", "typealias", "func", "var", "let"].contains(first) {
                    words = words.dropFirst()
                }
                if let module = words.first?.split(separator: ".").first { modules.insert(String(module)) }
            }
        }
        return modules
    }

    @Test func thePolicyEngineDependsOnTheModelAlone() throws {
        let graph = try Self.targetGraph()
        #expect(Self.closure(of: "FingerlyPolicy", in: graph) == ["FingerlyModel"])
        #expect(Self.closure(of: "FingerlyModel", in: graph).isEmpty)
        // Not even Foundation or Glibc: nothing there could open a file.
        #expect(try Self.imports(of: "FingerlyPolicy") == ["FingerlyModel"])
        #expect(try Self.imports(of: "FingerlyModel") == ["FoundationEssentials"])
    }

    @Test func aProbeCannotReachThePolicyEngineOrTheCommandLine() throws {
        let graph = try Self.targetGraph()
        let reachable = Self.closure(of: "FingerlyProbes", in: graph)
        #expect(reachable.isDisjoint(with: ["FingerlyPolicy", "Fingerly", "FingerlyIdentifyCommand", "fingerly-identify"]), "\(reachable)")
        #expect(try Self.imports(of: "FingerlyProbes").isDisjoint(with: ["FingerlyPolicy", "Fingerly", "FingerlyIdentifyCommand"]))
        let host = Self.closure(of: "FingerlyHost", in: graph)
        #expect(host.isDisjoint(with: ["FingerlyProbes", "FingerlyPolicy", "Fingerly", "FingerlyModel"]), "\(host)")
    }

    @Test func theTransportSeesBytesNotReports() throws {
        let graph = try Self.targetGraph()
        let reachable = Self.closure(of: "FingerlyTransport", in: graph)
        #expect(reachable.isDisjoint(with: ["FingerlyModel", "FingerlyProbes", "FingerlyPolicy", "Fingerly"]), "\(reachable)")
        #expect(Self.closure(of: "Fingerly", in: graph).contains("FingerlyTransport"))
    }

    @Test func theStoreKeepsRowsAndTheEngineKnowsNoHTTP() throws {
        let graph = try Self.targetGraph()
        #expect(Self.closure(of: "FingerlyStore", in: graph).isDisjoint(with: ["FingerlyModel", "FingerlyProbes", "FingerlyPolicy", "FingerlyEngine", "Fingerly"]))
        #expect(Self.closure(of: "FingerlyEngine", in: graph).isDisjoint(with: ["FingerlyTransport", "FingerlyServer", "Fingerly", "CMicroHTTPD", "CCurl"]))
        #expect(Self.closure(of: "FingerlyServer", in: graph).isDisjoint(with: ["Fingerly", "FingerlyIdentifyCommand"]))
    }

    @Test func everyTargetImportsOnlyWhatItDependsOn() throws {
        let graph = try Self.targetGraph()
        let system: Set<String> = ["FoundationEssentials", "Foundation", "Glibc", "Musl", "Dispatch", "Synchronization"]
        for target in ["FingerlyModel", "FingerlyHost", "FingerlyProbes", "FingerlyPolicy", "FingerlyTransport", "FingerlyStore",
                       "FingerlyEngine", "FingerlyServer", "Fingerly", "FingerlyIdentifyCommand"] {
            let allowed = Self.closure(of: target, in: graph).union(system)
            let stray = try Self.imports(of: target).subtracting(allowed)
            #expect(stray.isEmpty, "\(target) imports \(stray.sorted()) without depending on it")
        }
    }
}
