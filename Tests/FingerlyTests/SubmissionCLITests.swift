import Foundation
import Glibc
import Testing
@testable import Fingerly
@testable import FingerlyModel
@testable import FingerlyTransport

/// The acceptance fault cases driven through the real `fingerly-identify` process: each run gets
/// a state directory of its own, a key, a loopback endpoint and a fixture root, and the cases
/// look at what the fault server saw and what the outbox holds on disk.
@Suite(.serialized) struct SubmissionCLITests {
    static let fixture = TestPaths.fixture("kvm-qemu")

    static let answer = #"{"requestId":"req-1","visitorId":"vis-1","visitorIsNew":true,"visitorConfidence":80,"identifiable":true,"duplicate":false,"suspectScore":null,"suspectLevel":null}"#

    static func accepted(delayMs: Int = 0) -> FaultServer.Reply {
        .status(200, [("Content-Type", "application/json")], body: answer, delayMs: delayMs)
    }

    static func error(_ status: Int, _ code: String) -> FaultServer.Reply {
        .status(status, [("Content-Type", "application/json")], body: #"{"error":{"code":"\#(code)","message":"scripted"}}"#)
    }

    static func freshState(_ label: String) throws -> String {
        let path = try TestPaths.temporaryDirectory("cli-\(label)")
        chmod(path, 0o700)
        return path
    }

    /// This process's environment without anything that would steer the CLI elsewhere (a proxy,
    /// another key, endpoint or state directory), plus the run's own.
    static func environment(state: String, apiKey: String? = TestKeys.standard) -> [String: String] {
        var env = ProcessInfo.processInfo.environment
        for name in env.keys where name.lowercased().hasSuffix("_proxy") || name.hasPrefix("FINGERLY_") { env[name] = nil }
        env["FINGERLY_STATE_DIR"] = state
        env["STATE_DIRECTORY"] = state
        env["FINGERLY_API_KEY"] = apiKey
        return env
    }

    /// The identify arguments of every run: a fixture, the fast tier, short pauses.
    static func identifyArguments(_ endpoint: String, attempts: Int = 3) -> [String] {
        ["--endpoint", endpoint, "--root", fixture, "--tiers", "fast", "--attempts", String(attempts),
         "--retry-delay-ms", "5", "--deadline-ms", "5000"]
    }

    static func flushArguments(_ endpoint: String) -> [String] {
        ["flush", "--endpoint", endpoint, "--retry-delay-ms", "5", "--deadline-ms", "10000"]
    }

    /// A loopback URL nobody listens on: a port the kernel handed out, then closed.
    static func closedPort() throws -> String {
        "http://127.0.0.1:\(try HeldLoopbackPort().port)"
    }

    static func outboxPath(_ state: String) -> String { state + "/outbox" }

    /// Names in the outbox directory, without opening it as an Outbox (which would sweep it).
    static func outboxNames(_ state: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: outboxPath(state))) ?? []).sorted()
    }

    static func itemFiles(_ state: String) -> [String] { outboxNames(state).filter { $0.hasSuffix(".item") } }

    /// The queued requests as the library reads them.
    static func queued(_ state: String) throws -> [OutgoingRequest] {
        try Outbox.open(directory: outboxPath(state)).items()
    }

    static func exists(_ path: String) -> Bool {
        var info = stat()
        return lstat(path, &info) == 0
    }

    /// One closed-port run: the report is queued (75) and its preview names key and body.
    @discardableResult
    static func queueOne(state: String, sourceLocation: SourceLocation = #_sourceLocation) throws -> SubmissionRequest {
        let run = try runCLI(identifyArguments(try closedPort(), attempts: 1) + ["--json"], environment: environment(state: state))
        try #require(run.status == 75, "queueing run: \(run.status) \(run.standardError)", sourceLocation: sourceLocation)
        return try #require(try run.identifyResultLine().request, sourceLocation: sourceLocation)
    }

    /// Every request carried a queued item's key and body, each item exactly once.
    static func expectDeliveredOnce(_ requests: [RecordedRequest], items: [OutgoingRequest],
                                    sourceLocation: SourceLocation = #_sourceLocation) {
        let keys = requests.map { $0.header("Idempotency-Key") ?? "" }
        #expect(requests.count == items.count, "\(requests.count) requests for \(items.count) items", sourceLocation: sourceLocation)
        #expect(Set(keys).count == keys.count, "a key was sent twice: \(keys)", sourceLocation: sourceLocation)
        let byKey = Dictionary(items.map { ("\"\($0.idempotencyKey)\"", $0.body) }, uniquingKeysWith: { first, _ in first })
        #expect(Set(keys) == Set(byKey.keys), sourceLocation: sourceLocation)
        for request in requests {
            #expect(request.method == "POST" && request.path == "/v1/identify", sourceLocation: sourceLocation)
            #expect(byKey[request.header("Idempotency-Key") ?? ""] == request.body, "body differs from the queued bytes",
                    sourceLocation: sourceLocation)
        }
    }

    // MARK: 7: a closed port queues; flush delivers the same key and bytes

    @Test func aClosedPortQueuesAndFlushSendsTheSameKeyAndBytes() throws {
        // The bytes a failed attempt carries, as the server captured them, are the bytes queued.
        let failedState = try Self.freshState("503")
        let unavailable = try FaultServer([Self.error(503, "unavailable")])
        let failed = try runCLI(Self.identifyArguments(unavailable.url, attempts: 1), environment: Self.environment(state: failedState))
        #expect(failed.status == 75, "\(failed.standardError)")
        #expect(unavailable.requests.count == 1)
        let queuedAfter503 = try Self.queued(failedState)
        try #require(queuedAfter503.count == 1)
        let attempt = try #require(unavailable.requests.first)
        #expect(attempt.header("Idempotency-Key") == "\"\(queuedAfter503[0].idempotencyKey)\"")
        #expect(attempt.body == queuedAfter503[0].body)
        #expect(queuedAfter503[0].attempts == 1)

        // The closed port: no attempt reached anyone; the queued item is the dry-run preview's key and body.
        let state = try Self.freshState("closed")
        let preview = try Self.queueOne(state: state)
        #expect(Self.itemFiles(state).count == 1)
        let items = try Self.queued(state)
        try #require(items.count == 1)
        #expect(items[0].idempotencyKey == preview.idempotencyKey)
        #expect(items[0].body == Array(preview.body.utf8))
        #expect(items[0].organization == "acme")

        for (directory, expected, label) in [(state, items[0], "closed port"), (failedState, queuedAfter503[0], "503")] {
            let server = try FaultServer([Self.accepted()])
            let flush = try runCLI(Self.flushArguments(server.url), environment: Self.environment(state: directory))
            #expect(flush.status == 0, "\(label): \(flush.status) \(flush.standardError)")
            #expect(flush.standardOutput.contains("1 delivered"), "\(label): \(flush.standardOutput)")
            #expect(server.requests.count == 1, "\(label)")
            #expect(server.requests.first?.header("Idempotency-Key") == "\"\(expected.idempotencyKey)\"", "\(label)")
            #expect(server.requests.first?.body == expected.body, "\(label)")
            #expect(Self.itemFiles(directory).isEmpty, "\(label)")
        }
        // The 503 attempt and the flush carried one report: byte for byte.
        #expect(queuedAfter503[0].body == attempt.body)
    }

    // MARK: 9: kill -9 while queueing

    /// SplitMix64: a seeded generator, so a failing sequence of kills can be replayed.
    struct SeededGenerator: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    /// Starts the CLI with stdout into `outputFile` and stderr discarded; the caller waits.
    static func spawnCLI(_ arguments: [String], environment: [String: String], outputFile: String) throws -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, outputFile, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        startsWithDefaultSignals(&attributes)
        let argv = ([TestPaths.cli] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { (argv + envp).forEach { free($0) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, TestPaths.cli, &actions, &attributes, argv, envp)
        guard spawned == 0 else { throw POSIXError(POSIXErrorCode(rawValue: spawned) ?? .ENOENT) }
        return pid
    }

    /// The exit status as the shell reports it: 128 + the signal for a killed process.
    static func wait(_ pid: pid_t) -> Int32 {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        return (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
    }

    @Test func killNineWhileQueueingNeverLeavesAPartialItemAndFlushDeliversEachOnce() throws {
        let runs = 50
        let seed = ProcessInfo.processInfo.environment["FINGERLY_KILL_SEED"].flatMap { UInt64($0) } ?? UInt64(time(nil))
        var generator = SeededGenerator(state: seed)
        let state = try Self.freshState("kill9")
        let scratch = try TestPaths.temporaryDirectory("kill9-out")
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let arguments = Self.identifyArguments(try Self.closedPort(), attempts: 1) + ["--json"]
        let env = Self.environment(state: state)

        // How long a whole run takes here, so the kills spread over collection, the attempt and
        // the write: the calibration runs queue under a directory of their own.
        let calibration = Self.environment(state: try Self.freshState("kill9-calibration"))
        var walls: [Double] = []
        for _ in 0..<3 {
            let run = try runCLI(arguments, environment: calibration)
            try #require(run.status == 75, "\(run.standardError)")
            walls.append(run.wallMs)
        }
        let window = Int(walls.max()! * 1.15) + 1

        var completed: [String] = []
        var killed = 0
        var printedBeforeKill = 0
        // What each kill interrupted, told by what it left: nothing, a temporary file, an item.
        var beforeQueueing = 0, midWrite = 0, afterQueueing = 0
        // Half the kills aim at the edge between "no item yet" and "item queued", learnt as the
        // runs go, so that some land inside the write; the other half spread over the whole run.
        var latestWithoutItem: Int?, earliestWithItem: Int?
        let started = Date()
        for index in 0..<runs {
            let edge = latestWithoutItem.flatMap { low in earliestWithItem.map { (low + $0) / 2 } } ?? window * 4 / 5
            let delay = Bool.random(using: &generator) ? Int.random(in: 0...window, using: &generator)
                                                       : max(0, edge + Int.random(in: -4...4, using: &generator))
            let itemsBefore = Self.itemFiles(state).count
            let output = scratch + "/run-\(index).json"
            let pid = try Self.spawnCLI(arguments, environment: env, outputFile: output)
            usleep(useconds_t(delay * 1000))
            kill(pid, SIGKILL)
            let status = Self.wait(pid)
            let names = Self.outboxNames(state)
            let queuedOne = names.filter { $0.hasSuffix(".item") }.count > itemsBefore
            // Now, before the next run's upkeep could remove a bad file: every item is whole.
            for name in names where name.hasSuffix(".item") {
                let bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: Self.outboxPath(state) + "/" + name)))
                #expect(throws: Never.self, "run \(index), delay \(delay) ms (seed \(seed)): partial item \(name)") {
                    _ = try OutboxItemFormat.decode(bytes)
                }
            }
            if queuedOne {
                earliestWithItem = min(earliestWithItem ?? delay, delay)
            } else if status == 128 + SIGKILL {
                latestWithoutItem = max(latestWithoutItem ?? delay, delay)
            }
            let printed = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
            // A result printed whole comes after the queueing: its report must be in the outbox.
            let line = printed.split(separator: "\n").first { $0.hasPrefix("{\"") }
            let key = line.flatMap { try? JSONDecoder.fingerly.decode(IdentifyResult.self, from: Data($0.utf8)) }?.request?.idempotencyKey
            if status == 128 + SIGKILL {
                killed += 1
                if names.contains(where: { $0.hasPrefix(".tmp.") }) { midWrite += 1 } else if queuedOne { afterQueueing += 1 } else { beforeQueueing += 1 }
                if let key { completed.append(key); printedBeforeKill += 1 }
            } else {
                #expect(status == 75, "run \(index) (seed \(seed)): exit \(status)")
                if let key { completed.append(key) } else { Issue.record("run \(index) (seed \(seed)) exited \(status) without a result") }
            }
        }
        let killingSeconds = Date().timeIntervalSince(started)

        let itemNames = Self.itemFiles(state)
        let outbox = try Outbox.open(directory: Self.outboxPath(state))
        let items = try outbox.items()
        #expect(items.count == itemNames.count, "seed \(seed): \(items.count) readable of \(itemNames.count) item files")
        #expect(!Self.outboxNames(state).contains { $0.hasPrefix(".tmp.") }, "seed \(seed): a temporary file survived the sweep")
        // No run's upkeep ever found a bad item to remove either (the counter persists).
        #expect(outbox.dropCounts() == OutboxDropCounts(), "seed \(seed): \(outbox.dropCounts())")
        let queuedKeys = Set(items.map(\.idempotencyKey))
        #expect(Set(completed).isSubset(of: queuedKeys), "seed \(seed): a run that reported its report queued lost it")

        let server = try FaultServer(Array(repeating: Self.accepted(), count: runs + 10))
        let flush = try runCLI(Self.flushArguments(server.url), environment: env)
        #expect(flush.status == 0, "seed \(seed): \(flush.status) \(flush.standardError)")
        Self.expectDeliveredOnce(server.requests, items: items)
        #expect(Self.itemFiles(state).isEmpty)

        print("kill -9 seed \(seed): \(runs) runs in \(Int(killingSeconds * 1000)) ms, window 0…\(window) ms (a whole run: \(walls.map { Int($0) }) ms); "
              + "\(killed) killed (\(beforeQueueing) before queueing, \(midWrite) mid-write, \(afterQueueing) after, \(printedBeforeKill) of them after printing), "
              + "\(runs - killed) finished; "
              + "\(itemNames.count) items queued; \(server.requests.count) delivered by one flush")
    }

    // MARK: 10: an outbox of garbage

    @Test func aFlushSkipsAndRemovesGarbageAndNeverCrashes() throws {
        let state = try Self.freshState("garbage")
        let preview = try Self.queueOne(state: state)
        let outbox = Self.outboxPath(state)
        let real = try #require(try Self.queued(state).first)
        let realBytes = try OutboxItemFormat.encode(real)
        var generator = SeededGenerator(state: 11)
        func itemName(_ seed: String) -> String { OutboxItemFormat.fileName(forKey: seed) }
        func write(_ name: String, _ bytes: [UInt8]) throws {
            try Data(bytes).write(to: URL(fileURLWithPath: outbox + "/" + name))
            chmod(outbox + "/" + name, 0o600)
        }
        try write(itemName("random"), (0..<4000).map { _ in UInt8.random(in: 0...255, using: &generator) })
        try write("not-an-item-name", (0..<100).map { _ in UInt8.random(in: 0...255, using: &generator) })
        try write(itemName("truncated"), Array(realBytes.prefix(realBytes.count / 2)))
        try write(itemName("magic-only"), Array(OutboxItemFormat.magic))
        try write(itemName("empty"), [])
        var badDigest = try OutboxItemFormat.encode(OutgoingRequest(idempotencyKey: "bad-digest", createdAt: Int64(time(nil)),
                                                                    organization: "acme", body: Array("{}".utf8)))
        badDigest[badDigest.count - 1] ^= 0xff
        try write(itemName("bad-digest"), badDigest)
        // A valid item under another key's name.
        try write(itemName("renamed"), try OutboxItemFormat.encode(OutgoingRequest(idempotencyKey: "elsewhere", createdAt: Int64(time(nil)),
                                                                                  organization: "acme", body: Array("{}".utf8))))
        try FileManager.default.createSymbolicLink(atPath: outbox + "/" + itemName("symlink"), withDestinationPath: outbox + "/" + real.fileName)
        try FileManager.default.createDirectory(atPath: outbox + "/" + itemName("directory"), withIntermediateDirectories: false)
        #expect(Self.itemFiles(state).count == 9)

        let server = try FaultServer([Self.accepted(), Self.accepted()])
        let flush = try runCLI(Self.flushArguments(server.url), environment: Self.environment(state: state))
        #expect(flush.status == 0, "\(flush.status) \(flush.standardError)")
        // The one real report went, once; every other file is gone, and nothing was sent for it.
        Self.expectDeliveredOnce(server.requests, items: [real])
        #expect(server.requests.first?.body == Array(preview.body.utf8))
        #expect(Self.outboxNames(state).filter { ![".lock", ".drops"].contains($0) } == [], "\(Self.outboxNames(state))")
        #expect(try Outbox.open(directory: outbox).dropCounts().unreadable >= 8)
        // The link's target was this outbox's own item: following it would have sent it twice.
        #expect(server.requests.count == 1)
    }

    // MARK: 12: disk full

    @Test func aFileSizeLimitIsACleanErrorAndLeavesQueuedItemsIntact() throws {
        let state = try Self.freshState("fsize")
        try Self.queueOne(state: state)
        let itemName = try #require(Self.itemFiles(state).first)
        let before = try Data(contentsOf: URL(fileURLWithPath: Self.outboxPath(state) + "/" + itemName))
        #expect(before.count > 4096, "an item must be larger than the limit: \(before.count)")

        let run = try runProcess("/usr/bin/prlimit", ["--fsize=4096", "--", TestPaths.cli]
                                 + Self.identifyArguments(try Self.closedPort(), attempts: 1),
                                 environment: Self.environment(state: state))
        #expect(run.status != 128 + SIGXFSZ, "the CLI died of SIGXFSZ")
        #expect(run.status == 74, "\(run.status) \(run.standardError)")
        #expect(run.standardError.contains("could not be queued"), "\(run.standardError)")
        // The verdicts were printed all the same.
        #expect(run.standardOutput.contains("Verdicts") && run.standardOutput.contains("virtualization"), "\(run.standardOutput.prefix(300))")
        // Nothing half-written stays, and the queued report is as it was.
        #expect(Self.outboxNames(state).filter { !$0.hasPrefix(".lock") && !$0.hasPrefix(".drops") } == [itemName])
        let after = try Data(contentsOf: URL(fileURLWithPath: Self.outboxPath(state) + "/" + itemName))
        #expect(after == before)
        #expect(try Self.queued(state).count == 1)
    }

    // MARK: 13: two flushes at once

    @Test func twoFlushesAtOnceSendEachItemOnce() throws {
        let state = try Self.freshState("two-flushes")
        for _ in 0..<4 { try Self.queueOne(state: state) }
        let items = try Self.queued(state)
        try #require(items.count == 4)

        let server = try FaultServer(Array(repeating: Self.accepted(delayMs: 300), count: 12))
        let env = Self.environment(state: state)
        let slots = [Locked<ProcessOutput?>(nil), Locked<ProcessOutput?>(nil)]
        let group = DispatchGroup()
        for slot in slots {
            group.enter()
            Thread {
                slot.set(try? runCLI(Self.flushArguments(server.url), environment: env))
                group.leave()
            }.start()
        }
        group.wait()
        let runs = slots.compactMap(\.value)
        try #require(runs.count == 2)
        for run in runs {
            #expect([0, 75].contains(run.status), "\(run.status) \(run.standardError)")
            if run.status == 75 { #expect(run.standardError.contains("another process is flushing"), "\(run.standardError)") }
        }
        #expect(runs.contains { $0.status == 0 })
        print("two flushes at once: exits \(runs.map(\.status)), \(server.requests.count) requests for \(items.count) items")
        Self.expectDeliveredOnce(server.requests, items: items)
        #expect(Self.itemFiles(state).isEmpty)
    }

    // MARK: 14: consent

    /// The file-system calls of a CLI run, with the path behind every descriptor (strace -y).
    static func traced(_ arguments: [String], environment: [String: String]) throws -> (run: ProcessOutput, calls: [String]) {
        let log = try TestPaths.temporaryDirectory("strace") + "/trace"
        let run = try runProcess("/usr/bin/strace", ["-f", "-qq", "-y", "-e", "trace=%file,%desc", "-o", log, TestPaths.cli] + arguments,
                                 environment: environment)
        let calls = try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n").map(String.init)
        return (run, calls)
    }

    /// Calls that name the root tree, beside the execve that carries it as an argument.
    static func callsNaming(_ root: String, _ calls: [String]) -> [String] {
        calls.filter { $0.contains(root) && !$0.contains("execve(") }
    }

    /// Calls that open what the integrity probes read: this process's status, threads and
    /// environment, and other processes' entries. libdispatch's pool monitor reads the traced
    /// process's own /proc/<pid>/stat by number; that is the runtime, not a probe.
    static func integrityProbeReads(_ calls: [String]) -> [String] {
        let ownIds = Set(calls.compactMap { $0.split(separator: " ").first.flatMap { Int($0) } })
        let selfFiles = #/"/proc/self/(status|task|environ|sessionid)/#
        let numbered = #/"/proc/([0-9]+)//#
        return calls.filter { call in
            if call.contains(selfFiles) { return true }
            guard let match = call.firstMatch(of: numbered), let id = Int(match.1) else { return false }
            return !ownIds.contains(id)
        }
    }

    static let straceAvailable = FileManager.default.isExecutableFile(atPath: "/usr/bin/strace")

    @Test(.enabled(if: SubmissionCLITests.straceAvailable, "strace is missing: scripts/install-deps --test"))
    func consentPendingReadsNothingSendsNothingAndExits77() throws {
        let root = try TestPaths.copyOfTree(Self.fixture, label: "consent-root")
        defer { try? FileManager.default.removeItem(atPath: root) }
        let server = try FaultServer([Self.accepted()])
        var arguments = Self.identifyArguments(server.url)
        arguments[arguments.firstIndex(of: Self.fixture)!] = root

        // The control: with consent the trace does show the root being read.
        let grantedState = try Self.freshState("consent-control")
        let control = try Self.traced(arguments + ["--no-submit"], environment: Self.environment(state: grantedState))
        #expect(control.run.status == 0, "\(control.run.standardError)")
        #expect(Self.callsNaming(root, control.calls).count > 10, "the trace does not show reads of the root")

        let state = try Self.freshState("consent-pending")
        let env = Self.environment(state: state)
        let set = try runCLI(["consent", "pending"], environment: env)
        #expect(set.status == 0 && set.standardOutput.hasPrefix("consent pending"), "\(set.standardOutput) \(set.standardError)")
        for extra in [[], ["--no-submit"], ["--no-submit", "--json"]] {
            let (run, calls) = try Self.traced(arguments + extra, environment: env)
            #expect(run.status == 77, "\(extra): \(run.status) \(run.standardError)")
            #expect(run.standardOutput.isEmpty, "\(extra): \(run.standardOutput.prefix(200))")
            #expect(run.standardError.contains("consent is pending"), "\(extra): \(run.standardError)")
            #expect(Self.callsNaming(root, calls).isEmpty, "\(extra): read under the root: \(Self.callsNaming(root, calls).prefix(5))")
        }
        // integrity reads the live host: its probes' files, which the control run does read, stay unopened.
        let integrityControl = try Self.traced(["integrity"], environment: Self.environment(state: grantedState))
        #expect(integrityControl.run.status == 0, "\(integrityControl.run.standardError)")
        #expect(!Self.integrityProbeReads(integrityControl.calls).isEmpty, "the trace does not show the integrity probes' reads")
        let (integrity, integrityCalls) = try Self.traced(["integrity"], environment: env)
        #expect(integrity.status == 77 && integrity.standardOutput.isEmpty, "\(integrity.status) \(integrity.standardError)")
        let probeReads = Self.integrityProbeReads(integrityCalls)
        #expect(probeReads.isEmpty, "integrity read the host without consent: \(probeReads.prefix(5))")
        #expect(server.requests.isEmpty)
        #expect(!Self.exists(Self.outboxPath(state)) || Self.itemFiles(state).isEmpty)
    }

    @Test func denyingPurgesTheOutboxAndGrantingFlushesIt() throws {
        let state = try Self.freshState("consent-flow")
        let env = Self.environment(state: state)
        let withoutKey = Self.environment(state: state, apiKey: nil)
        let granted = try runCLI(["consent", "granted"], environment: withoutKey)
        #expect(granted.status == 0, "\(granted.standardError)")
        for _ in 0..<3 { try Self.queueOne(state: state) }
        #expect(Self.itemFiles(state).count == 3)

        let denied = try runCLI(["consent", "denied"], environment: env)
        #expect(denied.status == 0, "\(denied.standardError)")
        #expect(denied.standardOutput.contains("outbox purged: 3 report(s)"), "\(denied.standardOutput)")
        #expect(Self.itemFiles(state).isEmpty)
        let refused = try runCLI(Self.identifyArguments(try Self.closedPort()), environment: env)
        #expect(refused.status == 77)
        #expect(Self.itemFiles(state).isEmpty)

        #expect(try runCLI(["consent", "granted"], environment: withoutKey).status == 0)
        for _ in 0..<2 { try Self.queueOne(state: state) }
        let items = try Self.queued(state)
        try #require(items.count == 2)
        let pending = try runCLI(["consent", "pending"], environment: env)
        #expect(pending.status == 0 && !pending.standardOutput.contains("purged"), "\(pending.standardOutput)")
        #expect(Self.itemFiles(state).count == 2)
        let flushWhilePending = try runCLI(Self.flushArguments(try Self.closedPort()), environment: env)
        #expect(flushWhilePending.status == 77)

        let server = try FaultServer([Self.accepted(), Self.accepted(), Self.accepted()])
        let grant = try runCLI(["consent", "granted", "--endpoint", server.url, "--retry-delay-ms", "5"], environment: env)
        #expect(grant.status == 0, "\(grant.status) \(grant.standardError)")
        #expect(grant.standardOutput.contains("2 delivered"), "\(grant.standardOutput)")
        Self.expectDeliveredOnce(server.requests, items: items)
        #expect(Self.itemFiles(state).isEmpty)
    }

    // MARK: 4 through the CLI: refusals are not queued

    @Test(arguments: [(401, "invalid_key", Int32(67)), (402, "organization_not_accepting", 69), (403, "forbidden", 67),
                      (422, "invalid_report", 76), (400, "bad_request", 76)])
    func aRefusalExitsWithItsCodeAfterOneRequestAndQueuesNothing(status: Int, code: String, exit: Int32) throws {
        let state = try Self.freshState("refused-\(status)")
        let server = try FaultServer([Self.error(status, code), Self.accepted()])
        let run = try runCLI(Self.identifyArguments(server.url), environment: Self.environment(state: state))
        #expect(run.status == exit, "\(run.status) \(run.standardError)")
        #expect(run.standardError.contains(code), "\(run.standardError)")
        #expect(server.requests.count == 1)
        #expect(Self.itemFiles(state).isEmpty)
    }

    // MARK: the dry run

    @Test func requestOnlyPrintsExactlyTheBodyTheJSONPreviewShows() throws {
        let state = try Self.freshState("dry-run")
        let env = Self.environment(state: state)
        let arguments = Self.identifyArguments(try Self.closedPort()) + ["--no-submit"]
        let bodyRun = try runCLI(arguments + ["--request-only"], environment: env)
        let jsonRun = try runCLI(arguments + ["--json"], environment: env)
        #expect(bodyRun.status == 0 && jsonRun.status == 0, "\(bodyRun.standardError) \(jsonRun.standardError)")
        let printed = try JSONDecoder.fingerly.decode(SubmissionBody.self, from: Data(bodyRun.standardOutput.utf8))
        let request = try #require(try jsonRun.identifyResult().request)
        let previewed = try JSONDecoder.fingerly.decode(SubmissionBody.self, from: Data(request.body.utf8))
        #expect(printed.client == previewed.client)
        #expect(printed.client == ClientInfo(proxy: false, sdk: "fingerly-linux", version: Fingerly.version))
        // Two collections differ in their clock readings alone: the collector's own budget figures.
        func timeless(_ report: SignalReport) -> [String: SignalValue] { report.signals.filter { !$0.key.hasPrefix("collector.") } }
        #expect(printed.report.probes.map(\.id) == previewed.report.probes.map(\.id))
        #expect(timeless(printed.report) == timeless(previewed.report))
        #expect(timeless(printed.report).count > 20)
        #expect(printed.report.identity == previewed.report.identity)
        // Just the body: re-encoding it the library's way gives the printed bytes back.
        #expect(String(decoding: try JSONEncoder.fingerly.encode(printed), as: UTF8.self) == bodyRun.standardOutput)
        #expect(request.method == "POST" && request.url.hasSuffix("/v1/identify"))
        #expect(!jsonRun.standardOutput.contains(TestKeys.standard) && !bodyRun.standardOutput.contains(TestKeys.standard))
        // A dry run queues nothing and makes no device key.
        #expect(Self.itemFiles(state).isEmpty)
    }

    // MARK: keys, reset, verbose

    @Test func anAPIKeyOnTheCommandLineWorksAndWarns() throws {
        let state = try Self.freshState("api-key-flag")
        let key = TestKeys.key(org: "flagorg", random: "FLAGflag0123456789")
        let server = try FaultServer([Self.accepted()])
        let run = try runCLI(Self.identifyArguments(server.url) + ["--api-key", key], environment: Self.environment(state: state, apiKey: nil))
        #expect(run.status == 0, "\(run.status) \(run.standardError)")
        #expect(run.standardError.contains("warning: --api-key is visible"), "\(run.standardError)")
        #expect(!run.standardError.contains(key) && !run.standardOutput.contains(key))
        #expect(server.requests.count == 1)
        #expect(server.requests.first?.header("Authorization") == "Bearer \(key)")
    }

    @Test func anAPIKeyFileWorksWithoutAWarning() throws {
        let state = try Self.freshState("api-key-file")
        let key = TestKeys.key(org: "fileorg", region: "eu", random: "FILEfile0123456789")
        let file = state + "/key"
        try Data((key + "\n").utf8).write(to: URL(fileURLWithPath: file))
        let server = try FaultServer([Self.accepted()])
        let run = try runCLI(Self.identifyArguments(server.url) + ["--api-key-file", file],
                             environment: Self.environment(state: state, apiKey: TestKeys.standard))
        #expect(run.status == 0, "\(run.status) \(run.standardError)")
        #expect(!run.standardError.contains("warning"), "\(run.standardError)")
        // The file's key, not the environment's.
        #expect(server.requests.first?.header("Authorization") == "Bearer \(key)")
        #expect(server.requests.count == 1)
    }

    @Test func resetRemovesTheDeviceKeyAndTheOutboxButKeepsConsent() throws {
        let state = try Self.freshState("reset")
        #expect(try runCLI(["consent", "granted"], environment: Self.environment(state: state, apiKey: nil)).status == 0)
        try Self.queueOne(state: state)
        #expect(Self.exists(state + "/" + DeviceKey.fileName))
        #expect(Self.itemFiles(state).count == 1)
        let reset = try runCLI(["reset"], environment: Self.environment(state: state))
        #expect(reset.status == 0, "\(reset.standardError)")
        #expect(reset.standardOutput.contains("the device key") && reset.standardOutput.contains("1 queued report(s)"), "\(reset.standardOutput)")
        #expect(!Self.exists(state + "/" + DeviceKey.fileName))
        #expect(Self.itemFiles(state).isEmpty)
        #expect(Self.exists(state + "/" + ConsentRecord.fileName))
        let again = try runCLI(["reset"], environment: Self.environment(state: state))
        #expect(again.status == 0 && !again.standardOutput.contains("device key"), "\(again.standardOutput)")
    }

    @Test func verboseShowsTheAttemptsAndNeverTheKey() throws {
        let state = try Self.freshState("verbose")
        let key = TestKeys.key(org: "verbose", random: "VERBOSEsecret0123456789")
        let server = try FaultServer([Self.error(503, "unavailable"), Self.accepted()])
        let run = try runCLI(Self.identifyArguments(server.url, attempts: 2) + ["--verbose"], environment: Self.environment(state: state, apiKey: key))
        #expect(run.status == 0, "\(run.status) \(run.standardError)")
        #expect(run.standardError.contains("attempt 1 of 2"), "\(run.standardError)")
        #expect(run.standardError.contains("attempt 2 of 2"), "\(run.standardError)")
        #expect(server.requests.count == 2)
        for secret in [key, "VERBOSEsecret0123456789"] {
            #expect(!run.standardError.contains(secret) && !run.standardOutput.contains(secret))
        }
    }
}

private extension OutgoingRequest {
    var fileName: String { OutboxItemFormat.fileName(forKey: idempotencyKey) }
}
