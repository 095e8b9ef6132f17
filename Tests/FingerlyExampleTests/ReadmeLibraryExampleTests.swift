// A target of its own with a plain `import Fingerly`: the README's library example compiles here
// against the public API alone, and the test checks that the README shows exactly this code.
import Fingerly
import Foundation
import Testing

/// The README's example, verbatim between the markers (indentation aside).
func readmeLibraryExample() async throws -> IdentifyResult {
    // README example begins
    struct StandardErrorLog: FingerlyLogHandler {
        func log(_ level: LogLevel, _ message: String) {
            if level >= .warning { FileHandle.standardError.write(Data("fingerly: \(message)\n".utf8)) }
        }
    }

    let fingerly = try await Fingerly.load(
        apiKey: nil,                                  // nil: local only, nothing is sent
        endpoint: "",                                 // "" uses the region in the key
        schedule: ScheduleOptions(budgetMs: 800, concurrency: 4),
        consent: .pending,                            // until .granted, calls throw ConsentError and read nothing
        options: FingerlyOptions(attributesToIgnore: ["dmi.*"], logger: StandardErrorLog()))

    fingerly.setConsent(.granted)
    let result = try await fingerly.identify(tag: "checkout:8412", tiers: [.fast], submit: false)
    if result.verdicts.debugger.value, result.verdicts.debugger.confidence == .high {
        // refuse the sensitive action
    }
    print(result.state, result.suspectScore.map(String.init) ?? "not scored", result.triggers.map(\.group))

    // Before each sensitive action: only the integrity probes, fast tier.
    let integrity = try await fingerly.checkIntegrity()
    if integrity.tampering.value || integrity.debugger.value {
        // refuse the sensitive action
    }
    // README example ends
    return result
}

@Suite struct ReadmeLibraryExampleTests {
    private static let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().path

    /// Lines between the markers, with the common indentation removed.
    private static func exampleLines(_ text: String, from start: String, to end: String) -> [String] {
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        guard let first = lines.firstIndex(where: { $0.contains(start) }),
              let last = lines[first...].firstIndex(where: { $0.contains(end) }) else { return [] }
        let body = Array(lines[(first + 1)..<last])
        let indent = body.filter { !$0.trimmingCharacters(in: .whitespaces).isEmpty }
            .map { $0.prefix { $0 == " " }.count }.min() ?? 0
        return body.map { $0.count >= indent ? String($0.dropFirst(indent)) : $0.trimmingCharacters(in: .whitespaces) }
    }

    @Test func theReadmeShowsTheCompiledExample() throws {
        let source = try String(contentsOfFile: #filePath, encoding: .utf8)
        let compiled = Self.exampleLines(source, from: "// README example begins", to: "// README example ends")
        let readme = try String(contentsOfFile: Self.packageRoot + "/README.md", encoding: .utf8)
        let lines = readme.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        let marker = try #require(lines.firstIndex(of: "<!-- library example: Tests/FingerlyExampleTests -->"))
        #expect(lines[marker + 1] == "```swift")
        let close = try #require(lines[(marker + 2)...].firstIndex(of: "```"))
        #expect(compiled.count > 10)
        // The README block opens with the import the example file has at its top.
        #expect(Array(lines[(marker + 2)..<close]) == ["import Fingerly", ""] + compiled)
    }

    @Test func theExampleRunsOnThisHost() async throws {
        let result = try await readmeLibraryExample()
        #expect(result.state == .collected)
        #expect(result.report.tiers == [.fast])
        #expect(result.report.signals.keys.allSatisfy { !$0.hasPrefix("dmi.") })
        #expect(result.suspectScore != nil, "the default policy scores")
    }
}
