import FingerlyHost
import FingerlyModel

/// Other processes on the host that automate input or output: virtual X servers (Xvfb, Xorg
/// with the dummy driver), input injectors, and whoever holds /dev/uinput open.
package struct ProcessScanProbe: Probe {
    package let id = "process-scan"

    package func collect(into context: ProbeContext) throws(ProbeFailure) {
        let host = context.host
        let entries: [String]
        // Process ids only, and as many as a busy host runs: short numeric names cost no heap.
        do {
            entries = try host.listDirectory("/proc", limit: 131_072) { name in name.utf8.count <= 10 && name.utf8.allSatisfy { $0 >= 0x30 && $0 <= 0x39 } }
        } catch { throw ProbeFailure(error) }
        var displays: [String] = []
        var injectors: [String] = []
        var uinputHolders: [String] = []
        var deniedFds = 0
        let uinputMayBeHeld = Self.uinputMayBeHeld(on: host)
        for pid in entries {
            // Processes come and go while we look: a vanished one is simply skipped.
            guard let comm = context.attemptIfPresent({ () throws(HostReadError) in try host.readAttribute("/proc/\(pid)/comm") }) else { continue }
            if context.tables.strings("virtualDisplayProcesses").contains(comm) {
                displays.append("\(comm) (pid \(pid))")
            } else if comm == "Xorg" || comm == "X",
                      let commandLine = context.attemptIfPresent({ () throws(HostReadError) in try host.read("/proc/\(pid)/cmdline", limit: 16 * 1024) }),
                      String(decoding: commandLine, as: UTF8.self).lowercased().contains("dummy") {
                displays.append("\(comm) with the dummy driver (pid \(pid))")
            }
            if context.tables.strings("inputInjectorProcesses").contains(comm) { injectors.append("\(comm) (pid \(pid))") }
            guard uinputMayBeHeld else { continue }
            do {
                for fd in try host.listDirectory("/proc/\(pid)/fd") {
                    if context.attemptIfPresent({ () throws(HostReadError) in try host.readLink("/proc/\(pid)/fd/\(fd)") }) == "/dev/uinput" {
                        uinputHolders.append("\(comm) (pid \(pid))")
                        break
                    }
                }
            } catch where error.failure == .denied {
                deniedFds += 1
            } catch where error.failure == .absent {
                // The process exited after it was listed.
            } catch { context.record(error) }
        }
        if deniedFds > 0 { context.note("open files of \(deniedFds) processes are not readable by this user") }
        context.emit("automation.virtual_display_processes", displays)
        context.emit("automation.input_injector_processes", injectors)
        context.emit("automation.uinput_holders", uinputHolders)
    }

    /// Whether any process can have /dev/uinput open. An open uinput pins its module, so while one
    /// is held the kernel lists the device in /sys/class/misc; a host whose list lacks it spares
    /// the reading of every open descriptor of every process (thousands on a desktop). A tree
    /// without the list at all is scanned.
    static func uinputMayBeHeld(on host: HostFileSystem) -> Bool {
        host.exists("/sys/class/misc/uinput") || !host.exists("/sys/class/misc")
    }
}
