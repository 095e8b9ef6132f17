import FingerlyStore
import Synchronization

/// Counters for `GET /metrics`, in the Prometheus text exposition format (version 0.0.4). Per
/// process: a scraper adds up the processes itself, as it does for any horizontally run service.
package final class ServerMetrics: Sendable {
    /// Latency bucket bounds, seconds: the identify target is a p99 under 25 ms.
    static let bucketBounds: [Double] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]

    private struct State {
        var requests: [String: [Int: Int]] = [:]
        var buckets: [String: [Int]] = [:]
        var latencySum: [String: Double] = [:]
        var latencyCount: [String: Int] = [:]
        var aborted = 0
        var storeErrors = 0
        var signatures: [String: Int] = [:]
        var unknownMembersDropped = 0
        var failureLimited = 0
        var deviceQuotaRefused = 0
        var purged: [String: Int] = [:]
    }

    /// What the store keeps, read when `/metrics` is asked: bytes of event documents over all
    /// organizations, and how many organizations are at their quota. nil when the store failed.
    package struct Storage: Sendable {
        package var eventBytes: Int64
        package var organizationsOverQuota: Int
        package init(eventBytes: Int64, organizationsOverQuota: Int) {
            self.eventBytes = eventBytes
            self.organizationsOverQuota = organizationsOverQuota
        }
    }

    private let state = Mutex(State())

    package init() {}

    package func record(route: String, status: Int, seconds: Double) {
        state.withLock { state in
            guard status != 0 else { state.aborted += 1; return }
            state.requests[route, default: [:]][status, default: 0] += 1
            var buckets = state.buckets[route] ?? Array(repeating: 0, count: Self.bucketBounds.count)
            for (index, bound) in Self.bucketBounds.enumerated() where seconds <= bound { buckets[index] += 1 }
            state.buckets[route] = buckets
            state.latencySum[route, default: 0] += seconds
            state.latencyCount[route, default: 0] += 1
        }
    }

    package func storeError() { state.withLock { $0.storeErrors += 1 } }

    /// `verified`, `unsigned`, or the reason a signature was refused.
    package func signature(_ outcome: String) { state.withLock { $0.signatures[outcome, default: 0] += 1 } }

    /// Members of a stored submission that no type reads: dropped, never stored.
    package func unknownMembersDropped(_ count: Int) {
        state.withLock { $0.unknownMembersDropped &+= count }
    }

    package var storeErrors: Int { state.withLock { $0.storeErrors } }

    /// A request answered 429 too_many_failures without touching the store.
    package func failureLimited() { state.withLock { $0.failureLimited += 1 } }

    /// An identify answered 507 device_quota_exceeded: its device's events fill its share.
    package func deviceQuotaRefused() { state.withLock { $0.deviceQuotaRefused += 1 } }

    /// Rows a retention pass removed: `events`, `visitors` or `idempotency`.
    package func purged(_ kind: String, _ count: Int) { state.withLock { $0.purged[kind, default: 0] += count } }

    package func exposition(inFlight: Int, storage: Storage? = nil, groupCommits: GroupCommitCounts? = nil) -> String {
        state.withLock { state in
            var lines: [String] = []
            lines.append("# HELP fingerly_http_requests_total Requests answered, by route and status.")
            lines.append("# TYPE fingerly_http_requests_total counter")
            for route in state.requests.keys.sorted() {
                for (status, count) in state.requests[route, default: [:]].sorted(by: { $0.key < $1.key }) {
                    lines.append("fingerly_http_requests_total{route=\"\(route)\",status=\"\(status)\"} \(count)")
                }
            }
            lines.append("# HELP fingerly_http_request_duration_seconds Time from the request head to the end of the answer.")
            lines.append("# TYPE fingerly_http_request_duration_seconds histogram")
            for route in state.buckets.keys.sorted() {
                let buckets = state.buckets[route, default: []]
                for (index, bound) in Self.bucketBounds.enumerated() {
                    lines.append("fingerly_http_request_duration_seconds_bucket{route=\"\(route)\",le=\"\(bound)\"} \(buckets[index])")
                }
                let count = state.latencyCount[route, default: 0]
                lines.append("fingerly_http_request_duration_seconds_bucket{route=\"\(route)\",le=\"+Inf\"} \(count)")
                lines.append("fingerly_http_request_duration_seconds_sum{route=\"\(route)\"} \(state.latencySum[route, default: 0])")
                lines.append("fingerly_http_request_duration_seconds_count{route=\"\(route)\"} \(count)")
            }
            lines.append("# HELP fingerly_http_requests_aborted_total Requests that ended without an answer (timeout, client gone).")
            lines.append("# TYPE fingerly_http_requests_aborted_total counter")
            lines.append("fingerly_http_requests_aborted_total \(state.aborted)")
            lines.append("# HELP fingerly_http_requests_in_flight Requests being read or answered.")
            lines.append("# TYPE fingerly_http_requests_in_flight gauge")
            lines.append("fingerly_http_requests_in_flight \(inFlight)")
            lines.append("# HELP fingerly_store_errors_total Store operations that failed (the request got 500 or 503).")
            lines.append("# TYPE fingerly_store_errors_total counter")
            lines.append("fingerly_store_errors_total \(state.storeErrors)")
            lines.append("# HELP fingerly_identify_signatures_total Identify requests whose body was read, "
                + "by signature outcome (unjudged: refused before the signature was looked at).")
            lines.append("# TYPE fingerly_identify_signatures_total counter")
            for (outcome, count) in state.signatures.sorted(by: { $0.key < $1.key }) {
                lines.append("fingerly_identify_signatures_total{outcome=\"\(outcome)\"} \(count)")
            }
            lines.append("# HELP fingerly_unknown_members_dropped_total Members no field reads, never stored.")
            lines.append("# TYPE fingerly_unknown_members_dropped_total counter")
            lines.append("fingerly_unknown_members_dropped_total \(state.unknownMembersDropped)")
            lines.append("# HELP fingerly_failure_limited_total Requests refused 429 too_many_failures: "
                + "their address failed authentication too often.")
            lines.append("# TYPE fingerly_failure_limited_total counter")
            lines.append("fingerly_failure_limited_total \(state.failureLimited)")
            lines.append("# HELP fingerly_device_quota_refused_total Identify requests refused 507 "
                + "device_quota_exceeded: their device's events fill its share of the organization's quota.")
            lines.append("# TYPE fingerly_device_quota_refused_total counter")
            lines.append("fingerly_device_quota_refused_total \(state.deviceQuotaRefused)")
            lines.append("# HELP fingerly_retention_purged_total Rows removed by retention: "
                + "events, visitors (with their components and keys), idempotency records.")
            lines.append("# TYPE fingerly_retention_purged_total counter")
            for kind in ["events", "visitors", "idempotency"] {
                lines.append("fingerly_retention_purged_total{kind=\"\(kind)\"} \(state.purged[kind, default: 0])")
            }
            if let groupCommits {
                lines.append("# HELP fingerly_store_group_commit_transactions Transactions each commit stored "
                    + "(concurrent requests commit together).")
                lines.append("# TYPE fingerly_store_group_commit_transactions histogram")
                var cumulative = 0
                for (index, bound) in GroupCommitCounts.bounds.enumerated() {
                    cumulative += groupCommits.commits[index]
                    lines.append("fingerly_store_group_commit_transactions_bucket{le=\"\(bound)\"} \(cumulative)")
                }
                lines.append("fingerly_store_group_commit_transactions_bucket{le=\"+Inf\"} \(cumulative)")
                lines.append("fingerly_store_group_commit_transactions_sum \(groupCommits.transactions)")
                lines.append("fingerly_store_group_commit_transactions_count \(cumulative)")
            }
            if let storage {
                lines.append("# HELP fingerly_store_event_bytes Bytes counted against storage quotas, all organizations "
                    + "together: event documents as stored and visitor rows.")
                lines.append("# TYPE fingerly_store_event_bytes gauge")
                lines.append("fingerly_store_event_bytes \(storage.eventBytes)")
                lines.append("# HELP fingerly_store_organizations_over_quota Organizations whose events fill their storage quota "
                    + "(identify answers 507).")
                lines.append("# TYPE fingerly_store_organizations_over_quota gauge")
                lines.append("fingerly_store_organizations_over_quota \(storage.organizationsOverQuota)")
            }
            return lines.joined(separator: "\n") + "\n"
        }
    }
}
