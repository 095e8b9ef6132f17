import Foundation
import Synchronization
import Testing
@testable import FingerlyHost
@testable import FingerlyTransport

/// A clock the test moves by hand.
private final class TestClock: Sendable {
    private let seconds: Mutex<Int64>
    init(_ start: Int64) { seconds = Mutex(start) }
    var now: Int64 { seconds.withLock { $0 } }
    func set(_ value: Int64) { seconds.withLock { $0 = value } }
    var reading: @Sendable () -> Int64 { { [self] in now } }
}

private struct SendFailure: Error, Equatable { let status: Int }

private let startOfTest: Int64 = 1_760_000_000

private func request(_ createdAt: Int64 = startOfTest, body: String = #"{"report":{}}"#, organization: String = "acme42",
                     bodyBytes: [UInt8]? = nil) -> OutgoingRequest {
    OutgoingRequest(idempotencyKey: UUID().uuidString.lowercased(), createdAt: createdAt, organization: organization,
                    body: bodyBytes ?? Array(body.utf8))
}

/// A fresh state directory; the outbox goes in `<it>/outbox`.
private func stateDirectory(_ label: String) throws -> String {
    try TestPaths.temporaryDirectory("outbox-" + label)
}

private func names(in directory: String) throws -> [String] {
    try FileManager.default.contentsOfDirectory(atPath: directory).sorted()
}

private func itemNames(in directory: String) throws -> [String] {
    try names(in: directory).filter { $0.hasSuffix(".item") }
}

/// Plain open/write: FileManager.createFile syncs every file, seconds for a directory of junk.
private func write(_ bytes: [UInt8], to path: String, mode: mode_t = 0o600) throws {
    let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode)
    try #require(fd >= 0, "\(path): \(SystemError(errno))")
    defer { close(fd) }
    #expect(fchmod(fd, mode) == 0)
    #expect(bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) } == bytes.count)
}

@Suite(.serialized) struct OutboxTests {
    // MARK: Format

    @Test func anItemSurvivesEncodingWithEveryField() throws {
        var original = request(-5, organization: "", bodyBytes: [0, 255, 10, 13] + Array(repeating: 7, count: 1000))
        original.attempts = 7
        let decoded = try OutboxItemFormat.decode(OutboxItemFormat.encode(original))
        #expect(decoded == original)
        let largest = OutgoingRequest(idempotencyKey: String(repeating: "k", count: 256), createdAt: .min,
                                      organization: String(repeating: "o", count: 256),
                                      destination: String(repeating: "d", count: OutboxItemFormat.maxDestinationBytes),
                                      body: Array(repeating: 1, count: OutboxItemFormat.maxBodyBytes), attempts: Int(UInt32.max))
        let encoded = try OutboxItemFormat.encode(largest)
        #expect(encoded.count == OutboxItemFormat.maxEncodedBytes)
        #expect(try OutboxItemFormat.decode(encoded) == largest)
    }

    @Test func everyTruncationAndEveryFlippedBitIsRefusedByTheDecoder() throws {
        let encoded = try OutboxItemFormat.encode(request())
        for length in 0..<encoded.count {
            #expect(throws: OutboxItemFormat.Problem.self) { try OutboxItemFormat.decode(Array(encoded.prefix(length))) }
        }
        #expect(throws: OutboxItemFormat.Problem.trailingBytes) { try OutboxItemFormat.decode(encoded + [0]) }
        for index in encoded.indices {
            for bit in 0..<8 {
                var flipped = encoded
                flipped[index] ^= 1 << bit
                #expect(throws: OutboxItemFormat.Problem.self) { try OutboxItemFormat.decode(flipped) }
            }
        }
    }

    @Test func aLengthFieldPastTheCapIsRefusedBeforeAnythingIsRead() throws {
        var encoded = try OutboxItemFormat.encode(request(body: ""))
        // The body length sits just before the 32-byte digest when the body is empty.
        let lengthAt = encoded.count - 32 - 4
        encoded.replaceSubrange(lengthAt..<(lengthAt + 4), with: [0xff, 0xff, 0xff, 0xff])
        #expect(throws: OutboxItemFormat.Problem.bodyTooLarge(Int(UInt32.max))) { try OutboxItemFormat.decode(encoded) }
        #expect(throws: OutboxItemFormat.Problem.notAnItem) { try OutboxItemFormat.decode(Array("{\"json\":true}".utf8)) }
        var newer = try OutboxItemFormat.encode(request())
        newer[15] = 3
        #expect(throws: OutboxItemFormat.Problem.unsupportedVersion(3)) { try OutboxItemFormat.decode(newer) }
    }

    @Test func requestsTheFormatCannotCarryAreRefusedAtEnqueue() throws {
        let outbox = try Outbox.open(directory: try stateDirectory("refuse") + "/outbox", now: { startOfTest })
        var headerInjection = request()
        headerInjection = OutgoingRequest(idempotencyKey: "a\r\nX-Evil: 1", createdAt: startOfTest, organization: "acme42", body: [])
        #expect(throws: OutboxError.invalidItem(.keyInvalid)) { try outbox.enqueue(headerInjection) }
        let oversized = request(bodyBytes: Array(repeating: 0, count: OutboxItemFormat.maxBodyBytes + 1))
        #expect(throws: OutboxError.invalidItem(.bodyTooLarge(OutboxItemFormat.maxBodyBytes + 1))) { try outbox.enqueue(oversized) }
        #expect(try itemNames(in: outbox.path).isEmpty)
    }

    // MARK: Round trip

    @Test func itemsComeBackOldestFirstAcrossReopenWithPrivateModes() throws {
        let state = try stateDirectory("round-trip")
        let directory = state + "/outbox"
        let outbox = try Outbox.open(directory: directory, now: { startOfTest })
        let queued = [request(startOfTest - 30), request(startOfTest - 90), request(startOfTest - 60)]
        for item in queued { try outbox.enqueue(item) }
        let expected = queued.sorted { $0.createdAt < $1.createdAt }
        #expect(try outbox.items() == expected)

        let reopened = try Outbox.open(directory: directory, now: { startOfTest })
        #expect(reopened.openMaintenance.performed)
        #expect(reopened.openMaintenance.dropped == OutboxDropCounts())
        #expect(try reopened.items() == expected)

        let attributes = try FileManager.default.attributesOfItem(atPath: directory)
        #expect((attributes[.posixPermissions] as? Int) == 0o700)
        for name in try itemNames(in: directory) {
            let file = try FileManager.default.attributesOfItem(atPath: directory + "/" + name)
            #expect((file[.posixPermissions] as? Int) == 0o600)
        }
        #expect(try names(in: directory).allSatisfy { !$0.hasPrefix(DurableFile.temporaryPrefix) })
    }

    @Test func queueingTheSameKeyAgainKeepsOneCopy() throws {
        let outbox = try Outbox.open(directory: try stateDirectory("same-key") + "/outbox", now: { startOfTest })
        var item = request()
        try outbox.enqueue(item)
        item.attempts = 2
        try outbox.enqueue(item)
        #expect(try outbox.items() == [item])
    }

    // MARK: Garbage

    @Test func everyTruncationOfARealItemOnDiskIsSkippedAndRemoved() throws {
        let directory = try stateDirectory("truncated") + "/outbox"
        let outbox = try Outbox.open(directory: directory, now: { startOfTest })
        let survivor = request(startOfTest - 1)
        try outbox.enqueue(survivor)
        let victim = request()
        let encoded = try OutboxItemFormat.encode(victim)
        let path = directory + "/" + OutboxItemFormat.fileName(forKey: victim.idempotencyKey)
        for length in 0..<encoded.count {
            try write(Array(encoded.prefix(length)), to: path)
            #expect(try outbox.items() == [survivor], "length \(length)")
            let reopened = try Outbox.open(directory: directory, now: { startOfTest })
            #expect(reopened.openMaintenance.dropped.unreadable == 1, "length \(length)")
            #expect(!FileManager.default.fileExists(atPath: path), "length \(length)")
        }
        #expect(try outbox.items() == [survivor])
        #expect(outbox.dropCounts().unreadable == encoded.count)
    }

    @Test func garbageForeignFilesLinksAndFIFOsAreRemovedAndNeverFollowed() throws {
        let state = try stateDirectory("garbage")
        let directory = state + "/outbox"
        let outbox = try Outbox.open(directory: directory, now: { startOfTest })
        let good = request()
        try outbox.enqueue(good)

        let victim = state + "/precious"
        try write(Array("keep me".utf8), to: victim)
        let fake = { (seed: String) in OutboxItemFormat.fileName(forKey: seed) }
        try write(Array(repeating: 0x41, count: 100), to: directory + "/" + fake("random"))
        try write(Array("hello".utf8), to: directory + "/notes.txt")
        try write(Array(repeating: 1, count: OutboxItemFormat.maxEncodedBytes + 1), to: directory + "/" + fake("huge"))
        try FileManager.default.createSymbolicLink(atPath: directory + "/" + fake("link"), withDestinationPath: victim)
        // A valid item, but under a name another key gives: a copy would be sent twice.
        let misnamed = request()
        try write(try OutboxItemFormat.encode(misnamed), to: directory + "/" + fake("other"))
        // A valid item anyone may rewrite.
        let shared = request()
        try write(try OutboxItemFormat.encode(shared), to: directory + "/" + fake(shared.idempotencyKey), mode: 0o666)
        #expect(mkfifo(directory + "/" + fake("fifo"), 0o600) == 0)
        try FileManager.default.createDirectory(atPath: directory + "/empty-dir", withIntermediateDirectories: false)
        #expect(try outbox.items() == [good])

        let reopened = try Outbox.open(directory: directory, now: { startOfTest })
        #expect(reopened.openMaintenance.dropped.unreadable == 8)
        #expect(try names(in: directory) == [".drops", ".lock", OutboxItemFormat.fileName(forKey: good.idempotencyKey)])
        #expect(try String(contentsOfFile: victim, encoding: .utf8) == "keep me")
        #expect(try reopened.items() == [good])
    }

    @Test func temporaryFilesOfDeadWritersAreSweptAndALiveWritersAreKept() throws {
        let directory = try stateDirectory("leftovers") + "/outbox"
        _ = try Outbox.open(directory: directory, now: { startOfTest })
        let dead = directory + "/" + DurableFile.temporaryPrefix + "dead"
        let live = directory + "/" + DurableFile.temporaryPrefix + "live"
        try write(Array(repeating: 9, count: 40), to: dead)
        try write(Array(repeating: 9, count: 40), to: live)
        let writer = open(live, O_RDONLY | O_CLOEXEC)
        #expect(flock(writer, LOCK_EX) == 0)
        defer { close(writer) }

        let reopened = try Outbox.open(directory: directory, now: { startOfTest })
        #expect(reopened.openMaintenance.leftoversRemoved == 1)
        #expect(!FileManager.default.fileExists(atPath: dead))
        #expect(FileManager.default.fileExists(atPath: live))
        // Leftovers are not reports: no drop is counted.
        #expect(reopened.dropCounts() == OutboxDropCounts())
    }

    @Test func aPlantedLockLinkIsReplacedWithoutTouchingItsTarget() throws {
        let state = try stateDirectory("lock-link")
        let directory = state + "/outbox"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        let target = state + "/target"
        try write(Array("x".utf8), to: target, mode: 0o644)
        try FileManager.default.createSymbolicLink(atPath: directory + "/.lock", withDestinationPath: target)
        let outbox = try Outbox.open(directory: directory, now: { startOfTest })
        try outbox.enqueue(request())
        #expect(outbox.flush { _ in .delivered }.delivered == 1)
        let lock = try FileManager.default.attributesOfItem(atPath: directory + "/.lock")
        #expect(lock[.type] as? FileAttributeType == .typeRegular)
        #expect(try String(contentsOfFile: target, encoding: .utf8) == "x")
    }

    @Test func aDirectoryOfThousandsOfPlantedFilesIsWorkedThroughInBoundedPasses() throws {
        let directory = try stateDirectory("hostile") + "/outbox"
        let limits = OutboxLimits(maxEntriesScanned: 500)
        let outbox = try Outbox.open(directory: directory, limits: limits, now: { startOfTest })
        let good = request()
        try outbox.enqueue(good)
        for index in 0..<1800 { try write([UInt8(index & 0xff)], to: directory + "/junk-\(index)") }

        var passes = 0
        var truncatedPasses = 0
        while true {
            passes += 1
            let opened = try Outbox.open(directory: directory, limits: limits, now: { startOfTest })
            #expect(opened.openMaintenance.dropped.unreadable <= limits.maxEntriesScanned)
            guard opened.openMaintenance.scanTruncated else { break }
            truncatedPasses += 1
            try #require(passes < 10)
        }
        #expect(truncatedPasses >= 3)
        #expect(try names(in: directory).filter { $0.hasPrefix("junk-") }.isEmpty)
        #expect(try outbox.items() == [good])
        #expect(outbox.dropCounts().unreadable == 1800)
    }

    // MARK: Caps

    @Test func theOldestItemsAreEvictedPastTheItemCapAndTheDropsSurviveReopening() throws {
        let directory = try stateDirectory("cap-items") + "/outbox"
        let limits = OutboxLimits(maxItems: 3)
        let outbox = try Outbox.open(directory: directory, limits: limits, now: { startOfTest })
        let queued = (0..<5).map { request(startOfTest - 100 + Int64($0)) }
        var evicted = 0
        for item in queued { evicted += try outbox.enqueue(item).dropped.evicted }
        #expect(evicted == 2)
        #expect(try outbox.items() == Array(queued.suffix(3)))
        #expect(outbox.dropCounts() == OutboxDropCounts(evicted: 2))

        let smaller = try Outbox.open(directory: directory, limits: OutboxLimits(maxItems: 2), now: { startOfTest })
        #expect(smaller.openMaintenance.dropped.evicted == 1)
        #expect(try smaller.items() == Array(queued.suffix(2)))
        let again = try Outbox.open(directory: directory, limits: limits, now: { startOfTest })
        #expect(again.dropCounts() == OutboxDropCounts(evicted: 3))
        #expect(try String(contentsOfFile: directory + "/.drops", encoding: .utf8) == "evicted 3\nexpired 0\nrejected 0\nunreadable 0\n")
    }

    @Test func theOldestItemsAreEvictedPastTheByteCap() throws {
        let directory = try stateDirectory("cap-bytes") + "/outbox"
        let body = Array(repeating: UInt8(ascii: "x"), count: 10_000)
        let size = try OutboxItemFormat.encode(request(bodyBytes: body)).count
        let outbox = try Outbox.open(directory: directory, limits: OutboxLimits(maxBytes: 2 * size + size / 2), now: { startOfTest })
        let queued = (0..<4).map { request(startOfTest - 10 + Int64($0), bodyBytes: body) }
        for item in queued { try outbox.enqueue(item) }
        #expect(try outbox.items() == Array(queued.suffix(2)))
        #expect(outbox.dropCounts().evicted == 2)
        #expect(throws: OutboxError.itemTooLarge(bytes: size * 3, limit: 2 * size + size / 2)) {
            try outbox.enqueue(request(bodyBytes: Array(repeating: 1, count: 3 * size - (size - 10_000))))
        }
    }

    @Test func itemsOlderThanTheAgeCapExpireAgainstTheInjectedClock() throws {
        let directory = try stateDirectory("age") + "/outbox"
        let clock = TestClock(startOfTest)
        let limits = OutboxLimits(maxAgeSeconds: 3600)
        let outbox = try Outbox.open(directory: directory, limits: limits, now: clock.reading)
        let old = request(startOfTest - 1800)
        let young = request(startOfTest)
        try outbox.enqueue(old)
        try outbox.enqueue(young)
        #expect(throws: OutboxError.expired(ageSeconds: 3601)) { try outbox.enqueue(request(startOfTest - 3601)) }
        #expect(throws: OutboxError.expired(ageSeconds: -3601)) { try outbox.enqueue(request(startOfTest + 3601)) }
        #expect(throws: OutboxError.expired(ageSeconds: .max)) { try outbox.enqueue(request(.min)) }

        clock.set(startOfTest + 1801)
        let later = try Outbox.open(directory: directory, limits: limits, now: clock.reading)
        #expect(later.openMaintenance.dropped == OutboxDropCounts(expired: 1))
        #expect(try later.items() == [young])
        clock.set(startOfTest + 3601)
        let summary = later.flush { _ in .delivered }
        #expect(summary.delivered == 0)
        #expect(summary.dropped == 1)
        #expect(later.dropCounts() == OutboxDropCounts(expired: 2))
    }

    // MARK: Flush

    @Test func flushSendsOldestFirstDropsRejectionsAndStopsAtTheFirstRetry() throws {
        let directory = try stateDirectory("flush") + "/outbox"
        let outbox = try Outbox.open(directory: directory, now: { startOfTest })
        let queued = (0..<4).map { request(startOfTest - 10 + Int64($0)) }
        for item in queued.reversed() { try outbox.enqueue(item) }
        var seen: [OutgoingRequest] = []
        let summary = outbox.flush { item in
            seen.append(item)
            switch seen.count {
            case 1: return .delivered
            case 2: return .rejected(SendFailure(status: 422))
            default: return .retryLater(SendFailure(status: 503))
            }
        }
        #expect(seen == Array(queued.prefix(3)))
        #expect(summary.delivered == 1)
        #expect(summary.dropped == 1)
        #expect(summary.remaining == 2)
        #expect(summary.lastError as? SendFailure == SendFailure(status: 503))
        #expect(!summary.busy)

        var retried = queued[2]
        retried.attempts = 1
        let reopened = try Outbox.open(directory: directory, now: { startOfTest })
        #expect(try reopened.items() == [retried, queued[3]])
        #expect(reopened.dropCounts() == OutboxDropCounts(rejected: 1))

        var second: [OutgoingRequest] = []
        let rest = reopened.flush { second.append($0); return .delivered }
        #expect(second == [retried, queued[3]])
        #expect(rest.delivered == 2 && rest.remaining == 0 && rest.lastError == nil)
    }

    @Test func flushForOneOrganizationLeavesAnothersItems() throws {
        let outbox = try Outbox.open(directory: try stateDirectory("organizations") + "/outbox", now: { startOfTest })
        let ours = request(startOfTest - 2, organization: "acme42")
        let theirs = request(startOfTest - 3, organization: "globex")
        try outbox.enqueue(ours)
        try outbox.enqueue(theirs)
        var sent: [OutgoingRequest] = []
        let summary = outbox.flush(organization: "acme42") { sent.append($0); return .delivered }
        #expect(sent == [ours])
        #expect(summary.remaining == 1)
        #expect(try outbox.items() == [theirs])
    }

    @Test func twoFlushesOnTwoThreadsMeanOneSenderAndEveryItemDeliveredOnce() throws {
        let directory = try stateDirectory("threads") + "/outbox"
        let first = try Outbox.open(directory: directory, now: { startOfTest })
        let second = try Outbox.open(directory: directory, now: { startOfTest })
        let queued = (0..<5).map { request(startOfTest - 10 + Int64($0)) }
        for item in queued { try first.enqueue(item) }

        let delivered = Mutex<[String]>([])
        let firstIsSending = DispatchSemaphore(value: 0)
        let secondIsDone = DispatchSemaphore(value: 0)
        let firstFinished = DispatchSemaphore(value: 0)
        let firstSummary = Mutex<FlushSummary?>(nil)
        Thread.detachNewThread {
            let summary = first.flush { item in
                if delivered.withLock({ $0.isEmpty }) {
                    firstIsSending.signal()
                    secondIsDone.wait()
                }
                delivered.withLock { $0.append(item.idempotencyKey) }
                return .delivered
            }
            firstSummary.withLock { $0 = summary }
            firstFinished.signal()
        }
        firstIsSending.wait()
        let secondSummary = second.flush { item in
            delivered.withLock { $0.append(item.idempotencyKey) }
            return .delivered
        }
        secondIsDone.signal()
        firstFinished.wait()

        #expect(secondSummary.busy)
        #expect(secondSummary.delivered == 0)
        #expect(secondSummary.remaining == 5)
        #expect(firstSummary.withLock { $0?.delivered } == 5)
        #expect(delivered.withLock { $0 } == queued.map(\.idempotencyKey))
        #expect(try first.items().isEmpty)
    }

    @Test func aFlushWhileAnotherProcessHoldsTheLockSendsNothing() throws {
        let directory = try stateDirectory("processes") + "/outbox"
        let outbox = try Outbox.open(directory: directory, now: { startOfTest })
        let item = request()
        try outbox.enqueue(item)

        // util-linux flock(1) takes the same flock(2) lock another fingerly process would.
        let holder = Process()
        holder.executableURL = URL(fileURLWithPath: "/usr/bin/flock")
        holder.arguments = [directory + "/.lock", "/bin/sh", "-c", "echo locked; read line"]
        let input = Pipe(), output = Pipe()
        holder.standardInput = input
        holder.standardOutput = output
        try holder.run()
        var announced = Data()
        while !String(decoding: announced, as: UTF8.self).contains("locked") {
            let chunk = output.fileHandleForReading.availableData
            try #require(!chunk.isEmpty, "flock(1) exited before taking the lock")
            announced += chunk
        }

        var sent = 0
        let blocked = outbox.flush { _ in sent += 1; return .delivered }
        #expect(blocked.busy)
        #expect(blocked.remaining == 1)
        // Upkeep at enqueue is left to the holder too: the item is written, nothing evicted.
        #expect(try outbox.enqueue(request()).performed == false)

        try input.fileHandleForWriting.close()
        holder.waitUntilExit()
        let released = outbox.flush { _ in sent += 1; return .delivered }
        #expect(!released.busy)
        #expect(released.delivered == 2)
        #expect(sent == 2)
    }

    // MARK: Disk full

    /// A write past RLIMIT_FSIZE fails with EFBIG (and SIGXFSZ, which would kill the test
    /// process, so it is ignored for the duration). The limit is process-wide: it is well above
    /// what the rest of the suite writes while this test runs alone (the suite is serialized,
    /// and scripts/test runs suites one after another).
    @Test func aWritePastTheFileSizeLimitIsACleanErrorAndLeavesTheOutboxAsItWas() throws {
        let directory = try stateDirectory("fsize") + "/outbox"
        let outbox = try Outbox.open(directory: directory, now: { startOfTest })
        let existing = [request(startOfTest - 2), request(startOfTest - 1)]
        for item in existing { try outbox.enqueue(item) }
        let filesBefore = try names(in: directory)

        let large = request(bodyBytes: Array(repeating: 0x5a, count: 512 * 1024))
        var saved = rlimit()
        #expect(getrlimit(Int32(RLIMIT_FSIZE.rawValue), &saved) == 0)
        let previousHandler = signal(SIGXFSZ, SIG_IGN)
        var limited = saved
        limited.rlim_cur = 256 * 1024
        #expect(setrlimit(Int32(RLIMIT_FSIZE.rawValue), &limited) == 0)
        let outcome = Result { () throws(OutboxError) in try outbox.enqueue(large) }
        #expect(setrlimit(Int32(RLIMIT_FSIZE.rawValue), &saved) == 0)
        signal(SIGXFSZ, previousHandler)

        guard case .failure(let error) = outcome else {
            Issue.record("the write past the limit succeeded")
            return
        }
        #expect(error.isOutOfSpace, "\(error)")
        #expect(try names(in: directory) == filesBefore)
        #expect(try outbox.items() == existing)
    }

    /// ENOSPC from a real file system of 64 KiB, where the container allows mounting one
    /// (root with CAP_SYS_ADMIN); the file-size-limit test above covers the same contract everywhere.
    @Test(.enabled(if: SmallFilesystem.canMount, "mounting a tmpfs needs CAP_SYS_ADMIN"))
    func aFullFilesystemIsACleanErrorAndLeavesTheOutboxAsItWas() throws {
        let mountPoint = try stateDirectory("tmpfs")
        try SmallFilesystem.mount(at: mountPoint)
        defer { _ = try? runProcess("/bin/umount", [mountPoint]) }
        let directory = mountPoint + "/outbox"
        let outbox = try Outbox.open(directory: directory, now: { startOfTest })
        let existing = [request(startOfTest - 2), request(startOfTest - 1)]
        for item in existing { try outbox.enqueue(item) }
        let filesBefore = try names(in: directory)

        #expect {
            try outbox.enqueue(request(bodyBytes: Array(repeating: 0x5a, count: 100 * 1024)))
        } throws: { error in
            (error as? OutboxError)?.isOutOfSpace == true
        }
        #expect(try names(in: directory) == filesBefore)
        #expect(try outbox.items() == existing)
        // The space the failed write took is given back.
        let small = request()
        try outbox.enqueue(small)
        #expect(try outbox.items() == existing + [small])

        // With not a page left, upkeep cannot record its drops, but delivering still empties
        // the outbox (an empty file takes no page to plant, and frees none when removed).
        try write([], to: directory + "/" + OutboxItemFormat.fileName(forKey: "planted"))
        try SmallFilesystem.fill(mountPoint + "/filler")
        var sent: [OutgoingRequest] = []
        let summary = outbox.flush { sent.append($0); return .delivered }
        #expect(sent == existing + [small])
        #expect(summary.delivered == 3 && summary.remaining == 0)
        #expect((summary.lastError as? OutboxError)?.isOutOfSpace == true, "\(String(describing: summary.lastError))")
        // The planted file went; its drop could not be counted (.drops was never written).
        #expect(try names(in: directory) == [".lock"])
    }

    // MARK: Purge

    @Test func purgeRemovesEveryItemAndKeepsTheCounters() throws {
        let directory = try stateDirectory("purge") + "/outbox"
        let outbox = try Outbox.open(directory: directory, limits: OutboxLimits(maxItems: 3), now: { startOfTest })
        for offset in 0..<4 { try outbox.enqueue(request(startOfTest - 10 + Int64(offset))) }
        #expect(try outbox.purge() == 3)
        #expect(try outbox.items().isEmpty)
        #expect(try itemNames(in: directory).isEmpty)
        #expect(outbox.dropCounts() == OutboxDropCounts(evicted: 1))
        #expect(outbox.flush { _ in .delivered }.delivered == 0)
    }

    // MARK: Drop counter file

    @Test func theDropCounterFileIsReadStrictly() {
        let counts = OutboxDropCounts(evicted: 1, expired: 22, rejected: 333, unreadable: 4444)
        #expect(OutboxDropCounts.parse(counts.formatted) == counts)
        for text in ["", "evicted 1\n", "evicted 1\nexpired 2\nrejected 3\nunreadable 4", "evicted -1\nexpired 2\nrejected 3\nunreadable 4\n",
                     "evicted 1\nexpired 2\nrejected 3\nunreadable 4\nmore 5\n", "evicted 99999999999999999999\nexpired 2\nrejected 3\nunreadable 4\n",
                     "expired 2\nevicted 1\nrejected 3\nunreadable 4\n"] {
            #expect(OutboxDropCounts.parse(Array(text.utf8)) == nil, "\(text)")
        }
    }
}

@Suite(.serialized) struct ConsentRecordTests {
    @Test(arguments: ConsentRecord.Value.allCases)
    func aRecordedValueReadsBackAndIsPrivate(_ value: ConsentRecord.Value) throws {
        let state = try TestPaths.temporaryDirectory("consent") + "/state"
        #expect(ConsentRecord.read(stateDirectory: state) == .absent)
        try ConsentRecord.write(value, stateDirectory: state)
        #expect(ConsentRecord.read(stateDirectory: state) == .recorded(value))
        #expect(try String(contentsOfFile: state + "/consent", encoding: .utf8) == value.rawValue + "\n")
        let file = try FileManager.default.attributesOfItem(atPath: state + "/consent")
        #expect((file[.posixPermissions] as? Int) == 0o600)
        let directory = try FileManager.default.attributesOfItem(atPath: state)
        #expect((directory[.posixPermissions] as? Int) == 0o700)
        try ConsentRecord.write(.denied, stateDirectory: state)
        #expect(ConsentRecord.read(stateDirectory: state) == .recorded(.denied))
        #expect(try FileManager.default.contentsOfDirectory(atPath: state) == ["consent"])
    }

    @Test(arguments: ["", "granted", "GRANTED\n", "granted\n\n", " granted\n", "granted\r\n", "granted \n", "yes\n",
                      "denied\ngranted\n", String(repeating: "granted\n", count: 3)])
    func anythingButOneExactWordAndANewlineIsInvalid(_ content: String) throws {
        let state = try TestPaths.temporaryDirectory("consent-content")
        try write(Array(content.utf8), to: state + "/consent")
        guard case .invalid = ConsentRecord.read(stateDirectory: state) else {
            Issue.record("\(content.debugDescription) was accepted")
            return
        }
    }

    @Test func aLinkADirectoryAFIFOAndAFileOthersMayWriteAreInvalid() throws {
        let state = try TestPaths.temporaryDirectory("consent-refusals")
        let target = state + "-target"
        try write(Array("granted\n".utf8), to: target)
        let path = state + "/consent"

        try FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: target)
        #expect(ConsentRecord.read(stateDirectory: state) == .invalid("\(path): is a symbolic link"))
        try FileManager.default.removeItem(atPath: path)

        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
        #expect(ConsentRecord.read(stateDirectory: state) == .invalid("\(path): not a regular file"))
        try FileManager.default.removeItem(atPath: path)

        #expect(mkfifo(path, 0o600) == 0)
        #expect(ConsentRecord.read(stateDirectory: state) == .invalid("\(path): not a regular file"))
        try FileManager.default.removeItem(atPath: path)

        try write(Array("granted\n".utf8), to: path, mode: 0o622)
        #expect(ConsentRecord.read(stateDirectory: state) == .invalid("\(path): writable by others (mode 622)"))
        #expect(chmod(path, 0o600) == 0)
        #expect(ConsentRecord.read(stateDirectory: state) == .recorded(.granted))
        if geteuid() == 0 {
            #expect(chown(path, 65534, 65534) == 0)
            #expect(ConsentRecord.read(stateDirectory: state) == .invalid("\(path): owned by uid 65534"))
        }
        // Writing replaces whatever was there with a file of this user's.
        try ConsentRecord.write(.pending, stateDirectory: state)
        #expect(ConsentRecord.read(stateDirectory: state) == .recorded(.pending))
        #expect(try String(contentsOfFile: target, encoding: .utf8) == "granted\n")
    }

    @Test func writingSweepsADeadWritersTemporaryFile() throws {
        let state = try TestPaths.temporaryDirectory("consent-sweep")
        let leftover = state + "/" + DurableFile.temporaryPrefix + "crashed"
        try write(Array("gran".utf8), to: leftover)
        try ConsentRecord.write(.granted, stateDirectory: state)
        #expect(try FileManager.default.contentsOfDirectory(atPath: state) == ["consent"])
    }
}

/// A 64 KiB tmpfs for the full-disk case.
enum SmallFilesystem {
    static let canMount: Bool = {
        guard geteuid() == 0, let probe = try? TestPaths.temporaryDirectory("tmpfs-probe") else { return false }
        guard (try? mount(at: probe)) != nil else { return false }
        _ = try? runProcess("/bin/umount", [probe])
        return true
    }()

    /// Writes a file until the file system has no page left.
    static func fill(_ path: String) throws {
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        try #require(fd >= 0)
        defer { close(fd) }
        let page = [UInt8](repeating: 0, count: 4096)
        while page.withUnsafeBytes({ Glibc.write(fd, $0.baseAddress, $0.count) }) > 0 {}
        #expect(errno == ENOSPC)
    }

    static func mount(at path: String) throws {
        let result = try runProcess("/bin/mount", ["-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", path])
        try #require(result.status == 0, "mount: \(result.standardError)")
    }
}
