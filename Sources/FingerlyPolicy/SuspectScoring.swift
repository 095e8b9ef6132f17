import FingerlyModel

/// The policy's `suspect` section, applied to verdicts: each true verdict adds its weight times
/// the factor of its confidence; the sum, capped at 100, is the score, and the policy's levels
/// turn it into low, medium or high.
package struct SuspectScoring: Sendable, Hashable {
    package let weights: [VerdictName: Int]
    package let confidenceFactors: [Confidence: Double]
    /// The lowest score that is `medium`; below it a request is `low`.
    package let mediumFrom: Int
    /// The lowest score that is `high`.
    package let highFrom: Int

    package struct Assessment: Sendable, Hashable {
        package let score: Int
        package let level: SuspectLevel
        /// One for each true verdict that added to the score, in verdict order.
        package let triggers: [IdentifyTrigger]
    }

    package func assess(_ verdicts: Verdicts) -> Assessment {
        var total = 0.0
        var triggers: [IdentifyTrigger] = []
        for name in VerdictName.allCases {
            let verdict = verdicts[name]
            guard verdict.value, let weight = weights[name], weight > 0 else { continue }
            let points = Double(weight) * (confidenceFactors[verdict.confidence] ?? 0)
            total += points
            // The strongest reason names the trigger; among equals, the policy's order ranks.
            let strongest = verdict.reasons.max { $0.confidence < $1.confidence }
            triggers.append(IdentifyTrigger(signal: strongest?.code ?? name.rawValue, group: name.rawValue,
                                            weight: Int(points.rounded()), confidence: verdict.confidence))
        }
        let score = min(100, Int(total.rounded()))
        let level: SuspectLevel = score >= highFrom ? .high : score >= mediumFrom ? .medium : .low
        return Assessment(score: score, level: level, triggers: triggers)
    }
}
