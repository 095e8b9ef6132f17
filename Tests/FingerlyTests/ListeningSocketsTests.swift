@testable import FingerlyCatalogue
import Foundation
import Glibc
import Testing
@testable import FingerlyHost
@testable import FingerlyModel
@testable import FingerlyProbes

/// A socket of the test's own, bound to the loopback address on `port` (0: any free one), and
/// listening unless told not to. Closed when the test ends.
final class LoopbackTestSocket {
    let descriptor: Int32
    let port: Int

    init(family: Int32, port: Int = 0, listening: Bool = true) throws {
        let descriptor = socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        try #require(descriptor >= 0, "socket: \(String(cString: strerror(errno)))")
        var yes: Int32 = 1
        setsockopt(descriptor, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var bound: Int32
        var found = 0
        if family == AF_INET {
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = in_port_t(UInt16(port).bigEndian)
            address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
            bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            _ = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
            }
            found = Int(UInt16(bigEndian: address.sin_port))
        } else {
            var address = sockaddr_in6()
            address.sin6_family = sa_family_t(AF_INET6)
            address.sin6_port = in_port_t(UInt16(port).bigEndian)
            address.sin6_addr = in6addr_any
            bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in6>.size))
                }
            }
            var length = socklen_t(MemoryLayout<sockaddr_in6>.size)
            _ = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
            }
            found = Int(UInt16(bigEndian: address.sin6_port))
        }
        try #require(bound == 0, "bind: \(String(cString: strerror(errno)))")
        if listening { try #require(listen(descriptor, 4) == 0, "listen: \(String(cString: strerror(errno)))") }
        self.descriptor = descriptor
        self.port = found
    }

    deinit { close(descriptor) }
}

/// TCP listeners: the kernel's sock_diag answer on the live host, /proc/net/tcp{,6} in a root tree.
@Suite struct ListeningSocketsTests {
    static func procTablePorts(_ path: String) throws -> Set<Int> {
        ListeningSocketsProbe.listeningPorts(inProcTable: try String(contentsOfFile: path, encoding: .utf8))
    }

    @Test func theKernelNamesTheSameListenersAsTheProcTables() throws {
        let listener = try LoopbackTestSocket(family: AF_INET)
        let boundOnly = try LoopbackTestSocket(family: AF_INET, listening: false)
        let fromKernel = try NetworkDevice.listeningTCPPorts(family: AF_INET)
        let fromFile = try Self.procTablePorts("/proc/net/tcp")
        for ports in [fromKernel, fromFile] {
            #expect(ports.contains(listener.port), "listener \(listener.port) missing from \(ports.sorted())")
            #expect(!ports.contains(boundOnly.port), "a socket that does not listen was named: \(boundOnly.port)")
        }

        let sixSocket = socket(AF_INET6, Int32(SOCK_STREAM.rawValue), 0)
        let sixError = errno
        if sixSocket < 0 {
            // A kernel without IPv6: neither source may claim to know its listeners.
            #expect(sixError == EAFNOSUPPORT, "socket(AF_INET6): \(String(cString: strerror(sixError)))")
            #expect(throws: SystemError.self) { try NetworkDevice.listeningTCPPorts(family: AF_INET6) }
            #expect(!FileManager.default.fileExists(atPath: "/proc/net/tcp6"))
            return
        }
        close(sixSocket)
        let sixListener = try LoopbackTestSocket(family: AF_INET6)
        let sixFromKernel = try NetworkDevice.listeningTCPPorts(family: AF_INET6)
        #expect(sixFromKernel.contains(sixListener.port), "\(sixListener.port) missing from \(sixFromKernel.sorted())")
        #expect(try Self.procTablePorts("/proc/net/tcp6").contains(sixListener.port))
        #expect(!sixFromKernel.contains(listener.port), "an IPv4 listener was named as IPv6")
    }

    @Test func aListenerOnAnInstrumentationServersPortIsNamedOnTheLiveHost() throws {
        // Whoever else listens there now is a listener all the same: the probe must name it.
        let frida = try? LoopbackTestSocket(family: AF_INET, port: 27042)
        let elsewhere = try LoopbackTestSocket(family: AF_INET)
        let context = ProbeContext(host: HostFileSystem(root: "/"), tables: .embedded, filter: .none,
                                   hasher: IdentifierHasher(organization: "acme"))
        try ListeningSocketsProbe().collect(into: context)
        guard case .strings(let named)? = context.signals["net.instrumentation_listeners"] else {
            Issue.record("no listeners signal: \(context.signals)")
            return
        }
        #expect(named.contains("27042 (frida-server)"), "\(named), own socket: \(frida != nil)")
        #expect(!named.contains { $0.hasPrefix("\(elsewhere.port) ") }, "an unwatched port was named: \(named)")
        #expect(context.issues.isEmpty, "\(context.issues)")
    }

    @Test func aRootTreesProcTablesAreReadAndOnlyListenersCount() throws {
        let root = try TestPaths.temporaryDirectory("listening-tree")
        let header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        // 69A2 = 27042 listening; 69A3 = 27043 established (st 01): only the first is a listener.
        try DeviceFixtures.write(header
            + "   0: 0100007F:69A2 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1\n"
            + "   1: 0100007F:69A3 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 2 1\n",
            to: root + "/proc/net/tcp")
        let context = ProbeContext(host: HostFileSystem(root: root), tables: .embedded, filter: .none,
                                   hasher: IdentifierHasher(organization: "acme"))
        try ListeningSocketsProbe().collect(into: context)
        #expect(context.signals["net.instrumentation_listeners"] == .strings(["27042 (frida-server)"]))
        let empty = try TestPaths.temporaryDirectory("listening-empty")
        let none = ProbeContext(host: HostFileSystem(root: empty), tables: .embedded, filter: .none,
                                hasher: IdentifierHasher(organization: "acme"))
        #expect(throws: ProbeFailure.self) { try ListeningSocketsProbe().collect(into: none) }
    }
}
