import CCrypto
import FingerlyHost
import FingerlyModel
import FingerlyProbes
import FingerlyStore

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
        let derived = HostIdentity.derive(from: report.probes.flatMap(\.identityComponents), hasher: hasher)
        let identity = report.identity
        // A version this server does not derive is no identifier it can check.
        if identity.instanceId != derived.instanceId
            || (identity.instanceId != nil && identity.instanceIdVersion != derived.instanceIdVersion) {
            return "report.identity.instanceId"
        }
        if identity.hardwareId != derived.hardwareId
            || (identity.hardwareId != nil && identity.hardwareIdVersion != derived.hardwareIdVersion) {
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
    /// The secret padded to SHA-256's block and XORed with HMAC's inner and outer pads (RFC 2104),
    /// once: `rekey`, run for a report's few dozen values, then costs two digests, without the
    /// MAC set-up libcrypto's one-shot `HMAC()` repeats on every call.
    private let innerPad: [UInt8]
    private let outerPad: [UInt8]

    package init(secret: [UInt8]) {
        let blockSize = 64
        var block = secret.count > blockSize ? Self.sha256(secret) : secret
        block += [UInt8](repeating: 0, count: blockSize - block.count)
        innerPad = block.map { $0 ^ 0x36 }
        outerPad = block.map { $0 ^ 0x5C }
    }

    /// Fetched once, as IdentifierHasher does: the provider lookup is most of a digest's cost.
    nonisolated(unsafe) private static let sha256Digest: OpaquePointer? = EVP_MD_fetch(nil, "SHA256", nil)

    private static func sha256(_ bytes: [UInt8]) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        let ok = bytes.withUnsafeBufferPointer { input in
            digest.withUnsafeMutableBufferPointer { output in
                EVP_Digest(input.baseAddress, input.count, output.baseAddress, &length, sha256Digest ?? EVP_sha256(), nil)
            }
        }
        precondition(ok == 1 && length == 32, "SHA-256 failed in libcrypto")
        return digest
    }

    /// The stored form of one client value: HMAC-SHA256 under the secret, 64 lowercase hex digits.
    package func rekey(_ value: String) -> String {
        let inner = Self.sha256(innerPad + Array("fingerly-stored-identifier-v1\n\(value)".utf8))
        let digest = Self.sha256(outerPad + inner)
        let hex = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        text.reserveCapacity(64)
        for byte in digest {
            text.append(hex[Int(byte >> 4)])
            text.append(hex[Int(byte & 0xf)])
        }
        return String(decoding: text, as: UTF8.self)
    }

    /// Whether a signal's text is a keyed identifier hash (64 lowercase hex digits), as probes
    /// write a machine-id or a serial beside the component that carries it.
    static func isIdentifierHash(_ text: String) -> Bool {
        text.utf8.count == 64 && text.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
    }

    /// The report as the server keeps it: identifiers, component hashes, the `name:prefix`
    /// summaries and identifier hashes among the signals re-keyed, everything else as judged.
    package func rekeyed(_ report: SignalReport) -> SignalReport {
        var full: [String: String] = [:]
        func stored(_ hash: String) -> String {
            if let known = full[hash] { return known }
            let value = rekey(hash)
            full[hash] = value
            return value
        }
        func holdsHash(_ value: SignalValue) -> Bool {
            switch value {
            case .string(let text): Self.isIdentifierHash(text)
            case .strings(let texts): texts.contains(where: Self.isIdentifierHash)
            default: false
            }
        }
        func signal(_ value: SignalValue) -> SignalValue {
            switch value {
            case .string(let text) where Self.isIdentifierHash(text): .string(stored(text))
            case .strings(let texts) where texts.contains(where: Self.isIdentifierHash):
                .strings(texts.map { Self.isIdentifierHash($0) ? stored($0) : $0 })
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
        func summary(_ part: String) -> String {
            guard let colon = part.lastIndex(of: ":") else { return String(rekey("summary\n" + part).prefix(12)) }
            let prefix = part[part.index(after: colon)...]
            let known = full.first { $0.key.hasPrefix(prefix) && !prefix.isEmpty }?.value ?? rekey("summary\n" + part)
            return String(part[...colon]) + known.prefix(12)
        }
        let identity = report.identity
        let storedIdentity = HostIdentity(hardwareId: identity.hardwareId.map(rekey), hardwareIdVersion: identity.hardwareIdVersion,
                                          instanceId: identity.instanceId.map(rekey), instanceIdVersion: identity.instanceIdVersion,
                                          hardwareComponents: identity.hardwareComponents.map(summary),
                                          instanceComponents: identity.instanceComponents.map(summary),
                                          rootOnlyEvidence: identity.rootOnlyEvidence.map(summary))
        return SignalReport(schemaVersion: report.schemaVersion, collectorVersion: report.collectorVersion,
                            collectedAt: report.collectedAt, tag: report.tag, root: report.root, tiers: report.tiers,
                            budgetMs: report.budgetMs, elapsedMs: report.elapsedMs, probes: probes, identity: storedIdentity,
                            identifierKeying: report.identifierKeying, freeText: report.freeText,
                            prefetchedAgeMs: report.prefetchedAgeMs)
    }
}

extension StoredIdentifierKeys {
    /// The report's JSON as sent with every value `rekeyed(report)` changes replaced in place: what
    /// encoding `rekeyed(report)` would store, without the cost of encoding a whole report again.
    /// nil, and the caller encodes, when the text holds an escape (a value could hide behind it)
    /// or holds any of the values elsewhere than where the report has them (a duplicate member,
    /// a tag equal to a component hash): the replacements must be exactly those.
    /// `stored` is `rekeyed(report)`, when the caller has it.
    package func rekeyed(reportText raw: ArraySlice<UInt8>, of report: SignalReport, stored known: SignalReport? = nil) -> [UInt8]? {
        guard !raw.contains(UInt8(ascii: "\\")) else { return nil }
        var replacements: [String: String] = [:]
        var expected = 0
        func note(_ value: String, _ stored: String) {
            replacements[value] = stored
            expected += 1
        }
        let stored = known ?? rekeyed(report)
        for (probe, kept) in zip(report.probes, stored.probes) {
            for (component, keptComponent) in zip(probe.identityComponents, kept.identityComponents) {
                note(component.hash, keptComponent.hash)
            }
            for (name, value) in probe.signals {
                switch (value, kept.signals[name]) {
                case (.string(let text), .string(let keptText)?) where text != keptText: note(text, keptText)
                case (.strings(let texts), .strings(let keptTexts)?):
                    for (text, keptText) in zip(texts, keptTexts) where text != keptText { note(text, keptText) }
                default: break
                }
            }
        }
        let identity = report.identity, keptIdentity = stored.identity
        if let id = identity.instanceId, let kept = keptIdentity.instanceId { note(id, kept) }
        if let id = identity.hardwareId, let kept = keptIdentity.hardwareId { note(id, kept) }
        for (parts, keptParts) in [(identity.hardwareComponents, keptIdentity.hardwareComponents),
                                   (identity.instanceComponents, keptIdentity.instanceComponents),
                                   (identity.rootOnlyEvidence, keptIdentity.rootOnlyEvidence)] {
            for (part, keptPart) in zip(parts, keptParts) { note(part, keptPart) }
        }
        // Without escapes a string ends at the next quote; member names (a quote, then a colon)
        // are never replaced. Only strings of a length some value has are looked up.
        let lengths = Set(replacements.keys.map(\.utf8.count))
        var out: [UInt8] = []
        out.reserveCapacity(raw.count)
        var replaced = 0
        var index = raw.startIndex
        while index < raw.endIndex {
            let byte = raw[index]
            guard byte == UInt8(ascii: "\"") else {
                out.append(byte)
                index += 1
                continue
            }
            guard let close = raw[(index + 1)...].firstIndex(of: UInt8(ascii: "\"")) else { return nil }
            let text = raw[(index + 1)..<close]
            var after = close + 1
            while after < raw.endIndex, [0x20, 0x09, 0x0A, 0x0D].contains(raw[after]) { after += 1 }
            let isName = after < raw.endIndex && raw[after] == UInt8(ascii: ":")
            if !isName, lengths.contains(text.count), let replacement = replacements[String(decoding: text, as: UTF8.self)] {
                out.append(UInt8(ascii: "\""))
                out.append(contentsOf: replacement.utf8)
                out.append(UInt8(ascii: "\""))
                replaced += 1
            } else {
                out.append(contentsOf: raw[index...close])
            }
            index = close + 1
        }
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
