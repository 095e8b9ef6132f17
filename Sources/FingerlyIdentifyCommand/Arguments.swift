import FingerlyModel
import FingerlyPolicy
import FingerlyProbes

/// A bad command line; printed with a pointer to `--help` and exit code 64.
package struct UsageError: Error, Equatable, CustomStringConvertible {
    package let message: String
    package init(_ message: String) { self.message = message }
    package var description: String { message }
}

/// A deliberately small parser: `--flag`, `--option value`, `--option=value`, and positional
/// words. Commands declare which names are flags and which take values; anything else is an error.
struct ParsedArguments {
    private(set) var flags: Set<String> = []
    private(set) var options: [String: String] = [:]
    private(set) var positionals: [String] = []

    init(_ arguments: [String], flags knownFlags: Set<String>, options knownOptions: Set<String>) throws(UsageError) {
        var index = arguments.startIndex
        while index < arguments.endIndex {
            let argument = arguments[index]
            index += 1
            guard argument.hasPrefix("--"), argument != "--" else {
                if argument == "--" {
                    positionals.append(contentsOf: arguments[index...])
                    break
                }
                if argument.hasPrefix("-") && argument.count > 1 {
                    throw UsageError("unknown option '\(argument)' (options are spelled with two dashes)")
                }
                positionals.append(argument)
                continue
            }
            var name = String(argument.dropFirst(2))
            var inlineValue: String?
            if let equals = name.firstIndex(of: "=") {
                inlineValue = String(name[name.index(after: equals)...])
                name = String(name[..<equals])
            }
            if knownFlags.contains(name) {
                if inlineValue != nil { throw UsageError("--\(name) takes no value") }
                flags.insert(name)
            } else if knownOptions.contains(name) {
                if options[name] != nil { throw UsageError("--\(name) is given twice") }
                if let inlineValue {
                    options[name] = inlineValue
                } else if index < arguments.endIndex {
                    options[name] = arguments[index]
                    index += 1
                } else {
                    throw UsageError("--\(name) needs a value")
                }
            } else {
                throw UsageError("unknown option '--\(name)'")
            }
        }
    }

    func has(_ flag: String) -> Bool { flags.contains(flag) }
    subscript(option: String) -> String? { options[option] }

    func integer(_ option: String, in range: ClosedRange<Int>) throws(UsageError) -> Int? {
        guard let text = options[option] else { return nil }
        guard let value = Int(text), range.contains(value) else {
            throw UsageError("--\(option) must be a whole number from \(range.lowerBound) to \(range.upperBound), got '\(text)'")
        }
        return value
    }

    /// A comma-separated list, empty items dropped.
    func list(_ option: String) -> [String]? {
        options[option].map { $0.split(separator: ",").map { $0.trimmingCharacters() }.filter { !$0.isEmpty } }
    }
}

extension Substring {
    func trimmingCharacters() -> String {
        String(drop(while: { $0 == " " }).reversed().drop(while: { $0 == " " }).reversed())
    }
}

/// What the user typed for each field of the library's options, so an error the library raises
/// names the flag (`--ignore`), or the variable the value came from, and never a field path
/// (`options.attributesToIgnore`).
struct ArgumentNames {
    /// Where the key came from: `--api-key`, `--api-key-file` or `FINGERLY_API_KEY`.
    var apiKey = "--api-key"
    /// `--endpoint` or `FINGERLY_ENDPOINT`.
    var endpoint = "--endpoint"
    /// `--state-dir`, `FINGERLY_STATE_DIR`, or the default directory described.
    var stateDirectory = "--state-dir"

    static let flagOfField = [
        "schedule.budgetMs": "--budget-ms", "schedule.concurrency": "--concurrency", "schedule.tiers": "--tiers",
        "schedule.defaultSourceTimeoutMs": "--timeout-ms", "schedule.sourceTimeoutOverrideMs": "--probe-timeout-ms",
        "options.root": "--root", "options.attributesToIgnore": "--ignore", "options.policy": "--policy",
        "options.submission.attempts": "--attempts", "options.submission.baseDelayMs": "--retry-delay-ms",
        "options.submission.deadlineMs": "--deadline-ms", "options.submission.caFile": "--ca-file",
        "options.submission.pins": "--api-pin",
    ]

    /// The name for `field`; a field no flag sets keeps its own name.
    func name(forField field: String) -> String {
        switch field {
        case "apiKey": apiKey
        case "endpoint": endpoint
        case "options.stateDirectory": stateDirectory
        default: Self.flagOfField[field] ?? field
        }
    }
}
