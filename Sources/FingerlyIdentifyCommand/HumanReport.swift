import Fingerly
import FingerlyModel
import FingerlyPolicy
import FingerlyProbes

/// The readable summary: verdicts with their reasons, then probe statuses and timings.
struct HumanReport {
    let result: IdentifyResult
    let colour: Bool

    private func paint(_ text: String, _ code: String) -> String {
        colour ? "\u{1B}[\(code)m\(text)\u{1B}[0m" : text
    }

    /// Pads to a visible width: colour escapes take no columns.
    private func padded(_ text: String, _ width: Int) -> String {
        var visible = 0
        var inEscape = false
        for character in text {
            if character == "\u{1B}" { inEscape = true } else if inEscape { inEscape = character != "m" } else { visible += 1 }
        }
        return visible >= width ? text + " " : text + String(repeating: " ", count: width - visible)
    }

    func render() -> String {
        let report = result.report
        var lines: [String] = []
        let place = report.root == "/" ? "this host" : "root \(report.root.escapingControlCharacters)"
        lines.append(paint("Fingerly \(report.collectorVersion)", "1") + " — \(place), tiers \(report.tiers.map(\.rawValue).joined(separator: "+")), "
            + "\(format(report.elapsedMs)) of a \(report.budgetMs) ms budget, policy '\(result.policy)'")
        lines.append("")
        lines.append(paint("Verdicts", "1"))
        for name in VerdictName.allCases {
            let verdict = result.verdicts[name]
            let value = verdict.value ? paint("TRUE ", "1;31") : "false"
            var line = "  " + padded(name.rawValue, 16) + value + "  " + verdict.confidence.rawValue
            if let kind = verdict.kind { line = padded(line, 34) + "kind: \(kind)" }
            lines.append(line)
            for reason in verdict.reasons {
                lines.append("      - [\(reason.code), \(reason.confidence.rawValue)] \(reason.message.escapingControlCharacters)")
            }
            if let omitted = verdict.reasonsOmitted, omitted > 0 {
                lines.append("      - (\(omitted) more reasons not shown: the report bounds each verdict's reasons)")
            }
            for missing in verdict.missingEvidence {
                lines.append("      ? " + missing.message.escapingControlCharacters)
            }
        }
        lines.append("")
        lines.append(paint("Probes", "1"))
        for probe in report.probes {
            let status = probe.status == .ok ? probe.status.rawValue : paint(probe.status.rawValue, "33")
            var line = "  " + padded(probe.id, 24) + padded(probe.tier.rawValue, 10) + padded(status, 10)
                + padded(format(probe.durationMs), 10) + "\(probe.signals.count) signal\(probe.signals.count == 1 ? "" : "s")"
            if let detail = probe.detail { line += " — \(detail.escapingControlCharacters)" }
            lines.append(line)
            for issue in probe.issues where probe.status == .ok {
                lines.append("      ? \(issue.path.escapingControlCharacters): \(issue.status.rawValue) (\(issue.detail.escapingControlCharacters))")
            }
        }
        lines.append("")
        let sent: String
        switch result.state {
        case .enriched:
            sent = "Submitted: request \(result.requestId.escapingControlCharacters), visitor \((result.visitorId ?? "-").escapingControlCharacters)"
                + "\(result.visitorIsNew == true ? " (new)" : "")\(result.visitorConfidence.map { ", confidence \($0)" } ?? "")"
                + "\(result.duplicate ? ", a replayed answer" : "")."
        case .local:
            sent = "Resolved here: visitor \((result.visitorId ?? "-").escapingControlCharacters)\(result.visitorIsNew == true ? " (new)" : "")."
        case .unavailable:
            sent = "Not delivered: the verdicts are this host's own (the error is on stderr)."
        case .collected:
            sent = "Nothing was sent."
        }
        if let score = result.suspectScore, let level = result.suspectLevel {
            lines.append("Suspect score \(score) (\(level.rawValue)). \(sent) --json shows the full report.")
        } else {
            lines.append("No suspect score: the policy has no suspect section. \(sent) --json shows the full report.")
        }
        switch report.identifierKeying {
        case .organization?: lines.append("Identifiers are keyed by the organization named in the API key: any of its keys gives the same ones.")
        case .installationSecret?: lines.append("Identifiers are keyed by this installation's secret (state directory): no other installation's reports match them.")
        case .perRun?: lines.append("Identifiers are keyed for this run only (no usable state directory): they match no other run.")
        case nil: break
        }
        return lines.joined(separator: "\n") + "\n"
    }

    private func format(_ milliseconds: Double) -> String {
        let tenths = Int((milliseconds * 10).rounded())
        return "\(tenths / 10).\(tenths % 10) ms"
    }
}
