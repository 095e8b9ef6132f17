import FoundationEssentials
import Fingerly
import FingerlyModel
#if canImport(Glibc)
import Glibc
#endif

/// The JSON a C caller passes to `fingerly_load`: the options of `Fingerly.load`, every member
/// optional. Unknown members are refused by name, so a misspelt option is an error and not a
/// silently ignored wish.
struct CConfiguration: Decodable {
    struct Schedule: Decodable {
        var budgetMs: Int?
        var concurrency: Int?
        var defaultSourceTimeoutMs: Int?
        var sourceTimeoutOverrideMs: Int?
        var tiers: [Tier]?

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: MemberName.self)
            try MemberName.refuseUnknown(in: container, allowed: ["budgetMs", "concurrency", "defaultSourceTimeoutMs",
                                                                  "sourceTimeoutOverrideMs", "tiers"], object: "schedule")
            budgetMs = try container.integer("budgetMs", in: "schedule")
            concurrency = try container.integer("concurrency", in: "schedule")
            defaultSourceTimeoutMs = try container.integer("defaultSourceTimeoutMs", in: "schedule")
            sourceTimeoutOverrideMs = try container.integer("sourceTimeoutOverrideMs", in: "schedule")
            // Read as words: the decoder's own refusal of an unknown tier names neither it nor the valid ones.
            tiers = try container.decodeIfPresent([String].self, forKey: "tiers").map { (names) throws(CallFailure) in
                try names.map { (name) throws(CallFailure) in
                    guard let tier = Tier(rawValue: name) else {
                        throw .configuration("schedule.tiers: unknown tier '\(BoundedText.bounded(name, limit: 40))'; use "
                                             + CConfiguration.alternatives(Tier.allCases.map(\.rawValue)))
                    }
                    return tier
                }
            }
        }
    }

    struct Submission: Decodable {
        var attempts: Int?
        var deadlineMs: Int?
        var attemptTimeoutMs: Int?
        var caFile: String?
        var pins: [String]?
        var localResultOnFailure: Bool?

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: MemberName.self)
            try MemberName.refuseUnknown(in: container, allowed: ["attempts", "deadlineMs", "attemptTimeoutMs", "caFile", "pins",
                                                                  "localResultOnFailure"], object: "submission")
            attempts = try container.integer("attempts", in: "submission")
            deadlineMs = try container.integer("deadlineMs", in: "submission")
            attemptTimeoutMs = try container.integer("attemptTimeoutMs", in: "submission")
            caFile = try container.decodeIfPresent(String.self, forKey: "caFile")
            pins = try container.decodeIfPresent([String].self, forKey: "pins")
            localResultOnFailure = try container.decodeIfPresent(Bool.self, forKey: "localResultOnFailure")
        }
    }

    var apiKey: String?
    var endpoint: String?
    var consent: ConsentState?
    var schedule: Schedule?
    var stateDirectory: String?
    var ignore: [String]?
    var root: String?
    var policyPath: String?
    var submission: Submission?

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: MemberName.self)
        try MemberName.refuseUnknown(in: container, allowed: ["apiKey", "endpoint", "consent", "schedule", "stateDirectory", "ignore",
                                                              "root", "policyPath", "submission"], object: "the configuration")
        apiKey = try container.decodeIfPresent(String.self, forKey: "apiKey")
        endpoint = try container.decodeIfPresent(String.self, forKey: "endpoint")
        consent = try container.decodeIfPresent(String.self, forKey: "consent").map { (name) throws(CallFailure) in
            try Self.consentState(name)
        }
        schedule = try container.decodeIfPresent(Schedule.self, forKey: "schedule")
        stateDirectory = try container.decodeIfPresent(String.self, forKey: "stateDirectory")
        ignore = try container.decodeIfPresent([String].self, forKey: "ignore")
        root = try container.decodeIfPresent(String.self, forKey: "root")
        policyPath = try container.decodeIfPresent(String.self, forKey: "policyPath")
        submission = try container.decodeIfPresent(Submission.self, forKey: "submission")
    }

    /// A consent word, refused with the valid ones listed (as `fingerly-identify consent` does).
    static func consentState(_ name: String) throws(CallFailure) -> ConsentState {
        guard let state = ConsentState(rawValue: name) else {
            let valid = alternatives(ConsentState.allCases.map(\.rawValue))
            throw .configuration("consent: '\(BoundedText.bounded(name, limit: 40))' is not \(valid)")
        }
        return state
    }

    /// "a, b or c".
    static func alternatives(_ names: [String]) -> String {
        guard let last = names.last, names.count > 1 else { return names.joined() }
        return names.dropLast().joined(separator: ", ") + " or " + last
    }

    /// The member of this configuration a library field comes from, so an error names what the
    /// C caller wrote (`ignore`, not `options.attributesToIgnore`).
    static func member(forField field: String) -> String {
        let renamed = ["options.root": "root", "options.stateDirectory": "stateDirectory",
                       "options.attributesToIgnore": "ignore", "options.policy": "policyPath"]
        if let member = renamed[field] { return member }
        if field.hasPrefix("options.submission.") { return String(field.dropFirst("options.".count)) }
        return field
    }

    /// Reads the JSON; a failure is a configuration error naming where the document went wrong:
    /// `member: reason`, the member as the document spells it, so a binding can name its own argument.
    static func decode(_ bytes: [UInt8]) throws(CallFailure) -> CConfiguration {
        guard !bytes.isEmpty else { return try decode(Array("{}".utf8)) }
        guard !nestsDeeperThan(deepestNesting, bytes) else {
            throw .configuration("config: not valid JSON: nested deeper than \(deepestNesting) levels")
        }
        // Foundation's decoder keeps one of two equal member names without a word; the strict
        // reader refuses them, so {"consent":"denied","consent":"granted"} is not a guess.
        do {
            _ = try JSONParser.parse(bytes)
        } catch {
            throw .configuration("config: not valid JSON: \(BoundedText.bounded(error.description, limit: 200))")
        }
        do {
            return try JSONDecoder().decode(CConfiguration.self, from: Data(bytes))
        } catch let failure as CallFailure {
            throw failure
        } catch let DecodingError.typeMismatch(type, context) {
            throw .configuration(context.codingPath.isEmpty ? "config: the document must be \(describe(type))"
                                                            : "\(path(context)): must be \(describe(type))")
        } catch let DecodingError.dataCorrupted(context) {
            throw .configuration(context.codingPath.isEmpty ? "config: not valid JSON"
                                                            : "\(path(context)): unexpected value")
        } catch let DecodingError.valueNotFound(type, context) {
            throw .configuration("\(path(context)): must be \(describe(type)), not null")
        } catch {
            throw .configuration("config: not valid JSON")
        }
    }

    /// A configuration nests three levels (the document, schedule, tiers). The parsers recurse per
    /// level on the caller's thread, whose stack may be small: a bound far above three, checked
    /// without recursion, keeps a hostile document from exhausting it.
    static let deepestNesting = 16

    static func nestsDeeperThan(_ limit: Int, _ bytes: [UInt8]) -> Bool {
        var depth = 0
        var inString = false
        var escaped = false
        for byte in bytes {
            if inString {
                if escaped {
                    escaped = false
                } else if byte == UInt8(ascii: "\\") {
                    escaped = true
                } else if byte == UInt8(ascii: "\"") {
                    inString = false
                }
                continue
            }
            switch byte {
            case UInt8(ascii: "\""): inString = true
            case UInt8(ascii: "["), UInt8(ascii: "{"):
                depth += 1
                if depth > limit { return true }
            case UInt8(ascii: "]"), UInt8(ascii: "}"): depth -= 1
            default: break
            }
        }
        return false
    }

    private static func path(_ context: DecodingError.Context) -> String {
        guard !context.codingPath.isEmpty else { return "the document" }
        return context.codingPath.reduce(into: "") { path, key in
            if let index = key.intValue {
                path += "[\(index)]"
            } else {
                path += (path.isEmpty ? "" : ".") + key.stringValue
            }
        }
    }

    private static func describe(_ type: Any.Type) -> String {
        switch type {
        case is Int.Type, is Double.Type: return "a number"
        case is String.Type: return "a string"
        case is Bool.Type: return "true or false"
        case is [Any].Type: return "an array"
        case is [String: Any].Type: return "an object"
        default: return "a \(type)".lowercased()
        }
    }

    /// The arguments of `Fingerly.load`, starting from its own defaults, and what `fingerly-identify`
    /// refuses before it loads: a state directory that was named but cannot be used (the CLI's exit
    /// 64) and, once consent allows looking at it, a root that is not a directory (65).
    func load() async throws -> Fingerly {
        // Before the instance exists, so none starts its background work on a refused configuration.
        // A relative path or one with a NUL is left to Fingerly.load, which names the problem.
        func checkable(_ path: String) -> Bool { path.hasPrefix("/") && !path.utf8.contains(0) }
        // Trust first, as every command of the CLI judges it: another user's writable directory is
        // refused for what it is, not merely called unusable.
        if let stateDirectory, checkable(stateDirectory),
           let problem = FingerlyOptions.untrustedStateDirectory(stateDirectory) {
            throw CallFailure.configuration("stateDirectory: " + BoundedText.bounded(problem, limit: 400))
        }
        if let stateDirectory, checkable(stateDirectory), let problem = Fingerly.stateDirectoryProblem(stateDirectory) {
            throw CallFailure.configuration("stateDirectory: cannot be used: "
                                            + BoundedText.bounded(problem, limit: 200))
        }
        // Without consent nothing of the host is looked at, the root included (as the CLI does).
        let root = root ?? "/"
        if (consent ?? .granted) == .granted, checkable(root), !Self.isDirectory(root) {
            throw CallFailure.configuration("root: \(BoundedText.bounded(root, limit: 200)): not a directory")
        }
        return try await loadOptions()
    }

    static func isDirectory(_ path: String) -> Bool {
        var info = stat()
        return stat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFDIR
    }

    private func loadOptions() async throws(FingerlyError) -> Fingerly {
        var scheduleOptions = ScheduleOptions()
        if let schedule {
            if let value = schedule.budgetMs { scheduleOptions.budgetMs = value }
            if let value = schedule.concurrency { scheduleOptions.concurrency = value }
            if let value = schedule.defaultSourceTimeoutMs { scheduleOptions.defaultSourceTimeoutMs = value }
            scheduleOptions.sourceTimeoutOverrideMs = schedule.sourceTimeoutOverrideMs
            if let tiers = schedule.tiers { scheduleOptions.tiers = Set(tiers) }
        }
        var submissionOptions = SubmissionOptions()
        if let submission {
            if let value = submission.attempts { submissionOptions.attempts = value }
            if let value = submission.deadlineMs { submissionOptions.deadlineMs = value }
            if let value = submission.attemptTimeoutMs { submissionOptions.attemptTimeoutMs = value }
            submissionOptions.caFile = submission.caFile
            if let pins = submission.pins { submissionOptions.pins = pins }
            if let value = submission.localResultOnFailure { submissionOptions.localResultOnFailure = value }
        }
        let options = FingerlyOptions(root: root ?? "/", attributesToIgnore: Set(ignore ?? []),
                                      policy: policyPath.map { .file(path: $0) } ?? .embedded,
                                      stateDirectory: stateDirectory, submission: submissionOptions)
        return try await Fingerly.load(apiKey: apiKey, endpoint: endpoint ?? "", schedule: scheduleOptions,
                                       consent: consent ?? .granted, options: options)
    }
}

/// A member name of any JSON object, so unknown ones can be listed.
struct MemberName: CodingKey, ExpressibleByStringLiteral {
    let stringValue: String
    var intValue: Int? { nil }
    init(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { nil }
    init(stringLiteral value: String) { stringValue = value }

    static func refuseUnknown(in container: KeyedDecodingContainer<MemberName>, allowed: Set<String>, object: String) throws(CallFailure) {
        let unknown = container.allKeys.map(\.stringValue).filter { !allowed.contains($0) }.sorted()
        guard unknown.isEmpty else {
            let names = unknown.prefix(4).map { "'\(BoundedText.bounded($0, limit: 40))'" }.joined(separator: ", ")
            throw .configuration("config: unknown member(s) of \(object): \(names); known: \(allowed.sorted().joined(separator: ", "))")
        }
    }
}

extension KeyedDecodingContainer where Key == MemberName {
    /// An integer member. Read as a double first: Foundation's decoder reports 1e300 or 1.5 for an
    /// Int as "not valid JSON", which names neither the member nor the problem.
    func integer(_ name: String, in object: String) throws -> Int? {
        guard let number = try decodeIfPresent(Double.self, forKey: MemberName(stringValue: name)) else { return nil }
        // ±2^53: every integer a double holds exactly, far beyond any budget or count.
        guard number.rounded() == number, abs(number) <= 9_007_199_254_740_992, let value = Int(exactly: number) else {
            throw CallFailure.configuration("\(object).\(name): must be an integer, got \(number)")
        }
        return value
    }
}
