/// The runtime integrity verdicts alone, for a check right before a sensitive action.
public struct IntegrityResult: Sendable, Codable {
    public static let verdictNames: [VerdictName] = [.debugger, .tampering, .instrumentation, .automation]

    public let verdicts: [VerdictName: Verdict]
    public let report: SignalReport
}

extension Fingerly {
    /// Runs only the probes that the debugger, tampering, instrumentation and automation rules
    /// read, and judges them. The fast tier (the default) is cheap enough to call again and
    /// again in one process; add `.deferred` for the in-memory-versus-disk code comparison and
    /// the scans of other processes.
    public func checkIntegrity(tiers: Set<Tier> = [.fast]) async throws(ConsentError) -> IntegrityResult {
        let consent = currentConsent
        guard consent == .granted else { throw ConsentError(consent: consent) }
        let requestedAt = monotonicMilliseconds()
        let probeIds = integrityProbeIds
        let report = await withCheckedContinuation { continuation in
            let started = startDetachedThread {
                continuation.resume(returning: self.collectBlocking(tag: nil, tiers: tiers, startedAt: requestedAt, only: probeIds))
            }
            if !started { continuation.resume(returning: self.collectBlocking(tag: nil, tiers: tiers, startedAt: requestedAt, only: probeIds)) }
        }
        let all = engine.evaluate(report)
        return IntegrityResult(verdicts: all.filter { IntegrityResult.verdictNames.contains($0.key) }, report: report)
    }

}
