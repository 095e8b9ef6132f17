/// One piece of evidence behind a verdict.
public struct Reason: Sendable, Codable, Hashable {
    /// Stable code: the policy rule id.
    public let code: String
    public let message: String
    public let confidence: Confidence
}

/// Evidence a verdict could not see because a probe failed, said rather than hidden.
public struct MissingEvidence: Sendable, Codable, Hashable {
    public let probe: String
    public let status: ProbeStatus
    public let message: String
}

/// A local decision about this host or process.
public struct Verdict: Sendable, Codable, Hashable {
    public let value: Bool
    /// For a true verdict, how strong the evidence is. For a false one: `medium` when every
    /// probe the rules rely on ran, `low` when some of their evidence was missing.
    public let confidence: Confidence
    /// What was found (`kvm`, `docker`…), when the evidence names it.
    public let kind: String?
    public let reasons: [Reason]
    public let missingEvidence: [MissingEvidence]
}

/// Applies a policy to a report.
struct VerdictEngine {
    let policy: Policy
    /// Signal name -> the id of the probe that reports it.
    let owners: [String: String]

    init(policy: Policy, catalogue: ProbeCatalogue) {
        self.policy = policy
        owners = catalogue.signalOwners
    }

    func evaluate(_ report: SignalReport) -> [VerdictName: Verdict] {
        let signals = report.signals
        let statusByProbe = Dictionary(report.probes.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
        var verdicts: [VerdictName: Verdict] = [:]
        for name in VerdictName.allCases {
            let rules = policy.verdicts[name]
            var fired: [(rule: Policy.Rule, value: SignalValue?)] = []
            for rule in rules?.rules ?? [] where rule.conditions.allSatisfy({ Self.holds($0, signals[$0.signal]) }) {
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
                    missing.append(MissingEvidence(probe: probe, status: entry.status,
                                                   message: "probe '\(probe)' ended \(entry.status.rawValue): \(entry.detail ?? "no detail"); its evidence is missing"))
                } else if let issue = entry.issues.first(where: { $0.status.hidesEvidence }) {
                    // The probe ran, but one of its sources was unreadable (pid 1's environ is
                    // denied even to root in many containers): part of its evidence is missing.
                    missing.append(MissingEvidence(probe: probe, status: issue.status,
                                                   message: "probe '\(probe)' could not read \(issue.path) (\(issue.status.rawValue): \(issue.detail)); that evidence is missing"))
                }
            }

            guard let strongest = fired.map(\.rule.confidence).max() else {
                verdicts[name] = Verdict(value: false, confidence: missing.isEmpty ? .medium : .low,
                                         kind: nil, reasons: [], missingEvidence: missing)
                continue
            }
            let corroborated = rules?.corroborate == true && independent.count >= 2
            // The strongest rule that names a kind decides it; among equals, the policy's order ranks.
            func namedKind(of rule: Policy.Rule) -> String? { rule.kind ?? rule.kindFrom.flatMap { signals[$0]?.description } }
            let kindLevel = fired.filter { namedKind(of: $0.rule) != nil }.map(\.rule.confidence).max()
            let kind = fired.first { $0.rule.confidence == kindLevel && namedKind(of: $0.rule) != nil }.flatMap { namedKind(of: $0.rule) }
            verdicts[name] = Verdict(
                value: true,
                confidence: corroborated ? strongest.raised : strongest,
                kind: kind,
                reasons: fired.map { Reason(code: $0.rule.id,
                                            message: ReasonTemplate.render($0.rule.reason, value: $0.value, signals: signals),
                                            confidence: $0.rule.confidence) },
                missingEvidence: missing)
        }
        return verdicts
    }

    static func holds(_ condition: Policy.Condition, _ value: SignalValue?) -> Bool {
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

    /// Case-insensitive substring for a string; element substring for a list.
    private static func matches(_ value: SignalValue, anyOf needles: [String]) -> Bool {
        let lowered = needles.map { $0.lowercased() }
        switch value {
        case .string(let text):
            return lowered.contains { text.lowercased().contains($0) }
        case .strings(let items):
            return items.contains { item in lowered.contains { item.lowercased().contains($0) } }
        case .bool, .int:
            return false
        }
    }
}
