import Fingerly
#if canImport(Glibc)
import Glibc
#endif
import FingerlyModel
import FingerlyPolicy
import FingerlyProbes

/// The whole command line, callable from tests: returns the exit status instead of exiting.
package enum FingerlyIdentify {
    package static let help = """
        USAGE: fingerly-identify --no-submit [options]
               fingerly-identify integrity [--tiers LIST] [--fail-on LIST] [--json] [--repeat N] [--concurrency N]
               fingerly-identify probes [--json]

        Collects device and integrity signals from this Linux host (or a root tree), applies the
        verdict policy, and prints the result. Raw identifiers are only ever shown hashed.

        OPTIONS:
          --no-submit              Collect and judge locally; send and persist nothing.
                                   (Submission is not implemented yet, so this is required.)
          --json                   Print the full result (verdicts and report) as JSON on stdout.
          --tiers LIST             fast, deferred or all (default: all).
          --budget-ms N            Hard wall-clock budget for collection (default: 1200).
          --concurrency N          Probes running at once (default: 4).
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
          --api-key KEY            fly_pk_<region>_<env>_<org>_<random> (default: $FINGERLY_API_KEY): its
                                   organization keys the identifier hashes, so every key of one
                                   organization gives the same identifiers. Without one,
                                   a random secret of this installation, kept in the state directory,
                                   keys them; if that directory is unusable, a key of this run alone.
                                   The report's identifierKeying says which.
          --state-dir DIR          The collector's own state (the installation secret): always on this
                                   host, also under --root. Default: $STATE_DIRECTORY, else
                                   /var/lib/fingerly for root, else $XDG_STATE_HOME/fingerly or
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
          prints the per-call cost on stderr.

        EXIT CODES:
          0   success
          3   a --fail-on verdict matched
          64  usage error (bad flag or value)
          65  bad input: invalid policy file, or --root is not a directory
          69  unavailable: submission requested without --no-submit
          70  internal error

        ENVIRONMENT:
          NO_COLOR                 Disables colour (colour is only used on a terminal anyway).
          FINGERLY_API_KEY         Default for --api-key.
          STATE_DIRECTORY, XDG_STATE_HOME, HOME
                                   Where the default --state-dir is.

        """

    package static func main(_ arguments: [String], io: CommandIO) async -> Int32 {
        do throws(UsageError) {
            if arguments.first == "probes" {
                let parsed = try ParsedArguments(Array(arguments.dropFirst()), flags: ProbesCommand.flags, options: [])
                if parsed.has("help") { io.standardOutput(help); return ExitCode.success.rawValue }
                if let extra = parsed.positionals.first { throw UsageError("unexpected argument '\(extra)'") }
                return ProbesCommand(json: parsed.has("json")).run(io).rawValue
            }
            if arguments.first == "integrity" {
                let parsed = try ParsedArguments(Array(arguments.dropFirst()), flags: IntegrityCommand.flags, options: IntegrityCommand.options)
                if parsed.has("help") { io.standardOutput(help); return ExitCode.success.rawValue }
                return await (try IntegrityCommand(parsed)).run(io).rawValue
            }
            let parsed = try ParsedArguments(arguments, flags: IdentifyCommand.flags, options: IdentifyCommand.options)
            if parsed.has("help") { io.standardOutput(help); return ExitCode.success.rawValue }
            if parsed.has("version") { io.standardOutput("fingerly-identify \(Fingerly.version)\n"); return ExitCode.success.rawValue }
            let command = try IdentifyCommand(parsed, environment: io.environment)
            return await command.run(io).rawValue
        } catch {
            io.standardError("fingerly-identify: \(error.message)\nRun 'fingerly-identify --help' for usage.\n")
            return ExitCode.usage.rawValue
        }
    }

    /// The real process: real streams and environment.
    package static func main() async -> Int32 {
        var environment: [String: String] = [:]
        var pointer = environ
        while let entry = pointer.pointee {
            let text = String(cString: entry)
            if let equals = text.firstIndex(of: "=") {
                environment[String(text[..<equals])] = String(text[text.index(after: equals)...])
            }
            pointer += 1
        }
        let io = CommandIO(
            standardOutput: { writeAll($0, to: STDOUT_FILENO) },
            standardError: { writeAll($0, to: STDERR_FILENO) },
            environment: environment,
            outputIsTerminal: isatty(1) == 1)
        return await main(Array(CommandLine.arguments.dropFirst()), io: io)
    }
}

/// Unbuffered so stdout and stderr interleave in order; retries short writes and EINTR.
private func writeAll(_ text: String, to descriptor: Int32) {
    var bytes = Array(text.utf8)[...]
    while !bytes.isEmpty {
        let written = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
        if written < 0 && errno == EINTR { continue }
        guard written > 0 else { return }
        bytes = bytes.dropFirst(written)
    }
}
