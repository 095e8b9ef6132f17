#if canImport(Glibc)
import Glibc
#endif
import FingerlyHost

/// How much the outbox keeps. Past a cap the oldest items go first.
package struct OutboxLimits: Sendable, Hashable {
    package var maxItems: Int
    /// Total size of the item files.
    package var maxBytes: Int
    /// Below the server's 24-hour idempotency-key lifetime: an item older than that could be
    /// taken for a new report and counted twice.
    package var maxAgeSeconds: Int64
    /// Directory entries looked at in one pass; the rest wait for the next pass.
    package var maxEntriesScanned: Int

    package init(maxItems: Int = 50, maxBytes: Int = 8 << 20, maxAgeSeconds: Int64 = 23 * 3600, maxEntriesScanned: Int = 1024) {
        self.maxItems = maxItems
        self.maxBytes = maxBytes
        self.maxAgeSeconds = maxAgeSeconds
        self.maxEntriesScanned = maxEntriesScanned
    }

    package static let standard = OutboxLimits()
}

/// What the sender made of one item.
package enum SendVerdict: Sendable {
    case delivered
    /// The server will never accept it (a 4xx that retrying cannot change): it is dropped.
    case rejected(any Error)
    /// Not now (network, 5xx, 429): the flush stops, the item stays with one more attempt.
    case retryLater(any Error)
}

/// Items removed without being delivered, since the outbox was created (kept in `.drops`).
package struct OutboxDropCounts: Sendable, Hashable {
    /// Over the item or byte cap.
    package var evicted = 0
    /// Older than the age cap.
    package var expired = 0
    /// Refused by the server.
    package var rejected = 0
    /// Files that were not valid items: truncated, corrupt, foreign, links.
    package var unreadable = 0

    package init(evicted: Int = 0, expired: Int = 0, rejected: Int = 0, unreadable: Int = 0) {
        self.evicted = evicted
        self.expired = expired
        self.rejected = rejected
        self.unreadable = unreadable
    }

    package var total: Int { evicted &+ expired &+ rejected &+ unreadable }

    static func + (left: OutboxDropCounts, right: OutboxDropCounts) -> OutboxDropCounts {
        OutboxDropCounts(evicted: left.evicted &+ right.evicted, expired: left.expired &+ right.expired,
                         rejected: left.rejected &+ right.rejected, unreadable: left.unreadable &+ right.unreadable)
    }
}

/// One pass of upkeep: leftovers swept, bad files removed, caps applied.
package struct OutboxMaintenance: Sendable, Hashable {
    /// false: another process or thread held the lock, and upkeep was left to it.
    package var performed = false
    package var leftoversRemoved = 0
    /// This pass's drops (unreadable files, expiry, caps).
    package var dropped = OutboxDropCounts()
    /// The directory had more entries than `maxEntriesScanned`; the rest were not looked at.
    package var scanTruncated = false
    /// A step that failed (taking the lock, listing, syncing the directory, recording the drops).
    /// What was done stays done; a full disk must not stop the outbox from being emptied.
    package var error: OutboxError?
}

package struct FlushSummary: Sendable {
    package var delivered = 0
    /// Removed undelivered during this flush: refused by the server, expired, over a cap, unreadable.
    package var dropped = 0
    /// Items left in the outbox, of every organization.
    package var remaining = 0
    /// The verdict's error of the last item not delivered, or a storage failure.
    package var lastError: (any Error)?
    /// Another flush held the lock: this one sent nothing.
    package var busy = false
    package var scanTruncated = false
}

package enum OutboxError: Error, Sendable, Hashable, CustomStringConvertible {
    case storage(StateFileError)
    case invalidItem(OutboxItemFormat.Problem)
    case itemTooLarge(bytes: Int, limit: Int)
    /// Older than the age cap already: the server could no longer tell it from a new report.
    case expired(ageSeconds: Int64)

    /// The disk (or the file-size limit) was full: the item is not queued, nothing else changed.
    package var isOutOfSpace: Bool {
        if case .storage(let failure) = self { return failure.isOutOfSpace }
        return false
    }

    package var description: String {
        switch self {
        case .storage(let failure): return "outbox: \(failure)"
        case .invalidItem(let problem): return "outbox: the request cannot be queued: \(problem)"
        case .itemTooLarge(let bytes, let limit): return "outbox: an item of \(bytes) bytes is over the outbox's \(limit) bytes"
        case .expired(let age): return "outbox: the request is \(age) s old, past the outbox's age cap"
        }
    }
}

/// Requests that could not be delivered yet, one file each in a directory of this user's, kept
/// across crashes and restarts and sent oldest first by one sender at a time.
///
/// Layout: `<hash of the key>.item` per request (OutboxItemFormat), `.lock` (flock: the sender,
/// and whoever applies the caps), `.drops` (the drop counters), `.tmp.*` (writes in progress).
/// Anything else is removed.
package final class Outbox: Sendable {
    private let store: OutboxStore
    /// What opening found and fixed.
    package let openMaintenance: OutboxMaintenance

    package var path: String { store.path }
    package var limits: OutboxLimits { store.limits }

    private init(store: OutboxStore, openMaintenance: OutboxMaintenance) {
        self.store = store
        self.openMaintenance = openMaintenance
    }

    deinit { close(store.directoryFd) }

    /// Opens (creating it 0700 when missing; its parent must exist) the outbox at `directory`,
    /// sweeps what crashed writers left, removes files that are not valid items and applies the
    /// caps, unless another process is doing so right now. Throws only when the directory cannot
    /// be created or opened, or is not safely this user's; what upkeep could not do is in
    /// `openMaintenance.error`.
    package static func open(directory: String, limits: OutboxLimits = .standard,
                             now: @escaping @Sendable () -> Int64 = { Int64(time(nil)) }) throws(OutboxError) -> Outbox {
        let fd: Int32
        do { fd = try DurableFile.openDirectory(directory, create: true) } catch { throw .storage(error) }
        let store = OutboxStore(path: directory, directoryFd: fd, limits: limits, now: now)
        return Outbox(store: store, openMaintenance: store.maintainUnlessBusy())
    }

    /// Why the outbox at `directory`, where it exists, cannot be trusted: a directory (not a link)
    /// of this user or root that nobody else may write, holding only entries of this user that
    /// nobody else may write. nil when it can, or when there is none yet. Reads only; at most
    /// `OutboxLimits.standard.maxEntriesScanned` names are examined, past which the outbox's own
    /// upkeep refuses what it finds.
    package static func untrustedEntry(directory: String) -> String? {
        var info = stat()
        guard lstat(directory, &info) == 0 else { return errno == ENOENT ? nil : "\(directory): \(SystemError(errno))" }
        guard info.st_mode & S_IFMT == S_IFDIR else { return "\(directory): not a directory" }
        guard info.st_uid == geteuid() || info.st_uid == 0 else {
            return "\(directory): owned by uid \(info.st_uid), not by this user"
        }
        guard info.st_mode & 0o022 == 0 else {
            return "\(directory): writable by another user (mode \(String(info.st_mode & 0o777, radix: 8)))"
        }
        let fd: Int32
        switch retryingOnInterrupt({ Glibc.open(directory, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }) {
        case .success(let descriptor): fd = descriptor
        case .failure(let error): return "\(directory): \(error)"
        }
        defer { close(fd) }
        let limit = OutboxLimits.standard.maxEntriesScanned
        guard let listing = try? DirectoryListing(of: fd, limit: limit) else { return nil }
        for name in listing.names {
            var entry = stat()
            guard fstatat(fd, name, &entry, AT_SYMLINK_NOFOLLOW) == 0 else { continue }
            // A planted name may hold terminal controls: shown as printable ASCII only.
            let printable = name.nameBytes.prefix(128).map { byte -> Character in
                (0x21...0x7E).contains(byte) ? Character(UnicodeScalar(byte)) : "?"
            }
            let shown = "\(directory)/\(String(printable))"
            // What is this user's but no item (a link, a directory) is garbage the upkeep removes;
            // what another user owns or may write is not this user's outbox any more.
            guard entry.st_uid == geteuid() else { return "\(shown): owned by uid \(entry.st_uid), not by this user" }
            guard entry.st_mode & S_IFMT == S_IFLNK || entry.st_mode & 0o022 == 0 else {
                return "\(shown): writable by another user (mode \(String(entry.st_mode & 0o777, radix: 8)))"
            }
        }
        return nil
    }

    /// Queues a request durably. On a full disk it throws an error whose `isOutOfSpace` is true,
    /// and the outbox is as it was. Then the caps are applied (which may evict older items, or
    /// this one when it is the oldest), unless a flush holds the lock: it applies them when done.
    /// A request with the key of a queued one replaces it.
    @discardableResult
    package func enqueue(_ request: OutgoingRequest) throws(OutboxError) -> OutboxMaintenance {
        let bytes: [UInt8]
        do { bytes = try OutboxItemFormat.encode(request) } catch { throw .invalidItem(error) }
        guard bytes.count <= limits.maxBytes else { throw .itemTooLarge(bytes: bytes.count, limit: limits.maxBytes) }
        if let age = store.expiredAge(request.createdAt) { throw .expired(ageSeconds: age) }
        try store.write(bytes, key: request.idempotencyKey)
        // The item is queued: what goes wrong from here is reported, not thrown.
        return store.maintainUnlessBusy()
    }

    /// The queued requests, oldest first, within the caps. Reads only: files it cannot use are
    /// skipped here and removed by the next pass that holds the lock.
    package func items() throws(OutboxError) -> [OutgoingRequest] {
        var result: [OutgoingRequest] = []
        var bytes = 0
        for entry in try store.scan(removing: false).entries {
            guard result.count < limits.maxItems, entry.size <= limits.maxBytes - bytes else { break }
            guard case .item(let request, _) = store.readItem(entry.name) else { continue }
            result.append(request)
            bytes += entry.size
        }
        return result
    }

    /// Sends the queued requests, oldest first, under the outbox lock, so that two flushes at
    /// once, in threads or processes, never send one item twice: the second returns at once with
    /// `busy` set (the first is already sending what is queued). Items of another organization
    /// than `organization`, or for another destination than `destination` (when given), stay.
    /// `send` is called once per item; see `SendVerdict`.
    package func flush(organization: String? = nil, destination: String? = nil, send: (OutgoingRequest) -> SendVerdict) -> FlushSummary {
        do {
            if let summary = try store.withLock(wait: false, { store.flush(organization: organization, destination: destination, send: send) }) {
                return summary
            }
            var summary = FlushSummary()
            summary.busy = true
            summary.remaining = (try? store.countItemNames()) ?? 0
            return summary
        } catch {
            var summary = FlushSummary()
            summary.lastError = error
            summary.remaining = (try? store.countItemNames()) ?? 0
            return summary
        }
    }

    /// Removes every item (consent was denied), waiting for a flush in progress to finish.
    /// Returns how many were removed. The drop counters stay: purged items are not drops.
    @discardableResult
    package func purge() throws(OutboxError) -> Int {
        try store.withLock(wait: true) { () throws(OutboxError) in try store.purge() } ?? 0
    }

    /// `purge` unless a flush holds the lock: nil then, and nothing was removed.
    package func purgeUnlessBusy() throws(OutboxError) -> Int? {
        try store.withLock(wait: false) { () throws(OutboxError) in try store.purge() }
    }

    /// The drop counters as persisted.
    package func dropCounts() -> OutboxDropCounts { store.readDropCounts() }
}

/// The outbox's files, through a directory descriptor the Outbox owns.
private struct OutboxStore: Sendable {
    let path: String
    let directoryFd: Int32
    let limits: OutboxLimits
    let now: @Sendable () -> Int64

    static let lockName = ".lock"
    static let dropsName = ".drops"

    // MARK: Under the lock

    func flush(organization: String?, destination: String?, send: (OutgoingRequest) -> SendVerdict) -> FlushSummary {
        var summary = FlushSummary()
        let (upkeep, entries) = maintain()
        summary.dropped = upkeep.dropped.total
        summary.scanTruncated = upkeep.scanTruncated
        summary.lastError = upkeep.error
        var removed = 0
        var drops = OutboxDropCounts()
        sending: for entry in entries {
            guard organization == nil || entry.organization == organization else { continue }
            // A flush may take minutes: an item may have aged past the cap since the scan.
            if expiredAge(entry.createdAt) != nil {
                if unlink(entry.name) { removed += 1 }
                drops.expired += 1
                continue
            }
            guard case .item(var request, _) = readItem(entry.name) else {
                if unlink(entry.name) { removed += 1 }
                drops.unreadable += 1
                continue
            }
            guard destination == nil || request.destination == destination else { continue }
            switch send(request) {
            case .delivered:
                do {
                    try DurableFile.remove(entry.name.nameText, in: directoryFd, directoryPath: path)
                } catch {
                    // The server has it; sending it again gets its stored answer, not a duplicate.
                    summary.delivered += 1
                    summary.lastError = OutboxError.storage(error)
                    break sending
                }
                removed += 1
                summary.delivered += 1
            case .rejected(let error):
                summary.lastError = error
                if unlink(entry.name) { removed += 1 }
                drops.rejected += 1
            case .retryLater(let error):
                summary.lastError = error
                if request.attempts < Int(UInt32.max) { request.attempts += 1 }
                do {
                    try write(OutboxItemFormat.encode(request), key: request.idempotencyKey)
                } catch {
                    summary.lastError = error
                }
                break sending
            }
        }
        if drops != OutboxDropCounts() {
            _ = retryingOnInterrupt { fsync(directoryFd) }
            summary.dropped += drops.total
            do { try addDrops(drops) } catch { summary.lastError = error }
        }
        // Items queued while this flush ran were left for it to cap.
        let (late, left) = maintain()
        summary.dropped += late.dropped.total
        if let error = late.error { summary.lastError = error }
        summary.remaining = left.count
        return summary
    }

    /// Sweeps leftovers, removes unusable files, drops expired items, then the oldest until the
    /// caps hold, and records the drops. Returns the items kept, oldest first.
    func maintainUnlessBusy() -> OutboxMaintenance {
        do {
            return try withLock(wait: false) { () throws(OutboxError) in maintain().maintenance } ?? OutboxMaintenance()
        } catch {
            var maintenance = OutboxMaintenance()
            maintenance.error = error
            return maintenance
        }
    }

    func maintain() -> (maintenance: OutboxMaintenance, kept: [ScannedItem]) {
        var maintenance = OutboxMaintenance()
        maintenance.performed = true
        let found: Scan
        do { found = try scan(removing: true) } catch {
            maintenance.error = error
            return (maintenance, [])
        }
        maintenance.leftoversRemoved = found.leftoversRemoved
        maintenance.scanTruncated = found.truncated
        maintenance.dropped.unreadable = found.unreadableRemoved
        var kept: [ScannedItem] = []
        for entry in found.entries {
            if expiredAge(entry.createdAt) != nil {
                if unlink(entry.name) { maintenance.dropped.expired += 1 }
            } else {
                kept.append(entry)
            }
        }
        var bytes = kept.reduce(0) { $0 + $1.size }
        var evicted = 0
        while evicted < kept.count, kept.count - evicted > limits.maxItems || bytes > limits.maxBytes {
            if unlink(kept[evicted].name) { maintenance.dropped.evicted += 1 }
            bytes -= kept[evicted].size
            evicted += 1
        }
        kept.removeFirst(evicted)
        if maintenance.dropped != OutboxDropCounts() || found.leftoversRemoved > 0 {
            if case .failure(let error) = retryingOnInterrupt({ fsync(directoryFd) }) {
                maintenance.error = .storage(StateFileError(path: path, step: .syncDirectory, error: error))
            }
        }
        if maintenance.dropped != OutboxDropCounts() {
            do { try addDrops(maintenance.dropped) } catch { maintenance.error = error }
        }
        return (maintenance, kept)
    }

    func purge() throws(OutboxError) -> Int {
        let listing: DirectoryListing
        do { listing = try DirectoryListing(of: directoryFd, limit: Int.max) } catch { throw .storage(failure(.read, error)) }
        var removed = 0
        for name in listing.names {
            let bytes = name.nameBytes
            if OutboxItemFormat.isItemName(bytes) {
                if unlinkat(directoryFd, name, 0) == 0 { removed += 1 }
            } else if bytes.starts(with: DurableFile.temporaryPrefix.utf8) {
                _ = DurableFile.removeIfAbandoned(name, in: directoryFd)
            }
        }
        if case .failure(let error) = retryingOnInterrupt({ fsync(directoryFd) }) {
            throw .storage(StateFileError(path: path, step: .syncDirectory, error: error))
        }
        return removed
    }

    // MARK: Files

    struct ScannedItem {
        let name: [CChar]
        let createdAt: Int64
        let organization: String
        let size: Int
    }

    struct Scan {
        var entries: [ScannedItem] = []
        var leftoversRemoved = 0
        var unreadableRemoved = 0
        var truncated = false
    }

    /// The valid items, oldest first. With `removing`, also removes what must go: abandoned
    /// temporary files, files that are not valid items, anything foreign.
    func scan(removing: Bool) throws(OutboxError) -> Scan {
        let listing: DirectoryListing
        do { listing = try DirectoryListing(of: directoryFd, limit: limits.maxEntriesScanned) } catch { throw .storage(failure(.read, error)) }
        var scan = Scan()
        scan.truncated = listing.truncated
        for name in listing.names {
            let bytes = name.nameBytes
            if bytes.elementsEqual(Self.lockName.utf8) || bytes.elementsEqual(Self.dropsName.utf8) { continue }
            if bytes.starts(with: DurableFile.temporaryPrefix.utf8) {
                if removing, DurableFile.removeIfAbandoned(name, in: directoryFd) { scan.leftoversRemoved += 1 }
                continue
            }
            guard OutboxItemFormat.isItemName(bytes) else {
                if removing, removeForeign(name) { scan.unreadableRemoved += 1 }
                continue
            }
            switch readItem(name) {
            case .item(let request, let size):
                scan.entries.append(ScannedItem(name: name, createdAt: request.createdAt, organization: request.organization, size: size))
            case .unusable:
                // removeForeign: a directory under an item's name is as unusable as a bad file.
                if removing, removeForeign(name) { scan.unreadableRemoved += 1 }
            case .unavailable:
                // Gone since the listing, or the system is short of descriptors or memory: not
                // the file's fault, so it stays.
                continue
            }
        }
        // Names are hashes: they only make the order of items of one second stable.
        scan.entries.sort { ($0.createdAt, $0.name.nameText) < ($1.createdAt, $1.name.nameText) }
        return scan
    }

    enum ItemRead {
        case item(OutgoingRequest, size: Int)
        /// Not a valid item: to be removed.
        case unusable(String)
        case unavailable(SystemError)
    }

    /// Reads and checks one item file: a regular file of this user's, writable by nobody else,
    /// no larger than the largest valid item, decoding cleanly under the name its key gives.
    func readItem(_ name: [CChar]) -> ItemRead {
        let fd = openat(directoryFd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else {
            let error = errno
            if error == ELOOP || error == ENXIO || error == EACCES { return .unusable("cannot be opened as a file (\(SystemError(error)))") }
            return .unavailable(SystemError(error))
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { return .unavailable(SystemError(errno)) }
        guard info.st_mode & S_IFMT == S_IFREG else { return .unusable("not a regular file") }
        guard info.st_uid == geteuid(), info.st_mode & 0o022 == 0 else { return .unusable("not this user's own") }
        guard info.st_size >= 0, info.st_size <= OutboxItemFormat.maxEncodedBytes else {
            return .unusable("\(info.st_size) bytes, larger than any item")
        }
        // One byte more than fstat said tells a file that grew since.
        var bytes = [UInt8](repeating: 0, count: Int(info.st_size) + 1)
        var filled = 0
        reading: while filled < bytes.count {
            let wanted = bytes.count - filled
            let result = bytes.withUnsafeMutableBytes { buffer in retryingOnInterrupt { read(fd, buffer.baseAddress! + filled, wanted) } }
            switch result {
            case .success(0): break reading
            case .success(let count): filled += count
            case .failure(let error): return .unavailable(error)
            }
        }
        guard filled < bytes.count else { return .unusable("grew while being read") }
        bytes.removeSubrange(filled...)
        let request: OutgoingRequest
        do { request = try OutboxItemFormat.decode(bytes) } catch { return .unusable(error.description) }
        guard OutboxItemFormat.fileName(forKey: request.idempotencyKey).utf8.elementsEqual(name.nameBytes) else {
            return .unusable("under another key's name")
        }
        return .item(request, size: filled)
    }

    func write(_ bytes: [UInt8], key: String) throws(OutboxError) {
        do {
            try DurableFile.write(bytes, as: OutboxItemFormat.fileName(forKey: key), in: directoryFd, directoryPath: path)
        } catch { throw .storage(error) }
    }

    /// Without a sync: the caller syncs the directory once for a batch.
    private func unlink(_ name: [CChar]) -> Bool { unlinkat(directoryFd, name, 0) == 0 || errno == ENOENT }

    private func removeForeign(_ name: [CChar]) -> Bool {
        if unlinkat(directoryFd, name, 0) == 0 { return true }
        // An empty directory can go; a full one stays (and is looked at again on every pass).
        return errno == EISDIR && unlinkat(directoryFd, name, AT_REMOVEDIR) == 0
    }

    func countItemNames() throws(OutboxError) -> Int {
        do {
            return try DirectoryListing(of: directoryFd, limit: limits.maxEntriesScanned).names.count { OutboxItemFormat.isItemName($0.nameBytes) }
        } catch { throw .storage(failure(.read, error)) }
    }

    /// The age when past the cap, else nil. A date as far in the future is as suspect as one in
    /// the past (a clock set back, a planted file) and goes too; a difference that overflows
    /// means a date nowhere near now.
    func expiredAge(_ createdAt: Int64) -> Int64? {
        let (age, overflow) = now().subtractingReportingOverflow(createdAt)
        if overflow { return Int64.max }
        return age > limits.maxAgeSeconds || age < -limits.maxAgeSeconds ? age : nil
    }

    private func failure(_ step: StateFileError.Step, _ error: SystemError) -> StateFileError {
        StateFileError(path: path, step: step, error: error)
    }

    // MARK: Lock

    /// Runs `body` holding the outbox's exclusive flock; nil without running it when another
    /// holder has it and `wait` is false. flock (not fcntl) locks belong to the open file, so
    /// two threads of one process exclude each other as two processes do.
    func withLock<T>(wait: Bool, _ body: () throws(OutboxError) -> T) throws(OutboxError) -> T? {
        let fd = try openLockFile()
        defer { close(fd) }
        switch retryingOnInterrupt({ flock(fd, wait ? LOCK_EX : LOCK_EX | LOCK_NB) }) {
        case .success: break
        case .failure(let error) where error.code == EWOULDBLOCK: return nil
        case .failure(let error): throw .storage(StateFileError(path: path + "/" + Self.lockName, step: .lock, error: error))
        }
        return try body()
    }

    private func openLockFile() throws(OutboxError) -> Int32 {
        var replaced = false
        while true {
            let fd = openat(directoryFd, Self.lockName, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0o600)
            let error = fd >= 0 ? 0 : errno
            var info = stat()
            if fd >= 0, fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG { return fd }
            if fd >= 0 { close(fd) }
            // A link, FIFO or directory planted as the lock would stop every flush for good:
            // it is not ours, so it goes, once.
            if !replaced, fd >= 0 || error == ELOOP || error == ENXIO || error == EISDIR {
                replaced = true
                if unlinkat(directoryFd, Self.lockName, 0) != 0 { _ = unlinkat(directoryFd, Self.lockName, AT_REMOVEDIR) }
                continue
            }
            throw .storage(StateFileError(path: path + "/" + Self.lockName, step: .lock, error: SystemError(fd >= 0 ? EINVAL : error)))
        }
    }

    // MARK: Drop counters

    func readDropCounts() -> OutboxDropCounts {
        let fd = openat(directoryFd, Self.dropsName, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { return OutboxDropCounts() }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return OutboxDropCounts() }
        var buffer = [UInt8](repeating: 0, count: 256)
        let result = buffer.withUnsafeMutableBytes { raw in retryingOnInterrupt { read(fd, raw.baseAddress, raw.count) } }
        guard case .success(let count) = result, count < buffer.count else { return OutboxDropCounts() }
        return OutboxDropCounts.parse(Array(buffer.prefix(count))) ?? OutboxDropCounts()
    }

    /// Only ever called under the lock, so two passes cannot lose each other's counts.
    private func addDrops(_ drops: OutboxDropCounts) throws(OutboxError) {
        let total = readDropCounts() + drops
        do {
            try DurableFile.write(total.formatted, as: Self.dropsName, in: directoryFd, directoryPath: path)
        } catch { throw .storage(error) }
    }
}

extension OutboxDropCounts {
    static let labels = ["evicted ", "expired ", "rejected ", "unreadable "]

    var formatted: [UInt8] {
        Array(zip(Self.labels, [evicted, expired, rejected, unreadable]).map { "\($0)\($1)\n" }.joined().utf8)
    }

    /// Exactly the four lines `formatted` writes, each a label and a decimal count.
    static func parse(_ bytes: [UInt8]) -> OutboxDropCounts? {
        let lines = bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
        guard lines.count == labels.count + 1, lines.last?.isEmpty == true else { return nil }
        var values: [Int] = []
        for (line, label) in zip(lines, labels) {
            guard line.starts(with: label.utf8) else { return nil }
            let digits = line.dropFirst(label.utf8.count)
            guard !digits.isEmpty, digits.count <= 18, digits.allSatisfy({ (48...57).contains($0) }) else { return nil }
            values.append(digits.reduce(0) { $0 * 10 + Int($1 - 48) })
        }
        return OutboxDropCounts(evicted: values[0], expired: values[1], rejected: values[2], unreadable: values[3])
    }
}
