@testable import FingerlyCatalogue
import Foundation
import Testing
@testable import Fingerly
@testable import FingerlyHost
@testable import FingerlyModel
@testable import FingerlyPolicy
@testable import FingerlyProbes

@Suite(.serialized) struct IntegrityCheckTests {
    @Test func checkIntegrityRunsOnlyTheProbesItsVerdictsRead() async throws {
        let fingerly = try Fingerly.loadBlocking(apiKey: nil, consent: .granted)
        let first = try await fingerly.checkIntegrity()
        #expect(Set(VerdictName.allCases.filter { first[$0] != nil }) == Set(IntegrityResult.verdictNames))
        let ran = Set(first.report.probes.map(\.id))
        #expect(ran == fingerly.integrityProbeIds.filter { ProbeCatalogue.embedded.entry($0)?.tier == .fast })
        #expect(ran.contains("process-context") && ran.contains("symbol-interposition") && !ran.contains("pci") && !ran.contains("os"))
        // Called again and again, it answers the same.
        for _ in 0..<20 {
            let again = try await fingerly.checkIntegrity()
            for name in IntegrityResult.verdictNames { #expect(again[name]?.value == first[name]?.value) }
        }
        let full = try await fingerly.checkIntegrity(tiers: [.fast, .deferred])
        #expect(full.report.probes.contains { $0.id == "code-integrity" } && full.report.probes.contains { $0.id == "ptrace-self-test" })
    }

    @Test func checkIntegrityNeedsConsent() async throws {
        let fingerly = try Fingerly.loadBlocking(apiKey: nil, consent: .denied)
        await #expect(throws: ConsentError.self) { try await fingerly.checkIntegrity() }
    }

    @Test func integrityCommandPrintsTheFourVerdictsAndItsCost() throws {
        let run = try runCLI(["integrity", "--json", "--repeat", "5"])
        #expect(run.status == 0, "\(run.standardError)")
        let result = try run.decoded(IntegrityResult.self)
        #expect(Set(VerdictName.allCases.filter { result[$0] != nil }) == Set(IntegrityResult.verdictNames))
        #expect(result.report.probes.allSatisfy { $0.tier == .fast })
        #expect(run.standardError.contains("5 repeat calls in one process: median"))
        #expect(try runCLI(["integrity", "--repeat", "0"]).status == 64)
    }

    /// A gate on a verdict `integrity` never computes could never fire: it is refused, naming
    /// the four it does compute, and those four are taken.
    @Test func integrityFailOnTakesOnlyTheVerdictsItComputes() throws {
        let computed = "debugger, tampering, instrumentation, automation"
        #expect(IntegrityResult.verdictNames.map(\.rawValue).joined(separator: ", ") == computed)
        for verdict in VerdictName.allCases {
            let run = try runCLI(["integrity", "--fail-on", "\(verdict.rawValue):high"])
            if IntegrityResult.verdictNames.contains(verdict) {
                #expect(run.status == 0 || run.status == 3, "\(verdict.rawValue): \(run.standardError)")
                #expect(!run.standardError.contains("--fail-on:") || run.standardError.contains("--fail-on matched"))
            } else {
                #expect(run.status == 64, "\(verdict.rawValue) was accepted: \(run.status)")
                #expect(run.standardError.contains("integrity does not compute '\(verdict.rawValue)'"),
                        "\(run.standardError)")
                #expect(run.standardError.contains("it computes \(computed)"), "\(run.standardError)")
                #expect(run.standardOutput.isEmpty)
            }
        }
        // One verdict it cannot compute spoils a list of good ones.
        #expect(try runCLI(["integrity", "--fail-on", "debugger,tampering:medium,farm"]).status == 64)
        let unknown = try runCLI(["integrity", "--fail-on", "psychic"])
        #expect(unknown.status == 64)
        #expect(unknown.standardError.contains("verdicts are \(computed)"), "\(unknown.standardError)")
        // The main command computes them all and takes them all.
        #expect(try runCLI(["--no-submit", "--tiers", "fast", "--fail-on", "container:high"]).status != 64)
    }

    @Test(.enabled(if: IntegrityScenarioTests.installed("gcc"), "gcc is not installed"))
    func integrityCommandGatesOnFailOn() throws {
        let library = try IntegrityScenarioTests.buildHook("open")
        var environment = ProcessInfo.processInfo.environment
        environment["LD_PRELOAD"] = library
        #expect(try runCLI(["integrity", "--fail-on", "tampering:high"], environment: environment).status == 3)
        #expect(try runCLI(["integrity", "--fail-on", "tampering:high"]).status == 0)
    }
}

@Suite struct JSONParserTests {
    @Test func parsesEveryKindOfValue() throws {
        let value = try JSONParser.parse(Array(#"{"a": [1, -2.5e1, true, false, null], "s": "x\"y\\z\/\n\u00e9\ud83d\ude00", "o": {}}"#.utf8))
        guard case .object(let members) = value else { Issue.record("not an object"); return }
        #expect(members["a"] == .array([.number(1), .number(-25), .bool(true), .bool(false), .null]))
        #expect(members["s"] == .string("x\"y\\z/\n\u{e9}\u{1F600}"))
        #expect(members["o"] == .object([:]))
    }

    @Test(arguments: [#"{"a": }"#, #"[1, 2"#, #"{"a" 1}"#, #""unterminated"#, #"{"a": 1} extra"#, #"tru"#, #"["\q"]"#, "[\"a\u{01}b\"]"])
    func rejectsMalformedDocuments(_ text: String) {
        #expect(throws: JSONParser.SyntaxError.self) { try JSONParser.parse(Array(text.utf8)) }
    }

    @Test func refusesPathologicalNesting() {
        let deep = String(repeating: "[", count: 500) + String(repeating: "]", count: 500)
        #expect(throws: JSONParser.SyntaxError.self) { try JSONParser.parse(Array(deep.utf8)) }
    }
}
