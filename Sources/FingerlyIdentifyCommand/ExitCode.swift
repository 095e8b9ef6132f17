import Fingerly

/// Exit statuses, following sysexits(3) where one fits.
package enum ExitCode: Int32, Sendable, Error {
    case success = 0
    /// A `--fail-on` verdict matched.
    case failOnMatched = 3
    /// EX_USAGE: bad flags or arguments.
    case usage = 64
    /// EX_DATAERR: a bad policy file or unusable input.
    case dataError = 65
    /// EX_NOUSER: the server does not know the API key (401) or refuses it (403).
    case keyRejected = 67
    /// EX_UNAVAILABLE: the organization is not accepting traffic (402).
    case notAccepting = 69
    /// EX_SOFTWARE: an internal error.
    case software = 70
    /// EX_IOERR: delivery failed and the report could not be queued either (disk full, no
    /// usable state directory), the state directory cannot be changed, or the local store cannot
    /// be opened or read (a damaged `local.sqlite`), as the server's 74 for its database.
    case ioError = 74
    /// EX_TEMPFAIL: delivery failed for now; the report is queued for `flush`.
    case queued = 75
    /// EX_PROTOCOL: the server rejected the report (another 4xx), or the connection could not
    /// be trusted (TLS verification, a pin mismatch).
    case rejected = 76
    /// EX_NOPERM: consent is not granted.
    case noPermission = 77
    /// EX_CONFIG: this host's configuration cannot be used as it is: a proxy that wants other
    /// credentials (407), a state directory or file of the client that other users may write, or
    /// no usable libcurl for a submission.
    case configuration = 78

    /// Says why a library call failed and gives its status: every command maps the same error
    /// to the same code.
    static func failure(_ error: any Error, _ io: CommandIO, names: ArgumentNames = ArgumentNames()) -> ExitCode {
        if case FingerlyError.invalidConfiguration(let field, let reason) = error {
            io.standardError("fingerly-identify: \(names.name(forField: field)): \(reason)\n")
        } else {
            io.standardError("fingerly-identify: \(error)\n")
        }
        switch error {
        case FingerlyError.invalidConfiguration(let field, _):
            // A policy file is input the command was given; a state directory the run needs and
            // cannot use (a named one was checked before, so this is the default or its store) is
            // the I/O failure it is, not bad usage; every other field comes from flags.
            switch field {
            case "options.policy": return .dataError
            case "options.stateDirectory": return .ioError
            default: return .usage
            }
        case FingerlyError.localStore: return .ioError
        case is ConsentError: return .noPermission
        case is StateError: return .ioError
        case let transport as TransportError:
            if transport.retryable { return transport.code == TransportError.notQueuedCode ? .ioError : .queued }
            if TransportError.hostConfigurationCodes.contains(transport.code) { return .configuration }
            switch transport.status {
            case 401?, 403?: return .keyRejected
            case 402?: return .notAccepting
            default: return .rejected
            }
        default: return .software
        }
    }
}

/// Where a command writes. Tests pass buffers; the executable passes the real streams.
package struct CommandIO: Sendable {
    package var standardOutput: @Sendable (String) -> Void
    package var standardError: @Sendable (String) -> Void
    package var environment: [String: String]
    package var outputIsTerminal: Bool

    package init(standardOutput: @escaping @Sendable (String) -> Void, standardError: @escaping @Sendable (String) -> Void,
                environment: [String: String], outputIsTerminal: Bool) {
        self.standardOutput = standardOutput
        self.standardError = standardError
        self.environment = environment
        self.outputIsTerminal = outputIsTerminal
    }

    /// Colour only for a terminal, and never when NO_COLOR is set (no-color.org).
    var usesColour: Bool { outputIsTerminal && environment["NO_COLOR"].map(\.isEmpty) ?? true }
}
