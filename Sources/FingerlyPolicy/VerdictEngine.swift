import FingerlyModel

/// Applies a policy to a report.
package struct VerdictEngine {
    /// Bytes of reasons one verdict may carry, each reason charged its code, its message and
    /// `reasonOverhead`. Nine verdicts at this figure stay under 64 KiB in all, whatever the
    /// host's values and however many rules fire.
    static let verdictReasonBudget = 6 * 1024
    /// What a reason costs beyond its text (JSON keys, quotes, the confidence, its trigger),
    /// so that many empty reasons cannot slip under the budget.
    static let reasonOverhead = 32
    static let missingEvidenceMessageLimit = 512

    let policy: Policy
    /// Signal name -> the id of the probe that reports it.
    package let owners: [String: String]

    package init(policy: Policy, signalOwners: [String: String]) {
        self.policy = policy
        owners = signalOwners
    }

    package func evaluate(_ report: SignalReport) -> [VerdictName: Verdict] {
        let signals = report.signals
        let statusByProbe = Dictionary(report.probes.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
        // Case-insensitive tests lower a value once per report, not once per rule and needle:
        // many rules over one long environment value would otherwise multiply.
        var lowered: [String: SignalValue] = [:]
        func holds(_ condition: Policy.Condition) -> Bool {
            switch condition.test {
            case .contains, .containsAny:
                if let value = lowered[condition.signal] { return Self.holds(condition, value) }
                let value = signals[condition.signal].map(Self.lowercased)
                lowered[condition.signal] = value
                return Self.holds(condition, value)
            default:
                return Self.holds(condition, signals[condition.signal])
            }
        }

        var verdicts: [VerdictName: Verdict] = [:]
        for name in VerdictName.allCases {
            let rules = policy.verdicts[name]
            var fired: [(rule: Policy.Rule, value: SignalValue?)] = []
            for rule in rules?.rules ?? [] where rule.conditions.allSatisfy(holds) {
                fired.append((rule, signals[rule.conditions[0].signal]))
            }
            let independent = fired.filter { !$0.rule.corroboratesOnly }
            if !independent.contains(where: { $0.rule.confidence >= .medium }) {
                fired = independent
            }

            var missing: [MissingEvidence] = []
            for signal in policy.signals(of: name) {
                guard let probe = owners[signal], let entry = statusByProbe[probe], !missing.contains(where: { $0.probe == probe }) else { continue }
                if entry.status.hidesEvidence {
                    missing.append(MissingEvidence(probe: probe, status: entry.status, message: BoundedText.bounded(
                        "probe '\(probe)' ended \(entry.status.rawValue): \(entry.detail ?? "no detail"); its evidence is missing",
                        limit: Self.missingEvidenceMessageLimit)))
                } else if let issue = entry.issues.first(where: { $0.status.hidesEvidence }) {
                    // The probe ran, but one of its sources was unreadable (pid 1's environ is
                    // denied even to root in many containers): part of its evidence is missing.
                    missing.append(MissingEvidence(probe: probe, status: issue.status, message: BoundedText.bounded(
                        "probe '\(probe)' could not read \(issue.path) (\(issue.status.rawValue): \(issue.detail)); that evidence is missing",
                        limit: Self.missingEvidenceMessageLimit)))
                }
            }

            guard let strongest = fired.map(\.rule.confidence).max() else {
                verdicts[name] = Verdict(value: false, confidence: missing.isEmpty ? .medium : .low,
                                         kind: nil, reasons: [], missingEvidence: missing)
                continue
            }
            let corroborated = rules?.corroborate == true && independent.count >= 2
            // The strongest rule that names a kind decides it; among equals, the policy's order ranks.
            func namesKind(_ rule: Policy.Rule) -> Bool { rule.kind != nil || rule.kindFrom.flatMap { signals[$0] } != nil }
            let kindLevel = fired.filter { namesKind($0.rule) }.map(\.rule.confidence).max()
            let kind = fired.first { $0.rule.confidence == kindLevel && namesKind($0.rule) }.flatMap { entry in
                entry.rule.kind ?? entry.rule.kindFrom.flatMap { signals[$0]?.boundedDescription(limit: ReasonTemplate.valueByteLimit) }
            }

            // Reasons in policy order until the budget is spent; a rule past it is counted,
            // never rendered, so the work stays bounded however many rules fire.
            var reasons: [Reason] = []
            var spent = 0
            for (rule, value) in fired {
                let message = rule.template.render(value: value, signals: signals)
                let cost = rule.id.utf8.count + message.utf8.count + Self.reasonOverhead
                guard spent + cost <= Self.verdictReasonBudget else { break }
                spent += cost
                reasons.append(Reason(code: rule.id, message: message, confidence: rule.confidence))
            }
            verdicts[name] = Verdict(
                value: true,
                confidence: corroborated ? strongest.raised : strongest,
                kind: kind,
                reasons: reasons,
                reasonsOmitted: reasons.count < fired.count ? fired.count - reasons.count : nil,
                missingEvidence: missing)
        }
        return verdicts
    }

    private static func lowercased(_ value: SignalValue) -> SignalValue {
        switch value {
        case .string(let text): return .string(text.lowercased())
        case .strings(let items): return .strings(items.map { $0.lowercased() })
        case .bool, .int: return value
        }
    }

    /// `contains` and `containsAny` expect the value lowered (see `lowercased`).
    private static func holds(_ condition: Policy.Condition, _ value: SignalValue?) -> Bool {
        switch condition.test {
        case .present(let expected):
            return isPresent(value) == expected
        case .notEquals(let other):
            return value != nil && value != other
        default:
            break
        }
        guard let value else { return false }
        switch condition.test {
        case .equals(let other): return value == other
        case .oneOf(let others): return others.contains(value)
        case .contains(let needle): return matches(value, anyOf: [needle])
        case .containsAny(let needles): return matches(value, anyOf: needles)
        case .inTable(let rows):
            switch value {
            case .string(let text): return rows.contains(text)
            case .strings(let items): return items.contains(where: rows.contains)
            default: return false
            }
        case .greaterThan(let bound): if case .int(let number) = value { return number > bound } else { return false }
        case .lessThan(let bound): if case .int(let number) = value { return number < bound } else { return false }
        case .present, .notEquals: return false
        }
    }

    private static func isPresent(_ value: SignalValue?) -> Bool {
        switch value {
        case nil: return false
        case .string(let text)?: return !text.isEmpty
        case .strings(let items)?: return !items.isEmpty
        default: return true
        }
    }

    /// Substring for a string, element substring for a list. Callers pass the value lowered
    /// and the policy loader lowered the needles, which makes this case-insensitive.
    private static func matches(_ value: SignalValue, anyOf needles: [String]) -> Bool {
        switch value {
        case .string(let text):
            return needles.contains { text.contains($0) }
        case .strings(let items):
            return items.contains { item in needles.contains { item.contains($0) } }
        case .bool, .int:
            return false
        }
    }
}
