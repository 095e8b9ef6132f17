@testable import FingerlyPostgresStore
import Foundation
@testable import FingerlyStore

/// A throwaway PostgreSQL for the tests: `initdb` and `pg_ctl` from the Debian `postgresql`
/// package in a fresh temporary directory, listening on a Unix socket in that directory only
/// (no TCP port to collide with another run), fsync off. Run as the unprivileged `postgres`
/// user when the tests run as root, since the server refuses to run as root.
///
/// `shared` serves every suite of this process (each test makes a database of its own in it)
/// and stops when the process exits; a test that stops and restarts PostgreSQL starts its own.
final class PostgresCluster: @unchecked Sendable {
    /// Where Debian installs the server binaries, newest version first; nil when the package is missing.
    static let binaries: String? = {
        guard let versions = try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql") else { return nil }
        let sorted = versions.compactMap { Int($0) }.sorted(by: >)
        for version in sorted {
            let directory = "/usr/lib/postgresql/\(version)/bin"
            if FileManager.default.isExecutableFile(atPath: directory + "/initdb"),
               FileManager.default.isExecutableFile(atPath: directory + "/pg_ctl") {
                return directory
            }
        }
        return nil
    }()

    /// The server can be started here: the binaries exist and, as root, the `postgres` user and runuser do.
    static let isAvailable: Bool = {
        guard binaries != nil else { return false }
        if getuid() != 0 { return true }
        return getpwnam("postgres") != nil && FileManager.default.isExecutableFile(atPath: "/usr/sbin/runuser")
    }()

    /// Why the PostgreSQL suites do not run here.
    static let unavailableReason = "the Debian postgresql package (initdb, pg_ctl) is not installed: scripts/install-deps --test installs it"

    private static let sharedLock = NSLock()
    nonisolated(unsafe) private static var sharedCluster: PostgresCluster?

    /// The process-wide cluster, started on first use and stopped at exit.
    static func shared() throws -> PostgresCluster {
        sharedLock.lock()
        defer { sharedLock.unlock() }
        if let sharedCluster { return sharedCluster }
        let cluster = try PostgresCluster()
        sharedCluster = cluster
        atexit {
            PostgresCluster.sharedCluster?.destroy()
        }
        return cluster
    }

    let directory: String
    private var dataDirectory: String { directory + "/data" }
    private var running = false
    private let lock = NSLock()
    /// The role the stores connect as: owner of the databases it gets, not a superuser.
    static let role = "fingerly"

    init() throws {
        guard Self.isAvailable, let binaries = Self.binaries else { throw ClusterError(Self.unavailableReason) }
        // Short: a Unix socket path is limited to 107 bytes.
        directory = "/tmp/fpg-" + UUID().uuidString.prefix(12).lowercased()
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false,
                                                attributes: [.posixPermissions: 0o700])
        if getuid() == 0, let account = getpwnam("postgres") {
            guard chown(directory, account.pointee.pw_uid, account.pointee.pw_gid) == 0 else {
                throw ClusterError("cannot hand \(directory) to postgres")
            }
        }
        try run(binaries + "/initdb", ["-D", dataDirectory, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"])
        try start()
        try superuser { connection throws in
            try connection.command("CREATE ROLE \(Self.role) LOGIN")
        }
    }

    deinit { stop() }

    /// The libpq URL of `database` on this cluster's socket, as `user`.
    func url(database: String, user: String = PostgresCluster.role) -> String {
        "postgresql://\(user)@/\(database)?host=\(directory)"
    }

    /// A new, empty database owned by the test role; its name.
    func createDatabase() throws -> String {
        let name = "fingerly_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased().prefix(16)
        // Names are minted here, never input: the one place in the project SQL text is built.
        try superuser { connection throws in try connection.command("CREATE DATABASE \(name) OWNER \(Self.role)") }
        return name
    }

    func dropDatabase(_ name: String) {
        try? superuser { connection throws in try connection.command("DROP DATABASE IF EXISTS \(name) WITH (FORCE)") }
    }

    /// A fresh database and a store on it, and what removes both.
    func makeStore(options: PostgresStore.Options = PostgresStore.Options()) throws -> (store: PostgresStore, dispose: () -> Void) {
        let database = try createDatabase()
        let store = try PostgresStore(url: url(database: database), options: options)
        return (store, { [self] in
            store.close()
            dropDatabase(database)
        })
    }

    /// fsync off: the tests stop PostgreSQL, never the machine, so what a commit wrote to the
    /// kernel survives. synchronous_commit stays on: an immediate stop must lose no commit.
    func start() throws {
        try lock.withLock {
            guard !running, let binaries = Self.binaries else { return }
            let settings = "-c listen_addresses='' -c unix_socket_directories='\(directory)' -c fsync=off "
                + "-c full_page_writes=off -c max_connections=200"
            try run(binaries + "/pg_ctl", ["-D", dataDirectory, "-l", directory + "/log", "-o", settings, "-w", "-t", "60", "start"])
            running = true
        }
    }

    /// `immediate`: as a crash would (no checkpoint); otherwise clients are disconnected cleanly.
    func stop(immediate: Bool = true) {
        lock.withLock {
            guard running, let binaries = Self.binaries else { return }
            _ = try? run(binaries + "/pg_ctl", ["-D", dataDirectory, "-m", immediate ? "immediate" : "fast", "-w", "stop"])
            running = false
        }
    }

    /// Stops the server and removes its directory.
    func destroy() {
        stop()
        try? FileManager.default.removeItem(atPath: directory)
    }

    private func superuser(_ body: (PostgresConnection) throws -> Void) throws {
        let connection = try PostgresConnection(conninfo: url(database: "postgres", user: "postgres"), connectTimeoutSeconds: 10)
        defer { connection.close() }
        try body(connection)
    }

    @discardableResult
    private func run(_ executable: String, _ arguments: [String]) throws -> ProcessOutput {
        let output: ProcessOutput
        if getuid() == 0 {
            output = try runProcess("/usr/sbin/runuser", ["-u", "postgres", "--", executable] + arguments, timeout: 120)
        } else {
            output = try runProcess(executable, arguments, timeout: 120)
        }
        guard output.status == 0 else {
            throw ClusterError("\(executable) \(arguments.last ?? "") failed (\(output.status)): \(output.standardError)\(output.standardOutput)")
        }
        return output
    }
}

struct ClusterError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
