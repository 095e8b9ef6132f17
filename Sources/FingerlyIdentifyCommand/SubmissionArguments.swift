import Fingerly
import FingerlyHost
import FingerlyProbes

/// The flags every command that talks to the API shares: which key, which server, how to trust
/// it, how hard to try, and where the collector's own state is.
struct SubmissionArguments {
    static let flags: Set<String> = ["verbose"]
    static let options: Set<String> = ["api-key", "api-key-file", "endpoint", "state-dir", "ca-file", "api-pin",
                                       "attempts", "retry-delay-ms", "deadline-ms"]
    /// A key file holds one line; anything longer is not a key.
    static let keyFileLimit = 4096

    var apiKey: String?
    var endpoint = ""
    /// nil: the library's default for this process's environment.
    var stateDirectory: String?
    var submission = SubmissionOptions()
    var verbose = false
    /// Said on stderr once the command runs (a key on the command line).
    var warnings: [String] = []
    /// Where each value came from, for the library's errors.
    var names = ArgumentNames()

    init(_ arguments: ParsedArguments, environment: [String: String]) throws(UsageError) {
        verbose = arguments.has("verbose")
        if arguments["api-key"] != nil && arguments["api-key-file"] != nil {
            throw UsageError("--api-key and --api-key-file exclude each other")
        }
        if let key = arguments["api-key"] {
            apiKey = key
            names.apiKey = "--api-key"
            warnings.append("--api-key is visible to every user in ps and /proc/*/cmdline; prefer FINGERLY_API_KEY or --api-key-file")
        } else if let path = arguments["api-key-file"] {
            let bytes: [UInt8]
            do {
                bytes = try OperatorFile.readRegularFile(path, limit: Self.keyFileLimit)
            } catch {
                throw UsageError("--api-key-file \(IdentifyCommand.shown(path)): \(error.message)")
            }
            // One line, its newline optional; nothing of the file is quoted back.
            var text = Substring(decoding: bytes, as: UTF8.self)
            if text.hasSuffix("\n") { text = text.dropLast() }
            if text.hasSuffix("\r") { text = text.dropLast() }
            guard !text.isEmpty, !text.contains("\n") else { throw UsageError("--api-key-file \(IdentifyCommand.shown(path)): expected one line holding the key") }
            apiKey = String(text)
            names.apiKey = "--api-key-file"
        } else if let key = environment["FINGERLY_API_KEY"], !key.isEmpty {
            apiKey = key
            names.apiKey = "FINGERLY_API_KEY"
        }
        endpoint = arguments["endpoint"] ?? environment["FINGERLY_ENDPOINT"] ?? ""
        if arguments["endpoint"] == nil && !endpoint.isEmpty { names.endpoint = "FINGERLY_ENDPOINT" }
        if let directory = arguments["state-dir"] ?? environment["FINGERLY_STATE_DIR"].flatMap({ $0.isEmpty ? nil : $0 }) {
            guard directory.hasPrefix("/") else {
                throw UsageError("\(arguments["state-dir"] != nil ? "--state-dir" : "FINGERLY_STATE_DIR") needs an absolute path, got '\(IdentifyCommand.shown(directory))'")
            }
            stateDirectory = directory
            if arguments["state-dir"] == nil { names.stateDirectory = "FINGERLY_STATE_DIR" }
        } else if let directory = FingerlyOptions.defaultStateDirectory(environment: environment) {
            names.stateDirectory = "the default state directory \(IdentifyCommand.shown(directory)) "
                + "(--state-dir names another)"
        } else {
            names.stateDirectory = "the state directory (none by default here; --state-dir names one)"
        }
        if let file = arguments["ca-file"] {
            guard !file.isEmpty else { throw UsageError("--ca-file needs a file") }
            submission.caFile = file
        }
        if let pins = arguments.list("api-pin") {
            if let problem = TLSPinCheck.pinsProblem(TLSPinCheck.bare(pins)) { throw UsageError("--api-pin: \(problem)") }
            submission.pins = pins
        }
        if let attempts = try arguments.integer("attempts", in: 1...10) { submission.attempts = attempts }
        if let delay = try arguments.integer("retry-delay-ms", in: 0...60_000) { submission.baseDelayMs = delay }
        if let deadline = try arguments.integer("deadline-ms", in: SubmissionOptions.deadlineRangeMs) {
            submission.deadlineMs = deadline
        }
    }

    /// A state directory the user named must be usable: refused (exit 64, naming where it came
    /// from) rather than left for the run to degrade to identifiers keyed per run. The default
    /// one may be missing; what needs it then says so (exit 74).
    func namedStateDirectoryProblem() -> String? {
        guard let stateDirectory, let problem = Fingerly.stateDirectoryProblem(stateDirectory) else { return nil }
        // Room for a long path and the reason after it.
        return "\(names.stateDirectory): cannot be used: \(IdentifyCommand.shown(problem, limit: 600))"
    }

    /// The library's options for a command about the state directory alone (nothing of the host
    /// is collected): no background flush, since the command flushes in the foreground if at all.
    func options(stateDirectory: String, _ io: CommandIO) -> FingerlyOptions {
        var options = FingerlyOptions(stateDirectory: stateDirectory, logger: verbose ? StandardErrorLog(io) : nil, submission: submission)
        options.flushInBackground = false
        return options
    }

    /// The state directory to use: the flag's, else the library's default for this environment.
    func resolvedStateDirectory(_ environment: [String: String]) -> String? {
        stateDirectory ?? FingerlyOptions.defaultStateDirectory(environment: environment)
    }
}
