import FingerlyCatalogue
import FingerlyHost
import FingerlyModel
import FingerlyStore
#if canImport(Glibc)
import Glibc
#endif

/// How the engine recomputes a report's identifiers from its components: the key the client
/// hashed them under. A server's clients key by their API key's organization (public inside
/// every `fly_pk_…`); the local mode's by its installation secret, which it holds.
package enum ClientIdentifierKeying: Sendable {
    case organizationName
    case hasher(IdentifierHasher)

    func hasher(organization: String) -> IdentifierHasher {
        switch self {
        case .organizationName: IdentifierHasher(organization: organization)
        case .hasher(let hasher): hasher
        }
    }
}

/// The check that a report's `instanceId` and `hardwareId` are what its components derive: an
/// identifier copied from another host onto components of one's own is refused, never matched.
enum IdentityDerivationCheck {
    /// The identifier field that does not derive from the report's components; nil when both do.
    static func underivedField(_ report: SignalReport, hasher: IdentifierHasher) -> String? {
        let derived = HostIdentity.derivedIdentifiers(from: report.probes.flatMap(\.identityComponents), hasher: hasher)
        let identity = report.identity
        // A version this server does not derive is no identifier it can check.
        if identity.instanceId != derived.instanceId
            || (identity.instanceId != nil && identity.instanceIdVersion != HostIdentity.instanceIdVersion) {
            return "report.identity.instanceId"
        }
        if identity.hardwareId != derived.hardwareId
            || (identity.hardwareId != nil && identity.hardwareIdVersion != HostIdentity.hardwareIdVersion) {
            return "report.identity.hardwareId"
        }
        return nil
    }
}

/// The organization's server-side keying of what it stores: every identifier and component hash
/// a client sent is kept as an HMAC under a secret the server made and never sends, so a leaked
/// database or event holds no value a client could send back as its own claim (whatever a
/// client sends is re-keyed before it is compared).
package struct StoredIdentifierKeys: Sendable {
    package static let secretLength = 32
    /// Keyed once: `rekey`, run for a report's few dozen values, then costs the value's blocks and two more.
    private let code: HMACSHA256

    package init(secret: [UInt8]) {
        code = HMACSHA256(key: secret)
    }

    private static let domain = Array("fingerly-stored-identifier-v1\n".utf8)

    /// The stored form of one client value: HMAC-SHA256 under the secret, 64 lowercase hex digits.
    package func rekey(_ value: String) -> String {
        var code = code
        code.update(Self.domain)
        var value = value
        value.withUTF8 { code.update(UnsafeRawBufferPointer($0)) }
        return lowercaseHex(code.finalize())
    }

    /// Where a signal's text holds keyed identifier hashes: each word (a run of ASCII letters
    /// and digits) of exactly 64 lowercase hex digits, as probes write `eth0 <hash>` or a serial's
    /// hash beside its device. Offsets are UTF-8.
    static func identifierHashRanges(in text: String) -> [Range<Int>] {
        guard text.utf8.count >= 64 else { return [] }
        let bytes = Array(text.utf8)
        func isLowerHex(_ byte: UInt8) -> Bool { (0x30...0x39).contains(byte) || (0x61...0x66).contains(byte) }
        func isWord(_ byte: UInt8) -> Bool { isLowerHex(byte) || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte) }
        var ranges: [Range<Int>] = []
        var index = 0
        while index < bytes.count {
            guard isWord(bytes[index]) else {
                index += 1
                continue
            }
            let start = index
            while index < bytes.count, isWord(bytes[index]) { index += 1 }
            if index - start == 64, bytes[start..<index].allSatisfy(isLowerHex) { ranges.append(start..<index) }
        }
        return ranges
    }

    /// The report as the server keeps it: identifiers, component hashes, the `name:prefix`
    /// summaries and identifier hashes among the signals re-keyed, everything else as judged.
    package func rekeyed(_ report: SignalReport) -> SignalReport { rekeying(report).report }

    /// A re-keyed report and what re-keying replaced in it: each client value with its stored
    /// value, and how many places of the report hold one (what an in-place rewrite of the
    /// report's text must find, no more and no fewer).
    package struct Rekeying: Sendable {
        package let report: SignalReport
        let replacements: [String: String]
        let places: Int
        /// Two places of one value were given two stored values (a component hash spelled like
        /// a summary): no rewrite of the text by value can be right.
        let ambiguous: Bool
    }

    package func rekeying(_ report: SignalReport) -> Rekeying {
        // Value → stored value; until the summaries and identifiers are added below it holds
        // only component and signal hashes, which is all `stored` and the summaries look up.
        var replacements: [String: String] = [:]
        var places = 0
        var ambiguous = false
        func replaced(_ value: String, by stored: String) -> String {
            if let earlier = replacements.updateValue(stored, forKey: value), earlier != stored { ambiguous = true }
            places += 1
            return stored
        }
        // Hash → stored hash, for the components and the hashes inside signals.
        var keyed: [String: String] = [:]
        func keyedHash(_ hash: String) -> String {
            if let known = keyed[hash] { return known }
            let value = rekey(hash)
            keyed[hash] = value
            return value
        }
        func stored(_ hash: String) -> String { replaced(hash, by: keyedHash(hash)) }
        func holdsHash(_ text: String) -> Bool { text.utf8.count >= 64 && !Self.identifierHashRanges(in: text).isEmpty }
        func holdsHash(_ value: SignalValue) -> Bool {
            switch value {
            case .string(let text): holdsHash(text)
            case .strings(let texts): texts.contains(where: holdsHash)
            default: false
            }
        }
        /// The text with each hash in it re-keyed; the text is what the report's JSON holds.
        func storedText(_ text: String) -> String {
            let ranges = Self.identifierHashRanges(in: text)
            guard !ranges.isEmpty else { return text }
            let bytes = Array(text.utf8)
            var out: [UInt8] = []
            var copied = 0
            for range in ranges {
                out += bytes[copied..<range.lowerBound]
                out += keyedHash(String(decoding: bytes[range], as: UTF8.self)).utf8
                copied = range.upperBound
            }
            out += bytes[copied...]
            return replaced(text, by: String(decoding: out, as: UTF8.self))
        }
        func signal(_ value: SignalValue) -> SignalValue {
            switch value {
            case .string(let text): .string(storedText(text))
            case .strings(let texts) where texts.contains(where: holdsHash): .strings(texts.map(storedText))
            default: value
            }
        }
        let probes = report.probes.map { probe in
            // Most probes carry neither: they are kept as they are, not copied.
            let rekeysSignals = probe.signals.values.contains(where: holdsHash)
            guard rekeysSignals || !probe.identityComponents.isEmpty else { return probe }
            let components = probe.identityComponents.map { component in
                IdentityComponent(scope: component.scope, name: component.name, hash: stored(component.hash),
                                  worldReadable: component.worldReadable)
            }
            return ProbeEntry(id: probe.id, tier: probe.tier, status: probe.status, durationMs: probe.durationMs, detail: probe.detail,
                              issues: probe.issues, signals: rekeysSignals ? probe.signals.mapValues(signal) : probe.signals,
                              identityComponents: components)
        }
        // A summary is `name:` and a hash's first 12 digits: the stored hash's, when a component
        // of the report has it; a summary naming no component is re-keyed on its own.
        // Clients write a hash's first 12 characters (all of a shorter one): those are looked up in
        // one step; a prefix no component has is no summary of this report's (a search by prefix
        // for each of thousands of made-up summaries cost seconds of CPU a request).
        var byPrefix: [Substring: String] = [:]
        for (hash, value) in keyed { byPrefix[Substring(hash.utf8.prefix(12))] = value }
        func summary(_ part: String) -> String {
            guard let colon = part.utf8.lastIndex(of: UInt8(ascii: ":")) else {
                return replaced(part, by: String(rekey("summary\n" + part).prefix(12)))
            }
            let known = byPrefix[part[part.utf8.index(after: colon)...]]
            return replaced(part, by: String(part[...colon]) + (known ?? rekey("summary\n" + part)).prefix(12))
        }
        func identifier(_ id: String) -> String { replaced(id, by: rekey(id)) }
        let identity = report.identity
        let storedIdentity = HostIdentity(hardwareId: identity.hardwareId.map(identifier), hardwareIdVersion: identity.hardwareIdVersion,
                                          instanceId: identity.instanceId.map(identifier), instanceIdVersion: identity.instanceIdVersion,
                                          hardwareComponents: identity.hardwareComponents.map(summary),
                                          instanceComponents: identity.instanceComponents.map(summary),
                                          rootOnlyEvidence: identity.rootOnlyEvidence.map(summary))
        let stored = SignalReport(schemaVersion: report.schemaVersion, collectorVersion: report.collectorVersion,
                                  collectedAt: report.collectedAt, tag: report.tag, root: report.root, tiers: report.tiers,
                                  budgetMs: report.budgetMs, elapsedMs: report.elapsedMs, probes: probes, identity: storedIdentity,
                                  identifierKeying: report.identifierKeying, freeText: report.freeText,
                                  prefetchedAgeMs: report.prefetchedAgeMs)
        return Rekeying(report: stored, replacements: replacements, places: places, ambiguous: ambiguous)
    }
}

extension StoredIdentifierKeys {
    /// The report's JSON as sent with every value `rekeyed(report)` changes replaced in place: what
    /// encoding `rekeyed(report)` would store, without the cost of encoding a whole report again.
    /// nil, and the caller encodes, when the text holds an escape (a value could hide behind it)
    /// or holds any of the values elsewhere than where the report has them (a duplicate member,
    /// a tag equal to a component hash): the replacements must be exactly those.
    /// `rekeying` is `rekeying(report)`, when the caller has it.
    package func rekeyed(reportText raw: ArraySlice<UInt8>, of report: SignalReport, rekeying known: Rekeying? = nil) -> [UInt8]? {
        let escaped = raw.withUnsafeBufferPointer { text in
            text.baseAddress.map { memchr($0, Int32(UInt8(ascii: "\\")), text.count) != nil } ?? false
        }
        guard !escaped else { return nil }
        let rekeying = known ?? self.rekeying(report)
        guard !rekeying.ambiguous else { return nil }
        let replacements = rekeying.replacements, expected = rekeying.places
        // Without escapes a string ends at the next quote; member names (a quote, then a colon)
        // are never replaced. Only strings of a length some value has are looked up, and the
        // text between replacements is copied in runs: this runs on every stored request.
        // Every length some value has: a value never looked up would leave its place unreplaced
        // while another string's replacement made the count come out right.
        var lengths = [Bool](repeating: false, count: (replacements.keys.map(\.utf8.count).max() ?? 0) + 1)
        for value in replacements.keys { lengths[value.utf8.count] = true }
        var out: [UInt8] = []
        var replaced = 0
        let complete = raw.withUnsafeBufferPointer { text -> Bool in
            guard let start = text.baseAddress else { return true }
            out.reserveCapacity(text.count + 64)
            let quote = UInt8(ascii: "\""), colon = UInt8(ascii: ":")
            // Eight bytes at a time: most of a report's bytes lie between quotes, and a call to
            // memchr for each of its few hundred strings cost more than the search.
            func nextQuote(from index: Int) -> Int? {
                var index = index
                let ones: UInt64 = 0x0101_0101_0101_0101, highs: UInt64 = 0x8080_8080_8080_8080
                while index + 8 <= text.count {
                    let word = UInt64(littleEndian: UnsafeRawPointer(start + index).loadUnaligned(as: UInt64.self))
                    let quotes = word ^ (ones &* UInt64(quote))
                    // The lowest high bit set marks the first byte that is a quote (later ones may be false).
                    let found = (quotes &- ones) & ~quotes & highs
                    if found != 0 { return index + found.trailingZeroBitCount / 8 }
                    index += 8
                }
                while index < text.count {
                    if text[index] == quote { return index }
                    index += 1
                }
                return nil
            }
            var copied = 0
            var open = nextQuote(from: 0)
            while let opening = open {
                guard let close = nextQuote(from: opening + 1) else { return false }
                let length = close - opening - 1
                if length < lengths.count, lengths[length] {
                    var after = close + 1
                    while after < text.count, text[after] == 0x20 || text[after] == 0x09 || text[after] == 0x0A || text[after] == 0x0D {
                        after += 1
                    }
                    let isName = after < text.count && text[after] == colon
                    if !isName, let replacement = replacements[String(decoding: UnsafeBufferPointer(start: start + opening + 1, count: length),
                                                                      as: UTF8.self)] {
                        out.append(contentsOf: UnsafeBufferPointer(rebasing: text[copied...opening]))
                        out.append(contentsOf: replacement.utf8)
                        copied = close
                        replaced += 1
                    }
                }
                open = nextQuote(from: close + 1)
            }
            out.append(contentsOf: UnsafeBufferPointer(rebasing: text[copied...]))
            return true
        }
        guard complete else { return nil }
        return replaced == expected ? out : nil
    }
}

/// Whether a request proves a bound visitor: signed by one of its keys, or by a new key that a
/// rotation statement of one of its keys vouches for (`rotatedFrom`, already verified).
package func proves(_ visitor: VisitorRecord, verifiedKeyID: String?, rotatedFrom: String?) -> Bool {
    guard let key = verifiedKeyID else { return false }
    return visitor.isBound(to: key) || rotatedFrom.map(visitor.isBound(to:)) == true
}

/// Whether the request claims a bound visitor's identity without proving it: it would join a
/// bound visitor it does not prove, or it would be stored as a new visitor holding the instanceId
/// of bound visitors none of which it proves (where the next report of the real host would find
/// it and be scored as a clone). Unbound visitors, first seen unsigned, are claimable as before.
package func claimsWithoutKey(_ resolution: Resolution, instanceHolders: [VisitorRecord], verifiedKeyID: String?,
                              rotatedFrom: String?) -> Bool {
    if let matched = resolution.matched {
        return matched.isBound && !proves(matched, verifiedKeyID: verifiedKeyID, rotatedFrom: rotatedFrom)
    }
    let bound = instanceHolders.filter(\.isBound)
    return !bound.isEmpty && !bound.contains { proves($0, verifiedKeyID: verifiedKeyID, rotatedFrom: rotatedFrom) }
}
