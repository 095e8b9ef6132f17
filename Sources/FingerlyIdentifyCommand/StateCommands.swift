import Fingerly
#if canImport(Glibc)
import Glibc
#endif
import FoundationEssentials
import FingerlyTransport

/// `consent`, `flush` and `reset`: the commands about the collector's own state directory.
enum StateCommands {
    /// The consent the operator's commands run under: what `consent` persisted, else granted
    /// (running the command is the operator's consent). An unreadable record fails closed.
    /// Refuses a state directory another user may write, or one holding a file of the client
    /// they may write, before anything is read or written there: the library would refuse it
    /// too, but only once the command had begun. nil when it can be used.
    static func untrustedStateDirectory(_ stateDirectory: String?, _ io: CommandIO) -> ExitCode? {
        guard let stateDirectory, let problem = FingerlyOptions.untrustedStateDirectory(stateDirectory) else {
            return nil
        }
        io.standardError("fingerly-identify: the state directory (--state-dir, FINGERLY_STATE_DIR) cannot be trusted, "
            + "so nothing runs: \(problem)\n")
        return .configuration
    }

    /// Also refuses an untrusted state directory (`untrustedStateDirectory`).
    static func operatorConsent(_ stateDirectory: String?, _ io: CommandIO) -> Result<ConsentState, ExitCode> {
        switch Fingerly.systemConsent() {
        case .success(nil), .success(.granted?): break
        case .success(let state?):
            io.standardError("fingerly-identify: an administrator set consent \(state.rawValue) for this host (\(ConsentRecord.systemPath)): nothing is read or sent\n")
            return .failure(.noPermission)
        case .failure(let error):
            io.standardError("fingerly-identify: the host's consent record cannot be trusted, so nothing runs: \(error)\n")
            return .failure(.noPermission)
        }
        guard let stateDirectory else { return .success(.granted) }
        if let refused = untrustedStateDirectory(stateDirectory, io) { return .failure(refused) }
        switch Fingerly.persistedConsent(stateDirectory: stateDirectory) {
        case .success(let state?):
            guard state == .granted else {
                io.standardError("fingerly-identify: consent is \(state.rawValue) on this host (\(stateDirectory)/consent): nothing is read or sent; "
                    + "'fingerly-identify consent granted' changes it\n")
                return .failure(.noPermission)
            }
            return .success(.granted)
        case .success(nil): return .success(.granted)
        case .failure(let error):
            io.standardError("fingerly-identify: the consent record cannot be read, so nothing runs: \(error); "
                + "'fingerly-identify consent granted|pending|denied' writes it again\n")
            return .failure(.noPermission)
        }
    }

    struct Consent {
        static let flags = SubmissionArguments.flags.union(["help"])
        static let options = SubmissionArguments.options
        let connection: SubmissionArguments
        let newState: ConsentState?

        init(_ arguments: ParsedArguments, environment: [String: String]) throws(UsageError) {
            connection = try SubmissionArguments(arguments, environment: environment)
            guard arguments.positionals.count <= 1 else { throw UsageError("unexpected argument '\(arguments.positionals[1])'") }
            if let word = arguments.positionals.first {
                guard let state = ConsentState(rawValue: word) else {
                    throw UsageError("consent: '\(IdentifyCommand.shown(word))' is not granted, pending or denied")
                }
                newState = state
            } else {
                newState = nil
            }
        }

        func run(_ io: CommandIO) async -> ExitCode {
            for warning in connection.warnings { io.standardError("fingerly-identify: warning: \(warning)\n") }
            guard let directory = connection.resolvedStateDirectory(io.environment) else {
                io.standardError("fingerly-identify: consent: no state directory can be named; give --state-dir or FINGERLY_STATE_DIR\n")
                return .usage
            }
            if let refused = StateCommands.untrustedStateDirectory(directory, io) { return refused }
            guard let newState else {
                switch Fingerly.persistedConsent(stateDirectory: directory) {
                case .success(let state?): io.standardOutput("\(state.rawValue)\n")
                case .success(nil): io.standardOutput("not set (\(directory)/consent): running the command is the operator's consent\n")
                case .failure(let error):
                    io.standardError("fingerly-identify: consent: \(error)\n")
                    return .noPermission
                }
                return .success
            }
            do {
                let fingerly = try await Fingerly.load(apiKey: connection.apiKey, endpoint: connection.endpoint, consent: .pending,
                                                       options: connection.options(stateDirectory: directory, io))
                let change = try await fingerly.changeConsent(to: newState)
                io.standardOutput("consent \(newState.rawValue) (\(directory)/consent)\n")
                // Root's own default state is the machine's: its consent binds every user.
                if geteuid() == 0, connection.stateDirectory == nil,
                   directory == FingerlyOptions.defaultStateDirectory(environment: [:]) {
                    try Fingerly.recordSystemConsent(newState)
                    io.standardOutput("consent \(newState.rawValue) for every user of this host (\(ConsentRecord.systemPath))\n")
                }
                if let purged = change.purged { io.standardOutput("outbox purged: \(purged) report(s) deleted unsent\n") }
                if let flushed = change.flushed { return Flush.report(flushed, io) }
                if newState == .granted && connection.apiKey == nil {
                    io.standardOutput("queued reports stay queued until 'fingerly-identify flush' runs with an API key\n")
                }
                return .success
            } catch {
                return ExitCode.failure(error, io, names: connection.names)
            }
        }
    }

    struct Flush {
        static let flags = SubmissionArguments.flags.union(["help", "json"])
        static let options = SubmissionArguments.options
        let connection: SubmissionArguments
        let json: Bool

        init(_ arguments: ParsedArguments, environment: [String: String]) throws(UsageError) {
            connection = try SubmissionArguments(arguments, environment: environment)
            json = arguments.has("json")
            if let extra = arguments.positionals.first { throw UsageError("unexpected argument '\(extra)'") }
            guard connection.apiKey != nil else { throw UsageError("flush needs an API key (FINGERLY_API_KEY, --api-key-file)") }
        }

        func run(_ io: CommandIO) async -> ExitCode {
            for warning in connection.warnings { io.standardError("fingerly-identify: warning: \(warning)\n") }
            let directory = connection.resolvedStateDirectory(io.environment)
            if case .failure(let code) = StateCommands.operatorConsent(directory, io) { return code }
            guard let directory else {
                io.standardError("fingerly-identify: flush: no state directory can be named; give --state-dir or FINGERLY_STATE_DIR\n")
                return .usage
            }
            do {
                let fingerly = try await Fingerly.load(apiKey: connection.apiKey, endpoint: connection.endpoint, consent: .granted,
                                                       options: connection.options(stateDirectory: directory, io))
                let result = try await fingerly.flush()
                if json {
                    io.standardOutput(String(decoding: try JSONEncoder.fingerly.encode(result), as: UTF8.self) + "\n")
                    return Self.status(result)
                }
                return Self.report(result, io)
            } catch {
                return ExitCode.failure(error, io, names: connection.names)
            }
        }

        static func report(_ result: FlushResult, _ io: CommandIO) -> ExitCode {
            io.standardOutput("flush: \(result.delivered) delivered, \(result.dropped) dropped, \(result.remaining) remaining\n")
            if let error = result.lastError { io.standardError("fingerly-identify: flush: last error: \(error)\n") }
            return status(result)
        }

        /// Success once nothing is left; else the status of the error that stopped the flush.
        static func status(_ result: FlushResult) -> ExitCode {
            guard result.remaining > 0, let error = result.lastError else { return .success }
            if error.retryable { return .queued }
            if TransportError.hostConfigurationCodes.contains(error.code) { return .configuration }
            switch error.status {
            case 401?, 403?: return .keyRejected
            case 402?: return .notAccepting
            default: return .rejected
            }
        }
    }

    struct Reset {
        static let flags: Set<String> = ["help"]
        static let options: Set<String> = ["state-dir"]
        let stateDirectory: String?

        init(_ arguments: ParsedArguments, environment: [String: String]) throws(UsageError) {
            if let extra = arguments.positionals.first { throw UsageError("unexpected argument '\(extra)'") }
            let directory = arguments["state-dir"] ?? environment["FINGERLY_STATE_DIR"].flatMap { $0.isEmpty ? nil : $0 }
            if let directory, !directory.hasPrefix("/") {
                throw UsageError("--state-dir needs an absolute path, got '\(IdentifyCommand.shown(directory))'")
            }
            stateDirectory = directory
        }

        func run(_ io: CommandIO) -> ExitCode {
            guard let directory = stateDirectory ?? FingerlyOptions.defaultStateDirectory(environment: io.environment) else {
                io.standardError("fingerly-identify: reset: no state directory can be named; give --state-dir or FINGERLY_STATE_DIR\n")
                return .usage
            }
            if let refused = StateCommands.untrustedStateDirectory(directory, io) { return refused }
            switch Fingerly.resetState(stateDirectory: directory) {
            case .success(let removed):
                io.standardOutput(removed.isEmpty ? "reset: nothing to remove in \(directory)\n"
                                                  : "reset: removed \(removed.joined(separator: ", ")) in \(directory)\n")
                return .success
            case .failure(let error):
                io.standardError("fingerly-identify: reset: \(error)\n")
                return .ioError
            }
        }
    }
}

/// `--verbose`: the library's diagnostics on stderr, attempts included. The library never
/// hands a key or a raw identifier to its logger.
struct StandardErrorLog: FingerlyLogHandler {
    let write: @Sendable (String) -> Void
    init(_ io: CommandIO) { write = io.standardError }
    func log(_ level: LogLevel, _ message: String) { write("fingerly-identify: \(level): \(message)\n") }
}
