import Foundation
import Testing
@testable import Fingerly

/// Paths the tests share.
enum TestPaths {
    static let packageRoot: String = {
        var url = URL(fileURLWithPath: #filePath)
        for _ in 0..<3 { url.deleteLastPathComponent() }
        return url.path
    }()

    static func fixture(_ name: String) -> String { packageRoot + "/Tests/Fixtures/hosts/" + name }

    static let hostFixtures = ["laptop-baremetal", "kvm-qemu", "vmware", "virtualbox", "hyperv", "firecracker",
                               "docker", "podman", "wsl2", "malformed"]

    /// The CLI as `swift build` left it.
    static let cli: String = packageRoot + "/.build/debug/fingerly-identify"

    static func temporaryDirectory(_ label: String) throws -> String {
        let path = NSTemporaryDirectory() + "fingerly-\(label)-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }
}

/// A finished child process.
struct ProcessOutput {
    let status: Int32
    let standardOutput: String
    let standardError: String
    let wallMs: Double

    func json() throws -> [String: Any] {
        let object = try JSONSerialization.jsonObject(with: Data(standardOutput.utf8))
        return try #require(object as? [String: Any])
    }
}

/// Runs a real process; both pipes are drained before waiting so a chatty child never blocks.
func runProcess(_ executable: String, _ arguments: [String], environment: [String: String]? = nil,
                removing: [String] = []) throws -> ProcessOutput {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    var env = environment ?? ProcessInfo.processInfo.environment
    for name in removing { env[name] = nil }
    process.environment = env
    let out = Pipe(), err = Pipe()
    process.standardOutput = out
    process.standardError = err
    process.standardInput = FileHandle.nullDevice
    let started = Date()
    try process.run()
    let errorData = Locked(Data())
    let drainError = Thread { errorData.set(err.fileHandleForReading.readDataToEndOfFile()) }
    drainError.start()
    let outData = out.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    while !errorData.isSet { usleep(1000) }
    return ProcessOutput(status: process.terminationStatus,
                         standardOutput: String(decoding: outData, as: UTF8.self),
                         standardError: String(decoding: errorData.value, as: UTF8.self),
                         wallMs: Date().timeIntervalSince(started) * 1000)
}

/// Runs the built CLI.
func runCLI(_ arguments: [String], environment: [String: String]? = nil, removing: [String] = []) throws -> ProcessOutput {
    try runProcess(TestPaths.cli, arguments, environment: environment, removing: removing)
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
func identify(root: String, ignore: Set<String> = [], apiKey: String? = "test-key",
              schedule: ScheduleOptions = ScheduleOptions()) async throws -> IdentifyResult {
    let fingerly = try Fingerly.load(apiKey: apiKey, schedule: schedule, consent: .granted,
                                     options: CollectionOptions(root: root, attributesToIgnore: ignore))
    return try await fingerly.identify(submit: false)
}

extension IdentifyResult {
    func probe(_ id: String) throws -> ProbeEntry {
        try #require(report.probes.first { $0.id == id }, "no probe \(id) in the report")
    }
    var signals: [String: SignalValue] { report.signals }
}
