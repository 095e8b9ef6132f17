import Foundation
import Testing

/// The public surface is whatever the built modules export; the checked-in list makes every change to it
/// a reviewed diff instead of a side effect.
@Suite struct PublicAPITests {
    @Test func publicAPIMatchesTheCheckedInList() throws {
        let script = TestPaths.packageRoot + "/scripts/public-api"
        // The script runs the toolchain's swift-symbolgraph-extract over .build/debug, which `swift test`
        // has just built; a missing extractor or module is a failure with the script's reason, not a skip.
        let output = try runProcess("/bin/bash", [script, "--check"])
        let listing = output.standardOutput + output.standardError
        switch output.status {
        case 0:
            break
        case 1:
            Issue.record("""
                The public API differs from api/public-api.txt. If the change is meant, run \
                scripts/public-api --write and commit the file.
                \(listing)
                """)
        default:
            Issue.record("scripts/public-api could not list the API (exit \(output.status)):\n\(listing)")
        }
    }

    @Test func everyPublicDeclarationHasADocComment() throws {
        let output = try runProcess("/bin/bash", [TestPaths.packageRoot + "/scripts/public-api", "--undocumented"])
        #expect(output.status == 0, "public declarations without a doc comment:\n\(output.standardOutput)\(output.standardError)")
    }

    @Test func checkReportsADifferenceAsADiff() throws {
        // A list with one declaration removed must fail the check and name that declaration, or the
        // test above could pass while comparing nothing.
        let checkedIn = try String(contentsOfFile: TestPaths.packageRoot + "/api/public-api.txt", encoding: .utf8)
        var lines = checkedIn.split(separator: "\n", omittingEmptySubsequences: false)
        let removedIndex = try #require(lines.firstIndex { !$0.hasPrefix("#") && !$0.isEmpty })
        let removed = lines.remove(at: removedIndex)
        let directory = try TestPaths.temporaryDirectory("public-api")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let edited = directory + "/public-api.txt"
        try lines.joined(separator: "\n").write(toFile: edited, atomically: true, encoding: .utf8)

        let output = try runProcess("/bin/bash", [TestPaths.packageRoot + "/scripts/public-api", "--check", edited])
        #expect(output.status == 1, "\(output.standardError)")
        #expect(output.standardOutput.split(separator: "\n").contains("+" + removed))
    }
}
