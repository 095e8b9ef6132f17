#if canImport(Glibc)
import Glibc
#endif
import FingerlyHost

/// Where the trust-store cache is kept between runs: the collector's state directory. The probe
/// only hands bytes over; who may own the file and how it is replaced is the state directory's rule.
package protocol TrustStoreCacheStorage: Sendable {
    /// The cache file's bytes, nil when there is none or it cannot be trusted.
    func load() -> [UInt8]?
    func save(_ contents: [UInt8])
    /// The wall clock, seconds since the epoch: what the change times are compared with.
    func currentSeconds() -> Int64
}

extension TrustStoreCacheStorage {
    package func currentSeconds() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Int64(now.tv_sec)
    }
}

/// What the trust-store probe derived from each certificate file it read, by the file's identity
/// (device, inode, size, modification and change times), so that an unchanged file is neither
/// read nor parsed again. Only SHA-256 fingerprints of certificates are kept, and only of the
/// distribution's packaged roots and of trusted files whose every certificate is one of them:
/// no name, no path, nothing of a locally added root.
///
/// The file is written by this user into a directory nobody else may write, but it is read back
/// as untrusted input all the same: one malformed byte and the whole cache is ignored (and
/// rewritten at the end of the run), so the worst it can cost is the reads it would have saved.
/// Whoever can rewrite a certificate file cannot keep its identity: every write sets the change
/// time, which no unprivileged caller can set back. The kernel keeps that time at the grain of
/// its timer tick, though, so two writes within one tick can leave it unchanged: a file changed
/// in the last seconds is read but not kept until its change time is safely in the past.
package final class TrustStoreCache {
    /// How old a file's change time must be before what was read from it is kept.
    package static let settlingSeconds: Int64 = 2
    package static let header = "fingerly trust-store cache 1"
    package static let byteLimit = 2 * 1024 * 1024
    package static let entryLimit = 4_096
    package static let fingerprintLimit = 16_384

    package struct Entry: Sendable, Hashable {
        package let fingerprints: [String]
        /// Read as a trusted file, every certificate of it was a packaged root: the scan's
        /// answer is then known again from the fingerprints, as long as they all still are.
        package let scannedAllPackaged: Bool

        package init(fingerprints: [String], scannedAllPackaged: Bool) {
            self.fingerprints = fingerprints
            self.scannedAllPackaged = scannedAllPackaged
        }
    }

    private let loaded: [FileIdentity: Entry]
    /// What this run used or learned: the next file, so that files gone from the host leave it.
    private var kept: [FileIdentity: Entry] = [:]
    private var keptFingerprints = 0
    /// Files changed at or after this second are not kept.
    private let unsettledFrom: Int64

    /// A cache from the file's bytes; nil or malformed bytes give an empty one. `now`: the
    /// wall clock's seconds.
    package init(contents: [UInt8]?, now: Int64) {
        loaded = contents.flatMap(Self.parse) ?? [:]
        unsettledFrom = now - Self.settlingSeconds
    }

    package var entries: [FileIdentity: Entry] { kept }
    package var needsSaving: Bool { kept != loaded }

    /// The fingerprints of a file read before, as `Certificates.fingerprints(ofPEM:)` gave them.
    package func fingerprints(of identity: FileIdentity) -> [String]? {
        guard let entry = lookUp(identity) else { return nil }
        keep(identity, entry)
        return entry.fingerprints
    }

    /// How many packaged roots a scan of this trusted file would count, when it would find
    /// nothing else: every certificate it held is still among `packaged`.
    package func packagedCount(of identity: FileIdentity, packaged: Set<String>) -> Int? {
        guard let entry = lookUp(identity), entry.scannedAllPackaged,
              entry.fingerprints.allSatisfy(packaged.contains) else { return nil }
        keep(identity, entry)
        return entry.fingerprints.count
    }

    package func remember(_ identity: FileIdentity, fingerprints: [String], scannedAllPackaged: Bool) {
        guard identity.changedSeconds < unsettledFrom else { return }
        let earlier = kept[identity]?.scannedAllPackaged ?? false
        keep(identity, Entry(fingerprints: fingerprints, scannedAllPackaged: scannedAllPackaged || earlier))
    }

    private func lookUp(_ identity: FileIdentity) -> Entry? { kept[identity] ?? loaded[identity] }

    /// Within the limits the parser accepts, so a file this writes is always one it reads back.
    private func keep(_ identity: FileIdentity, _ entry: Entry) {
        let before = kept[identity]?.fingerprints.count
        let total = keptFingerprints - (before ?? 0) + entry.fingerprints.count
        guard entry.fingerprints.count <= Certificates.defaultLimit, total <= Self.fingerprintLimit,
              before != nil || kept.count < Self.entryLimit else { return }
        kept[identity] = entry
        keptFingerprints = total
    }

    /// The file: the header, one line per file ("S" or "F", the seven identity numbers, the
    /// fingerprints joined by commas or "-" for none), and "end" with the number of lines, so a
    /// file cut short is told from a whole one.
    package func serialized() -> [UInt8] {
        var text = Self.header + "\n"
        let ordered = kept.sorted { ($0.key.device, $0.key.inode) < ($1.key.device, $1.key.inode) }
        for (identity, entry) in ordered {
            let numbers = [String(identity.device), String(identity.inode), String(identity.size),
                           String(identity.modifiedSeconds), String(identity.modifiedNanoseconds),
                           String(identity.changedSeconds), String(identity.changedNanoseconds)]
            let list = entry.fingerprints.isEmpty ? "-" : entry.fingerprints.joined(separator: ",")
            text += (entry.scannedAllPackaged ? "S " : "F ") + numbers.joined(separator: " ") + " " + list + "\n"
        }
        text += "end \(ordered.count)\n"
        return Array(text.utf8)
    }

    /// The entries of a cache file, or nil when anything in it is not exactly what `serialized`
    /// writes.
    package static func parse(_ bytes: [UInt8]) -> [FileIdentity: Entry]? {
        guard bytes.count <= byteLimit, bytes.last == UInt8(ascii: "\n") else { return nil }
        let lines = bytes.dropLast().split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
        guard lines.count >= 2, lines.count - 2 <= entryLimit, lines.first?.elementsEqual(header.utf8) == true,
              let last = lines.last, last.starts(with: "end ".utf8),
              let count = unsigned(last.dropFirst(4)), count == UInt64(lines.count - 2) else { return nil }
        var entries: [FileIdentity: Entry] = [:]
        var fingerprintTotal = 0
        for line in lines.dropFirst().dropLast() {
            let fields = line.split(separator: UInt8(ascii: " "), omittingEmptySubsequences: false)
            guard fields.count == 9, fields[0].count == 1 else { return nil }
            let scanned: Bool
            switch fields[0].first {
            case UInt8(ascii: "S"): scanned = true
            case UInt8(ascii: "F"): scanned = false
            default: return nil
            }
            guard let device = unsigned(fields[1]), let inode = unsigned(fields[2]), let size = unsigned(fields[3]),
                  let modified = signed(fields[4]), let modifiedNanoseconds = nanoseconds(fields[5]),
                  let changed = signed(fields[6]), let changedNanoseconds = nanoseconds(fields[7]) else { return nil }
            var fingerprints: [String] = []
            if !fields[8].elementsEqual("-".utf8) {
                for item in fields[8].split(separator: UInt8(ascii: ","), omittingEmptySubsequences: false) {
                    let isHex = item.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
                    guard item.count == 64, isHex else { return nil }
                    fingerprints.append(String(decoding: item, as: UTF8.self))
                }
            }
            fingerprintTotal += fingerprints.count
            guard fingerprints.count <= Certificates.defaultLimit, fingerprintTotal <= fingerprintLimit else {
                return nil
            }
            let identity = FileIdentity(device: device, inode: inode, size: size, modifiedSeconds: modified,
                                        modifiedNanoseconds: modifiedNanoseconds, changedSeconds: changed,
                                        changedNanoseconds: changedNanoseconds)
            guard entries.updateValue(Entry(fingerprints: fingerprints, scannedAllPackaged: scanned),
                                      forKey: identity) == nil else { return nil }
        }
        return entries
    }

    /// Decimal digits as `String(_:)` writes them: no sign, no leading zero, at most 20 digits.
    private static func unsigned(_ digits: ArraySlice<UInt8>) -> UInt64? {
        guard (1...20).contains(digits.count), digits.allSatisfy({ (48...57).contains($0) }),
              digits.count == 1 || digits.first != UInt8(ascii: "0") else { return nil }
        var value: UInt64 = 0
        for digit in digits {
            let (shifted, over) = value.multipliedReportingOverflow(by: 10)
            let (sum, carry) = shifted.addingReportingOverflow(UInt64(digit - 48))
            guard !over, !carry else { return nil }
            value = sum
        }
        return value
    }

    private static func signed(_ text: ArraySlice<UInt8>) -> Int64? {
        if text.first == UInt8(ascii: "-") {
            guard let magnitude = unsigned(text.dropFirst()), magnitude != 0, magnitude <= UInt64(Int64.max) else {
                return nil
            }
            return -Int64(magnitude)
        }
        guard let value = unsigned(text), value <= UInt64(Int64.max) else { return nil }
        return Int64(value)
    }

    private static func nanoseconds(_ text: ArraySlice<UInt8>) -> UInt32? {
        guard let value = unsigned(text), value < 1_000_000_000 else { return nil }
        return UInt32(value)
    }
}
