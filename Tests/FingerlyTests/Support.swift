@testable import FingerlyCatalogue
import Foundation
import Glibc
import Testing
@testable import Fingerly
@testable import FingerlyHost
@testable import FingerlyModel
@testable import FingerlyPolicy
@testable import FingerlyProbes

/// A loopback TCP port this process holds: bound and not listened on, connections to it are
/// refused for as long as it is held, and no other test can take it meanwhile; listened on, it
/// is an address in use. `port` 0 takes any free one. AF_INET6 binds the any address: a
/// container's loopback may have no ::1.
final class HeldLoopbackPort {
    let descriptor: Int32
    let port: UInt16

    init(family: Int32 = AF_INET, port wanted: UInt16 = 0, listening: Bool = false) throws {
        let descriptor = socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw POSIXError(.EMFILE) }
        /// Binds `address` and reads back the port the kernel gave it.
        func bindAndName<Address>(_ address: inout Address, port: (Address) -> in_port_t) -> UInt16? {
            var length = socklen_t(MemoryLayout<Address>.size)
            let bound = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(descriptor, $0, length) == 0 && getsockname(descriptor, $0, &length) == 0
                }
            }
            return bound ? UInt16(bigEndian: port(address)) : nil
        }
        var found: UInt16?
        if family == AF_INET6 {
            var address = sockaddr_in6()
            address.sin6_family = sa_family_t(AF_INET6)
            address.sin6_port = wanted.bigEndian
            address.sin6_addr = in6addr_any
            found = bindAndName(&address) { $0.sin6_port }
        } else {
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = wanted.bigEndian
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            found = bindAndName(&address) { $0.sin_port }
        }
        guard let found, !listening || listen(descriptor, 1) == 0 else {
            close(descriptor)
            throw POSIXError(.EADDRINUSE)
        }
        self.descriptor = descriptor
        port = found
    }

    deinit { close(descriptor) }
}

/// Paths the tests share.
enum TestPaths {
    static let packageRoot: String = {
        var url = URL(fileURLWithPath: #filePath)
        for _ in 0..<3 { url.deleteLastPathComponent() }
        return url.path
    }()

    static func fixture(_ name: String) -> String { packageRoot + "/Tests/Fixtures/hosts/" + name }

    static let hostFixtures = ["laptop-baremetal", "kvm-qemu", "vmware", "virtualbox", "hyperv", "firecracker",
                               "docker", "podman", "wsl2", "runit-baremetal", "malformed"]

    /// The CLI as `swift build` left it.
    static let cli: String = packageRoot + "/.build/debug/fingerly-identify"

    /// One state directory for every CLI run of this test process.
    static let stateDirectory: String = {
        let path = NSTemporaryDirectory() + "fingerly-state-\(getpid())"
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        return path
    }()

    static func temporaryDirectory(_ label: String) throws -> String {
        let path = NSTemporaryDirectory() + "fingerly-\(label)-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    /// Copies a tree with modes, owners and links kept (`cp -a`), creating `target` when missing.
    static func copyTree(_ source: String, to target: String) throws {
        let copy = try runProcess("/bin/cp", ["-a", source + "/.", target])
        try #require(copy.status == 0, "cp -a \(source) \(target): \(copy.standardError)")
    }

    /// A copy of a tree in a fresh temporary directory.
    static func copyOfTree(_ source: String, label: String) throws -> String {
        let target = try temporaryDirectory(label)
        try copyTree(source, to: target)
        return target
    }
}

/// A finished child process.
struct ProcessOutput {
    let status: Int32
    let standardOutput: String
    let standardError: String
    let wallMs: Double

    /// Standard output decoded into one of the library's own types, as a client would read it.
    func decoded<Value: Decodable>(_ type: Value.Type) throws -> Value {
        try JSONDecoder.fingerly.decode(type, from: Data(standardOutput.utf8))
    }

    /// What `fingerly-identify --json` prints.
    func identifyResult() throws -> IdentifyResult { try decoded(IdentifyResult.self) }

    /// The result from the one JSON line on standard output, among a debugger's or a script's own chatter.
    func identifyResultLine() throws -> IdentifyResult {
        let line = try #require(standardOutput.split(separator: "\n").first { $0.hasPrefix("{\"") },
                                "no JSON in the output: \(standardOutput.prefix(500)) \(standardError.prefix(500))")
        return try JSONDecoder.fingerly.decode(IdentifyResult.self, from: Data(line.utf8))
    }
}

/// The verdicts of the result line in a CLI run's output.
func verdicts(in output: ProcessOutput) throws -> Verdicts {
    try output.identifyResultLine().verdicts
}

extension Verdict {
    var codes: [String] { reasons.map(\.code) }
    var messages: [String] { reasons.map(\.message) }
}

/// Runs a real process and returns once it exits, or kills it after `timeout` seconds.
///
/// posix_spawn with an empty signal mask and default dispositions: the test runner's threads
/// block signals, and a debugger that inherits a blocked SIGCHLD waits for its inferior forever.
/// Both pipes are drained on threads of their own before waiting, so a chatty child never blocks.
func runProcess(_ executable: String, _ arguments: [String], environment: [String: String]? = nil,
                removing: [String] = [], timeout: Double = 300) throws -> ProcessOutput {
    var env = environment ?? ProcessInfo.processInfo.environment
    for name in removing { env[name] = nil }
    var outPipe: [Int32] = [0, 0], errPipe: [Int32] = [0, 0]
    guard pipe(&outPipe) == 0, pipe(&errPipe) == 0 else { throw POSIXError(.EMFILE) }

    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
    posix_spawn_file_actions_adddup2(&actions, outPipe[1], 1)
    posix_spawn_file_actions_adddup2(&actions, errPipe[1], 2)
    for fd in outPipe + errPipe { posix_spawn_file_actions_addclose(&actions, fd) }

    var attributes = posix_spawnattr_t()
    posix_spawnattr_init(&attributes)
    defer { posix_spawnattr_destroy(&attributes) }
    // Its own process group, so a timeout can kill the tool and everything it started.
    startsWithDefaultSignals(&attributes, inNewProcessGroup: true)

    let argv = ([executable] + arguments).map { strdup($0) } + [nil]
    let envp = env.map { strdup("\($0.key)=\($0.value)") } + [nil]
    defer { (argv + envp).forEach { free($0) } }
    var pid: pid_t = 0
    let started = Date()
    let spawned = posix_spawn(&pid, executable, &actions, &attributes, argv, envp)
    close(outPipe[1])
    close(errPipe[1])
    guard spawned == 0 else {
        close(outPipe[0]); close(errPipe[0])
        throw POSIXError(POSIXErrorCode(rawValue: spawned) ?? .ENOENT)
    }

    func drain(_ fd: Int32) -> Locked<Data> {
        let box = Locked(Data())
        Thread {
            var data = Data()
            var buffer = [UInt8](repeating: 0, count: 65536)
            while true {
                let count = read(fd, &buffer, buffer.count)
                if count < 0 && errno == EINTR { continue }
                if count <= 0 { break }
                data.append(contentsOf: buffer[0..<count])
            }
            close(fd)
            box.set(data)
        }.start()
        return box
    }
    let out = drain(outPipe[0]), err = drain(errPipe[0])

    var status: Int32 = 0
    while true {
        let result = waitpid(pid, &status, WNOHANG)
        if result == pid { break }
        if result < 0 && errno != EINTR { break }
        if Date().timeIntervalSince(started) > timeout {
            kill(-pid, SIGKILL)
            kill(pid, SIGKILL)
        }
        usleep(2000)
    }
    while !out.isSet || !err.isSet { usleep(1000) }
    let exitStatus: Int32 = (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
    return ProcessOutput(status: exitStatus,
                         standardOutput: String(decoding: out.value, as: UTF8.self),
                         standardError: String(decoding: err.value, as: UTF8.self),
                         wallMs: Date().timeIntervalSince(started) * 1000)
}

/// Runs the built CLI.
func runCLI(_ arguments: [String], environment: [String: String]? = nil, removing: [String] = []) throws -> ProcessOutput {
    var env = environment ?? ProcessInfo.processInfo.environment
    // The collector keeps its per-installation key in a state directory; the tests' own, not the machine's.
    if env["STATE_DIRECTORY"] == nil { env["STATE_DIRECTORY"] = TestPaths.stateDirectory }
    return try runProcess(TestPaths.cli, arguments, environment: env, removing: removing)
}

final class Locked<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: Value
    private var wasSet = false
    init(_ value: Value) { stored = value }
    func set(_ value: Value) { lock.withLock { stored = value; wasSet = true } }
    var value: Value { lock.withLock { stored } }
    var isSet: Bool { lock.withLock { wasSet } }
}

/// Collects a root tree in-process, with every probe and the default policy.
func identify(root: String, ignore: Set<String> = [], apiKey: String? = TestKeys.standard,
              schedule: ScheduleOptions = ScheduleOptions()) async throws -> IdentifyResult {
    let fingerly = try Fingerly.loadBlocking(apiKey: apiKey, schedule: schedule, consent: .granted,
                                     options: FingerlyOptions(root: root, attributesToIgnore: ignore))
    return try await fingerly.identify(submit: false)
}

extension IdentifyResult {
    func probe(_ id: String) throws -> ProbeEntry { try report.probe(id) }
    var signals: [String: SignalValue] { report.signals }
}

extension SignalReport {
    func probe(_ id: String) throws -> ProbeEntry {
        try #require(probes.first { $0.id == id }, "no probe \(id) in the report")
    }
}

/// Typed views of a signal, nil when the signal has another type.
extension SignalValue {
    var string: String? { if case .string(let value) = self { value } else { nil } }
    var strings: [String]? { if case .strings(let value) = self { value } else { nil } }
    var int: Int? { if case .int(let value) = self { value } else { nil } }
}

/// Probes by id, as `Fingerly.loadBlocking` takes them.
func probesById(_ probes: [any Probe]) -> [String: any Probe] {
    Dictionary(probes.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
}

/// A policy from text, checked against the embedded catalogue and tables.
func loadPolicy(_ json: String) throws(PolicyError) -> Policy {
    try PolicyLoader(catalogue: .embedded, tables: .embedded).load(Data(json.utf8), source: "test.json")
}

/// A report of one probe carrying these signals: what a policy judges, without collecting anything.
/// It declares every tier, so the probes it leaves out are not said to be missing for a tier not run.
func singleProbeReport(_ signals: [String: SignalValue], status: ProbeStatus = .ok, probe: String = "test",
                       detail: String? = nil, tiers: [Tier] = Tier.allCases) -> SignalReport {
    let entry = ProbeEntry(id: probe, tier: .fast, status: status, durationMs: 0, detail: detail, issues: [],
                           signals: signals, identityComponents: [])
    return SignalReport(schemaVersion: 1, collectorVersion: "t", collectedAt: Date(), tag: nil, root: "/", tiers: tiers,
                        budgetMs: 1, elapsedMs: 0, probes: [entry],
                        identity: .derive(from: [], hasher: IdentifierHasher(organization: "acme")))
}

/// The verdicts a policy gives these signals, from one probe that ended with `status`.
func evaluate(_ policy: Policy, _ signals: [String: SignalValue], status: ProbeStatus = .ok, probe: String = "test") -> [VerdictName: Verdict] {
    VerdictEngine(policy: policy, catalogue: .embedded).evaluate(singleProbeReport(signals, status: status, probe: probe, detail: "why"))
}

func runShell(_ script: String, _ arguments: String...) throws -> ProcessOutput {
    try runProcess("/bin/sh", ["-c", script, "sh"] + arguments)
}

/// Public keys in the format `Fingerly.load` accepts; the organization is what keys identifiers.
enum TestKeys {
    static func key(org: String = "acme", environment: String = "production", region: String = "us",
                    random: String = "0123456789abcdefABCD") -> String {
        "fly_pk_\(region)_\(environment)_\(org)_\(random)"
    }

    static let standard = key()
}

/// The package manifest as `swift package dump-package` reads it: targets, what each depends on,
/// and the settings each is built with.
struct PackageManifest: Decodable {
    struct Target: Decodable {
        struct Setting: Decodable {
            struct Kind: Decodable { let enableUpcomingFeature: [String: String]? }
            let kind: Kind
        }
        let name: String
        let dependencies: [[String: [String?]]]
        let settings: [Setting]

        var dependencyNames: [String] { dependencies.compactMap { $0.values.first?.first ?? nil } }
        var upcomingFeatures: [String] { settings.compactMap { $0.kind.enableUpcomingFeature?["_0"] } }
    }
    let targets: [Target]

    static func dump() throws -> PackageManifest {
        // A scratch path of its own: the default one is locked by the `swift test` running this.
        let scratch = try TestPaths.temporaryDirectory("dump-package")
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let run = try runProcess("/usr/bin/env", ["swift", "package", "--package-path", TestPaths.packageRoot,
                                                  "--scratch-path", scratch, "dump-package"], timeout: 120)
        try #require(run.status == 0, "\(run.standardError)")
        return try JSONDecoder().decode(PackageManifest.self, from: Data(run.standardOutput.utf8))
    }
}

/// A child starts with no signal blocked and every disposition at its default, whatever the
/// test runner's threads have blocked or ignored (SIGPIPE, SIGTERM under libdispatch).
func startsWithDefaultSignals(_ attributes: inout posix_spawnattr_t, inNewProcessGroup: Bool = false) {
    var emptyMask = sigset_t(), allSignals = sigset_t()
    sigemptyset(&emptyMask)
    sigfillset(&allSignals)
    posix_spawnattr_setsigmask(&attributes, &emptyMask)
    posix_spawnattr_setsigdefault(&attributes, &allSignals)
    var flags = Int32(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF)
    if inNewProcessGroup {
        posix_spawnattr_setpgroup(&attributes, 0)
        flags |= Int32(POSIX_SPAWN_SETPGROUP)
    }
    posix_spawnattr_setflags(&attributes, Int16(flags))
}

/// A blocking TCP connection to 127.0.0.1:`port` whose reads (and, when asked, writes) give up
/// after `seconds`: a hung server fails the test instead of stalling it.
func connectToLoopback(port: UInt16, timeoutSeconds seconds: Int, sendTimeout: Bool = false) throws(POSIXError) -> Int32 {
    let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard descriptor >= 0 else { throw POSIXError(.EMFILE) }
    var timeout = timeval(tv_sec: seconds, tv_usec: 0)
    setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    if sendTimeout { setsockopt(descriptor, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size)) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = port.bigEndian
    address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
    let result = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard result == 0 else {
        let code = errno
        close(descriptor)
        throw POSIXError(POSIXErrorCode(rawValue: code) ?? .ECONNREFUSED)
    }
    return descriptor
}
