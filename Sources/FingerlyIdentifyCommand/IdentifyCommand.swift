import Fingerly
#if canImport(Glibc)
import Glibc
#endif
import FoundationEssentials
import FingerlyModel
import FingerlyPolicy
import FingerlyProbes

/// `fingerly-identify [options]`: collect, judge, and submit when a key is configured; with
/// `--no-submit`, show what would be sent and send nothing.
struct IdentifyCommand {
    static let flags: Set<String> = Set(["no-submit", "json", "request-only", "help", "version"]).union(SubmissionArguments.flags)
    static let options: Set<String> = Set(["tiers", "budget-ms", "concurrency", "tag", "root", "policy", "ignore",
                                           "fail-on", "timeout-ms", "probe-timeout-ms", "check-tls", "pin",
                                           "free-text"]).union(SubmissionArguments.options)

    struct FailOn: Equatable {
        let verdict: VerdictName
        let atLeast: Confidence

        /// `.failOnMatched`, after naming what matched, when any rule holds.
        static func check(_ rules: [FailOn], _ verdict: (VerdictName) -> Verdict?, _ io: CommandIO) -> ExitCode {
            let matched = rules.compactMap { rule -> String? in
                guard let found = verdict(rule.verdict), found.value, found.confidence >= rule.atLeast else { return nil }
                return "\(rule.verdict.rawValue) (\(found.confidence.rawValue))"
            }
            guard !matched.isEmpty else { return .success }
            io.standardError("fingerly-identify: --fail-on matched: \(matched.joined(separator: ", "))\n")
            return .failOnMatched
        }
    }

    var noSubmit = false
    var json = false
    /// Print only the body a submission would send.
    var requestOnly = false
    var connection: SubmissionArguments
    var tiers: Set<Tier> = Set(Tier.allCases)
    var schedule = ScheduleOptions()
    var tag: String?
    var root = "/"
    var policyPath: String?
    var ignore: Set<String> = []
    var failOn: [FailOn] = []
    var pinChecks: [TLSPinCheck] = []
    /// nil: what the policy says.
    var freeText: FreeTextHandling?

    init(_ arguments: ParsedArguments, environment: [String: String]) throws(UsageError) {
        noSubmit = arguments.has("no-submit")
        json = arguments.has("json")
        requestOnly = arguments.has("request-only")
        if requestOnly && !noSubmit { throw UsageError("--request-only goes with --no-submit (it prints what would be sent)") }
        if requestOnly && json { throw UsageError("--request-only and --json exclude each other") }
        connection = try SubmissionArguments(arguments, environment: environment)
        if let names = arguments.list("tiers") { tiers = try Self.parseTiers(names) }
        schedule.tiers = tiers
        if let budget = try arguments.integer("budget-ms", in: ScheduleOptions.budgetRangeMs) {
            schedule.budgetMs = budget
        }
        if let concurrency = try arguments.integer("concurrency", in: ScheduleOptions.concurrencyRange) {
            schedule.concurrency = concurrency
        }
        if let timeout = try arguments.integer("timeout-ms", in: ScheduleOptions.timeoutRangeMs) {
            schedule.defaultSourceTimeoutMs = timeout
        }
        schedule.sourceTimeoutOverrideMs = try arguments.integer("probe-timeout-ms", in: ScheduleOptions.timeoutRangeMs)
        tag = arguments["tag"]
        if let root = arguments["root"] {
            guard !root.isEmpty else { throw UsageError("--root needs a directory") }
            self.root = root
        }
        policyPath = arguments["policy"]
        ignore = Set(arguments.list("ignore") ?? [])
        failOn = try Self.parseFailOn(arguments.list("fail-on") ?? [])
        if let text = arguments["free-text"] {
            guard let handling = FreeTextHandling(rawValue: text) else {
                throw UsageError("--free-text must be \(FreeTextHandling.allCases.map(\.rawValue).joined(separator: " or ")), got '\(text)'")
            }
            freeText = handling
        }
        let pins = arguments.list("pin") ?? []
        for target in arguments.list("check-tls") ?? [] {
            guard let colon = target.lastIndex(of: ":"), let port = Int(target[target.index(after: colon)...]),
                  (1...65535).contains(port), colon != target.startIndex else {
                throw UsageError("--check-tls: '\(Self.shown(target))' is not HOST:PORT (an IPv6 address in brackets: [::1]:443)")
            }
            // The host goes into a CONNECT request, SNI and the resolver: nothing outside RFC 3986 gets that far.
            if let problem = TLSPinCheck.hostProblem(String(target[..<colon])) { throw UsageError("--check-tls: \(problem)") }
            guard !pins.isEmpty else { throw UsageError("--check-tls needs --pin sha256/BASE64 (the expected SPKI hash)") }
            let check = TLSPinCheck(host: String(target[..<colon]), port: port, pins: pins)
            if let problem = TLSPinCheck.pinsProblem(check.pins) { throw UsageError("--pin: \(problem)") }
            pinChecks.append(check)
        }
        if !pins.isEmpty && pinChecks.isEmpty { throw UsageError("--pin goes with --check-tls HOST:PORT") }
        if !arguments.positionals.isEmpty {
            throw UsageError("unexpected argument '\(Self.shown(arguments.positionals[0]))'")
        }
    }

    /// Command-line text as an error message may echo it: printable ASCII, the rest escaped, cut short.
    static func shown(_ text: String, limit: Int = 80) -> String {
        // One loop into one string: the state directory is shown on every start.
        var shown = ""
        var count = 0
        for scalar in text.unicodeScalars {
            if count == limit { return shown + "…" }
            if (0x20..<0x7f).contains(scalar.value) && scalar != "\\" { shown.unicodeScalars.append(scalar) }
            else { shown += scalar.escaped(asASCII: true) }
            count += 1
        }
        return shown
    }

    static func parseTiers(_ names: [String]) throws(UsageError) -> Set<Tier> {
        var tiers: Set<Tier> = []
        for name in names {
            if name == "all" { tiers.formUnion(Tier.allCases); continue }
            guard let tier = Tier(rawValue: name) else { throw UsageError("--tiers: unknown tier '\(name)'; use fast, deferred or all") }
            tiers.insert(tier)
        }
        if tiers.isEmpty { throw UsageError("--tiers needs at least one tier") }
        return tiers
    }

    /// `computed` lists the verdicts `command` decides: a gate on any other could never fire, so it
    /// is refused rather than left to pass every time.
    static func parseFailOn(_ specs: [String], computed: [VerdictName] = VerdictName.allCases,
                            by command: String = "fingerly-identify") throws(UsageError) -> [FailOn] {
        // Named only for a message: joining them cost a start a third of a millisecond.
        var computedNames: String { computed.map { $0.rawValue }.joined(separator: ", ") }
        var rules: [FailOn] = []
        for spec in specs {
            let parts = spec.split(separator: ":", omittingEmptySubsequences: false).map(String.init)
            guard parts.count <= 2, let verdict = VerdictName(rawValue: parts[0]) else {
                throw UsageError("--fail-on: '\(spec)' is not VERDICT[:CONFIDENCE]; verdicts are \(computedNames)")
            }
            guard computed.contains(verdict) else {
                throw UsageError("--fail-on: \(command) does not compute '\(verdict.rawValue)', so that gate could "
                                 + "never fire; it computes \(computedNames)")
            }
            let confidence = parts.count == 2 ? Confidence(rawValue: parts[1]) : .low
            guard let confidence else { throw UsageError("--fail-on: confidence '\(parts[1])' must be low, medium or high") }
            rules.append(FailOn(verdict: verdict, atLeast: confidence))
        }
        return rules
    }

    func run(_ io: CommandIO) -> ExitCode {
        for warning in connection.warnings { io.standardError("fingerly-identify: warning: \(warning)\n") }
        let stateDirectory = connection.resolvedStateDirectory(io.environment)
        // Another user's writable directory is refused as every command refuses it (78), before
        // the named directory's usability check could call it merely unusable.
        if let refused = StateCommands.untrustedStateDirectory(stateDirectory, io) { return refused }
        if let problem = connection.namedStateDirectoryProblem() {
            io.standardError("fingerly-identify: \(problem)\n")
            return .usage
        }
        let consent: ConsentState
        // Before the root is as much as looked at: without consent nothing of the host is read.
        switch StateCommands.operatorConsent(stateDirectory, io) {
        case .success(let state): consent = state
        case .failure(let code): return code
        }
        var rootInfo = stat()
        guard stat(root, &rootInfo) == 0, (rootInfo.st_mode & S_IFMT) == S_IFDIR else {
            io.standardError("fingerly-identify: --root \(Self.shown(root)): not a directory\n")
            return .dataError
        }
        // No key and no endpoint: the embedded local mode resolves the visitor in this process.
        let submitting = !noSubmit
        if submitting && connection.apiKey == nil && !connection.endpoint.isEmpty {
            io.standardError("fingerly-identify: --endpoint needs an API key (FINGERLY_API_KEY, --api-key-file); without both, the visitor is resolved here\n")
            return .usage
        }
        let result: IdentifyResult
        var failure: TransportError?
        do {
            var submission = connection.submission
            // The command prints the verdicts whatever became of the submission, then exits with its status.
            submission.localResultOnFailure = true
            var options = FingerlyOptions(root: root, attributesToIgnore: ignore, policy: policyPath.map { .file(path: $0) } ?? .embedded,
                                          stateDirectory: stateDirectory, freeText: freeText,
                                          logger: connection.verbose ? StandardErrorLog(io) : nil, submission: submission)
            options.tlsPinChecks = pinChecks
            // A process about to exit flushes in the foreground, after its own report went through.
            options.flushInBackground = false
            let fingerly = try Fingerly.loadBlocking(apiKey: connection.apiKey, endpoint: connection.endpoint,
                                                     schedule: schedule, consent: consent, options: options)
            if submitting {
                (result, failure) = try fingerly.identifyReportingFailureBlocking(tag: tag, tiers: tiers)
                // The server answered: whatever an earlier run queued can go now.
                if failure == nil, connection.apiKey != nil {
                    let flushed = try fingerly.flushWithConsentBlocking()
                    if flushed.delivered + flushed.dropped > 0 {
                        io.standardError("fingerly-identify: earlier queued reports: \(flushed.delivered) delivered, \(flushed.dropped) dropped, \(flushed.remaining) remaining\n")
                    }
                }
            } else {
                result = try fingerly.identifyWithoutSubmittingBlocking(tag: tag, tiers: tiers)
            }
        } catch {
            return ExitCode.failure(error, io, names: connection.names)
        }

        if requestOnly {
            io.standardOutput(result.request?.body ?? "")
            return .success
        }
        if json {
            if let written = result.json {
                io.standardOutput(String(decoding: written + [UInt8(ascii: "\n")], as: UTF8.self))
            } else {
                // Only JSONEncoder's refusal is left to it, so the error says what it always said.
                do {
                    io.standardOutput(String(decoding: try JSONEncoder.fingerly.encode(result), as: UTF8.self) + "\n")
                } catch {
                    io.standardError("fingerly-identify: cannot encode the result: \(error)\n")
                    return .software
                }
            }
        } else {
            io.standardOutput(HumanReport(result: result, colour: io.usesColour).render())
        }
        if let failure { return ExitCode.failure(failure, io, names: connection.names) }
        return FailOn.check(failOn, { result.verdicts[$0] }, io)
    }
}
