/// Which key the identifier hashes of a report were made with.
public enum IdentifierKeying: String, Sendable, Codable, Hashable {
    /// The organization named in the API key: one organization always sees the same value for a
    /// host, whichever of its keys or environments sent it.
    case organization
    /// A random secret kept in this installation's state directory: stable across runs here,
    /// unlinkable to any other installation's reports.
    case installationSecret
    /// A random key for this run only, when there is no API key and no usable state directory:
    /// nothing links two runs.
    case perRun
}

/// How free text that can name a person (a local CA's subject, an input device's name) leaves
/// a probe: the policy's `privacy.freeText`.
public enum FreeTextHandling: String, Sendable, Codable, Hashable, CaseIterable {
    /// A keyed fingerprint (`fp:` and 16 hex digits) in place of the text: equal texts still
    /// compare equal within one keying, and the text itself never reaches the report.
    case fingerprint
    /// The text as read: for an operator looking at their own machine.
    case keep
}
