/// How suspicious a request is, from the policy's levels over the suspect score.
public enum SuspectLevel: String, Sendable, Codable, Hashable {
    /// Below the policy's `medium` level.
    case low
    /// From the policy's `medium` level.
    case medium
    /// From the policy's `high` level.
    case high
}

/// What raised the suspect score: one true verdict and the points it added.
public struct IdentifyTrigger: Sendable, Codable, Hashable {
    /// The rule that decided it (the code of the verdict's strongest reason).
    public let signal: String
    /// The verdict it belongs to.
    public let group: String
    /// Points added to the score: the verdict's weight times the factor of its confidence.
    public let weight: Int
    /// The verdict's confidence.
    public let confidence: Confidence

    package init(signal: String, group: String, weight: Int, confidence: Confidence) {
        self.signal = signal
        self.group = group
        self.weight = weight
        self.confidence = confidence
    }
}
