import Fingerly
import FoundationEssentials

/// `events show REQUEST_ID` and `visitors`: what the embedded local mode stored.
enum LocalStoreCommands {
    static let flags: Set<String> = ["help", "json"]
    static let options: Set<String> = ["state-dir", "limit"]

    static func run(_ subcommand: String, _ arguments: ParsedArguments, _ io: CommandIO) async throws(UsageError) -> ExitCode {
        let directory = arguments["state-dir"] ?? io.environment["FINGERLY_STATE_DIR"].flatMap { $0.isEmpty ? nil : $0 }
        if let directory, !directory.hasPrefix("/") {
            throw UsageError("--state-dir needs an absolute path, got '\(IdentifyCommand.shown(directory))'")
        }
        guard let state = directory ?? FingerlyOptions.defaultStateDirectory(environment: io.environment) else {
            io.standardError("fingerly-identify: no state directory can be named; give --state-dir or FINGERLY_STATE_DIR\n")
            return .usage
        }
        let limit = try arguments.integer("limit", in: 1...1000) ?? 100
        if case .failure(let code) = StateCommands.operatorConsent(state, io) { return code }
        var options = FingerlyOptions(stateDirectory: state)
        options.flushInBackground = false
        do {
            let fingerly = try await Fingerly.load(options: options)
            switch subcommand {
            case "events":
                guard arguments.positionals.count == 2, arguments.positionals[0] == "show" else {
                    throw UsageError("usage: fingerly-identify events show REQUEST_ID")
                }
                guard let event = try fingerly.localEvent(requestId: arguments.positionals[1]) else {
                    io.standardError("fingerly-identify: no local event \(IdentifyCommand.shown(arguments.positionals[1]))\n")
                    return .dataError
                }
                io.standardOutput(Self.terminalSafeJSON(String(decoding: event, as: UTF8.self)) + "\n")
            default:
                if let extra = arguments.positionals.first { throw UsageError("unexpected argument '\(IdentifyCommand.shown(extra))'") }
                let visitors = try fingerly.localVisitors(limit: limit)
                if arguments.has("json") {
                    let json = String(decoding: try JSONEncoder.fingerly.encode(visitors), as: UTF8.self)
                    io.standardOutput(Self.terminalSafeJSON(json) + "\n")
                } else {
                    for visitor in visitors {
                        let id = Self.terminalSafe(visitor.visitorId)
                        io.standardOutput("\(id)  first \(visitor.firstSeen)  last \(visitor.lastSeen)  "
                            + "\(visitor.identifiable ? "identifiable" : "not identifiable"), \(visitor.components) components\n")
                    }
                    if visitors.isEmpty { io.standardOutput("no visitors yet: run fingerly-identify (without --no-submit) first\n") }
                }
            }
            return .success
        } catch let error as UsageError {
            throw error
        } catch {
            return ExitCode.failure(error, io)
        }
    }

    /// What the store holds came from reports, and a report is the measured host's word: a
    /// control character (ESC, BEL, any other C0 or C1, DEL) is shown escaped, never sent to the
    /// terminal. `\` is escaped too, so an escape cannot be forged.
    static func terminalSafe(_ text: String) -> String {
        text.unicodeScalars.map { isControl($0) || $0 == "\\" ? $0.escaped(asASCII: true) : String($0) }.joined()
    }

    /// JSON with the controls that JSON leaves raw (DEL, C1) written as `\u` escapes: the same
    /// document to a parser, nothing for a terminal to act on. Other C0 controls are escaped
    /// already by every JSON writer; one found raw is escaped the same way.
    static func terminalSafeJSON(_ json: String) -> String {
        var output = ""
        output.unicodeScalars.reserveCapacity(json.unicodeScalars.count)
        for scalar in json.unicodeScalars {
            // Tab, newline and return are JSON's own whitespace outside strings, and escaped in them.
            if isControl(scalar), !["\t", "\n", "\r"].contains(scalar) {
                let hex = String(scalar.value, radix: 16)
                output += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            } else {
                output.unicodeScalars.append(scalar)
            }
        }
        return output
    }

    static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value)
    }
}
