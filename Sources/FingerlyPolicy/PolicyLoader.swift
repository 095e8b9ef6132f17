import FingerlyModel

/// Validates a policy document against the catalogue: every rule must name known signals,
/// known tables and well-typed fields, or loading fails with the exact place.
package struct PolicyLoader {
    let vocabulary: PolicyVocabulary
    private let signalNames: Set<String>

    package init(vocabulary: PolicyVocabulary) {
        self.vocabulary = vocabulary
        signalNames = Set(vocabulary.signalOwners.keys)
    }

    private static let ruleFields: Set<String> = ["id", "when", "all", "confidence", "kind", "kindFrom", "reason", "corroboratesOnly"]
    private static let verdictFields: Set<String> = ["corroborate", "rules"]
    /// Most needles one containsAny condition may hold.
    static let needleLimit = 512
    /// Most substring needles (contains and containsAny) a whole policy may hold; the default has
    /// about a hundred, and each costs a search of a value of at most 512 bytes.
    static let policyNeedleLimit = 16_384
    private static let testFields: Set<String> = ["equals", "notEquals", "in", "present", "contains", "containsAny",
                                                  "inTable", "greaterThan", "lessThan"]
    /// Rule ids are stable codes that every fired rule repeats in the result (reasons,
    /// triggers): short by design, and bounded so they cannot crowd out the reasons. The
    /// policy name and literal kinds share the bound.
    static let ruleIdByteLimit = 128
    /// How much of a policy's own text an error message quotes back.
    static let quotedByteLimit = 128

    /// Policy text for an error message: control characters escaped, cut short.
    static func quoted(_ text: String) -> String { BoundedText.bounded(text, limit: quotedByteLimit) }

    /// Why a name the output repeats as is (policy name, rule id, literal kind) cannot be
    /// used, or nil: the human report prints these straight to a terminal.
    static func problem(withName text: String) -> String? {
        if text.utf8.count > ruleIdByteLimit { return "'\(quoted(text))' is longer than \(ruleIdByteLimit) bytes" }
        if text.unicodeScalars.contains(where: { BoundedText.escape($0) != nil }) { return "'\(quoted(text))' contains control characters" }
        return nil
    }

    package func load(_ bytes: [UInt8], source: String) throws(PolicyError) -> Policy {
        func fail(_ location: String?, _ field: String?, _ message: String) -> PolicyError {
            PolicyError(file: source, location: location, field: field, message: message)
        }
        let document: JSONValue
        do {
            document = try JSONParser.parse(bytes)
        } catch {
            throw fail(error.path, nil, "not valid JSON: \(error.message) at byte \(error.offset)")
        }
        guard case .object(let top) = document else { throw fail(nil, nil, "the document must be a JSON object") }

        guard case .number(let version)? = top["policyVersion"] else {
            throw fail(nil, "policyVersion", "missing or not a number")
        }
        guard Int(exactly: version) == Policy.supportedVersion else {
            throw fail(nil, "policyVersion", "version \(Int(exactly: version).map(String.init) ?? String(version)) is not supported; this collector reads version \(Policy.supportedVersion)")
        }
        var name = "unnamed"
        if let value = top["name"] {
            guard case .string(let text) = value else { throw fail(nil, "name", "expected a string, got \(value.typeName)") }
            if let problem = Self.problem(withName: text) { throw fail(nil, "name", problem) }
            name = text
        }
        guard case .object(let verdictObjects)? = top["verdicts"] else {
            throw fail(nil, "verdicts", "missing or not an object")
        }

        var verdicts: [VerdictName: Policy.VerdictRules] = [:]
        for key in verdictObjects.keys.sorted() {
            let location = "verdict '\(Self.quoted(key))'"
            guard let verdict = VerdictName(rawValue: key) else {
                throw fail(location, nil, "unknown verdict; known verdicts are \(VerdictName.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            guard case .object(let fields) = verdictObjects[key]! else { throw fail(location, nil, "expected an object") }
            if let unknown = fields.keys.sorted().first(where: { !Self.verdictFields.contains($0) }) {
                throw fail(location, Self.quoted(unknown), "unknown field")
            }
            var corroborate = false
            if let value = fields["corroborate"] {
                guard case .bool(let flag) = value else { throw fail(location, "corroborate", "expected a boolean, got \(value.typeName)") }
                corroborate = flag
            }
            guard case .array(let ruleValues)? = fields["rules"] else { throw fail(location, "rules", "missing or not an array") }
            var rules: [Policy.Rule] = []
            var ids: Set<String> = []
            for (index, ruleValue) in ruleValues.enumerated() {
                let rule = try parseRule(ruleValue, location: "\(location), rule \(index + 1)", fail: fail)
                guard ids.insert(rule.id).inserted else {
                    throw fail("\(location), rule \(index + 1) ('\(Self.quoted(rule.id))')", "id", "duplicate rule id")
                }
                rules.append(rule)
            }
            verdicts[verdict] = Policy.VerdictRules(corroborate: corroborate, rules: rules)
        }

        let suspect = try top["suspect"].map { section throws(PolicyError) in try Self.suspectScoring(section, fail: fail) }
        // The engine's cost after collection is needles times value length: bounded per policy, not
        // only per condition, or a policy of many rules would hold the verdicts past the budget.
        let needles = verdicts.values.flatMap(\.rules).flatMap(\.conditions).reduce(0) { total, condition in
            switch condition.test {
            case .containsAny(let list): return total + list.count
            case .contains: return total + 1
            default: return total
            }
        }
        guard needles <= Self.policyNeedleLimit else {
            throw fail(nil, "verdicts", "\(needles) substring needles in all; at most \(Self.policyNeedleLimit) (put long lists in a detection table and use inTable)")
        }
        let freeText = try FreeTextHandling.fromPolicySection(top["privacy"], source: source)
        return Policy(name: name, source: source, verdicts: verdicts, suspect: suspect,
                      freeText: freeText)
    }

    private func parseRule(_ value: JSONValue, location: String, fail: (String?, String?, String) -> PolicyError) throws(PolicyError) -> Policy.Rule {
        guard case .object(let fields) = value else { throw fail(location, nil, "expected an object") }
        guard case .string(let id)? = fields["id"], !id.isEmpty else { throw fail(location, "id", "missing or not a non-empty string") }
        if let problem = Self.problem(withName: id) { throw fail(location, "id", problem) }
        let location = "\(location) ('\(Self.quoted(id))')"
        if let unknown = fields.keys.sorted().first(where: { !Self.ruleFields.contains($0) }) {
            throw fail(location, Self.quoted(unknown), "unknown field")
        }

        var conditionValues: [(JSONValue, String)] = []
        switch (fields["when"], fields["all"]) {
        case (let single?, nil): conditionValues = [(single, "when")]
        case (nil, .array(let list)?) where !list.isEmpty:
            conditionValues = list.enumerated().map { ($0.element, "all[\($0.offset)]") }
        case (nil, _?): throw fail(location, "all", "expected a non-empty array of conditions")
        case (nil, nil): throw fail(location, "when", "a rule needs 'when' (one condition) or 'all' (several)")
        case (_?, _?): throw fail(location, "all", "give either 'when' or 'all', not both")
        }
        var conditions: [Policy.Condition] = []
        for (conditionValue, field) in conditionValues {
            conditions.append(try parseCondition(conditionValue, location: location, field: field, fail: fail))
        }

        guard case .string(let confidenceText)? = fields["confidence"] else { throw fail(location, "confidence", "missing or not a string") }
        guard let confidence = Confidence(rawValue: confidenceText) else {
            throw fail(location, "confidence", "expected low, medium or high, got '\(Self.quoted(confidenceText))'")
        }
        var kind: String?
        if let value = fields["kind"] {
            guard case .string(let text) = value else { throw fail(location, "kind", "expected a string, got \(value.typeName)") }
            if let problem = Self.problem(withName: text) { throw fail(location, "kind", problem) }
            kind = text
        }
        var kindFrom: String?
        if let value = fields["kindFrom"] {
            guard case .string(let signal) = value else { throw fail(location, "kindFrom", "expected a signal name") }
            guard signalNames.contains(signal) else { throw fail(location, "kindFrom", "unknown signal '\(Self.quoted(signal))'") }
            kindFrom = signal
        }
        var corroboratesOnly = false
        if let value = fields["corroboratesOnly"] {
            guard case .bool(let flag) = value else { throw fail(location, "corroboratesOnly", "expected a boolean, got \(value.typeName)") }
            corroboratesOnly = flag
        }
        guard case .string(let reason)? = fields["reason"], !reason.isEmpty else {
            throw fail(location, "reason", "missing or not a non-empty string")
        }
        let template = ReasonTemplate(reason)
        for placeholder in template.placeholders where placeholder != "value" && !signalNames.contains(placeholder) {
            throw fail(location, "reason", "the placeholder {\(Self.quoted(placeholder))} names no known signal")
        }
        return Policy.Rule(id: id, conditions: conditions, confidence: confidence, kind: kind, kindFrom: kindFrom,
                           reason: reason, template: template, corroboratesOnly: corroboratesOnly)
    }

    private func parseCondition(_ value: JSONValue, location: String, field: String,
                                fail: (String?, String?, String) -> PolicyError) throws(PolicyError) -> Policy.Condition {
        guard case .object(let fields) = value else { throw fail(location, field, "a condition must be an object") }
        guard case .string(let signal)? = fields["signal"] else { throw fail(location, field + ".signal", "missing or not a string") }
        guard signalNames.contains(signal) else {
            throw fail(location, field + ".signal", "unknown signal '\(Self.quoted(signal))'")
        }
        let tests = fields.keys.filter { $0 != "signal" }.sorted()
        guard tests.count == 1, let testName = tests.first else {
            throw fail(location, field, "a condition needs 'signal' and exactly one test of \(Self.testFields.sorted().joined(separator: ", "))")
        }
        guard Self.testFields.contains(testName) else { throw fail(location, field + "." + Self.quoted(testName), "unknown test") }
        let operand = fields[testName]!
        let testField = field + "." + testName
        func scalar() throws(PolicyError) -> SignalValue {
            guard let value = operand.signalValue, operand.isScalar else {
                throw fail(location, testField, "expected a string, whole number or boolean, got \(operand.typeName)")
            }
            return value
        }
        func stringList() throws(PolicyError) -> [String] {
            guard case .strings(let list)? = operand.signalValue, case .array = operand, !list.isEmpty else {
                throw fail(location, testField, "expected a non-empty array of strings")
            }
            return list
        }
        func integer() throws(PolicyError) -> Int {
            guard case .int(let number)? = operand.signalValue, case .number = operand else {
                throw fail(location, testField, "expected a whole number, got \(operand.typeName)")
            }
            return number
        }
        let test: Policy.Condition.Test
        switch testName {
        case "equals": test = .equals(try scalar())
        case "notEquals": test = .notEquals(try scalar())
        case "in":
            let items: [JSONValue]
            if case .array(let list) = operand { items = list } else { items = [] }
            let values = items.compactMap { $0.isScalar ? $0.signalValue : nil }
            guard !items.isEmpty, values.count == items.count else {
                throw fail(location, testField, "expected a non-empty array of strings, numbers or booleans")
            }
            test = .oneOf(values)
        case "present":
            guard case .bool(let flag) = operand else { throw fail(location, testField, "expected a boolean, got \(operand.typeName)") }
            test = .present(flag)
        case "contains":
            guard case .string(let text) = operand else { throw fail(location, testField, "expected a string, got \(operand.typeName)") }
            // Lowered once here: the engine compares lowered values.
            test = .contains(text.lowercased())
        case "containsAny":
            // Every needle is searched for in every value it is given: a policy-sized list times a
            // host-sized value would run past the budget. Long lists belong in a detection table.
            let needles = try stringList()
            guard needles.count <= Self.needleLimit else {
                throw fail(location, testField, "\(needles.count) needles; at most \(Self.needleLimit) (put longer lists in a detection table and use inTable)")
            }
            test = .containsAny(needles.map { $0.lowercased() })
        case "inTable":
            guard case .string(let table) = operand else { throw fail(location, testField, "expected a table name") }
            guard let rows = vocabulary.stringTables[table] else {
                throw fail(location, testField, "unknown detection table '\(Self.quoted(table))'; string tables are \(vocabulary.stringTables.keys.sorted().joined(separator: ", "))")
            }
            test = .inTable(rows)
        case "greaterThan": test = .greaterThan(try integer())
        default: test = .lessThan(try integer())
        }
        return Policy.Condition(signal: signal, test: test)
    }

    /// The `suspect` section: `weights` per verdict (0–100), `confidenceFactors` for low, medium
    /// and high (0–1), and `levels`, the scores from which a request is `medium` and `high`
    /// (below `medium` it is `low`). All three are required: no figure of the score is in code.
    static func suspectScoring(_ section: JSONValue,
                               fail: (String?, String?, String) -> PolicyError) throws(PolicyError) -> SuspectScoring {
        guard case .object(let fields) = section else { throw fail("suspect", nil, "expected an object") }
        if let unknown = fields.keys.sorted().first(where: { !["weights", "confidenceFactors", "levels"].contains($0) }) {
            throw fail("suspect", Self.quoted(unknown), "unknown field")
        }
        guard case .object(let weightValues)? = fields["weights"] else { throw fail("suspect", "weights", "missing or not an object") }
        var weights: [VerdictName: Int] = [:]
        for (key, value) in weightValues {
            guard let verdict = VerdictName(rawValue: key) else { throw fail("suspect.weights", Self.quoted(key), "unknown verdict") }
            guard case .number(let weight) = value, let whole = Int(exactly: weight.rounded()), (0...100).contains(whole) else {
                throw fail("suspect.weights", key, "expected a number from 0 to 100")
            }
            weights[verdict] = whole
        }
        guard case .object(let factorValues)? = fields["confidenceFactors"] else {
            throw fail("suspect", "confidenceFactors", "missing or not an object")
        }
        var factors: [Confidence: Double] = [:]
        for (key, value) in factorValues {
            guard let confidence = Confidence(rawValue: key) else {
                throw fail("suspect.confidenceFactors", Self.quoted(key), "expected low, medium or high")
            }
            guard case .number(let factor) = value, (0...1).contains(factor) else { throw fail("suspect.confidenceFactors", key, "expected a number from 0 to 1") }
            factors[confidence] = factor
        }
        if let missing = Confidence.allCases.first(where: { factors[$0] == nil }) {
            throw fail("suspect.confidenceFactors", missing.rawValue, "missing: every confidence needs a factor")
        }
        guard case .object(let levelValues)? = fields["levels"] else { throw fail("suspect", "levels", "missing or not an object") }
        var levels: [String: Int] = [:]
        for (key, value) in levelValues {
            guard key == "medium" || key == "high" else { throw fail("suspect.levels", Self.quoted(key), "expected medium or high (below medium is low)") }
            guard case .number(let bound) = value, let whole = Int(exactly: bound), (1...100).contains(whole) else {
                throw fail("suspect.levels", key, "expected a whole number from 1 to 100")
            }
            levels[key] = whole
        }
        guard let medium = levels["medium"], let high = levels["high"] else {
            throw fail("suspect.levels", levels["medium"] == nil ? "medium" : "high", "missing")
        }
        guard medium <= high else { throw fail("suspect.levels", "high", "must not be below medium (\(medium))") }
        return SuspectScoring(weights: weights, confidenceFactors: factors, mediumFrom: medium, highFrom: high)
    }
}

extension JSONValue {
    var isScalar: Bool {
        switch self {
        case .bool, .string: return true
        case .number(let value): return Int(exactly: value) != nil
        default: return false
        }
    }
}
