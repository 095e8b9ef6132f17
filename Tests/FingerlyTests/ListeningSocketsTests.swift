@testable import FingerlyCatalogue
import Foundation
import Glibc
import Testing
@testable import FingerlyHost
@testable import FingerlyModel
@testable import FingerlyProbes

/// TCP listeners: the kernel's sock_diag answer on the live host, /proc/net/tcp{,6} in a root tree.
@Suite struct ListeningSocketsTests {
    static func procTablePorts(_ path: String) throws -> Set<Int> {
        ListeningSocketsProbe.listeningPorts(inProcTable: try String(contentsOfFile: path, encoding: .utf8))
    }

    @Test func theKernelNamesTheSameListenersAsTheProcTables() throws {
        let listener = try HeldLoopbackPort(listening: true)
        let boundOnly = try HeldLoopbackPort()
        let fromKernel = try NetworkDevice.listeningTCPPorts(family: AF_INET)
        let fromFile = try Self.procTablePorts("/proc/net/tcp")
        for ports in [fromKernel, fromFile] {
            #expect(ports.contains(Int(listener.port)), "listener \(listener.port) missing from \(ports.sorted())")
            #expect(!ports.contains(Int(boundOnly.port)), "a socket that does not listen was named: \(boundOnly.port)")
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
        let sixListener = try HeldLoopbackPort(family: AF_INET6, listening: true)
        let sixFromKernel = try NetworkDevice.listeningTCPPorts(family: AF_INET6)
        #expect(sixFromKernel.contains(Int(sixListener.port)), "\(sixListener.port) missing from \(sixFromKernel.sorted())")
        #expect(try Self.procTablePorts("/proc/net/tcp6").contains(Int(sixListener.port)))
        #expect(!sixFromKernel.contains(Int(listener.port)), "an IPv4 listener was named as IPv6")
    }

    @Test func aListenerOnAnInstrumentationServersPortIsNamedOnTheLiveHost() throws {
        // Whoever else listens there now is a listener all the same: the probe must name it.
        let frida = try? HeldLoopbackPort(port: 27042, listening: true)
        let elsewhere = try HeldLoopbackPort(listening: true)
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
