import Foundation
import Glibc
import Testing
@testable import Fingerly

/// libcurl is opened by the first request a process sends, never linked: a dry run, the local mode
/// and the integrity check run in real processes (the CLI, and a C host that dlopens libfingerly.so.0)
/// without it, a submission maps it, and a host without a usable libcurl gets a clear error.
@Suite(.serialized) struct LazyHTTPClientLoadingTests {
    /// One line of Tests/CABI/lazy_http_client_host.c.
    struct HostStep: Decodable {
        let step: String
        let rc: Int
        let kind: Int
        let retryable: Bool
        let message: String
        /// The libcurl files the host's /proc/self/maps held after the step.
        let libcurl: [String]
        let result: Outcome?
    }

    /// What of a result the steps tell apart; an integrity result has no state.
    struct Outcome: Decodable {
        let state: IdentifyResult.State?
    }

    static let host: Result<String, any Error> = Result {
        let directory = try TestPaths.temporaryDirectory("lazy-http-client-host")
        let binary = directory + "/lazy_http_client_host"
        let built = try runShell("cc -Wall -Werror -I\"$1/include\" \"$1/Tests/CABI/$3.c\" -o \"$2\"",
                                 TestPaths.packageRoot, binary, "lazy_http_client_host")
        try #require(built.status == 0, "cc lazy_http_client_host: \(built.standardError)")
        return binary
    }

    static func runHost(state: String, server: (endpoint: String, key: String)? = nil,
                        libraryPath: String? = nil) throws -> [String: HostStep] {
        var environment = try InstalledLibrary.environment()
        if let libraryPath {
            environment["LD_LIBRARY_PATH"] = libraryPath + ":" + (environment["LD_LIBRARY_PATH"] ?? "")
        }
        let arguments = [try InstalledLibrary.library, state] + (server.map { [$0.endpoint, $0.key] } ?? [])
        let run = try runProcess(try host.get(), arguments, environment: environment)
        try #require(run.status == 0, "lazy_http_client_host: \(run.status) \(run.standardError)")
        let steps = try run.standardOutput.split(separator: "\n").map {
            try JSONDecoder().decode(HostStep.self, from: Data($0.utf8))
        }
        return Dictionary(steps.map { ($0.step, $0) }, uniquingKeysWith: { first, _ in first })
    }

    static func freshState(_ label: String) throws -> String {
        let path = try TestPaths.temporaryDirectory("lazy-curl-\(label)")
        try #require(chmod(path, 0o700) == 0)
        return path
    }

    /// A server with one key, for as long as `body` runs.
    static func withServer<Value>(_ label: String,
                                  _ body: (_ endpoint: String, _ key: String) throws -> Value) throws -> Value {
        let database = try TestPaths.temporaryDirectory("lazy-curl-\(label)") + "/db.sqlite"
        let (publicKey, _) = try addedKeys(try runServerCLI(["keys", "add", "--org", "acme", "--db", database]))
        let server = try ServerProcess(database: database)
        defer { _ = server.terminate() }
        return try body("http://127.0.0.1:\(server.port)", publicKey)
    }

    /// The CLI with the loader saying which libraries it looks for and loads, on stderr.
    static func runTracedCLI(_ arguments: [String], state: String, apiKey: String?) throws -> ProcessOutput {
        var environment = SubmissionCLITests.environment(state: state, apiKey: apiKey)
        environment["LD_DEBUG"] = "libs"
        return try runProcess(TestPaths.cli, arguments, environment: environment)
    }

    @Test func noProductNamesLibcurlAmongItsNeededLibraries() throws {
        for object in [TestPaths.cli, ServerProcess.executable, try InstalledLibrary.library] {
            let dynamic = try runProcess("/usr/bin/readelf", ["-d", object])
            try #require(dynamic.status == 0, "readelf \(object): \(dynamic.standardError)")
            #expect(dynamic.standardOutput.contains("(NEEDED)"), "\(object): \(dynamic.standardOutput)")
            #expect(!dynamic.standardOutput.contains("libcurl"), "\(object) needs libcurl: \(dynamic.standardOutput)")
        }
    }

    @Test func aHostProcessMapsLibcurlOnlyOnceItSubmits() throws {
        let state = try Self.freshState("host")
        let steps = try Self.withServer("host") { endpoint, key in
            try Self.runHost(state: state, server: (endpoint, key))
        }
        for name in ["start", "dry run", "integrity", "local"] {
            let step = try #require(steps[name], "no step \(name): \(steps.keys.sorted())")
            #expect(step.rc == 0, "\(name): \(step.rc) \(step.message)")
            #expect(step.libcurl.isEmpty, "\(name) mapped \(step.libcurl)")
        }
        #expect(steps["dry run"]?.result?.state == .collected)
        #expect(steps["local"]?.result?.state == .local)
        // The same process, the same library: the check sees libcurl once a report is sent.
        let submitted = try #require(steps["submit"])
        #expect(submitted.rc == 0, "\(submitted.message)")
        #expect(submitted.result?.state == .enriched)
        #expect(submitted.libcurl.contains { $0.hasSuffix("/libcurl.so.4") || $0.contains("/libcurl.so.4.") },
                "\(submitted.libcurl)")
    }

    @Test func theCommandLoadsLibcurlOnlyToSubmit() throws {
        let state = try Self.freshState("cli")
        let dryRun = try Self.runTracedCLI(["--no-submit", "--json"], state: state, apiKey: TestKeys.standard)
        #expect(dryRun.status == 0, "\(dryRun.standardError.suffix(2000))")
        #expect(try dryRun.identifyResult().state == .collected)
        let integrity = try Self.runTracedCLI(["integrity", "--json"], state: state, apiKey: TestKeys.standard)
        #expect(integrity.status == 0, "\(integrity.standardError.suffix(2000))")
        let local = try Self.runTracedCLI(["--tiers", "fast", "--json"], state: state, apiKey: nil)
        #expect(local.status == 0, "\(local.standardError.suffix(2000))")
        #expect(try local.identifyResult().state == .local)
        for (name, run) in [("--no-submit", dryRun), ("integrity", integrity), ("the local mode", local)] {
            // The loader's trace is there (so its silence on libcurl means something) and never names it.
            let traced = run.standardError.contains("calling init:")
            let lookedForLibcurl = run.standardError.contains("libcurl")
            #expect(traced, "\(name): no loader trace")
            #expect(!lookedForLibcurl, "\(name) looked for libcurl")
        }

        let submitted = try Self.withServer("cli") { endpoint, key in
            try Self.runTracedCLI(["--endpoint", endpoint, "--tiers", "fast", "--json"], state: state, apiKey: key)
        }
        #expect(submitted.status == 0, "\(submitted.standardError.suffix(2000))")
        #expect(try submitted.identifyResult().state == .enriched)
        let loaded = submitted.standardError.contains("find library=libcurl.so.4")
        #expect(loaded, "the submission did not load libcurl")
    }

    @Test func aHostThatUsesLibcurlItselfSharesItsCopyAndKeepsUsingIt() throws {
        let directory = try TestPaths.temporaryDirectory("curl-using-host")
        let binary = directory + "/curl_using_host"
        let built = try runShell("cc -Wall -Werror -I\"$1/include\" \"$1/Tests/CABI/$3.c\" -lcurl -o \"$2\"",
                                 TestPaths.packageRoot, binary, "curl_using_host")
        try #require(built.status == 0, "cc curl_using_host: \(built.standardError)")
        let state = try Self.freshState("curl-using-host")
        let run = try Self.withServer("curl-using-host") { endpoint, key in
            try runProcess(binary, [try InstalledLibrary.library, endpoint, key, state],
                           environment: try InstalledLibrary.environment())
        }
        #expect(run.status == 0, "\(run.standardError)")
        // The host's curl works before and after the library's send, and both used one libcurl.
        let expected: [Substring] = ["before 200", "submit 0 delivered", "after 200", "libcurl copies 1"]
        #expect(run.standardOutput.split(separator: "\n") == expected, "\(run.standardOutput)")
    }

    /// A directory for LD_LIBRARY_PATH holding a libcurl.so.4 of the test's making: one that needs a
    /// library no longer there, or one without any of curl's functions.
    static func brokenLibcurl(missingDependency: Bool) throws -> String {
        let directory = try TestPaths.temporaryDirectory("broken-libcurl")
        let source = directory + "/empty.c"
        try "int fingerly_test_placeholder;\n".write(toFile: source, atomically: true, encoding: .utf8)
        var linked = ""
        let dependency = try TestPaths.temporaryDirectory("broken-libcurl-dependency")
        if missingDependency {
            let made = try runShell("cc -shared -fPIC \"$1\" -o \"$2/$3\"", source, dependency,
                                    "libfingerly-absent-dependency.so")
            try #require(made.status == 0, "\(made.standardError)")
            linked = "-Wl,--no-as-needed -L\"\(dependency)\" -lfingerly-absent-dependency"
        }
        let made = try runShell("cc -shared -fPIC -Wl,-soname,libcurl.so.4 \"$1\" \(linked) -o \"$2/libcurl.so.4\"",
                                source, directory)
        try #require(made.status == 0, "\(made.standardError)")
        // Gone once linked against: the loader finds the libcurl.so.4 and not what it needs.
        if missingDependency { try #require(unlink(dependency + "/libfingerly-absent-dependency.so") == 0) }
        return directory
    }

    @Test(arguments: [true, false])
    func aHostWithoutAUsableLibcurlGetsAClearError(missingDependency: Bool) throws {
        let broken = try Self.brokenLibcurl(missingDependency: missingDependency)
        let expected = missingDependency
            ? ["libcurl.so.4 could not be loaded", "libfingerly-absent-dependency.so: cannot open shared object file"]
            : ["libcurl.so.4 lacks a function", "undefined symbol: curl_"]

        // The C ABI: a transport error, not retried, and the host goes on.
        let state = try Self.freshState("broken-host")
        let steps = try Self.runHost(state: state, server: (try SubmissionCLITests.closedPort(), TestKeys.standard),
                                     libraryPath: broken)
        #expect(steps["dry run"]?.rc == 0 && steps["local"]?.rc == 0, "\(steps)")
        let submitted = try #require(steps["submit"])
        #expect(submitted.rc == -2 && submitted.kind == 2 && !submitted.retryable,
                "\(submitted.rc) \(submitted.message)")
        for text in expected { #expect(submitted.message.contains(text), "\(submitted.message)") }

        // The command: the verdicts, then exit 78 naming the library and the loader's reason; nothing queued.
        var environment = SubmissionCLITests.environment(state: state)
        environment["LD_LIBRARY_PATH"] = broken
        let endpoint = try SubmissionCLITests.closedPort()
        let identify = try runProcess(TestPaths.cli, SubmissionCLITests.identifyArguments(endpoint) + ["--json"],
                                      environment: environment)
        #expect(identify.status == 78, "\(identify.status) \(identify.standardError)")
        #expect(try identify.identifyResult().state == .unavailable)
        for text in expected { #expect(identify.standardError.contains(text), "\(identify.standardError)") }
        #expect(SubmissionCLITests.itemFiles(state).isEmpty)
    }

    @Test func aFlushWithoutAUsableLibcurlKeepsTheQueue() throws {
        let state = try Self.freshState("broken-flush")
        let endpoint = try SubmissionCLITests.closedPort()
        let queued = try runProcess(TestPaths.cli, SubmissionCLITests.identifyArguments(endpoint, attempts: 1),
                                    environment: SubmissionCLITests.environment(state: state))
        #expect(queued.status == 75, "\(queued.standardError)")
        try #require(SubmissionCLITests.itemFiles(state).count == 1)

        var environment = SubmissionCLITests.environment(state: state)
        environment["LD_LIBRARY_PATH"] = try Self.brokenLibcurl(missingDependency: true)
        let flushed = try runProcess(TestPaths.cli, SubmissionCLITests.flushArguments(endpoint),
                                     environment: environment)
        #expect(flushed.status == 78, "\(flushed.status) \(flushed.standardError)")
        #expect(flushed.standardError.contains("libcurl.so.4 could not be loaded"), "\(flushed.standardError)")
        #expect(SubmissionCLITests.itemFiles(state).count == 1)
    }
}
