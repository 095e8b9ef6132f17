/// Whether the user agreed to collection. Until it is `.granted`, nothing is read or sent.
public enum ConsentState: String, Sendable, Codable, Hashable, CaseIterable {
    /// Collection and submission may run.
    case granted
    /// Not asked yet, or no answer: nothing is read or sent.
    case pending
    /// Refused: nothing is read or sent.
    case denied
}

/// A call that needs consent while it is not granted. Nothing was read or sent.
public struct ConsentError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The consent state at the time of the call.
    public let state: ConsentState

    package init(state: ConsentState) { self.state = state }

    /// Names the state and what it means.
    public var description: String { "consent is \(state.rawValue): nothing is read or sent until it is granted" }
}
