import FingerlyModel

/// Applies a policy to a report.
///
/// The policy is compiled once, in `init`: every signal a rule, a kind or a reason reads gets a
/// slot, and `evaluate` fills the slots from the report with one dictionary probe per reported
/// signal. Rules then read slots, never hash a name: the server evaluates every request, and
/// name lookups were most of the evaluation's cost (`bench/server` under perf).
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
    private let compiled: CompiledPolicy
    private let absence: Absence

    /// What a probe absent from a report of a tier it declares means.
    package enum Absence: Sendable {
        /// The caller asked for only some probes (`checkIntegrity`): nothing, only a tier the
        /// report leaves out is missing evidence.
        case askedFor
        /// A submitted report, whose sender may leave out whatever would count against it: every
        /// absent probe a verdict reads is missing evidence, exactly as one reported `denied`.
        /// The collector reports every probe of the tiers it ran, so an honest report loses nothing.
        /// A probe the report says ended `absent` or `skipped` is missing evidence too: the sender's word.
        case missingEvidence
        /// The local mode's engine judging the report this process collected: a probe left out is
        /// missing evidence as for a submitted report, but `absent` and `skipped` are its own word.
        case missingEvidenceCollectedHere
    }

    /// `probeTiers` names the tier of every probe in `signalOwners`: a probe absent from a report
    /// whose tiers leave out its tier did not run, and a verdict that reads it says so.
    package init(policy: Policy, signalOwners: [String: String], probeTiers: [String: Tier],
                 absence: Absence = .askedFor) {
        self.policy = policy
        owners = signalOwners
        compiled = CompiledPolicy(policy, owners: signalOwners, tiers: probeTiers)
        self.absence = absence
    }

    /// Whether a probe or a source that ended with `status` gave no evidence a verdict may rely on.
    /// In a submitted report `absent` and `skipped` are only the sender's word: a sender claiming
    /// them instead of `denied` would read cleaner, so they are missing evidence as `denied` is.
    /// Where the collector's own word is trusted, `absent` is evidence (no DMI on a VM without it).
    private func hidesEvidence(_ status: ProbeStatus) -> Bool {
        status.hidesEvidence || (absence == .missingEvidence && (status == .absent || status == .skipped))
    }

    package func evaluate(_ report: SignalReport) -> [VerdictName: Verdict] {
        // The first probe in report order that reports a signal gives its value, as
        // `SignalReport.signals` merges them.
        var values = [SignalValue?](repeating: nil, count: compiled.slots.count)
        // Positions in report.probes, not copies: an entry is a dozen reference-counted fields.
        var probes = [Int?](repeating: nil, count: compiled.probeSlots.count)
        for (position, probe) in report.probes.enumerated() {
            if let slot = compiled.probeSlots[probe.id], probes[slot] == nil { probes[slot] = position }
            for (name, value) in probe.signals {
                if let slot = compiled.slots[name], values[slot] == nil { values[slot] = value }
            }
        }
        func signal(_ name: String) -> SignalValue? { compiled.slots[name].flatMap { values[$0] } }
        // Case-insensitive tests lower a value once per report, not once per rule and needle:
        // many rules over one long environment value would otherwise multiply.
        var lowered = [SignalValue??](repeating: nil, count: values.count)
        func holds(_ condition: CompiledCondition) -> Bool {
            switch condition.test {
            case .contains, .containsAny:
                if let value = lowered[condition.slot] { return Self.holds(condition.test, value) }
                let value = values[condition.slot].map(Self.lowercased)
                lowered[condition.slot] = .some(value)
                return Self.holds(condition.test, value)
            default:
                return Self.holds(condition.test, values[condition.slot])
            }
        }

        var verdicts: [VerdictName: Verdict] = [:]
        for verdict in compiled.verdicts {
            var fired: [(rule: CompiledRule, value: SignalValue?)] = []
            for rule in verdict.rules where rule.conditions.allSatisfy(holds) {
                fired.append((rule, values[rule.conditions[0].slot]))
            }
            let independent = fired.filter { !$0.rule.rule.corroboratesOnly }
            if !independent.contains(where: { $0.rule.rule.confidence >= .medium }) {
                fired = independent
            }

            var missing: [MissingEvidence] = []
            for slot in verdict.evidenceProbeSlots {
                guard let position = probes[slot] else {
                    // A probe can also be absent because the caller asked for only some probes
                    // (checkIntegrity) or, in a submitted report, for no reason given: only a tier
                    // the report says it left out tells that the evidence was never looked at.
                    if let tier = compiled.probeTiers[slot], !report.tiers.contains(tier) {
                        let probe = compiled.probeIds[slot]
                        let message = "probe '\(probe)' is in the \(tier.rawValue) tier, "
                            + "which this run did not include; its evidence is missing"
                        missing.append(MissingEvidence(probe: probe, status: .skipped, message: BoundedText.bounded(
                            message, limit: Self.missingEvidenceMessageLimit)))
                    } else if absence != .askedFor {
                        // Whatever tiers the report declares (none, or not this probe's): a
                        // probe that is not there gave no evidence, and its absence never reads
                        // cleaner than its denial.
                        let probe = compiled.probeIds[slot]
                        missing.append(MissingEvidence(probe: probe, status: .skipped, message: BoundedText.bounded(
                            "probe '\(probe)' is not in the report; its evidence is missing",
                            limit: Self.missingEvidenceMessageLimit)))
                    }
                    continue
                }
                let entry = report.probes[position]
                let probe = entry.id
                if entry.status.hidesEvidence {
                    missing.append(MissingEvidence(probe: probe, status: entry.status, message: BoundedText.bounded(
                        "probe '\(probe)' ended \(entry.status.rawValue): \(entry.detail ?? "no detail"); its evidence is missing",
                        limit: Self.missingEvidenceMessageLimit)))
                } else if hidesEvidence(entry.status) {
                    // Only the sender's word, and its detail is in the report: a short line, since a
                    // collected report of a root tree claims a dozen of these.
                    let message = "probe '\(probe)' ended \(entry.status.rawValue); its evidence is missing"
                    missing.append(MissingEvidence(probe: probe, status: entry.status, message: message))
                } else if let issue = entry.issues.first(where: { hidesEvidence($0.status) }) {
                    // The probe ran, but one of its sources was unreadable (pid 1's environ is
                    // denied even to root in many containers): part of its evidence is missing.
                    missing.append(MissingEvidence(probe: probe, status: issue.status, message: BoundedText.bounded(
                        "probe '\(probe)' could not read \(issue.path) (\(issue.status.rawValue): \(issue.detail)); that evidence is missing",
                        limit: Self.missingEvidenceMessageLimit)))
                }
            }

            guard let strongest = fired.map(\.rule.rule.confidence).max() else {
                verdicts[verdict.name] = Verdict(value: false, confidence: missing.isEmpty ? .medium : .low,
                                                 kind: nil, reasons: [], missingEvidence: missing)
                continue
            }
            let corroborated = verdict.corroborate && independent.count >= 2
            // The strongest rule that names a kind decides it; among equals, the policy's order ranks.
            func namesKind(_ rule: CompiledRule) -> Bool { rule.rule.kind != nil || rule.kindFromSlot.flatMap { values[$0] } != nil }
            let kindLevel = fired.filter { namesKind($0.rule) }.map(\.rule.rule.confidence).max()
            let kind = fired.first { $0.rule.rule.confidence == kindLevel && namesKind($0.rule) }.flatMap { entry in
                entry.rule.rule.kind ?? entry.rule.kindFromSlot.flatMap { values[$0]?.boundedDescription(limit: ReasonTemplate.valueByteLimit) }
            }

            // Reasons in policy order until the budget is spent; a rule past it is counted,
            // never rendered, so the work stays bounded however many rules fire.
            var reasons: [Reason] = []
            var spent = 0
            for (compiledRule, value) in fired {
                let rule = compiledRule.rule
                let message = rule.template.render(value: value, signal: signal)
                let cost = rule.id.utf8.count + message.utf8.count + Self.reasonOverhead
                guard spent + cost <= Self.verdictReasonBudget else { break }
                spent += cost
                reasons.append(Reason(code: rule.id, message: message, confidence: rule.confidence))
            }
            verdicts[verdict.name] = Verdict(
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
    private static func holds(_ test: Policy.Condition.Test, _ value: SignalValue?) -> Bool {
        switch test {
        case .present(let expected):
            return isPresent(value) == expected
        case .notEquals(let other):
            return value != nil && value != other
        default:
            break
        }
        guard let value else { return false }
        switch test {
        case .equals(let other): return value == other
        case .oneOf(let others): return others.contains(value)
        case .contains(let needle): return matches(value, anyOf: CollectionOfOne(needle))
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
    private static func matches(_ value: SignalValue, anyOf needles: some Collection<String>) -> Bool {
        switch value {
        case .string(let text):
            return needles.contains { CharacterSearch.contains(text, $0) }
        case .strings(let items):
            return items.contains { item in needles.contains { CharacterSearch.contains(item, $0) } }
        case .bool, .int:
            return false
        }
    }
}

/// A condition with its signal's slot in place of the name.
private struct CompiledCondition {
    let slot: Int
    let test: Policy.Condition.Test
}

/// A class, not a struct: the evaluation walks every rule of every verdict, and copying a rule
/// of strings and arrays cost a retain and a release of each.
private final class CompiledRule: Sendable {
    let rule: Policy.Rule
    let conditions: [CompiledCondition]
    let kindFromSlot: Int?

    init(rule: Policy.Rule, conditions: [CompiledCondition], kindFromSlot: Int?) {
        self.rule = rule
        self.conditions = conditions
        self.kindFromSlot = kindFromSlot
    }
}

private struct CompiledVerdict {
    let name: VerdictName
    let corroborate: Bool
    let rules: [CompiledRule]
    /// The probes behind the verdict's signals, each once, in the order its signals first
    /// name them: a missing one makes the verdict's evidence incomplete.
    let evidenceProbeSlots: [Int]
}

/// A policy with every name it reads turned into a slot, once per engine.
private struct CompiledPolicy {
    /// Signal name -> slot, for every signal a rule tests, a kind comes from or a reason quotes.
    let slots: [String: Int]
    /// Probe id -> slot, for every probe that owns one of those signals.
    let probeSlots: [String: Int]
    /// Slot -> probe id, and slot -> the tier that probe runs in (nil when not known).
    let probeIds: [String]
    let probeTiers: [Tier?]
    let verdicts: [CompiledVerdict]

    init(_ policy: Policy, owners: [String: String], tiers: [String: Tier]) {
        var slots: [String: Int] = [:]
        var probeSlots: [String: Int] = [:]
        func slot(_ name: String, in table: inout [String: Int]) -> Int {
            if let existing = table[name] { return existing }
            table[name] = table.count
            return table.count - 1
        }
        verdicts = VerdictName.allCases.map { name in
            let rules = policy.verdicts[name]
            let compiledRules = (rules?.rules ?? []).map { rule in
                for placeholder in rule.template.placeholders where placeholder != "value" {
                    _ = slot(placeholder, in: &slots)
                }
                return CompiledRule(
                    rule: rule,
                    conditions: rule.conditions.map { CompiledCondition(slot: slot($0.signal, in: &slots), test: $0.test) },
                    kindFromSlot: rule.kindFrom.map { slot($0, in: &slots) })
            }
            var evidence: [Int] = []
            for signal in policy.signals(of: name) {
                guard let probe = owners[signal] else { continue }
                let probeSlot = slot(probe, in: &probeSlots)
                if !evidence.contains(probeSlot) { evidence.append(probeSlot) }
            }
            return CompiledVerdict(name: name, corroborate: rules?.corroborate == true, rules: compiledRules,
                                   evidenceProbeSlots: evidence)
        }
        self.slots = slots
        self.probeSlots = probeSlots
        var probeIds = [String](repeating: "", count: probeSlots.count)
        for (probe, slot) in probeSlots { probeIds[slot] = probe }
        self.probeIds = probeIds
        probeTiers = probeIds.map { tiers[$0] }
    }
}
