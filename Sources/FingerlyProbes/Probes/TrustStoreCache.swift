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
/// distribution's packaged roots and of trusted files whose every certificate is one of them;
/// and, by a directory's identity, the names in it that are links to packaged files with their
/// targets: no name of anything else, nothing of a locally added root. A kept link is judged again
/// each run, by what that run read of the packaged files: the cache saves reading it, not judging it.
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
    package static let header = "fingerly trust-store cache 3"
    package static let byteLimit = 4 * 1024 * 1024
    package static let entryLimit = 4_096
    package static let fingerprintLimit = 16_384
    /// Links kept, over all directories, and the bytes of their names and targets: what a file may hold beside the
    /// fingerprints (about 1 MiB at most) and the identities (about 0.6 MiB) within `byteLimit`.
    package static let linkLimit = 4_096
    package static let linkByteLimit = 2 * 1024 * 1024
    package static let linkTargetLimit = 1_024

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

    /// What one cache file holds: files by identity, and directories by identity with the names in them
    /// that were links to packaged files, each with its target.
    package struct Contents: Equatable {
        package var files: [FileIdentity: Entry] = [:]
        package var directories: [FileIdentity: [String: String]] = [:]
        package init() {}
        var lines: Int { files.count + directories.count }
    }

    private let loaded: Contents
    /// What this run used or learned: the next file, so that files gone from the host leave it.
    private var kept = Contents()
    private var keptFingerprints = 0
    private var keptLinks = 0
    private var keptLinkBytes = 0
    /// Files changed at or after this second are not kept.
    private let unsettledFrom: Int64

    /// A cache from the file's bytes; nil or malformed bytes give an empty one. `now`: the
    /// wall clock's seconds.
    package init(contents: [UInt8]?, now: Int64) {
        loaded = contents.flatMap(Self.parse) ?? Contents()
        unsettledFrom = now - Self.settlingSeconds
        // A run keeps nearly all it loaded: room made once, not regrown entry by entry.
        kept.files.reserveCapacity(loaded.files.count)
    }

    package var entries: [FileIdentity: Entry] { kept.files }
    package var contents: Contents { kept }
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
        let earlier = kept.files[identity]?.scannedAllPackaged ?? false
        keep(identity, Entry(fingerprints: fingerprints, scannedAllPackaged: scannedAllPackaged || earlier))
    }

    /// The links to packaged files a directory of this identity held, name to target. Not kept for the next run
    /// until `rememberLinks` says which of them still are.
    package func packagedLinks(of identity: FileIdentity) -> [String: String]? {
        kept.directories[identity] ?? loaded.directories[identity]
    }

    /// Only what the file can hold is kept (a name of printable ASCII without space or "/", not "-"; a target of
    /// printable ASCII without space); any other link is left out, and so read again each run.
    /// Filtered before the names become keys: String keys take canonically equivalent names as one, and
    /// ASCII names only as the same bytes.
    package func rememberLinks(_ identity: FileIdentity, links: [(name: String, target: String)]) {
        guard identity.changedSeconds < unsettledFrom else { return }
        var keepable: [String: String] = [:]
        for link in links where Self.isKeepableName(link.name.utf8) && Self.isKeepableTarget(link.target.utf8) {
            keepable[link.name] = link.target
        }
        keep(identity, links: keepable)
    }

    private func lookUp(_ identity: FileIdentity) -> Entry? { kept.files[identity] ?? loaded.files[identity] }

    /// Within the limits the parser accepts, so a file this writes is always one it reads back.
    private func keep(_ identity: FileIdentity, _ entry: Entry) {
        guard Self.isWritable(identity) else { return }
        let before = kept.files[identity]?.fingerprints.count
        let total = keptFingerprints - (before ?? 0) + entry.fingerprints.count
        guard entry.fingerprints.count <= Certificates.defaultLimit, total <= Self.fingerprintLimit,
              before != nil || kept.lines < Self.entryLimit, kept.directories[identity] == nil else { return }
        kept.files[identity] = entry
        keptFingerprints = total
    }

    private func keep(_ identity: FileIdentity, links: [String: String]) {
        guard Self.isWritable(identity) else { return }
        let before = kept.directories[identity]
        let total = keptLinks - (before?.count ?? 0) + links.count
        let bytes = keptLinkBytes - (before.map(Self.linkBytes) ?? 0) + Self.linkBytes(links)
        guard total <= Self.linkLimit, bytes <= Self.linkByteLimit, before != nil || kept.lines < Self.entryLimit,
              kept.files[identity] == nil else { return }
        kept.directories[identity] = links
        (keptLinks, keptLinkBytes) = (total, bytes)
    }

    private static func linkBytes(_ links: [String: String]) -> Int {
        links.reduce(0) { $0 + $1.key.utf8.count + $1.value.utf8.count }
    }

    /// The parser takes seconds from -Int64.max: a time at Int64.min (which tmpfs lets anyone set) is not kept.
    private static func isWritable(_ identity: FileIdentity) -> Bool {
        identity.modifiedSeconds != .min && identity.changedSeconds != .min
    }

    private static func isKeepableName(_ name: some Collection<UInt8>) -> Bool {
        (1...255).contains(name.count) && !name.elementsEqual("-".utf8)
            && name.allSatisfy { (0x21...0x7e).contains($0) && $0 != UInt8(ascii: "/") }
    }

    private static func isKeepableTarget(_ target: some Collection<UInt8>) -> Bool {
        (1...linkTargetLimit).contains(target.count) && target.allSatisfy { (0x21...0x7e).contains($0) }
    }

    /// The file: the header, one line per file ("S" or "F", the seven identity numbers, the
    /// fingerprints joined by commas or "-" for none) and per directory ("L", the seven numbers, each
    /// link as its name, "/" and its target, joined by spaces, or "-" for none), and "end" with the number
    /// of lines, so a file cut short is told from a whole one. A name holds no "/" and neither holds a space.
    package func serialized() -> [UInt8] {
        var text = Self.header + "\n"
        func line(_ kind: String, _ identity: FileIdentity, _ list: [String], separator: String) {
            let numbers = [String(identity.device), String(identity.inode), String(identity.size),
                           String(identity.modifiedSeconds), String(identity.modifiedNanoseconds),
                           String(identity.changedSeconds), String(identity.changedNanoseconds)]
            text += kind + " " + numbers.joined(separator: " ") + " "
                + (list.isEmpty ? "-" : list.joined(separator: separator)) + "\n"
        }
        let inOrder: (FileIdentity, FileIdentity) -> Bool = { ($0.device, $0.inode) < ($1.device, $1.inode) }
        for identity in kept.files.keys.sorted(by: inOrder) {
            guard let entry = kept.files[identity] else { continue }
            line(entry.scannedAllPackaged ? "S" : "F", identity, entry.fingerprints, separator: ",")
        }
        for identity in kept.directories.keys.sorted(by: inOrder) {
            let links = (kept.directories[identity] ?? [:]).sorted { Array($0.key.utf8).lexicographicallyPrecedes($1.key.utf8) }
            line("L", identity, links.map { $0.key + "/" + $0.value }, separator: " ")
        }
        text += "end \(kept.lines)\n"
        return Array(text.utf8)
    }

    /// The contents of a cache file, or nil when anything in it is not exactly what `serialized`
    /// writes. One pass over the bytes: it is read on every run.
    package static func parse(_ bytes: [UInt8]) -> Contents? {
        guard bytes.count <= byteLimit, bytes.last == UInt8(ascii: "\n") else { return nil }
        return bytes.withUnsafeBufferPointer { buffer -> Contents? in
            var reader = LineReader(bytes: buffer)
            guard reader.take(header.utf8), reader.take(UInt8(ascii: "\n")) else { return nil }
            var contents = Contents()
            var fingerprintTotal = 0, linkTotal = 0, linkBytes = 0
            while !reader.take("end ".utf8) {
                guard contents.lines < entryLimit, let kind = reader.byte(), reader.take(UInt8(ascii: " ")) else {
                    return nil
                }
                var numbers: [UInt64] = []
                var signs: [Bool] = []
                for field in 0..<7 {
                    // The two seconds fields (3 and 5) may be negative; the others are unsigned.
                    let negative = (field == 3 || field == 5) && reader.take(UInt8(ascii: "-"))
                    guard let value = reader.unsigned(), reader.take(UInt8(ascii: " ")),
                          !negative || (value != 0 && value <= UInt64(Int64.max)) else { return nil }
                    numbers.append(value)
                    signs.append(negative)
                }
                guard numbers[3] <= UInt64(Int64.max), numbers[5] <= UInt64(Int64.max),
                      numbers[4] < 1_000_000_000, numbers[6] < 1_000_000_000 else { return nil }
                let identity = FileIdentity(
                    device: numbers[0], inode: numbers[1], size: numbers[2],
                    modifiedSeconds: signs[3] ? -Int64(numbers[3]) : Int64(numbers[3]), modifiedNanoseconds: UInt32(numbers[4]),
                    changedSeconds: signs[5] ? -Int64(numbers[5]) : Int64(numbers[5]), changedNanoseconds: UInt32(numbers[6]))
                guard contents.files[identity] == nil, contents.directories[identity] == nil,
                      let list = reader.list(separator: kind == UInt8(ascii: "L") ? UInt8(ascii: " ") : UInt8(ascii: ","))
                else { return nil }
                switch kind {
                case UInt8(ascii: "S"), UInt8(ascii: "F"):
                    var fingerprints: [String] = []
                    for item in list {
                        let isHex = item.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
                        guard item.count == 64, isHex else { return nil }
                        fingerprints.append(String(decoding: item, as: UTF8.self))
                    }
                    fingerprintTotal += fingerprints.count
                    guard fingerprints.count <= Certificates.defaultLimit, fingerprintTotal <= fingerprintLimit else {
                        return nil
                    }
                    contents.files[identity] = Entry(fingerprints: fingerprints, scannedAllPackaged: kind == UInt8(ascii: "S"))
                case UInt8(ascii: "L"):
                    var links: [String: String] = [:]
                    for item in list {
                        guard let slash = item.firstIndex(of: UInt8(ascii: "/")) else { return nil }
                        let name = item[..<slash], target = item[(slash + 1)...]
                        guard isKeepableName(name), isKeepableTarget(target),
                              links.updateValue(String(decoding: target, as: UTF8.self),
                                                forKey: String(decoding: name, as: UTF8.self)) == nil else { return nil }
                        linkBytes += name.count + target.count
                    }
                    linkTotal += links.count
                    guard linkTotal <= linkLimit, linkBytes <= linkByteLimit else { return nil }
                    contents.directories[identity] = links
                default: return nil
                }
            }
            guard let count = reader.unsigned(), count == UInt64(contents.lines), reader.take(UInt8(ascii: "\n")),
                  reader.atEnd else { return nil }
            return contents
        }
    }

    /// A cursor over the cache file's bytes.
    private struct LineReader {
        let bytes: UnsafeBufferPointer<UInt8>
        var index = 0

        var atEnd: Bool { index == bytes.count }

        mutating func byte() -> UInt8? {
            guard index < bytes.count else { return nil }
            defer { index += 1 }
            return bytes[index]
        }

        mutating func take(_ byte: UInt8) -> Bool {
            guard index < bytes.count, bytes[index] == byte else { return false }
            index += 1
            return true
        }

        mutating func take(_ text: String.UTF8View) -> Bool {
            guard bytes.count - index >= text.count,
                  UnsafeBufferPointer(rebasing: bytes[index..<(index + text.count)]).elementsEqual(text) else { return false }
            index += text.count
            return true
        }

        /// Decimal digits as `String(_:)` writes them: no sign, no leading zero, at most 20 digits.
        mutating func unsigned() -> UInt64? {
            let start = index
            var value: UInt64 = 0
            while index < bytes.count, (48...57).contains(bytes[index]) {
                let (shifted, over) = value.multipliedReportingOverflow(by: 10)
                let (sum, carry) = shifted.addingReportingOverflow(UInt64(bytes[index] - 48))
                guard !over, !carry else { return nil }
                value = sum
                index += 1
            }
            let digits = index - start
            guard (1...20).contains(digits), digits == 1 || bytes[start] != UInt8(ascii: "0") else { return nil }
            return value
        }

        /// The items of the rest of the line, which ends it: none for "-"; nil for an empty rest.
        mutating func list(separator: UInt8) -> [Slice<UnsafeBufferPointer<UInt8>>]? {
            guard let end = bytes[index...].firstIndex(of: UInt8(ascii: "\n")), end > index else { return nil }
            let rest = bytes[index..<end]
            index = end + 1
            return rest.elementsEqual("-".utf8) ? [] : rest.split(separator: separator, omittingEmptySubsequences: false)
        }
    }
}
