import Foundation
import Testing

/// The Python package (through the installed libfingerly.so.0, in a fresh venv) and the
/// `fingerly-identify` command are fed the same bad configurations: both refuse, and both name
/// the argument the user wrote (`root` and `--root`), never a field of the library.
@Suite(.serialized)
struct BindingParityTests {
    struct Case {
        let name: String
        /// Keyword arguments of `fingerly.load`, as JSON.
        let python: String
        let argument: String
        let cli: [String]
        let flag: String
        let exitCode: Int32
        /// What both messages say about the value, beside the name; nil where the two explain
        /// the same refusal in words of their own (the CLI's ranges are its own).
        let shared: String?
    }

    static let secretKey = "fly_sk_us_production_acme_0123456789abcdefABCD"
    static let publicKey = "fly_pk_us_production_acme_0123456789abcdefABCD"

    static let cases: [Case] = [
        Case(name: "root missing", python: #"{"root": "/nonexistent"}"#, argument: "root",
             cli: ["--no-submit", "--root", "/nonexistent"], flag: "--root", exitCode: 65,
             shared: "/nonexistent: not a directory"),
        Case(name: "state directory unusable", python: #"{"state_directory": "/proc/nope"}"#,
             argument: "state_directory",
             cli: ["--no-submit", "--state-dir", "/proc/nope"], flag: "--state-dir", exitCode: 64,
             shared: "cannot be used: /proc/nope: No such file or directory"),
        Case(name: "consent unknown", python: #"{"consent": "maybe"}"#, argument: "consent",
             cli: ["consent", "maybe"], flag: "consent", exitCode: 64,
             shared: "'maybe' is not granted, pending or denied"),
        Case(name: "tier unknown", python: #"{"tiers": ["slow"]}"#, argument: "tiers",
             cli: ["--no-submit", "--tiers", "slow"], flag: "--tiers", exitCode: 64,
             shared: "unknown tier 'slow'; use fast"),
        Case(name: "ignore unknown", python: #"{"ignore": ["foo.bar"]}"#, argument: "ignore",
             cli: ["--no-submit", "--ignore", "foo.bar"], flag: "--ignore", exitCode: 64,
             shared: "unknown attribute(s) to ignore: foo.bar"),
        Case(name: "attempts too many", python: #"{"attempts": 11}"#, argument: "attempts",
             cli: ["--no-submit", "--attempts", "11"], flag: "--attempts", exitCode: 64, shared: "1 to 10"),
        Case(name: "budget zero", python: #"{"budget_ms": 0}"#, argument: "budget_ms",
             cli: ["--no-submit", "--budget-ms", "0"], flag: "--budget-ms", exitCode: 64, shared: nil),
        Case(name: "budget past ten minutes", python: #"{"budget_ms": 600001}"#, argument: "budget_ms",
             cli: ["--no-submit", "--budget-ms", "600001"], flag: "--budget-ms", exitCode: 64, shared: "600000"),
        Case(name: "concurrency past 64", python: #"{"concurrency": 65}"#, argument: "concurrency",
             cli: ["--no-submit", "--concurrency", "65"], flag: "--concurrency", exitCode: 64, shared: "64"),
        Case(name: "deadline past ten minutes", python: #"{"deadline_ms": 600001}"#, argument: "deadline_ms",
             cli: ["--no-submit", "--deadline-ms", "600001"], flag: "--deadline-ms", exitCode: 64, shared: "600000"),
        Case(name: "secret key", python: #"{"api_key": "\#(secretKey)"}"#, argument: "api_key",
             cli: ["--no-submit", "--api-key", secretKey], flag: "--api-key", exitCode: 64,
             shared: "a secret key (fly_sk_"),
        Case(name: "endpoint scheme", python: #"{"api_key": "\#(publicKey)", "endpoint": "ftp://example.com"}"#,
             argument: "endpoint", cli: ["--no-submit", "--api-key", publicKey, "--endpoint", "ftp://example.com"],
             flag: "--endpoint", exitCode: 64, shared: "the scheme must be https or http"),
        Case(name: "pin malformed", python: #"{"pins": ["nope"]}"#, argument: "pins",
             cli: ["--no-submit", "--api-pin", "nope"], flag: "--api-pin", exitCode: 64,
             shared: "pin 'nope' is not a SHA-256"),
        Case(name: "CA file empty", python: #"{"ca_file": ""}"#, argument: "ca_file",
             cli: ["--no-submit", "--ca-file", ""], flag: "--ca-file", exitCode: 64, shared: nil),
        Case(name: "policy missing", python: #"{"policy_path": "/nonexistent/policy.json"}"#, argument: "policy_path",
             cli: ["--no-submit", "--policy", "/nonexistent/policy.json"], flag: "--policy", exitCode: 65,
             shared: "/nonexistent/policy.json: cannot read"),
    ]

    /// Runs every case's `fingerly.load(**arguments)` in one interpreter; a JSON line per case.
    static let pythonRefusals = """
        import json, sys
        import fingerly
        for line in open(sys.argv[1]):
            arguments = json.loads(line)
            try:
                fingerly.load(**arguments).close()
                print(json.dumps({"refused": False}))
            except fingerly.ConfigurationError as error:
                print(json.dumps({"refused": True, "argument": error.argument, "message": str(error)}))
            except Exception as error:
                print(json.dumps({"refused": True, "argument": None, "message": f"{type(error).__name__}: {error}"}))
        """

    struct PythonOutcome: Decodable {
        let refused: Bool
        let argument: String?
        let message: String?
    }

    /// Runs `script` in the fresh venv against the installed library; `input` is the file `sys.argv[1]` names.
    static func python(_ script: String, input: String,
                       environment extra: [String: String] = [:]) throws -> ProcessOutput {
        let directory = try TestPaths.temporaryDirectory("parity-script")
        try script.write(toFile: directory + "/script.py", atomically: true, encoding: .utf8)
        try input.write(toFile: directory + "/input", atomically: true, encoding: .utf8)
        var environment = try InstalledLibrary.environment(["FINGERLY_LIBRARY": try InstalledLibrary.library,
                                                            "PYTHONDONTWRITEBYTECODE": "1"])
        environment.merge(extra) { $1 }
        return try runProcess(try venvPath.get() + "/bin/python", [directory + "/script.py", directory + "/input"],
                              environment: environment)
    }

    static let venvPath: Result<String, any Error> = Result { try CABITests.freshVirtualEnvironment("parity-venv") }

    @Test func pythonAndTheCLIRefuseTheSameConfigurationsNamingTheSameArgument() throws {
        let run = try Self.python(Self.pythonRefusals,
                                  input: Self.cases.map { $0.python }.joined(separator: "\n") + "\n")
        try #require(run.status == 0, "python: \(run.standardError)")
        let outcomes = try run.standardOutput.split(separator: "\n").map {
            try JSONDecoder().decode(PythonOutcome.self, from: Data($0.utf8))
        }
        try #require(outcomes.count == Self.cases.count, "\(run.standardOutput)\(run.standardError)")
        let internalNames = ["config:", "options.", "schedule.", "submission.", "attributesToIgnore", "stateDirectory",
                             "budgetMs", "policyPath", "caFile", "apiKey"]
        for (testCase, outcome) in zip(Self.cases, outcomes) {
            let message = outcome.message ?? ""
            #expect(outcome.refused, "\(testCase.name): Python accepted \(testCase.python)")
            #expect(outcome.argument == testCase.argument, "\(testCase.name): \(message)")
            #expect(message.hasPrefix(testCase.argument + ": "), "\(testCase.name): \(message)")

            let cli = try runCLI(testCase.cli)
            #expect(cli.status == testCase.exitCode, "\(testCase.name): exit \(cli.status): \(cli.standardError)")
            #expect(cli.standardError.contains("fingerly-identify: \(testCase.flag)"),
                    "\(testCase.name): \(cli.standardError)")
            if let shared = testCase.shared {
                #expect(message.contains(shared), "\(testCase.name), Python: \(message)")
                #expect(cli.standardError.contains(shared), "\(testCase.name), CLI: \(cli.standardError)")
            }
            for name in internalNames {
                #expect(!message.contains(name), "\(testCase.name), Python names \(name): \(message)")
                #expect(!cli.standardError.contains(name), "\(testCase.name), CLI names \(name): \(cli.standardError)")
            }
        }
    }

    /// A default state directory that cannot be used (as for `nobody`, whose HOME is
    /// /nonexistent; here systemd's STATE_DIRECTORY names one under /proc): judging here without
    /// sending goes on with identifiers keyed per run, in both; the local mode, which keeps its
    /// visitors there, is refused by both, the CLI with 74 (not 64: nothing the user typed is wrong).
    @Test func anUnusableDefaultStateDirectoryStopsOnlyWhatNeedsIt() throws {
        let unusable = ["STATE_DIRECTORY": "/proc/nope"]
        var environment = ProcessInfo.processInfo.environment
        environment.merge(unusable) { $1 }
        environment["FINGERLY_STATE_DIR"] = nil

        let judged = try runCLI(["--no-submit", "--json", "--tiers", "fast"], environment: environment)
        #expect(judged.status == 0, "\(judged.standardError)")
        #expect(try judged.identifyResult().report.identifierKeying == .perRun)

        let local = try runCLI(["--tiers", "fast"], environment: environment)
        #expect(local.status == 74, "\(local.status): \(local.standardError)")
        #expect(local.standardError.contains("the default state directory /proc/nope (--state-dir names another)"),
                "\(local.standardError)")
        #expect(!local.standardError.contains("options.") && !local.standardError.contains("--help"),
                "\(local.standardError)")

        let script = """
            import fingerly
            client = fingerly.load(api_key=None, tiers=("fast",))
            print(client.identify(submit=False).report["identifierKeying"])
            try:
                client.identify()
                print("local mode ran")
            except fingerly.ConfigurationError as error:
                print(error.argument)
                print(error)
            """
        let run = try Self.python(script, input: "", environment: unusable)
        #expect(run.status == 0, "\(run.standardError)")
        let lines = run.standardOutput.split(separator: "\n").map(String.init)
        #expect(lines.count == 3, "\(run.standardOutput)")
        #expect(lines.first == "perRun")
        #expect(lines.dropFirst().first == "state_directory")
        #expect(lines.last?.hasPrefix("state_directory: ") == true && lines.last?.contains("/proc/nope") == true,
                "\(run.standardOutput)")
    }
}
