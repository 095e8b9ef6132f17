import FoundationEssentials

/// The bounds every backend holds a transaction to, and the parts of its writes that do not
/// depend on the SQL dialect: both backends run the same checks and plan the same rows.
package enum StoreLimits {
    /// The most rows a listing or lookup returns, whatever limit it was asked for.
    package static let maximumRows = 1_000
    /// The most hashes one `visitors(sharingAnyOf:)` lookup takes: a report has tens of components.
    package static let maximumLookupHashes = 4_096
    /// The most components, and the most device keys, one visitor keeps.
    package static let maximumVisitorComponents = 1_024

    /// What a visitor's rows count against its organization's quota: a visitor row, each of its
    /// components and each of its device keys, at about what one takes with its index entries.
    /// Counted per row, not per byte of text, so the sweep can take it off in SQL and re-keying
    /// changes nothing.
    package static let visitorRowBytes: Int64 = 256
    package static let componentRowBytes: Int64 = 192
    package static let deviceKeyRowBytes: Int64 = 160

    /// The quota cost of `visitors` visitor rows with `components` component and `keys` key rows.
    package static func rowBytes(visitors: Int64, components: Int64, keys: Int64) -> Int64 {
        visitors * visitorRowBytes + components * componentRowBytes + keys * deviceKeyRowBytes
    }

    /// A caller's row limit, within 0…`maximumRows`.
    package static func clamped(_ limit: Int) -> Int64 {
        Int64(max(0, min(limit, maximumRows)))
    }

    /// The distinct hashes of a component lookup as one JSON array (one bound parameter instead
    /// of an IN list as long as the input, so one prepared statement serves every lookup); nil
    /// when there is nothing to look up.
    package static func lookupList(_ hashes: [String], limit: Int) throws(StoreError) -> String? {
        let distinct = Array(Set(hashes))
        guard !distinct.isEmpty, limit > 0 else { return nil }
        guard distinct.count <= maximumLookupHashes else {
            throw StoreError("a visitor lookup by \(distinct.count) component hashes exceeds \(maximumLookupHashes)")
        }
        return try jsonArray(distinct)
    }

    /// Texts as one JSON array of strings: one bound parameter however many there are.
    package static func jsonArray(_ texts: [String]) throws(StoreError) -> String {
        do {
            return String(decoding: try JSONEncoder().encode(texts), as: UTF8.self)
        } catch {
            throw StoreError("cannot encode a list of \(texts.count) texts")
        }
    }
}

/// The component and device-key rows that writing a visitor deletes and inserts: only the
/// difference from what is stored, since a returning visitor's components rarely change.
package struct VisitorRowChanges {
    package let removedComponents: Set<ComponentRecord>
    package let addedComponents: Set<ComponentRecord>
    package let removedKeys: Set<String>
    /// Oldest-proven first, as the visitor holds them.
    package let addedKeys: [DeviceKeyRecord]

    /// Refuses a visitor past the bounds before anything is written.
    package static func check(_ visitor: VisitorRecord) throws(StoreError) {
        let limit = StoreLimits.maximumVisitorComponents
        guard visitor.components.count <= limit, visitor.deviceKeys.count <= limit else {
            throw StoreError("a visitor with \(visitor.components.count) components and \(visitor.deviceKeys.count) device keys exceeds "
                + "\(limit) of either")
        }
    }

    /// `previous` when it is this visitor as read earlier in the transaction and its row was
    /// updated in place (`updatedInPlace`): its components and keys are then what the rows hold.
    package static func known(_ previous: VisitorRecord?, for visitor: VisitorRecord, updatedInPlace: Bool) -> VisitorRecord? {
        guard updatedInPlace, let previous, previous.id == visitor.id, previous.organization == visitor.organization else { return nil }
        return previous
    }

    package init(_ visitor: VisitorRecord, storedComponents: Set<ComponentRecord>, storedKeys: Set<String>) {
        // A key's first-proven time never changes once stored: keys differ by their id alone.
        let wanted = Set(visitor.components), wantedKeys = Set(visitor.deviceKeys.map(\.keyId))
        removedComponents = storedComponents.subtracting(wanted)
        addedComponents = wanted.subtracting(storedComponents)
        removedKeys = storedKeys.subtracting(wantedKeys)
        var seen = storedKeys
        addedKeys = visitor.deviceKeys.filter { seen.insert($0.keyId).inserted }
    }
}
