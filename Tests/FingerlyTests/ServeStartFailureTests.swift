@testable import FingerlySQLiteStore
import Foundation
import Testing
@testable import FingerlyStore
#if canImport(Glibc)
import Glibc
#endif

/// `serve` that cannot start exits with its documented code and a message (README: exit status),
/// never a trap: 69 for what may come back (an address in use, a database down), 78 for a setting
/// that is wrong (TLS files), which the unit does not restart. Under `Restart=on-failure` a trap is
/// a silent restart loop.
@Suite struct ServeStartFailureTests {
    private static func database(_ name: String) throws -> String {
        let directory = try TestPaths.temporaryDirectory(name)
        let database = directory + "/db.sqlite"
        let added = try runServerCLI(["keys", "add", "--org", "acme", "--db", database])
        #expect(added.status == 0, "\(added.standardError)")
        return database
    }

    private static func expectCannotListen(_ run: ProcessOutput, on address: String) {
        #expect(run.status == 69, "exit \(run.status): \(run.standardError)")
        #expect(run.standardError.contains("cannot listen on \(address)"), "\(run.standardError)")
        #expect(!run.standardError.contains("Fatal error"))
    }

    @Test func anAddressInUseExits69WithAMessage() throws {
        let database = try Self.database("serve-address-in-use")
        let held = try HeldLoopbackPort(listening: true)
        defer { withExtendedLifetime(held) {} }
        let port = held.port
        let run = try runServerCLI(["serve", "--database", database, "--listen", "127.0.0.1:\(port)"])
        Self.expectCannotListen(run, on: "127.0.0.1:\(port)")
    }

    @Test func anAddressNotOnThisHostExits69WithAMessage() throws {
        let database = try Self.database("serve-foreign-address")
        // TEST-NET-1 (RFC 5737): never an address of this host.
        let run = try runServerCLI(["serve", "--database", database, "--listen", "192.0.2.1:8080"])
        Self.expectCannotListen(run, on: "192.0.2.1:8080")
    }

    @Test func aPrivilegedPortForAnUnprivilegedUserExits69WithAMessage() throws {
        let setting = "/proc/sys/net/ipv4/ip_unprivileged_port_start"
        let unprivilegedStart = (try? String(contentsOfFile: setting, encoding: .utf8))
            .flatMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) } ?? 1024
        let runuser = "/usr/sbin/runuser"
        #expect(unprivilegedStart > 80, "this kernel lets any user bind port 80: no privileged port to test")
        #expect(geteuid() != 0 || FileManager.default.isExecutableFile(atPath: runuser))
        let database = try Self.database("serve-privileged-port")
        let directory = (database as NSString).deletingLastPathComponent
        // The unprivileged user must be able to open the database, so that listening is what fails.
        for path in [directory, database] { chmod(path, 0o777) }
        let arguments = ["serve", "--database", database, "--listen", "127.0.0.1:80"]
        let run = geteuid() == 0
            ? try runProcess(runuser, ["-u", "nobody", "--", ServerProcess.executable] + arguments)
            : try runServerCLI(arguments)
        Self.expectCannotListen(run, on: "127.0.0.1:80")
    }

    private static func expectRefused(_ run: ProcessOutput, status: Int32, naming words: [String]) {
        #expect(run.status == status, "exit \(run.status): \(run.standardError)")
        for word in words { #expect(run.standardError.contains(word), "\(word): \(run.standardError)") }
        #expect(!run.standardError.contains("Fatal error"))
        #expect(!run.standardError.contains("listening on"), "\(run.standardError)")
    }

    /// Runs `serve` as `nobody`, for whom root's 0600 file is unreadable and a 0555 directory unwritable.
    private static func serveAsNobody(_ arguments: [String]) throws -> ProcessOutput {
        #expect(geteuid() == 0, "the tests run as root (CI), which can become nobody")
        let command = ["-u", "nobody", "--", ServerProcess.executable, "serve"] + arguments
        return try runProcess("/usr/sbin/runuser", command)
    }

    /// A directory `nobody` may enter and write, holding a database it may open.
    private static func sharedDatabase(_ name: String) throws -> String {
        let database = try Self.database(name)
        let directory = (database as NSString).deletingLastPathComponent
        for path in [directory, database] { chmod(path, 0o777) }
        return database
    }

    @Test func aMissingTLSCertificateOrKeyExits78NamingTheFile() throws {
        let pki = try TestPKI.shared.get()
        let database = try Self.database("serve-tls-missing")
        let missing = (database as NSString).deletingLastPathComponent + "/absent.pem"
        let noCertificate = try runServerCLI(["serve", "--database", database, "--listen", "127.0.0.1:0",
                                              "--tls-cert", missing, "--tls-key", pki.path("genuine-leaf.key")])
        Self.expectRefused(noCertificate, status: 78, naming: ["TLS certificate \(missing) (tls-cert)", "No such file"])
        let noKey = try runServerCLI(["serve", "--database", database, "--listen", "127.0.0.1:0",
                                      "--tls-cert", pki.path("genuine-leaf.crt"), "--tls-key", missing])
        Self.expectRefused(noKey, status: 78, naming: ["TLS key \(missing) (tls-key)", "No such file"])
    }

    @Test func anUnreadableTLSKeyExits78NamingTheFile() throws {
        let pki = try TestPKI.shared.get()
        let database = try Self.sharedDatabase("serve-tls-unreadable")
        let directory = (database as NSString).deletingLastPathComponent
        let key = directory + "/root-only.key"
        try FileManager.default.copyItem(atPath: pki.path("genuine-leaf.key"), toPath: key)
        chmod(key, 0o600)
        let certificate = directory + "/leaf.crt"
        try FileManager.default.copyItem(atPath: pki.path("genuine-leaf.crt"), toPath: certificate)
        chmod(certificate, 0o644)
        let run = try Self.serveAsNobody(["--database", database, "--listen", "127.0.0.1:0",
                                          "--tls-cert", certificate, "--tls-key", key])
        Self.expectRefused(run, status: 78, naming: ["TLS key \(key) (tls-key)", "Permission denied"])
    }

    @Test func aTLSFileThatIsNotPEMExits78NamingBoth() throws {
        let pki = try TestPKI.shared.get()
        let database = try Self.database("serve-tls-not-pem")
        let junk = (database as NSString).deletingLastPathComponent + "/junk.pem"
        try "not a certificate\n".write(toFile: junk, atomically: true, encoding: .utf8)
        for (certificate, key) in [(junk, pki.path("genuine-leaf.key")), (pki.path("genuine-leaf.crt"), junk)] {
            let run = try runServerCLI(["serve", "--database", database, "--listen", "127.0.0.1:0",
                                        "--tls-cert", certificate, "--tls-key", key])
            Self.expectRefused(run, status: 78,
                               naming: ["\(certificate) (tls-cert)", "\(key) (tls-key)", "not a usable PEM pair"])
        }
    }

    @Test func aKeyOfAnotherCertificateExits78() throws {
        let pki = try TestPKI.shared.get()
        let database = try Self.database("serve-tls-mismatch")
        let run = try runServerCLI(["serve", "--database", database, "--listen", "127.0.0.1:0",
                                    "--tls-cert", pki.path("genuine-leaf.crt"),
                                    "--tls-key", pki.path("interceptor-leaf.key")])
        Self.expectRefused(run, status: 78, naming: ["not a usable PEM pair", "do not match"])
    }

    /// A port bound and not listened on answers a connection with a reset: closed, for certain.
    @Test func anUnreachablePostgreSQLExits69WithoutItsPassword() throws {
        let held = try HeldLoopbackPort()
        defer { withExtendedLifetime(held) {} }
        let port = held.port
        let url = "postgresql://fingerly:hunter2secret@127.0.0.1:\(port)/fingerly?connect_timeout=5"
        let run = try runServerCLI(["serve", "--database", url, "--listen", "127.0.0.1:0"])
        Self.expectRefused(run, status: 69,
                           naming: ["cannot open the database postgresql://fingerly:***@127.0.0.1", "refused"])
        #expect(!run.standardError.contains("hunter2secret"))
    }

    @Test func aSQLiteDatabaseInAMissingDirectoryExits69() throws {
        let directory = try TestPaths.temporaryDirectory("serve-missing-directory")
        let database = directory + "/not-made/db.sqlite"
        let run = try runServerCLI(["serve", "--database", database, "--listen", "127.0.0.1:0"])
        Self.expectRefused(run, status: 69, naming: ["cannot open the database \(database)", "does not exist"])
    }

    @Test func aSQLiteDatabaseInADirectoryItCannotWriteExits69() throws {
        let directory = try TestPaths.temporaryDirectory("serve-unwritable-directory")
        chmod(directory, 0o555)
        let database = directory + "/db.sqlite"
        let run = try Self.serveAsNobody(["--database", database, "--listen", "127.0.0.1:0"])
        Self.expectRefused(run, status: 69, naming: ["cannot open the database \(database)", "Permission denied"])
        #expect(!FileManager.default.fileExists(atPath: database))
    }

    @Test func aDatabaseOfANewerSchemaExits69() throws {
        let database = try Self.database("serve-newer-schema")
        let newer = SQLiteSchema.latestVersion + 1
        let raw = try SQLiteConnection(path: database, busyTimeoutMilliseconds: 1000, checkpointOnClose: true)
        try raw.execute("INSERT INTO schema_migrations (version, applied_at) VALUES (?1, 0)", [.integer(newer)])
        raw.close()
        let run = try runServerCLI(["serve", "--database", database, "--listen", "127.0.0.1:0"])
        Self.expectRefused(run, status: 69, naming: ["schema version \(newer)", "newer than this build"])
    }
}
