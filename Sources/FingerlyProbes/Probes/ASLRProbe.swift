import FingerlyHost
import FingerlyModel

/// Whether address-space randomisation is off for this process (gdb's default when it starts a
/// program, `setarch -R`) or for the whole system.
package struct ASLRProbe: Probe {
    package let id = "aslr"
    /// personality(2) flag ADDR_NO_RANDOMIZE.
    static let addressNoRandomize = 0x0040000

    package func collect(into context: ProbeContext) throws(ProbeFailure) {
        let host = context.host
        let text: String
        do { text = try host.readAttribute("/proc/self/personality") } catch { throw ProbeFailure(error) }
        guard let personality = Int(text, radix: 16) else {
            throw ProbeFailure(.malformed, "/proc/self/personality: not a hexadecimal personality")
        }
        context.emit("debug.aslr_disabled", personality & Self.addressNoRandomize != 0)
        if let text = context.attemptIfPresent({ () throws(HostReadError) in try host.readAttribute("/proc/sys/kernel/randomize_va_space") }),
           let value = Int(text) {
            context.emit("debug.randomize_va_space", value)
        }
    }
}
