import FingerlyHost
import FingerlyModel

/// Reads /proc/self/maps, status and environ twice, through libc and with raw system calls, one
/// right after the other: whatever one view shows and the other does not was filtered on its
/// way through libc by a hook hiding itself.
package struct LibcViewProbe: Probe {
    package let id = "libc-view"

    package func collect(into context: ProbeContext) throws(ProbeFailure) {
        let host = context.host
        guard host.isLiveHost else { throw ProbeFailure(.skipped, "compares two views of this process; a root tree has one") }
        var mismatches: [String] = []
        let limit = 4 * 1024 * 1024
        if let raw = context.attempt({ () throws(HostReadError) in try host.readTextBypassingLibc("/proc/self/maps", limit: limit) }),
           let viaLibc = context.attempt({ () throws(HostReadError) in try host.readText("/proc/self/maps", limit: limit) }) {
            // Mapped files only: anonymous regions come and go between the two reads.
            let hidden = ProcessMapsProbe.mappedFiles(ProcessMapsProbe.regions(raw))
                .subtracting(ProcessMapsProbe.mappedFiles(ProcessMapsProbe.regions(viaLibc)))
            if !hidden.isEmpty { mismatches.append("/proc/self/maps hides \(hidden.sorted().joined(separator: ", "))") }
        }
        let raw = context.attempt { () throws(HostReadError) in try host.readTextBypassingLibc("/proc/self/status") }
        let viaLibc = context.attempt { () throws(HostReadError) in try host.readText("/proc/self/status") }
        if let raw, let viaLibc, ProcessContextProbe.parseStatus(raw)["TracerPid"] != ProcessContextProbe.parseStatus(viaLibc)["TracerPid"] {
            mismatches.append("/proc/self/status TracerPid differs")
        }
        if let raw = context.attempt({ () throws(HostReadError) in try host.readBypassingLibc(ProcessEnvironment.path, limit: limit) }),
           let viaLibc = context.attempt({ () throws(HostReadError) in try host.read(ProcessEnvironment.path, limit: limit) }),
           raw != viaLibc {
            mismatches.append("\(ProcessEnvironment.path) differs")
        }
        context.emit("integrity.view_mismatches", mismatches)
    }
}
