import FingerlyCatalogue
import FingerlyHost
import FingerlyModel

/// The attributes a caller asked Fingerly neither to read nor to report (`--ignore`).
package struct AttributeFilter: Sendable, Hashable {
    /// Exact signal names, `prefix.*` patterns, or probe ids.
    let ignored: Set<String>

    static let none = AttributeFilter(ignored: [])

    func ignores(signal: String) -> Bool {
        if ignored.contains(signal) { return true }
        return ignored.contains { pattern in
            pattern.hasSuffix(".*") && signal.hasPrefix(String(pattern.dropLast(1)))
        }
    }

    package func ignores(probe entry: ProbeCatalogue.Entry) -> Bool {
        ignored.contains(entry.id) || entry.signals.allSatisfy { ignores(signal: $0.name) }
    }

    /// Attributes that name nothing in the catalogue.
    package func unknownAttributes(in catalogue: ProbeCatalogue) -> [String] {
        let probeIds = Set(catalogue.probes.map(\.id))
        let signals = catalogue.signalNames
        return ignored.filter { pattern in
            if probeIds.contains(pattern) || signals.contains(pattern) { return false }
            if pattern.hasSuffix(".*") {
                let prefix = String(pattern.dropLast(1))
                return !signals.contains { $0.hasPrefix(prefix) }
            }
            return true
        }.sorted()
    }

    package init(ignored: Set<String>) {
        self.ignored = ignored
    }
}
