import CFingerlyAllocator
import FingerlyEngine
import FingerlyHost
import FingerlyStore
#if canImport(Glibc)
import Glibc
#endif

/// Where a command writes; tests pass buffers.
package struct ServerIO: Sendable {
    package var standardOutput: @Sendable (String) -> Void
    package var standardError: @Sendable (String) -> Void
    package var environment: [String: String]

    package init(standardOutput: @escaping @Sendable (String) -> Void, standardError: @escaping @Sendable (String) -> Void,
                 environment: [String: String]) {
        self.standardOutput = standardOutput
        self.standardError = standardError
        self.environment = environment
    }
}

/// sysexits(3).
package enum ServerExit: Int32 {
    case success = 0, usage = 64, dataError = 65, noInput = 66, noUser = 67, unavailable = 69, software = 70,
         ioError = 74, configuration = 78
}

/// `fingerly-server`: serve, and the operator's key commands.
package enum FingerlyServerCommand {
    /// What `serve` does unless told otherwise, for the help text.
    private static let defaults = ServerConfiguration(database: "")

    package static let help = """
        USAGE: fingerly-server serve [--config FILE | --optional-config FILE] [options]
               fingerly-server keys add --org NAME [--env ENV] [--region us|eu|ap] [--db PATH]
               fingerly-server keys list [--org NAME] [--db PATH]
               fingerly-server keys suspend --org NAME [--db PATH]
               fingerly-server keys resume --org NAME [--db PATH]
               fingerly-server keys revoke --key fly_pk_… [--db PATH]
               fingerly-server keys quota --org NAME [--bytes SIZE|0|default] [--db PATH]
               fingerly-server migrate [--db PATH|URL]

        Answers POST /v1/identify and GET /v1/events/{requestId} (docs/api.md) from a SQLite
        database or PostgreSQL, plus GET /healthz and GET /metrics (Prometheus text).

        --config FILE reads `key = value` settings; --optional-config FILE reads them when FILE exists.
        Under systemd, READY=1 goes to $NOTIFY_SOCKET once listening and STOPPING=1 on SIGTERM.

        SERVE OPTIONS (each also a `key = value` line of the configuration file; flags win):
          --listen ADDR             IPV4:PORT or [IPV6]:PORT (default 127.0.0.1:8080; port 0 picks one)
          --database PATH|URL       The SQLite database (default $STATE_DIRECTORY/fingerly-server.sqlite,
                                    else /var/lib/fingerly-server/fingerly-server.sqlite), or PostgreSQL as
                                    postgres://user@host/db (PG* variables apply); --db too. Pending schema
                                    migrations are applied at start; a newer schema is refused
          --database-file FILE      Read the database (path or URL) from FILE's one line, such as a systemd
                                    credential: a URL's password stays off the command line. Not with --database
          --body-limit BYTES        Largest request body (default 1048576): larger is 413
          --rate-limit N            Authenticated identify requests per second per device key (per address when
                                    unsigned), and per address from devices new to this process; events
                                    requests per secret key (default 100): more is 429
          --retention-days N        Events older than this are purged at start and hourly (default 30; 0 keeps all)
          --visitor-retention-days N
                                    Visitors unseen for N days are purged, with their components and
                                    device keys, on the same passes (default 90; 0 keeps all)
          --storage-quota SIZE      Bytes of events and visitors each organization may keep, as stored (bytes,
                                    or with KiB, MiB, GiB, TiB; default 256MiB; 0: no limit); past it identify
                                    is 507 storage_quota_exceeded. `keys quota` sets one organization's
          --device-share PERCENT    Percent of its organization's quota one visitor's events may take
                                    (default 5; 0: no share); past it that device's identify is 507
                                    device_quota_exceeded while the others are answered
          --failure-limit N         Refusals before the key's budget (unknown key, missing or bad
                                    signature, ...) per second per source address (default 10); past it,
                                    its requests without a verifying signature get 429 too_many_failures,
                                    and past N of signed ones, all but devices admitted before
          --threads N               libmicrohttpd worker threads (default 4)
          --connection-limit N      Open connections at most (default 512)
          --connections-per-address N
                                    Open connections at most from one client address (default
                                    \(defaults.connectionsPerAddress)); more are closed as they are accepted
          --connection-timeout S    Idle connections (a body that stops arriving too), and request heads not
                                    complete, are closed without an answer after S seconds (default 10)
          --header-limit BYTES      Memory per connection, which bounds the request head (default 32768)
          --shutdown-grace S        After SIGTERM, requests in flight get S seconds to finish (default 20)
          --allow-unsigned [true|false]
                                    Accept unsigned identify requests, for third-party clients: they are
                                    recorded unsigned and bind no visitor to a device key (default false:
                                    401 missing_signature; the Fingerly client always signs)
          --tls-cert FILE, --tls-key FILE
                                    Serve HTTPS with this PEM certificate chain and key
          --policy FILE             The verdict policy (default: the embedded one)

        Keys are printed once by `keys add`; only the secret key's SHA-256 is stored. No key, no
        body and no raw identifier is ever logged. Exit status follows sysexits(3).

        """

    package static func main(_ arguments: [String], io: ServerIO) -> Int32 {
        switch arguments.first {
        case "serve"?: return serve(Array(arguments.dropFirst()), io: io).rawValue
        case "keys"?: return KeyCommands.run(Array(arguments.dropFirst()), io: io).rawValue
        case "migrate"?: return migrate(Array(arguments.dropFirst()), io: io).rawValue
        case "--help"?, "-h"?, "help"?: io.standardOutput(help); return ServerExit.success.rawValue
        default:
            io.standardError("fingerly-server: expected a subcommand, serve, keys or migrate\nRun 'fingerly-server --help' for usage.\n")
            return ServerExit.usage.rawValue
        }
    }

    /// The real process: real streams and environment. Synchronous on purpose: SIGTERM is
    /// blocked in every thread before serving, which only holds if no thread (such as Swift
    /// concurrency's pool, which an async main starts) exists before the mask is set.
    package static func main() -> Int32 {
        let environment = CommandProcess.environment()
        signal(SIGPIPE, SIG_IGN)
        let io = ServerIO(standardOutput: { CommandProcess.write($0, to: STDOUT_FILENO) }, standardError: { CommandProcess.write($0, to: STDERR_FILENO) },
                          environment: environment)
        return main(Array(CommandLine.arguments.dropFirst()), io: io)
    }

    /// Reads flags and the configuration file into a configuration, flags winning.
    package static func configuration(_ arguments: [String], environment: [String: String]) throws(ConfigurationError)
        -> ServerConfiguration {
        var configuration = ServerConfiguration(database: ServerConfiguration.defaultDatabase(environment: environment))
        var flags: [(String, String)] = []
        var configFile: String?
        var configFileIsOptional = false
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            guard argument.hasPrefix("--") else { throw ConfigurationError("unexpected argument '\(argument)'") }
            var name = String(argument.dropFirst(2))
            var value: String?
            if let equals = name.firstIndex(of: "=") {
                value = String(name[name.index(after: equals)...])
                name = String(name[..<equals])
            }
            if name == "db" { name = "database" }
            let isConfig = name == "config" || name == "optional-config"
            guard isConfig || ServerConfiguration.keys.contains(name) || name == "require-signatures" else {
                throw ConfigurationError("unknown option --\(name)")
            }
            if value == nil {
                let next = index + 1 < arguments.count ? arguments[index + 1] : nil
                if name == "allow-unsigned" || name == "require-signatures", next.map({ !["true", "false", "yes", "no", "1", "0"].contains($0) }) ?? true {
                    value = "true"
                } else {
                    guard let next else { throw ConfigurationError("--\(name) needs a value") }
                    value = next
                    index += 1
                }
            }
            index += 1
            if isConfig {
                guard configFile == nil else {
                    throw ConfigurationError("--config and --optional-config: give one, once")
                }
                configFile = value
                configFileIsOptional = name == "optional-config"
            } else {
                guard !flags.contains(where: { $0.0 == name }) else { throw ConfigurationError("--\(name) given twice") }
                if let other = ServerConfiguration.exclusive[name], flags.contains(where: { $0.0 == other }) {
                    throw ConfigurationError("--\(name) and --\(other) both name the database: give one")
                }
                flags.append((name, value ?? ""))
            }
        }
        // Absent, and only absent, is no configuration file: one that cannot be read is an error.
        if let configFile, !(configFileIsOptional && isAbsent(configFile)) {
            let bytes: [UInt8]
            do { bytes = try OperatorFile.readRegularFile(configFile, limit: 65_536) } catch {
                throw ConfigurationError("cannot read \(configFile): \(error.message)")
            }
            guard let text = String(validating: bytes, as: UTF8.self) else { throw ConfigurationError("\(configFile): not UTF-8") }
            _ = try configuration.apply(file: text, name: configFile)
        }
        for (name, value) in flags { try configuration.set(name, value, origin: "--\(name)") }
        try configuration.resolveDatabaseFile()
        try configuration.validate()
        return configuration
    }

    /// Applies pending migrations (each once, however many instances run it at once) and
    /// prints the version the database is at.
    private static func migrate(_ arguments: [String], io: ServerIO) -> ServerExit {
        var database = ServerConfiguration.defaultDatabase(environment: io.environment)
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            if argument == "--help" { io.standardOutput(help); return .success }
            if let value = ["--db=", "--database="].lazy.compactMap({ argument.hasPrefix($0) ? String(argument.dropFirst($0.count)) : nil }).first {
                database = value
            } else if argument == "--db" || argument == "--database", index + 1 < arguments.count {
                database = arguments[index + 1]
                index += 1
            } else {
                io.standardError("fingerly-server: migrate takes --db PATH|URL, not '\(argument)'\n")
                return .usage
            }
            index += 1
        }
        guard !database.isEmpty else {
            io.standardError("fingerly-server: migrate needs a non-empty --db\n")
            return .usage
        }
        if let problem = databaseSpellingProblem(database) {
            io.standardError("fingerly-server: cannot migrate \(databaseLabel(database)): \(problem)\n")
            return .configuration
        }
        let store: any IdentityStore
        do { store = try openStore(path: database) } catch {
            io.standardError("fingerly-server: cannot migrate \(databaseLabel(database)): \(error.message)\n")
            return .unavailable
        }
        defer { closeStore(store) }
        do {
            io.standardOutput("schema version \(try schemaVersion(store))\n")
            return .success
        } catch {
            io.standardError("fingerly-server: \(error.message)\n")
            return .unavailable
        }
    }

    private static func serve(_ arguments: [String], io: ServerIO) -> ServerExit {
        if arguments.contains("--help") { io.standardOutput(help); return .success }
        let configuration: ServerConfiguration
        do { configuration = try self.configuration(arguments, environment: io.environment) } catch {
            io.standardError("fingerly-server: \(error.message)\n")
            return .configuration
        }
        let notification: ServiceNotification?
        do { notification = try ServiceNotification(environment: io.environment) } catch {
            io.standardError("fingerly-server: \(error.message)\n")
            return .configuration
        }
        // Blocked before the store's and libmicrohttpd's threads start so they inherit the mask:
        // only sigwait below receives SIGTERM and SIGINT.
        var signals = sigset_t()
        sigemptyset(&signals)
        sigaddset(&signals, SIGTERM)
        sigaddset(&signals, SIGINT)
        pthread_sigmask(SIG_BLOCK, &signals, nil)
        keepFreedMemoryForReuse()

        if let problem = databaseSpellingProblem(configuration.database) {
            let label = databaseLabel(configuration.database)
            io.standardError("fingerly-server: cannot open the database \(label): \(problem)\n")
            return .configuration
        }
        let store: any IdentityStore
        do { store = try openStore(path: configuration.database, serving: true) } catch {
            io.standardError("fingerly-server: cannot open the database \(databaseLabel(configuration.database)): \(error.message)\n")
            return .unavailable
        }
        let engine: IdentityEngine
        if let path = configuration.policy {
            do { engine = IdentityEngine(store: store, policy: try .load(contentsOf: path)) } catch {
                io.standardError("fingerly-server: \(error)\n")
                return .configuration
            }
        } else {
            engine = IdentityEngine(store: store, policy: .embedded())
        }

        let server: RunningServer
        do {
            server = try RunningServer(configuration: configuration, store: store, engine: engine, log: io.standardError)
        } catch {
            io.standardError("fingerly-server: \(error.message)\n")
            closeStore(store)
            return error.exit
        }
        var listening = configuration.listen
        listening = ListenAddress(host: listening.host, port: server.port, isIPv6: listening.isIPv6)
        let url = "\(configuration.tlsCertificate == nil ? "http" : "https")://\(listening)"
        io.standardError("fingerly-server: listening on \(url)\n")
        // Sent once the socket accepts: a unit ordered After= this one finds it answering.
        notify(notification, "READY=1\nSTATUS=listening on \(url)", io: io)

        var received: Int32 = 0
        while sigwait(&signals, &received) != 0 {}
        notify(notification, "STOPPING=1", io: io)
        io.standardError("fingerly-server: signal \(received), finishing requests in flight\n")
        server.shutdown()
        closeStore(store)
        io.standardError("fingerly-server: stopped\n")
        return .success
    }
}

/// A readiness message the service manager does not get leaves it waiting until its timeout: said,
/// and serving goes on (the manager's timeout decides).
private func notify(_ notification: ServiceNotification?, _ state: String, io: ServerIO) {
    do { try notification?.send(state) } catch { io.standardError("fingerly-server: \(error.message)\n") }
}

/// Whether nothing is at `path`, not even a dangling link (which is a mistake to report).
private func isAbsent(_ path: String) -> Bool {
    var info = stat()
    return lstat(path, &info) != 0 && errno == ENOENT
}

/// glibc hands the top of a worker thread's heap back to the kernel once 128 KiB of it is
/// free, and every request frees that much: madvise took 2.6% of the server's CPU under
/// `bench/server`, and the next request faulted the pages back in. Keeping up to 16 MiB free
/// per heap, and serving blocks under 4 MiB from the heap rather than fresh mappings, trades
/// that churn for a bounded amount of resident memory a server can spare.
private func keepFreedMemoryForReuse() {
    _ = fingerly_allocator_keep_free(16 << 20, 4 << 20)
}
