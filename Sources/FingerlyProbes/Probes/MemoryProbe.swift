import FingerlyHost
import FingerlyModel

/// Installed memory from /proc/meminfo.
package struct MemoryProbe: Probe {
    package let id = "memory"
    static let path = "/proc/meminfo"

    package func collect(into context: ProbeContext) throws(ProbeFailure) {
        let text: String
        do { text = try context.host.readText(Self.path) } catch { throw ProbeFailure(error) }
        guard let line = text.lines.first(where: { $0.hasPrefix("MemTotal:") }) else {
            throw ProbeFailure(.malformed, "\(Self.path): no MemTotal line")
        }
        let fields = line.dropFirst("MemTotal:".count).split(separator: " ")
        guard fields.count == 2, fields[1] == "kB", let kibibytes = Int(fields[0]), kibibytes > 0 else {
            throw ProbeFailure(.malformed, "\(Self.path): MemTotal is not '<number> kB'")
        }
        // The host writes this number: one past Int.max / 1024 must be malformed, not a trap.
        let (bytes, overflow) = kibibytes.multipliedReportingOverflow(by: 1024)
        guard !overflow else { throw ProbeFailure(.malformed, "\(Self.path): MemTotal \(kibibytes) kB is out of range") }
        context.emit("memory.total_bytes", bytes)
    }
}
