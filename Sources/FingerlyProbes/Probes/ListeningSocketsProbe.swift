#if canImport(Glibc)
import Glibc
#endif
import FingerlyHost
import FingerlyModel

/// TCP listeners on ports that instrumentation servers use by default (frida-server: 27042), in
/// this network namespace. The live host is asked over sock_diag, which walks only the listening
/// table; /proc/net/tcp walks every bucket of the established table, milliseconds on a machine
/// with much memory. A root tree, or a host whose policy forbids netlink sockets, gives the files.
package struct ListeningSocketsProbe: Probe {
    package let id = "listening-sockets"
    static let listen = "0A"
    static let sources: [(family: Int32, path: String)] = [(AF_INET, "/proc/net/tcp"), (AF_INET6, "/proc/net/tcp6")]

    package func collect(into context: ProbeContext) throws(ProbeFailure) {
        var ports: Set<Int> = []
        var read = false
        for source in Self.sources {
            // try? justified: any failure of the netlink query leaves the file, which says the same.
            if context.host.isLiveHost, let listening = try? NetworkDevice.listeningTCPPorts(family: source.family) {
                ports.formUnion(listening)
                read = true
                continue
            }
            guard let text = context.attemptIfPresent({ () throws(HostReadError) in
                try context.host.readText(source.path, limit: 4 * 1024 * 1024)
            }) else { continue }
            read = true
            ports.formUnion(Self.listeningPorts(inProcTable: text))
        }
        guard read else { throw ProbeFailure(.absent, "/proc/net/tcp and /proc/net/tcp6 are not there") }
        let table = context.tables.mapping("instrumentationPorts")
        let watched = Set(table.keys.compactMap { Int($0) })
        context.emit("net.instrumentation_listeners", ports.intersection(watched).sorted().map { port in
            "\(port) (\(table[String(port)] ?? "?"))"
        })
    }

    /// The local ports of the rows in state LISTEN of a /proc/net/tcp{,6} table.
    static func listeningPorts(inProcTable text: String) -> Set<Int> {
        var ports: Set<Int> = []
        for line in text.lines.dropFirst() {
            let fields = line.split(separator: " ")
            guard fields.count > 3, fields[3] == Self.listen, let colon = fields[1].lastIndex(of: ":"),
                  let port = Int(fields[1][fields[1].index(after: colon)...], radix: 16) else { continue }
            ports.insert(port)
        }
        return ports
    }
}
