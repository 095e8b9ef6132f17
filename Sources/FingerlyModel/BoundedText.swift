/// Text built under a byte limit from pieces that may be huge or hostile (host values, policy
/// text echoed in errors): control characters are escaped so nothing reaches a terminal as a
/// command, and a cut ends on a scalar boundary with a visible marker.
package struct BoundedText {
    static let cutMarker = "…"
    private static let markerBytes = cutMarker.utf8.count

    let limit: Int
    /// What fits in `limit` even with the marker after it.
    private var kept = ""
    private var keptBytes = 0
    /// What fits only if nothing follows: kept back until it is known whether a cut comes.
    private var pending = ""
    private var pendingBytes = 0
    private(set) var isCut = false

    package init(limit: Int) {
        self.limit = max(limit, Self.markerBytes)
    }

    package var isFull: Bool { isCut }

    package var text: String { isCut ? kept + Self.cutMarker : kept + pending }

    /// Appends until the limit; stops reading `piece` as soon as it no longer fits.
    package mutating func append(_ piece: some StringProtocol, escapingControls: Bool = true) {
        // A piece with nothing to escape that fits whole before the marker comes out of the
        // scalar loop unchanged; that loop costs hundreds of instructions a byte, and every
        // verdict reason and probe detail passes through here on each integrity check. Read as a
        // buffer: a caller in another module gets this function unspecialized, where a generic
        // allSatisfy over the view costs as much as the loop.
        let room = limit - Self.markerBytes - keptBytes
        if !isCut, pending.isEmpty, let whole = piece.utf8.withContiguousStorageIfAvailable({ buffer -> String? in
            guard buffer.count <= room,
                  !escapingControls || buffer.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) else { return nil }
            return String(decoding: buffer, as: UTF8.self)
        }) ?? nil {
            kept += whole
            keptBytes += whole.utf8.count
            return
        }
        for scalar in piece.unicodeScalars {
            guard !isCut else { return }
            if escapingControls, let escape = Self.escape(scalar) {
                appendUnit(escape, bytes: escape.utf8.count)
            } else {
                appendUnit(String(scalar), bytes: UTF8.width(scalar))
            }
        }
    }

    /// An escape sequence goes in whole or not at all, so a cut never leaves half of one.
    private mutating func appendUnit(_ unit: String, bytes: Int) {
        if pending.isEmpty, keptBytes + bytes <= limit - Self.markerBytes {
            kept += unit
            keptBytes += bytes
        } else if keptBytes + pendingBytes + bytes <= limit {
            pending += unit
            pendingBytes += bytes
        } else {
            isCut = true
            pending = ""
            pendingBytes = 0
        }
    }

    /// C0 and C1 controls and DEL, written the way a JSON or Swift reader would: ESC is
    /// "\u001B", so a hostile value cannot clear a screen or retitle a terminal.
    package static func escape(_ scalar: Unicode.Scalar) -> String? {
        switch scalar.value {
        case 0x0A: return "\\n"
        case 0x0D: return "\\r"
        case 0x09: return "\\t"
        case 0..<0x20, 0x7F...0x9F:
            let hex = String(scalar.value, radix: 16, uppercase: true)
            return "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
        case 0x2028, 0x2029:
            return "\\u" + String(scalar.value, radix: 16, uppercase: true)
        default:
            // Invisible format characters: bidi overrides (U+202E shows text reversed), isolates,
            // zero-width spaces and joiners. A host string must read as what it holds.
            guard scalar.value > 0x9F, scalar.properties.generalCategory == .format else { return nil }
            let hex = String(scalar.value, radix: 16, uppercase: true)
            return "\\u" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex
        }
    }

    /// One piece of text, escaped and cut to `limit` bytes.
    package static func bounded(_ piece: some StringProtocol, limit: Int) -> String {
        var text = BoundedText(limit: limit)
        text.append(piece)
        return text.text
    }
}

extension SignalValue {
    /// The value as text, escaped and cut to `limit` bytes, without ever building the whole
    /// of a long list first.
    package func boundedDescription(limit: Int) -> String {
        var text = BoundedText(limit: limit)
        switch self {
        case .bool, .int: text.append(description)
        case .string(let value): text.append(value)
        case .strings(let items):
            for (index, item) in items.enumerated() {
                if text.isFull { break }
                if index > 0 { text.append(", ") }
                text.append(item)
            }
        }
        return text.text
    }
}

extension StringProtocol {
    /// The text with its control characters escaped, for a terminal: file names and details
    /// from a measured tree may carry ESC sequences that retitle or clear it.
    package var escapingControlCharacters: String {
        guard unicodeScalars.contains(where: { BoundedText.escape($0) != nil }) else { return String(self) }
        return BoundedText.bounded(self, limit: .max)
    }
}

extension String {
    /// At most `limit` UTF-8 bytes, cut on a scalar boundary, with "…" where something was cut.
    package func truncatedToUTF8(_ limit: Int) -> String {
        guard utf8.count > limit else { return self }
        var text = BoundedText(limit: limit)
        text.append(self, escapingControls: false)
        return text.text
    }
}
