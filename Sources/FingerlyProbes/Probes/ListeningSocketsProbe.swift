import FingerlyHost
import FingerlyModel

/// TCP listeners on ports that instrumentation servers use by default (frida-server: 27042),
/// from /proc/net/tcp and tcp6 of this network namespace.
package struct ListeningSocketsProbe: Probe {
    package let id = "listening-sockets"
    static let listen = "0A"

    package func collect(into context: ProbeContext) throws(ProbeFailure) {
        var ports: Set<Int> = []
        var read = false
        for path in ["/proc/net/tcp", "/proc/net/tcp6"] {
            guard let text = context.attemptIfPresent({ () throws(HostReadError) in try context.host.readText(path, limit: 4 * 1024 * 1024) }) else { continue }
            read = true
            for line in text.lines.dropFirst() {
                let fields = line.split(separator: " ")
                guard fields.count > 3, fields[3] == Self.listen, let colon = fields[1].lastIndex(of: ":"),
                      let port = Int(fields[1][fields[1].index(after: colon)...], radix: 16) else { continue }
                ports.insert(port)
            }
        }
        guard read else { throw ProbeFailure(.absent, "/proc/net/tcp and /proc/net/tcp6 are not there") }
        let watched = Set(context.tables.mapping("instrumentationPorts").keys.compactMap { Int($0) })
        context.emit("net.instrumentation_listeners", ports.intersection(watched).sorted().map { port in
            "\(port) (\(context.tables.mapping("instrumentationPorts")[String(port)] ?? "?"))"
        })
    }
}
