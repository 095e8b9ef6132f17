import Foundation
import Testing
@testable import Fingerly
@testable import FingerlyModel

/// The C ABI as a C program sees it: installed by scripts/install into a temporary prefix,
/// compiled with `cc $(pkg-config --cflags --libs fingerly)`, run with nothing of the Swift
/// toolchain on the loader's path.
enum InstalledLibrary {
    /// One installation per test process, from the debug build `swift test` made.
    static let prefix: Result<String, any Error> = Result {
        let prefix = try TestPaths.temporaryDirectory("cabi-prefix")
        let install = try runProcess(TestPaths.packageRoot + "/scripts/install",
                                     ["--prefix", prefix, "--build-dir", TestPaths.packageRoot + "/.build/debug"])
        try #require(install.status == 0, "scripts/install: \(install.standardError)")
        return prefix
    }

    static var library: String { get throws { try prefix.get() + "/lib/libfingerly.so.0" } }

    /// A C program's environment: the prefix's lib directory and no other, no toolchain paths; a state
    /// directory of the test's own so nothing is written under /var/lib.
    static func environment(_ extra: [String: String] = [:]) throws -> [String: String] {
        var environment = ["PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": try prefix.get() + "/lib",
                           "STATE_DIRECTORY": try TestPaths.temporaryDirectory("cabi-state")]
        environment.merge(extra) { $1 }
        return environment
    }

    /// Compiles C source the way the README says, against the installed prefix.
    static func compile(_ source: String, name: String, extraFlags: String = "") throws -> String {
        let directory = try TestPaths.temporaryDirectory("cabi-\(name)")
        let file = directory + "/\(name).c"
        try source.write(toFile: file, atomically: true, encoding: .utf8)
        let binary = directory + "/\(name)"
        // -I: the hosts of Tests/CABI share json_output.h, and the source is compiled from a copy.
        let built = try runShell("cc \"$1\" -I\"$4/Tests/CABI\" $(PKG_CONFIG_PATH=\"$2/lib/pkgconfig\" pkg-config --cflags --libs fingerly)"
                                 + " \(extraFlags) -o \"$3\"", file, try prefix.get(), binary, TestPaths.packageRoot)
        try #require(built.status == 0, "cc \(name): \(built.standardError)")
        return binary
    }

    static let harness: Result<String, any Error> = Result {
        try compile(try String(contentsOfFile: TestPaths.packageRoot + "/Tests/CABI/harness.c", encoding: .utf8),
                    name: "harness", extraFlags: "-pthread -Wall -Werror")
    }

    /// The fenced block under `<!-- NAME example: … -->` in README.md, so the README cannot drift
    /// from what the tests run.
    static func readmeExample(_ marker: String, fence: String) throws -> String {
        let readme = try String(contentsOfFile: TestPaths.packageRoot + "/README.md", encoding: .utf8)
        let start = try #require(readme.range(of: "<!-- \(marker) example:"), "README.md has no \(marker) example")
        let open = try #require(readme.range(of: "```\(fence)\n", range: start.upperBound..<readme.endIndex))
        let close = try #require(readme.range(of: "\n```", range: open.upperBound..<readme.endIndex))
        return String(readme[open.upperBound..<close.lowerBound]) + "\n"
    }
}

/// One line of Tests/CABI/harness.c: a call's outcome, the error record as C read it.
struct HarnessLine<Payload: Decodable>: Decodable {
    let caseName: String
    let rc: Int
    let kind: Int
    let status: Int
    let retryable: Bool
    /// Whether the message had a NUL inside its 256 bytes.
    let terminated: Bool
    let message: String
    let result: Payload?

    enum CodingKeys: String, CodingKey {
        case caseName = "case", rc, kind, status, retryable, terminated, message, result
    }

    static func lines(_ output: ProcessOutput) throws -> [HarnessLine] {
        try output.standardOutput.split(separator: "\n").map { try JSONDecoder.fingerly.decode(HarnessLine.self, from: Data($0.utf8)) }
    }
}

@Suite(.serialized)
struct CABITests {
    static let fixtureRoot = TestPaths.fixture("kvm-qemu")

    @Test func exportsOnlyTheCheckedInSymbolsUnderTheSoname() throws {
        let library = try InstalledLibrary.library
        let symbols = try runShell("nm -D --defined-only \"$1\" | awk '$2 ~ /^[A-Z]$/ {print $3}' | sort", library)
        try #require(symbols.status == 0, "\(symbols.standardError)")
        let expected = try String(contentsOfFile: TestPaths.packageRoot + "/api/fingerly.symbols", encoding: .utf8)
        #expect(symbols.standardOutput == expected)
        let dynamic = try runProcess("/usr/bin/readelf", ["-d", library])
        #expect(dynamic.standardOutput.contains("Library soname: [libfingerly.so.0]"))
        #expect(!dynamic.standardOutput.contains("swift"), "a Swift runtime library is NEEDED: \(dynamic.standardOutput)")
        // The version node the symbols carry is defined (gold also listed it as an absolute symbol; lld does not).
        let versions = try runProcess("/usr/bin/readelf", ["-V", library])
        #expect(versions.standardOutput.contains("Name: FINGERLY_0"), "\(versions.standardOutput)")
    }

    /// A plugin host unloads what it loaded: the library's threads, kept for a while after a call,
    /// must not run unmapped code once dlclose returns (the library is never unloaded: -z nodelete).
    @Test func aHostThatUnloadsTheLibraryKeepsRunning() throws {
        let directory = try TestPaths.temporaryDirectory("unloading-host")
        let binary = directory + "/unloading_host"
        let built = try runShell("cc -Wall -Werror -I\"$1/include\" \"$1/Tests/CABI/unloading_host.c\" -o \"$2\"",
                                 TestPaths.packageRoot, binary)
        try #require(built.status == 0, "cc unloading_host: \(built.standardError)")
        let state = try TestPaths.temporaryDirectory("unloading-host-state")
        #expect(chmod(state, 0o700) == 0)
        // Three seconds: past the two a kept probe thread waits for more work before it ends.
        let run = try runProcess(binary, [try InstalledLibrary.library, state, "3"],
                                 environment: try InstalledLibrary.environment())
        #expect(run.status == 0, "\(run.status) \(run.standardError)")
        #expect(run.standardOutput == "still running\n")
        let dynamic = try runProcess("/usr/bin/readelf", ["-d", try InstalledLibrary.library])
        #expect(dynamic.standardOutput.contains("NODELETE"), "\(dynamic.standardOutput)")
    }

    @Test func readmeExampleJudgesHereWithoutTheToolchain() throws {
        let example = try InstalledLibrary.compile(try InstalledLibrary.readmeExample("C", fence: "c"), name: "example")
        let environment = try InstalledLibrary.environment()
        let loaded = try runProcess("/usr/bin/ldd", [example], environment: environment)
        #expect(loaded.status == 0)
        #expect(loaded.standardOutput.contains(try InstalledLibrary.prefix.get() + "/lib/libfingerly.so.0"))
        #expect(!loaded.standardOutput.contains("swift") && !loaded.standardOutput.contains("not found"), "\(loaded.standardOutput)")

        let run = try runProcess(example, [], environment: environment)
        #expect(run.status == 0, "\(run.standardError)")
        let result = try run.identifyResult()
        #expect(result.state == .collected)
        #expect(result.report.tag == "checkout:8412")
        #expect(result.report.tiers == [.fast])
        #expect(result.request == nil || result.request?.method == "POST")
    }

    @Test func readmeExampleSubmitsToATestServer() throws {
        let example = try InstalledLibrary.compile(try InstalledLibrary.readmeExample("C", fence: "c"), name: "example-submit")
        let database = try TestPaths.temporaryDirectory("cabi-server") + "/db.sqlite"
        let (publicKey, _) = try addedKeys(try runServerCLI(["keys", "add", "--org", "acme", "--db", database]))
        let server = try ServerProcess(database: database)
        defer { _ = server.terminate() }
        let run = try runProcess(example, [], environment: try InstalledLibrary.environment(
            ["FINGERLY_API_KEY": publicKey, "FINGERLY_ENDPOINT": "http://127.0.0.1:\(server.port)"]))
        #expect(run.status == 0, "\(run.standardError)")
        let result = try run.identifyResult()
        #expect(result.state == .enriched)
        #expect(result.visitorId?.isEmpty == false)
        #expect(!result.requestId.isEmpty)
    }

    @Test func anUnknownKeyIsA401TransportErrorAndTheProcessKeepsRunning() throws {
        let database = try TestPaths.temporaryDirectory("cabi-401") + "/db.sqlite"
        _ = try addedKeys(try runServerCLI(["keys", "add", "--org", "acme", "--db", database]))
        let server = try ServerProcess(database: database)
        defer { _ = server.terminate() }
        let run = try runProcess(try InstalledLibrary.harness.get(),
                                 ["submit", "http://127.0.0.1:\(server.port)", TestKeys.key(org: "stranger")],
                                 environment: try InstalledLibrary.environment())
        #expect(run.status == 0, "\(run.standardError)")
        let lines = try HarnessLine<IdentifyResult>.lines(run)
        let submitted = try #require(lines.first { $0.caseName == "submit" })
        #expect(submitted.rc == -2 && submitted.kind == 2)
        #expect(submitted.status == 401)
        #expect(!submitted.retryable)
        #expect(submitted.message.contains("401") && submitted.terminated)
        #expect(submitted.result == nil)
        #expect(lines.last?.caseName == "still running")
    }

    @Test func badArgumentsAreClearErrorsAndTheProcessKeepsRunning() throws {
        let run = try runProcess(try InstalledLibrary.harness.get(), ["errors"], environment: try InstalledLibrary.environment())
        #expect(run.status == 0, "\(run.standardError)")
        let lines = try HarnessLine<IdentifyResult>.lines(run)
        let byCase = Dictionary(lines.map { ($0.caseName, $0) }, uniquingKeysWith: { first, _ in first })
        func expectFailure(_ name: String, kind: Int, mentioning text: String, sourceLocation: SourceLocation = #_sourceLocation) {
            guard let line = byCase[name] else { Issue.record("no outcome for \(name)", sourceLocation: sourceLocation); return }
            #expect(line.rc == -kind && line.kind == kind, "\(name): \(line.rc) \(line.kind) \(line.message)", sourceLocation: sourceLocation)
            #expect(line.message.contains(text), "\(name): \(line.message)", sourceLocation: sourceLocation)
            #expect(line.terminated && line.status == 0 && !line.retryable && line.result == nil, sourceLocation: sourceLocation)
        }
        expectFailure("unknown member", kind: 3, mentioning: "'colour'")
        expectFailure("truncated JSON", kind: 3, mentioning: "not valid JSON")
        expectFailure("negative budget", kind: 3, mentioning: "schedule.budgetMs")
        expectFailure("huge budget", kind: 3, mentioning: "budgetMs")
        expectFailure("secret key", kind: 3, mentioning: "apiKey")
        expectFailure("NULL out", kind: 3, mentioning: "out is NULL")
        expectFailure("NULL handle", kind: 3, mentioning: "handle is NULL")
        expectFailure("NULL result pointer", kind: 3, mentioning: "result_json is NULL")
        expectFailure("unknown tier bit", kind: 3, mentioning: "tiers")
        expectFailure("tag not UTF-8", kind: 3, mentioning: "UTF-8")
        expectFailure("unknown consent", kind: 3, mentioning: "'maybe'")
        expectFailure("identify while denied", kind: 1, mentioning: "denied")
        expectFailure("collect while denied", kind: 1, mentioning: "denied")
        expectFailure("integrity while denied", kind: 1, mentioning: "denied")
        #expect(byCase["NULL config loads defaults"]?.rc == 0)
        #expect(byCase["NULL error record"]?.rc == 0)
        #expect(byCase["consent denied"]?.rc == 0)
        #expect(byCase["flush without a key"]?.rc == 0)
        #expect(byCase["flush ignoring its result"]?.rc == 0)
        #expect(byCase["clear device identity"]?.rc == 0)
        expectFailure("clear with a NULL handle", kind: 3, mentioning: "handle is NULL")
        #expect(lines.last?.caseName == "still running")
        #expect(lines.count == 22)
    }

    @Test func eightThreadsIdentifyAtOnceOnOneHandle() throws {
        let run = try runProcess(try InstalledLibrary.harness.get(), ["threads", "8", Self.fixtureRoot],
                                 environment: try InstalledLibrary.environment())
        #expect(run.status == 0, "\(run.standardError)")
        let lines = try HarnessLine<IdentifyResult>.lines(run)
        #expect(Set(lines.map(\.caseName)) == Set((0..<8).map { "thread-\($0)" }))
        for line in lines {
            #expect(line.rc == 0 && line.kind == 0, "\(line.caseName): \(line.message)")
            let result = try #require(line.result)
            // Each thread got its own call's result, judged from the KVM fixture.
            #expect(result.report.tag == line.caseName)
            #expect(result.verdicts.virtualization.value)
            #expect(result.state == .collected)
        }
    }

    @Test func asynchronousCallsCallBackOnALibraryThreadAfterTheHandleIsClosed() throws {
        let run = try runProcess(try InstalledLibrary.harness.get(), ["async", "4", Self.fixtureRoot],
                                 environment: try InstalledLibrary.environment())
        #expect(run.status == 0, "\(run.standardError)")
        let lines = try HarnessLine<IdentifyResult>.lines(run)
        #expect(Set(lines.map(\.caseName)) == Set((0..<4).map { "async-\($0)" }))
        for line in lines {
            #expect(line.rc == 0, "\(line.caseName): \(line.message)")
            #expect(try #require(line.result).report.tag == line.caseName)
        }
    }

    /// valgrind runs the library: its Swift runtime is linked in, and scripts/install strips the
    /// DWARF 5 that valgrind 3.19 cannot read.
    @Test func valgrindFindsNothingDefinitelyLostOverAThousandCalls() throws {
        let log = try TestPaths.temporaryDirectory("cabi-valgrind") + "/memcheck.log"
        let run = try runProcess("/usr/bin/valgrind", ["--tool=memcheck", "--leak-check=full", "--log-file=\(log)",
                                                       try InstalledLibrary.harness.get(), "repeat", "1000", Self.fixtureRoot],
                                 environment: try InstalledLibrary.environment(), timeout: 1200)
        let report = try String(contentsOfFile: log, encoding: .utf8)
        #expect(run.status == 0, "\(run.standardError)\n\(report.suffix(3000))")
        let line = try #require(HarnessLine<IdentifyResult>.lines(run).first)
        #expect(line.caseName == "repeat" && line.rc >= 1000)
        let noLeaks = report.contains("All heap blocks were freed -- no leaks are possible")
        let definitelyLost = report.split(separator: "\n").first { $0.contains("definitely lost:") }
        #expect(noLeaks || definitelyLost?.contains("definitely lost: 0 bytes in 0 blocks") == true,
                "\(definitelyLost ?? "no leak summary")\n\(report.suffix(4000))")
    }

    /// The README's install command, run as written in a directory of its own, with pip kept off
    /// every index: the package must build offline.
    static func freshVirtualEnvironment(_ label: String, systemSitePackages: Bool = false) throws -> String {
        let readme = try String(contentsOfFile: TestPaths.packageRoot + "/README.md", encoding: .utf8)
        let command = "python3 -m venv venv && venv/bin/pip install ./bindings/python"
        try #require(readme.contains("\n" + command + "\n"), "README.md no longer shows: \(command)")
        let directory = try TestPaths.temporaryDirectory(label)
        try FileManager.default.createSymbolicLink(atPath: directory + "/bindings", withDestinationPath: TestPaths.packageRoot + "/bindings")
        let venvCommand = systemSitePackages ? command.replacingOccurrences(of: "-m venv venv", with: "-m venv --system-site-packages venv") : command
        let install = try runShell("cd \"$1\" && PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \(venvCommand)", directory)
        try #require(install.status == 0, "\(venvCommand): \(install.standardOutput)\(install.standardError)")
        return directory + "/venv"
    }

    @Test func readmePythonExampleAndTheIssuesOneLinerRunInAFreshVenv() async throws {
        let venv = try Self.freshVirtualEnvironment("cabi-venv")
        let environment = try InstalledLibrary.environment(["FINGERLY_LIBRARY": try InstalledLibrary.library])
        let example = try InstalledLibrary.readmeExample("Python", fence: "python")
        let run = try runProcess(venv + "/bin/python", ["-c", example], environment: environment)
        #expect(run.status == 0, "\(run.standardError)")
        let lines = run.standardOutput.split(separator: "\n")
        #expect(lines.first?.hasPrefix("collected ") == true, "\(run.standardOutput)")
        #expect(lines.last?.hasPrefix("no consent: consent is denied") == true, "\(run.standardOutput)")

        let oneLiner = "import fingerly; print(fingerly.load(api_key=None).identify(submit=False).verdicts.virtualization.value)"
        let printed = try runProcess(venv + "/bin/python", ["-c", oneLiner], environment: environment)
        #expect(printed.status == 0, "\(printed.standardError)")
        // The same verdict the Swift library reaches on this host.
        let fingerly = try Fingerly.loadBlocking(apiKey: nil, options: FingerlyOptions(stateDirectory: environment["STATE_DIRECTORY"]))
        let expected = try await fingerly.identify(submit: false).verdicts.virtualization.value
        #expect(printed.standardOutput == (expected ? "True\n" : "False\n"))
    }

    @Test func pythonPackagePassesItsPytestSuite() throws {
        let venv = try Self.freshVirtualEnvironment("cabi-pytest", systemSitePackages: true)
        let run = try runProcess(venv + "/bin/python", ["-m", "pytest", "-q", "-p", "no:cacheprovider",
                                                        TestPaths.packageRoot + "/bindings/python/tests"],
                                 // No bytecode written into the source tree.
                                 environment: try InstalledLibrary.environment(["FINGERLY_LIBRARY": try InstalledLibrary.library,
                                                                                "PYTHONDONTWRITEBYTECODE": "1"]))
        #expect(run.status == 0, "\(run.standardOutput)\(run.standardError)")
        #expect(run.standardOutput.contains(" passed") && !run.standardOutput.contains("failed"), "\(run.standardOutput)")
    }
}
