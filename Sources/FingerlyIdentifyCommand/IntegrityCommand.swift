import Fingerly
import FoundationEssentials
import FingerlyModel
import FingerlyPolicy
import FingerlyProbes

/// `fingerly-identify integrity [--tiers …] [--json] [--repeat N]`: the runtime integrity
/// verdicts alone, as an application would ask for them before a sensitive action. With
/// `--repeat`, the check runs N times in this one process and the per-call cost is printed.
struct IntegrityCommand {
    static let flags: Set<String> = ["json", "help"]
    static let options: Set<String> = ["tiers", "repeat", "fail-on", "concurrency", "state-dir"]

    var tiers: Set<Tier> = [.fast]
    var repeatCount: Int?
    var concurrency = ScheduleOptions().concurrency
    var json = false
    var failOn: [IdentifyCommand.FailOn] = []
    /// Where the persisted consent is; nil for the default.
    var stateDirectory: String?

    init(_ arguments: ParsedArguments, environment: [String: String]) throws(UsageError) {
        stateDirectory = arguments["state-dir"] ?? environment["FINGERLY_STATE_DIR"].flatMap { $0.isEmpty ? nil : $0 }
        if let directory = stateDirectory, !directory.hasPrefix("/") {
            throw UsageError("--state-dir needs an absolute path, got '\(IdentifyCommand.shown(directory))'")
        }
        json = arguments.has("json")
        if let names = arguments.list("tiers") { tiers = try IdentifyCommand.parseTiers(names) }
        repeatCount = try arguments.integer("repeat", in: 1...100_000)
        if let value = try arguments.integer("concurrency", in: 1...64) { concurrency = value }
        failOn = try IdentifyCommand.parseFailOn(arguments.list("fail-on") ?? [],
                                                 computed: IntegrityResult.verdictNames, by: "integrity")
        if let extra = arguments.positionals.first { throw UsageError("unexpected argument '\(extra)'") }
    }

    func run(_ io: CommandIO) async -> ExitCode {
        let directory = stateDirectory ?? FingerlyOptions.defaultStateDirectory(environment: io.environment)
        if case .failure(let code) = StateCommands.operatorConsent(directory, io) { return code }
        var result: IntegrityResult
        do {
            // The directory checked above, not the library's own default from the environment.
            let fingerly = try await Fingerly.load(apiKey: nil, schedule: ScheduleOptions(concurrency: concurrency),
                                                   consent: .granted,
                                                   options: FingerlyOptions(stateDirectory: directory))
            result = try await fingerly.checkIntegrity(tiers: tiers)
            if let repeatCount {
                let clock = ContinuousClock()
                var durations: [Double] = []
                for _ in 0..<repeatCount {
                    let started = clock.now
                    result = try await fingerly.checkIntegrity(tiers: tiers)
                    let elapsed = started.duration(to: clock.now).components
                    durations.append(Double(elapsed.seconds) * 1000 + Double(elapsed.attoseconds) / 1e15)
                }
                durations.sort()
                let median = durations[durations.count / 2], p90 = durations[min(durations.count - 1, durations.count * 9 / 10)]
                io.standardError("integrity check, \(repeatCount) repeat calls in one process: median \(format(median)) ms, "
                    + "p90 \(format(p90)) ms, min \(format(durations[0])) ms\n")
            }
        } catch {
            return ExitCode.failure(error, io)
        }
        if json {
            do {
                io.standardOutput(String(decoding: try JSONEncoder.fingerly.encode(result), as: UTF8.self) + "\n")
            } catch {
                io.standardError("fingerly-identify: cannot encode the result: \(error)\n")
                return .software
            }
        } else {
            var text = ""
            for name in IntegrityResult.verdictNames {
                guard let verdict = result[name] else { continue }
                text += "\(name.rawValue): \(verdict.value) (\(verdict.confidence.rawValue))\(verdict.kind.map { ", \($0)" } ?? "")\n"
                for reason in verdict.reasons { text += "    - [\(reason.code)] \(reason.message)\n" }
            }
            io.standardOutput(text)
        }
        return IdentifyCommand.FailOn.check(failOn, { result[$0] }, io)
    }

    private func format(_ value: Double) -> String {
        let hundredths = Int((value * 100).rounded())
        return "\(hundredths / 100).\(String(hundredths % 100).count == 1 ? "0" : "")\(hundredths % 100)"
    }
}
