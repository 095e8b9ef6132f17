import Fingerly
#if canImport(Glibc)
import Glibc
#endif
import Dispatch
import FingerlyHost
import Synchronization
import FingerlyModel
import FingerlyPolicy
import FingerlyProbes

/// The whole command line, callable from tests: returns the exit status instead of exiting.
package enum FingerlyIdentify {
    package static let help = """
        USAGE: fingerly-identify [options]
               fingerly-identify --no-submit [--json | --request-only] [options]
               fingerly-identify integrity [--tiers LIST] [--fail-on LIST] [--json] [--repeat N] [--concurrency N]
               fingerly-identify consent [granted|pending|denied] [--state-dir DIR]
               fingerly-identify flush [--json] [key and connection options]
               fingerly-identify reset [--state-dir DIR]
               fingerly-identify events show REQUEST_ID [--state-dir DIR]
               fingerly-identify visitors [--json] [--limit N] [--state-dir DIR]
               fingerly-identify probes [--json]

        Collects device and integrity signals from this Linux host (or a root tree), applies the
        verdict policy, prints the result and, when an API key is configured, submits the report.
        With no key and no endpoint, the visitor is resolved here, against a SQLite store in the
        state directory (state: local); `events show` and `visitors` read that store.
        Raw identifiers are only ever sent and shown hashed.

        OPTIONS:
          --no-submit              Collect and judge locally; send nothing. With --json the result
                                   includes `request`: the URL, the headers (key redacted) and the
                                   exact body a submission would send.
          --request-only           With --no-submit: print only that body.
          --json                   Print the full result (verdicts and report) as JSON on stdout.
          --tiers LIST             fast, deferred or all (default: all).
          --budget-ms N            Hard wall-clock budget for collection (default: 1200).
          --concurrency N          Probes running at once (default: one more than the usable CPUs,
                                   from 2 to 4).
          --timeout-ms N           Timeout for probes the catalogue gives none (default: 250).
          --probe-timeout-ms N     Timeout for every probe, overriding the catalogue (slow or
                                   instrumented hosts, e.g. under valgrind).
          --tag TEXT               A label carried in the report.
          --root DIR               Read the host through DIR (a fixture, container root or image).
          --policy FILE            Use this verdict policy instead of the embedded default.
          --ignore LIST            Signals (os.kernel_version), groups (dmi.*) or probe ids that are
                                   neither read nor reported.
          --fail-on LIST           VERDICT[:CONFIDENCE],… : exit 3 when a named verdict is true at or
                                   above that confidence (default low). Verdicts: \(VerdictName.allCases.map(\.rawValue).joined(separator: ", ")).
          --check-tls HOST:PORT,…  Connect (through the environment's proxy) and compare the presented
                                   chain with the --pin values: a mismatch is a mitm verdict.
          --pin PIN,…              Expected SPKI SHA-256, base64, optionally prefixed sha256/.
          --api-key-file FILE      A file holding the key fly_pk_<region>_<env>_<org>_<random> (default:
                                   $FINGERLY_API_KEY). With a key the report is submitted; its
                                   organization keys the identifier hashes, so every key of one
                                   organization gives the same identifiers. Without one, nothing is
                                   sent and a random secret of this installation, kept in the state
                                   directory, keys them (else a key of this run alone). The report's
                                   identifierKeying says which.
          --api-key KEY            The key on the command line: works, with a warning, as every user
                                   can read it in ps.
          --endpoint URL           An http(s) origin replacing the key's region (a self-hosted server
                                   or a first-party proxy); default: $FINGERLY_ENDPOINT, else
                                   https://<region>.api.fingerly.io.
          --ca-file FILE           Trust the CAs of this PEM file for the API origin instead of the system's.
          --api-pin PIN,…          SPKI SHA-256 pins of the API origin's own (leaf) key (base64,
                                   optionally sha256/): a mismatch is never retried and is reported
                                   as mitm.
          --attempts N             Attempts per submission, the first included (default 3, at most 10).
          --retry-delay-ms N       The first backoff pause's bound, doubled each attempt (default 500).
          --deadline-ms N          No attempt starts or runs past this (default 20000).
          --verbose                Log attempts and other diagnostics on stderr (never the key or a
                                   raw identifier).
          --state-dir DIR          The collector's own state: the installation secret, consent, the
                                   outbox of unsent reports, the device key. Always on this host, also
                                   under --root. Default: $FINGERLY_STATE_DIR, else $STATE_DIRECTORY,
                                   else /var/lib/fingerly for root, else $XDG_STATE_HOME/fingerly or
                                   ~/.local/state/fingerly.
          --free-text MODE         fingerprint or keep: free text that can name a person (a local CA's
                                   subject, input device names) as a keyed fingerprint or in clear
                                   (default: the policy's privacy.freeText, fingerprint).
          --version                Print the version.
          --help                   Print this help.

        INTEGRITY:
          The debugger, tampering, instrumentation and automation verdicts alone, from only the
          probes they need (fast tier by default), as an application checks before a sensitive
          action. Nothing is sent. --repeat N runs the check N more times in this process and
          prints the per-call cost on stderr. --fail-on takes only these four verdicts: a gate on
          one integrity does not compute could never fire, so it is a usage error (exit 64).

        CONSENT, FLUSH, RESET:
          consent STATE            Persist granted, pending or denied for this host's state directory
                                   (an administrator can forbid collection). Until it is granted no
                                   command reads or sends anything; nothing persisted counts as
                                   granted. Denying deletes every queued report; granting sends them
                                   (with a key). Without STATE, print the persisted state.
          flush                    Send the queued reports, oldest first, each under the key and bytes
                                   it was queued with; one sender at a time across processes.
          reset                    Delete the device key, the queued reports, the local store and the
                                   installation secret (identifiers without an API key change).
                                   Consent stays.

        EXIT CODES:
          0   success (submitted, or judged here)
          3   a --fail-on verdict matched
          64  usage error (bad flag or value, a --state-dir that cannot be used)
          65  bad input: invalid policy file, or --root is not a directory
          67  the server does not know or refuses the API key (401, 403)
          69  the organization is not accepting traffic (402)
          70  internal error
          74  delivery failed and the report could not be queued (disk full, no state directory),
              or the local mode has no usable state directory (the default one; --no-submit needs none),
              or the local store cannot be opened or read (a damaged local.sqlite)
          75  delivery failed for now: the report is queued; 'flush' sends it later
          76  the server rejected the report (another 4xx), or TLS verification or a pin failed
          77  consent is not granted (nothing was read or sent)
          78  configuration to fix: the proxy answered 407, the state directory or a file in it
              may be written by another user, or a submission found no usable libcurl.so.4

        ENVIRONMENT:
          NO_COLOR                 Disables colour (colour is only used on a terminal anyway).
          FINGERLY_API_KEY         The API key (preferred over --api-key).
          FINGERLY_ENDPOINT        Default for --endpoint.
          FINGERLY_STATE_DIR, STATE_DIRECTORY, XDG_STATE_HOME, HOME
                                   Where the default --state-dir is.
          https_proxy, http_proxy, ALL_PROXY, NO_PROXY (either case but HTTP_PROXY)
                                   The proxy a submission goes through; the report says it did.

        """

    package static func main(_ arguments: [String], io: CommandIO) -> Int32 {
        do throws(UsageError) {
            if arguments.first == "probes" {
                let parsed = try ParsedArguments(Array(arguments.dropFirst()), flags: ProbesCommand.flags, options: [])
                if parsed.has("help") { io.standardOutput(help); return ExitCode.success.rawValue }
                if let extra = parsed.positionals.first { throw UsageError("unexpected argument '\(extra)'") }
                return ProbesCommand(json: parsed.has("json")).run(io).rawValue
            }
            switch arguments.first {
            case "consent"?:
                let parsed = try ParsedArguments(Array(arguments.dropFirst()), flags: StateCommands.Consent.flags, options: StateCommands.Consent.options)
                if parsed.has("help") { io.standardOutput(help); return ExitCode.success.rawValue }
                let command = try StateCommands.Consent(parsed, environment: io.environment)
                return waitFor { await command.run(io) }.rawValue
            case "flush"?:
                let parsed = try ParsedArguments(Array(arguments.dropFirst()), flags: StateCommands.Flush.flags, options: StateCommands.Flush.options)
                if parsed.has("help") { io.standardOutput(help); return ExitCode.success.rawValue }
                let command = try StateCommands.Flush(parsed, environment: io.environment)
                return waitFor { await command.run(io) }.rawValue
            case "events"?, "visitors"?:
                let parsed = try ParsedArguments(Array(arguments.dropFirst()), flags: LocalStoreCommands.flags, options: LocalStoreCommands.options)
                if parsed.has("help") { io.standardOutput(help); return ExitCode.success.rawValue }
                let subcommand = arguments[0]
                return try waitFor { () async throws(UsageError) -> ExitCode in
                    try await LocalStoreCommands.run(subcommand, parsed, io)
                }.rawValue
            case "reset"?:
                let parsed = try ParsedArguments(Array(arguments.dropFirst()), flags: StateCommands.Reset.flags, options: StateCommands.Reset.options)
                if parsed.has("help") { io.standardOutput(help); return ExitCode.success.rawValue }
                return (try StateCommands.Reset(parsed, environment: io.environment)).run(io).rawValue
            default: break
            }
            if arguments.first == "integrity" {
                let parsed = try ParsedArguments(Array(arguments.dropFirst()), flags: IntegrityCommand.flags, options: IntegrityCommand.options)
                if parsed.has("help") { io.standardOutput(help); return ExitCode.success.rawValue }
                let command = try IntegrityCommand(parsed, environment: io.environment)
                return waitFor { await command.run(io) }.rawValue
            }
            let parsed = try ParsedArguments(arguments, flags: IdentifyCommand.flags, options: IdentifyCommand.options)
            if parsed.has("help") { io.standardOutput(help); return ExitCode.success.rawValue }
            if parsed.has("version") { io.standardOutput("fingerly-identify \(Fingerly.version)\n"); return ExitCode.success.rawValue }
            let command = try IdentifyCommand(parsed, environment: io.environment)
            return command.run(io).rawValue
        } catch {
            io.standardError("fingerly-identify: \(error.message)\nRun 'fingerly-identify --help' for usage.\n")
            return ExitCode.usage.rawValue
        }
    }

    /// The real process: real streams and environment.
    package static func main() -> Int32 {
        // Under a file-size limit (ulimit -f), a write past it must fail with EFBIG, which the
        // outbox reports as "not queued" (exit 74), not kill the process.
        signal(SIGXFSZ, SIG_IGN)
        let environment = CommandProcess.environment()
        let io = CommandIO(
            standardOutput: { CommandProcess.write($0, to: STDOUT_FILENO) },
            standardError: { CommandProcess.write($0, to: STDERR_FILENO) },
            environment: environment,
            outputIsTerminal: isatty(1) == 1)
        return main(Array(CommandLine.arguments.dropFirst()), io: io)
    }

    /// Runs a subcommand that speaks to the library's async API from this synchronous entry point.
    /// Only those subcommands start Swift concurrency's threads: the identify command and
    /// --version run on the main thread alone.
    static func waitFor<Failure: Error>(_ work: @escaping @Sendable () async throws(Failure) -> ExitCode)
        throws(Failure) -> ExitCode {
        let outcome = Mutex<Result<ExitCode, Failure>?>(nil)
        let done = DispatchSemaphore(value: 0)
        Task {
            let result: Result<ExitCode, Failure>
            do throws(Failure) { result = .success(try await work()) } catch { result = .failure(error) }
            outcome.withLock { $0 = result }
            done.signal()
        }
        done.wait()
        return try outcome.withLock { $0! }.get()
    }
}
