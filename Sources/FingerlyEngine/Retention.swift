import FingerlyStore

/// How long a store keeps what identify writes, for the server and the embedded local mode
/// alike: one declaration, so a local store ages as a server's does.
package struct Retention: Sendable, Hashable {
    /// Days an event is kept; 0 keeps events forever.
    package static let defaultEventDays = 30
    /// Days a visitor unseen is kept, with its components and device keys; 0 keeps them forever.
    package static let defaultVisitorDays = 90
    /// Rate counters older than this are of no window any more.
    static let counterSeconds: Int64 = 60

    package var eventDays: Int
    package var visitorDays: Int

    package init(eventDays: Int = Self.defaultEventDays, visitorDays: Int = Self.defaultVisitorDays) {
        self.eventDays = eventDays
        self.visitorDays = visitorDays
    }

    /// Removes, in one transaction, events and visitors past their days, idempotency records past
    /// the key lifetime and old rate counters. The rows removed per kind: `events`, `visitors`,
    /// `idempotency`.
    package func purge(_ store: any IdentityStore, now: Int64) throws(StoreError) -> [(kind: String, count: Int)] {
        try store.transaction { tx throws(StoreError) -> [(kind: String, count: Int)] in
            var purged: [(kind: String, count: Int)] = []
            if eventDays > 0 {
                purged.append(("events", try tx.expireEvents(receivedBefore: Self.cutoff(now, days: eventDays))))
            }
            if visitorDays > 0 {
                purged.append(("visitors", try tx.expireVisitors(lastSeenBefore: Self.cutoff(now, days: visitorDays))))
            }
            let idempotencyCutoff = now.subtractingReportingOverflow(IdentityEngine.idempotencyRetentionSeconds)
            let idempotencyBefore = idempotencyCutoff.overflow ? Int64.min : idempotencyCutoff.partialValue
            purged.append(("idempotency", try tx.expireIdempotency(createdBefore: idempotencyBefore)))
            let counters = now.subtractingReportingOverflow(Self.counterSeconds)
            _ = try tx.expireCounters(windowsBefore: counters.overflow ? .min : counters.partialValue)
            return purged
        }
    }

    /// `now` less `days`, or the earliest time when a hostile clock would take it past Int64.
    static func cutoff(_ now: Int64, days: Int) -> Int64 {
        let span = Int64(days).multipliedReportingOverflow(by: 86_400)
        guard !span.overflow else { return .min }
        let cutoff = now.subtractingReportingOverflow(span.partialValue)
        return cutoff.overflow ? .min : cutoff.partialValue
    }
}
