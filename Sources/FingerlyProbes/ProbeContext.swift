import FingerlyCatalogue
import FingerlyHost
import FingerlyModel

/// What a probe sees while it runs: the host, the hasher for identifiers, the detection tables,
/// and the signals it has emitted so far. Used by one probe on one thread, never shared.
package final class ProbeContext {
    let host: HostFileSystem
    let detectionTables: DetectionTables
    /// TLS endpoints the caller asked to check (--check-tls).
    let pinChecks: [TLSPinCheck]
    /// When the scheduler abandons this probe (monotonic ms): work that can wait on the network
    /// must end by then, since an abandoned thread runs on unobserved.
    package var deadline: Double = .infinity
    /// Where the trust store's cache is kept; nil without a usable state directory (no cache).
    package var trustStoreCacheStorage: (any TrustStoreCacheStorage)?
    private let filter: AttributeFilter
    private let hasher: IdentifierHasher
    package private(set) var signals: [String: SignalValue] = [:]
    package private(set) var issues: [SourceIssue] = []
    /// A remark for the report on how the probe got its data (a fallback, say).
    package private(set) var notes: [String] = []
    package private(set) var components: [IdentityComponent] = []

    package init(host: HostFileSystem, tables: DetectionTables, filter: AttributeFilter, hasher: IdentifierHasher,
         pinChecks: [TLSPinCheck] = []) {
        self.host = host
        self.detectionTables = tables
        self.pinChecks = pinChecks
        self.filter = filter
        self.hasher = hasher
    }

    /// Whether the caller wants a signal at all; check before reading anything for it.
    func wants(_ signal: String) -> Bool { !filter.ignores(signal: signal) }

    /// Bounds on what one probe may put in the report. The host writes these values (DMI
    /// strings, device names, environment), so without them a hostile tree makes the report, and
    /// everything that renders it, as large as it likes. A large server's PCI list fits.
    static let stringValueByteLimit = 512
    static let listItemLimit = 256
    static let listItemByteLimit = 256
    static let signalBytesLimit = 16 * 1024
    static let issueLimit = 16
    static let noteLimit = 8
    private var signalBytes = 0
    private var droppedIssues = 0
    /// Details a probe must see every issue of, whatever `issueLimit` leaves out of the report: a file cut short
    /// is evidence, and seventeen unreadable files in front of it must not hide it.
    var watchedDetails: Set<String> = []
    /// The paths of the issues with a watched detail, in the order met, at most `listItemLimit`.
    private(set) var watchedPaths: [String] = []

    /// Signals the catalogue marks `personalPaths`.
    static let personalPathSignals: Set<String> = Set(ProbeCatalogue.embedded.probes.flatMap(\.signals)
        .filter { $0.personalPaths == true }.map(\.name))

    func emit(_ signal: String, _ value: SignalValue) {
        guard wants(signal) else { return }
        var value = value
        if Self.personalPathSignals.contains(signal) {
            switch value {
            case .string(let text): value = .string(hasher.personalPaths(text))
            case .strings(let items): value = .strings(items.map(hasher.personalPaths))
            case .bool, .int: break
            }
        }
        var budget = Self.signalBytesLimit - signalBytes
        var bounded: SignalValue
        switch value {
        case .bool, .int:
            bounded = value
            budget -= 8
        case .string(let text):
            let cut = text.truncatedToUTF8(Self.stringValueByteLimit)
            budget -= cut.utf8.count
            bounded = .string(budget < 0 ? "" : cut)
        case .strings(let items):
            var kept: [String] = []
            for item in items.prefix(Self.listItemLimit) {
                let cut = item.truncatedToUTF8(Self.listItemByteLimit)
                guard budget - cut.utf8.count - 3 >= 0 else { budget = -1; break }
                budget -= cut.utf8.count + 3
                kept.append(cut)
            }
            if items.count > Self.listItemLimit { budget = min(budget, -1) }
            bounded = .strings(kept)
        }
        if budget < 0, !issues.contains(where: { $0.path == signal }) {
            record(HostReadError(.malformed, path: signal,
                                 detail: "value cut: a probe reports at most \(Self.signalBytesLimit / 1024) KiB, lists of \(Self.listItemLimit), strings of \(Self.stringValueByteLimit) bytes"))
        }
        signalBytes = Self.signalBytesLimit - max(0, budget)
        signals[signal] = bounded
    }

    func emit(_ signal: String, _ value: String) { emit(signal, .string(value)) }
    func emit(_ signal: String, _ value: Int) { emit(signal, .int(value)) }
    func emit(_ signal: String, _ value: Bool) { emit(signal, .bool(value)) }
    func emit(_ signal: String, _ value: [String]) { emit(signal, .strings(value)) }

    /// The keyed hash of a raw identifier, for signals that list several.
    func hash(_ raw: String) -> String { hasher.hash(raw) }

    /// Free text that can name a person (a CA subject, a device name), as the policy wants it
    /// reported: a fingerprint unless `privacy.freeText` is `keep`. Such signals are marked
    /// `personal` in the catalogue.
    func personal(_ text: String) -> String { hasher.personal(text) }

    /// Emits a raw identifier as its keyed hash; the raw value never reaches the report.
    func emitIdentifier(_ signal: String, raw: String) {
        guard wants(signal) else { return }
        signals[signal] = .string(hasher.hash(raw))
    }

    func note(_ text: String) {
        guard notes.count < Self.noteLimit else { return }
        notes.append(hasher.personalPaths(text).truncatedToUTF8(Self.stringValueByteLimit))
    }

    /// Offers a value to the stable identifiers. It is hashed here; `world-readable` says
    /// whether an unprivileged user can read it too, because only such values may shape an
    /// identifier (root-only values are kept as extra evidence). A component follows the signal
    /// that reports the same value: ignoring the signal leaves the component out too.
    func contribute(_ scope: IdentityComponent.Scope, _ name: String, raw: String, worldReadable: Bool, signal: String) {
        guard wants(signal), components.count < Self.listItemLimit else { return }
        components.append(IdentityComponent(scope: scope, name: name, hash: hasher.hash(raw), worldReadable: worldReadable))
    }

    /// Runs one read; a failure is recorded as an issue of this probe and yields nil.
    func attempt<T>(_ read: () throws(HostReadError) -> T) -> T? {
        do {
            return try read()
        } catch {
            record(error)
            return nil
        }
    }

    /// Like `attempt`, for optional sources: a missing file is normal there, not an issue.
    func attemptIfPresent<T>(_ read: () throws(HostReadError) -> T) -> T? {
        do {
            return try read()
        } catch {
            if error.failure != .absent { record(error) }
            return nil
        }
    }

    func record(_ error: HostReadError) {
        if watchedDetails.contains(error.detail), watchedPaths.count < Self.listItemLimit {
            watchedPaths.append(hasher.personalPaths(error.path))
        }
        // A tree of ten thousand unreadable files is one finding, not ten thousand.
        guard issues.count < Self.issueLimit else {
            droppedIssues += 1
            let summary = SourceIssue(path: "(more)", status: ProbeStatus(error.failure),
                                      detail: "\(droppedIssues) more unreadable or malformed sources not listed")
            if issues.count == Self.issueLimit { issues.append(summary) } else { issues[issues.count - 1] = summary }
            return
        }
        // Paths under a home directory name its user: reduced like the signals marked personalPaths.
        issues.append(SourceIssue(path: hasher.personalPaths(error.path).truncatedToUTF8(Self.stringValueByteLimit),
                                  status: ProbeStatus(error.failure),
                                  detail: hasher.personalPaths(error.detail).truncatedToUTF8(Self.stringValueByteLimit)))
    }

    /// A detection table a probe asked for is missing or of another shape: once per table, as
    /// the probe may ask inside a loop.
    func recordTableProblem(_ name: String, _ detail: String) {
        let path = "detection-tables.json#" + name
        guard !issues.contains(where: { $0.path == path }) else { return }
        record(HostReadError(.error, path: path, detail: detail))
    }

    func recordMalformed(_ path: String, _ detail: String) {
        record(HostReadError(.malformed, path: path, detail: detail))
    }

    /// The probe's status when it returned normally: ok once anything was learned, otherwise the
    /// most telling of the failures it met.
    package var completedStatus: ProbeStatus {
        if !signals.isEmpty || issues.isEmpty { return .ok }
        let severity: [ProbeStatus] = [.denied, .malformed, .error, .absent]
        return severity.first { status in issues.contains { $0.status == status } } ?? .error
    }
}
