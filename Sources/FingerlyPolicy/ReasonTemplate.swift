import FingerlyModel

/// A reason sentence with `{signal.name}` placeholders, split once when the policy loads.
///
/// The policy writes the sentence, the host the values it quotes. Rendering walks the parts
/// once and never reads inserted text again, so a value that itself holds `{signal.name}`
/// is quoted literally; each value and the whole sentence are cut to a byte limit.
package struct ReasonTemplate: Sendable, Hashable {
    /// Bytes of one inserted value, marker included.
    static let valueByteLimit = 256
    /// Bytes of one rendered reason, marker included.
    static let reasonByteLimit = 1024

    enum Part: Sendable, Hashable {
        case text(String)
        case placeholder(String)
    }

    let parts: [Part]

    /// A `{` opens a placeholder that runs to the next `}`; a `{` with no `}` after it is text.
    init(_ template: String) {
        var parts: [Part] = []
        var rest = Substring(template)
        while let open = rest.firstIndex(of: "{"), let close = rest[open...].firstIndex(of: "}") {
            if open > rest.startIndex { parts.append(.text(String(rest[..<open]))) }
            parts.append(.placeholder(String(rest[rest.index(after: open)..<close])))
            rest = rest[rest.index(after: close)...]
        }
        if !rest.isEmpty { parts.append(.text(String(rest))) }
        self.parts = parts
    }

    /// Parts split ahead of time, for the generated default policy.
    init(parts: [Part]) {
        self.parts = parts
    }

    var placeholders: [String] {
        parts.compactMap { if case .placeholder(let name) = $0 { name } else { nil } }
    }

    /// `signal` gives the value of a named placeholder; `{value}` is `value`.
    func render(value: SignalValue?, signal: (String) -> SignalValue?) -> String {
        var text = BoundedText(limit: Self.reasonByteLimit)
        for part in parts {
            if text.isFull { break }
            switch part {
            case .text(let literal):
                text.append(literal)
            case .placeholder(let name):
                let inserted = name == "value" ? value : signal(name)
                // Already escaped and cut: appending it escapes nothing twice.
                text.append(inserted?.boundedDescription(limit: Self.valueByteLimit) ?? "unknown", escapingControls: false)
            }
        }
        return text.text
    }
}
