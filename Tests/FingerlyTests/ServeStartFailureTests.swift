import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// `serve` that cannot listen exits 69 with a message naming the address (README: exit status),
/// never a trap: under a unit's `Restart=on-failure` a trap is a silent restart loop.
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
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #expect(socket >= 0)
        defer { close(socket) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        #expect(bound == 0 && listen(socket, 1) == 0)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(socket, $0, &length) }
        }
        let port = UInt16(bigEndian: address.sin_port)
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
}
