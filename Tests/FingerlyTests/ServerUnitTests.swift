import Foundation
import Testing
@testable import FingerlyServer
#if canImport(Glibc)
import Glibc
#endif

/// deploy/fingerly-server.service and its credentials drop-in as systemd runs them: verified, with
/// the settings they pass working against the real `fingerly-server`.
@Suite(.serialized)
struct ServerUnitTests {
    static let unitPath = TestPaths.packageRoot + "/deploy/fingerly-server.service"
    static let dropInPath = TestPaths.packageRoot + "/deploy/fingerly-server.service.d/credentials.conf"
    static let installedBinary = "/usr/local/bin/fingerly-server"

    /// The unit's `Key=` values, in order (a drop-in's `Key=` empties the list).
    static func values(_ key: String, in text: String) -> [String] {
        // A backslash ending a line continues it, as systemd reads it.
        let joined = text.replacingOccurrences(of: "\\\n", with: " ")
        return joined.split(separator: "\n").reduce(into: [String]()) { values, line in
            guard line.hasPrefix(key + "=") else { return }
            let value = String(line.dropFirst(key.count + 1))
            if value.isEmpty { values = [] } else { values.append(value) }
        }
    }

    /// systemd's size suffixes as the unit writes them.
    static func bytes(_ value: String) -> Int? {
        let factors: [Character: Int] = ["K": 1 << 10, "M": 1 << 20, "G": 1 << 30]
        guard let last = value.last, let factor = factors[last] else { return Int(value) }
        return Int(value.dropLast()).map { $0 * factor }
    }

    /// The unit (and the drop-in) in a directory of their own, ExecStart naming the built binary:
    /// verify checks that it exists, nothing else changes.
    static func copiedUnit(withDropIn: Bool) throws -> String {
        let directory = try TestPaths.temporaryDirectory("unit")
        func copy(_ source: String, to target: String) throws {
            try String(contentsOfFile: source, encoding: .utf8)
                .replacingOccurrences(of: installedBinary, with: ServerProcess.executable)
                .write(toFile: target, atomically: true, encoding: .utf8)
        }
        try copy(unitPath, to: directory + "/fingerly-server.service")
        if withDropIn {
            try FileManager.default.createDirectory(atPath: directory + "/fingerly-server.service.d",
                                                    withIntermediateDirectories: true)
            try copy(dropInPath, to: directory + "/fingerly-server.service.d/credentials.conf")
        }
        return directory + "/fingerly-server.service"
    }

    /// PID 1 is systemd (not in a container's CI here): then the unit is also started for real.
    static var systemdIsRunning: Bool { FileManager.default.fileExists(atPath: "/run/systemd/system") }

    @Test func theUnitAndItsCredentialsDropInVerifyWithoutAWarning() throws {
        for withDropIn in [false, true] {
            let unit = try Self.copiedUnit(withDropIn: withDropIn)
            // From the unit's directory, so the drop-in beside it is read; a warning about either
            // file is a line on stderr, with exit 0.
            let script = "cd \"$(dirname \"$1\")\" && /usr/bin/systemd-analyze verify \"$1\""
            let verified = try runProcess("/bin/sh", ["-c", script, "sh", unit])
            #expect(verified.status == 0, "\(verified.standardError)")
            #expect(verified.standardError.isEmpty, "drop-in \(withDropIn): \(verified.standardError)")
        }
        let unit = try String(contentsOfFile: Self.unitPath, encoding: .utf8)
        #expect(Self.values("Type", in: unit) == ["notify"])
        #expect(Self.values("RestartPreventExitStatus", in: unit) == ["64 78"])
        #expect(Self.values("IPAddressAllow", in: unit) == ["localhost"])
        #expect(Self.values("IPAddressDeny", in: unit) == ["any"])
        // Started for real where PID 1 is systemd; here (a container) verified offline only.
        if Self.systemdIsRunning { try Self.startUnderSystemd() }
    }

    /// Installs a copy of the unit under a name of its own, on a port of its own, starts it (which
    /// returns once READY=1 arrived), asks it for /healthz and stops it.
    static func startUnderSystemd() throws {
        let name = "fingerly-server-test-\(UUID().uuidString.prefix(8).lowercased()).service"
        let target = "/run/systemd/system/" + name
        let port = try freeLoopbackPort()
        try String(contentsOfFile: unitPath, encoding: .utf8)
            .replacingOccurrences(of: installedBinary + " serve",
                                  with: ServerProcess.executable + " serve --listen 127.0.0.1:\(port)")
            .write(toFile: target, atomically: true, encoding: .utf8)
        defer {
            _ = try? runProcess("/usr/bin/systemctl", ["stop", name])
            try? FileManager.default.removeItem(atPath: target)
            _ = try? runProcess("/usr/bin/systemctl", ["daemon-reload"])
        }
        #expect(try runProcess("/usr/bin/systemctl", ["daemon-reload"]).status == 0)
        let started = try runProcess("/usr/bin/systemctl", ["start", name])
        #expect(started.status == 0, "\(started.standardError)")
        #expect(try RawClient(port: port).request("GET", "/healthz").status == 200)
    }

    /// A port the kernel just gave out and took back.
    static func freeLoopbackPort() throws -> UInt16 { try HeldLoopbackPort().port }

    /// A notification socket as systemd binds it: a datagram socket at a path, or at an abstract name.
    final class NotifySocket {
        let descriptor: Int32
        let name: String

        init(abstract: Bool) throws {
            descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard descriptor >= 0 else { throw POSIXError(.EMFILE) }
            let label = "fingerly-notify-\(UUID().uuidString.prefix(8))"
            name = abstract ? "@" + label : try TestPaths.temporaryDirectory("notify") + "/" + label
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            var bytes = Array(name.utf8)
            if abstract { bytes[0] = 0 }
            withUnsafeMutableBytes(of: &address.sun_path) { path in
                for (index, byte) in bytes.enumerated() { path[index] = byte }
            }
            let length = socklen_t(MemoryLayout<sa_family_t>.size + bytes.count + (abstract ? 0 : 1))
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, length) }
            }
            guard bound == 0 else { close(descriptor); throw POSIXError(.EADDRINUSE) }
            // A bound on a server that never says anything, so the test fails instead of hanging.
            var timeout = timeval(tv_sec: 60, tv_usec: 0)
            setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        }

        deinit { close(descriptor) }

        /// The next datagram, nil when none came.
        func receive() -> String? {
            var buffer = [UInt8](repeating: 0, count: 4096)
            var count: Int
            repeat { count = recv(descriptor, &buffer, buffer.count, 0) } while count < 0 && errno == EINTR
            return count < 0 ? nil : String(decoding: buffer[0..<count], as: UTF8.self)
        }
    }

    /// `serve` in the environment given, stderr to a file, not waited for.
    static func spawnServe(_ arguments: [String], environment: [String: String],
                           standardError: String) throws -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 2, standardError, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        startsWithDefaultSignals(&attributes)
        let argv = ([ServerProcess.executable, "serve"] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { (argv + envp).forEach { free($0) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, ServerProcess.executable, &actions, &attributes, argv, envp)
        guard spawned == 0 else { throw POSIXError(POSIXErrorCode(rawValue: spawned) ?? .ENOENT) }
        return pid
    }

    static func exitStatus(_ pid: pid_t) -> Int32 {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        return (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
    }

    @Test(arguments: [false, true])
    func serveSaysReadyOnceItsPortAnswersAndStoppingOnSIGTERM(abstractName: Bool) throws {
        let notify = try NotifySocket(abstract: abstractName)
        let directory = try TestPaths.temporaryDirectory("serve-notify")
        var environment = ProcessInfo.processInfo.environment
        environment["NOTIFY_SOCKET"] = notify.name
        let pid = try Self.spawnServe(["--listen", "127.0.0.1:0", "--database", directory + "/db.sqlite"],
                                      environment: environment, standardError: directory + "/stderr")
        var exited = false
        defer { if !exited { kill(pid, SIGKILL); _ = Self.exitStatus(pid) } }

        let ready = try #require(notify.receive(), "no notification")
        let lines = ready.split(separator: "\n")
        #expect(lines.first == "READY=1", "\(ready)")
        // The port comes with the readiness; it answers at once, with nothing waited for.
        let status = try #require(lines.first { $0.hasPrefix("STATUS=listening on http://127.0.0.1:") }, "\(ready)")
        let port = try #require(UInt16(status.split(separator: ":").last ?? ""))
        #expect(try RawClient(port: port).request("GET", "/healthz").status == 200)

        kill(pid, SIGTERM)
        #expect(notify.receive() == "STOPPING=1")
        #expect(Self.exitStatus(pid) == 0)
        exited = true
        let log = try String(contentsOfFile: directory + "/stderr", encoding: .utf8)
        #expect(!log.contains("cannot notify"), "\(log)")
    }

    /// What the drop-in's `LoadCredential=` lines make: files named as the credentials, mode 0400,
    /// in `$CREDENTIALS_DIRECTORY`, which ExecStart's `%d` names; the configuration file absent.
    @Test func serveReadsTheTLSFilesAndTheDatabaseURLFromItsCredentialsDirectory() throws {
        let pki = try TestPKI.shared.get()
        let cluster = try PostgresCluster.shared()
        let database = try cluster.createDatabase()
        defer { cluster.dropDatabase(database) }
        let directory = try TestPaths.temporaryDirectory("serve-credentials")
        let credentials = directory + "/credentials"
        try FileManager.default.createDirectory(atPath: credentials, withIntermediateDirectories: true)
        // Trust authentication ignores it; it is there to be kept out of every message.
        let role = PostgresCluster.role
        let url = cluster.url(database: database)
            .replacingOccurrences(of: "://\(role)@", with: "://\(role):credential-password@")
        let dropIn = try String(contentsOfFile: Self.dropInPath, encoding: .utf8)
        let loaded = Self.values("LoadCredential", in: dropIn)
            .map { $0.split(separator: ":").first.map(String.init) ?? $0 }
        #expect(loaded == ["tls-cert", "tls-key", "database-url"])
        let certificate = try String(contentsOfFile: pki.path("genuine-leaf.crt"), encoding: .utf8)
        let key = try String(contentsOfFile: pki.path("genuine-leaf.key"), encoding: .utf8)
        for (name, contents) in [("tls-cert", certificate), ("tls-key", key),
                                 ("database-url", url + "\n")] {
            try contents.write(toFile: credentials + "/" + name, atomically: false, encoding: .utf8)
            chmod(credentials + "/" + name, 0o400)
        }
        chmod(credentials, 0o500)

        let execStart = try #require(Self.values("ExecStart", in: dropIn).last)
        var arguments = execStart.replacingOccurrences(of: "%d", with: credentials)
            .replacingOccurrences(of: "/etc/fingerly-server.conf", with: directory + "/absent.conf")
            .split(separator: " ", omittingEmptySubsequences: true).map(String.init)
        #expect(arguments.prefix(2) == [Self.installedBinary, "serve"])
        arguments = Array(arguments.dropFirst(2)) + ["--listen", "127.0.0.1:0"]
        var environment = ProcessInfo.processInfo.environment
        environment["CREDENTIALS_DIRECTORY"] = credentials
        let notify = try NotifySocket(abstract: true)
        environment["NOTIFY_SOCKET"] = notify.name
        let pid = try Self.spawnServe(arguments, environment: environment, standardError: directory + "/stderr")
        var exited = false
        defer { if !exited { kill(pid, SIGKILL); _ = Self.exitStatus(pid) } }

        let ready = notify.receive() ?? ""
        let log = { (try? String(contentsOfFile: directory + "/stderr", encoding: .utf8)) ?? "" }
        let listening = ready.split(separator: "\n").first { $0.hasPrefix("STATUS=listening on https://127.0.0.1:") }
        let status = try #require(listening, "\(ready) \(log())")
        let port = try #require(UInt16(status.split(separator: ":").last ?? ""))
        // HTTPS with the credential's certificate, trusted through its CA; PostgreSQL behind it.
        let script = "printf 'GET /healthz HTTP/1.1\\r\\nHost: pin-check.test\\r\\nConnection: close\\r\\n\\r\\n' | "
            + "openssl s_client -quiet -connect \"127.0.0.1:$1\" -servername pin-check.test -CAfile \"$2\" "
            + "-verify_hostname pin-check.test -verify_return_error"
        let health = try runProcess("/bin/sh", ["-c", script, "sh", String(port), pki.path("genuine-ca.crt")])
        #expect(health.standardOutput.contains("HTTP/1.1 200"), "\(health.standardError)")
        #expect(health.standardOutput.contains("\"ok\""), "\(health.standardError)")
        kill(pid, SIGTERM)
        #expect(Self.exitStatus(pid) == 0)
        exited = true
        #expect(!log().contains("credential-password"), "\(log())")
    }

    /// --optional-config as the unit passes it: absent is no settings; present is read, its errors
    /// exit 78 as --config's do; a dangling link is not absence.
    @Test func anOptionalConfigurationIsReadOnlyWhenPresent() throws {
        let directory = try TestPaths.temporaryDirectory("serve-optional-config")
        let config = directory + "/fingerly-server.conf"
        let notify = try NotifySocket(abstract: true)
        var environment = ProcessInfo.processInfo.environment
        environment["NOTIFY_SOCKET"] = notify.name
        let arguments = ["--optional-config", config, "--listen", "127.0.0.1:0", "--database", directory + "/db.sqlite"]
        let pid = try Self.spawnServe(arguments, environment: environment, standardError: directory + "/stderr")
        let ready = notify.receive()
        kill(pid, SIGTERM)
        #expect(Self.exitStatus(pid) == 0)
        let log = (try? String(contentsOfFile: directory + "/stderr", encoding: .utf8)) ?? ""
        #expect(ready?.hasPrefix("READY=1") == true, "\(log)")

        try "listen = nowhere\n".write(toFile: config, atomically: true, encoding: .utf8)
        let bad = try runServerCLI(["serve", "--optional-config", config, "--database", directory + "/db.sqlite"])
        #expect(bad.status == 78, "\(bad.standardError)")
        #expect(bad.standardError.contains("\(config):1: listen must be"), "\(bad.standardError)")

        let dangling = directory + "/dangling.conf"
        #expect(symlink(directory + "/nothing-here", dangling) == 0)
        let broken = try runServerCLI(["serve", "--optional-config", dangling, "--database", directory + "/db.sqlite"])
        #expect(broken.status == 78, "\(broken.standardError)")
        #expect(broken.standardError.contains("cannot read \(dangling)"), "\(broken.standardError)")
    }

    /// MemoryMax= and TasksMax= hold the server at its own limits: every connection of
    /// connection-limit holding a body of body-limit that has not finished arriving.
    @Test func theUnitsMemoryAndTaskLimitsHoldEveryConnectionWithAFullBody() throws {
        let unit = try String(contentsOfFile: Self.unitPath, encoding: .utf8)
        let memoryHigh = try #require(Self.values("MemoryHigh", in: unit).last.flatMap(Self.bytes))
        let memoryMax = try #require(Self.values("MemoryMax", in: unit).last.flatMap(Self.bytes))
        let tasksMax = try #require(Self.values("TasksMax", in: unit).last.flatMap { Int($0) })
        #expect(memoryHigh < memoryMax)
        let defaults = ServerConfiguration(database: "")
        let directory = try TestPaths.temporaryDirectory("serve-unit-limits")
        // All from loopback: one address may hold them all, for as long as the test takes.
        let server = try ServerProcess(database: directory + "/db.sqlite",
                                       arguments: ["--connections-per-address", String(defaults.connectionLimit),
                                                   "--connection-timeout", "120"])
        let head = Array(("POST /v1/identify HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + "Content-Length: \(defaults.bodyLimit)\r\n\r\n").utf8)
        let body = [UInt8](repeating: UInt8(ascii: " "), count: defaults.bodyLimit - 1)
        var connections: [Int32] = []
        defer { connections.forEach { close($0) } }
        for _ in 0..<defaults.connectionLimit {
            let connection = try server.client.connect()
            connections.append(connection)
            RawClient.write(connection, head)
            RawClient.write(connection, body)
        }
        // One more byte each would complete them: none is answered, all are held. The last bytes
        // may still be in the sockets' buffers: the peak is read once every body is in memory.
        func field(_ name: String) -> Int? {
            let status = (try? String(contentsOfFile: "/proc/\(server.pid)/status", encoding: .utf8)) ?? ""
            return status.split(separator: "\n").first { $0.hasPrefix(name + ":") }
                .flatMap { line in
                    Int(line.dropFirst(name.count + 1).split(whereSeparator: { $0 == " " || $0 == "\t" }).first ?? "")
                }
        }
        let bodies = defaults.connectionLimit * (defaults.bodyLimit - 1)
        var peakBytes = 0
        for _ in 0..<600 where peakBytes < bodies {
            usleep(100_000)
            peakBytes = (field("VmHWM") ?? 0) * 1024
        }
        let threads = try #require(field("Threads"))
        #expect(peakBytes >= bodies, "the bodies were not all held: \(peakBytes) bytes")
        #expect(peakBytes < memoryHigh, "\(peakBytes) bytes resident, MemoryHigh \(memoryHigh)")
        #expect(threads * 4 <= tasksMax, "\(threads) threads, TasksMax \(tasksMax)")
        connections.forEach { close($0) }
        connections = []
        #expect(server.terminate() == 0)
    }
}
