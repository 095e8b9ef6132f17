import FingerlyHost
import FingerlyModel

/// Names of this process's threads: injected agents run threads of their own (Frida's
/// gum-js-loop and pool-frida).
package struct ThreadNamesProbe: Probe {
    package let id = "thread-names"

    package func collect(into context: ProbeContext) throws(ProbeFailure) {
        let host = context.host
        let tids: [String]
        do { tids = try host.listDirectory("/proc/self/task") } catch { throw ProbeFailure(error) }
        var names: Set<String> = []
        for tid in tids {
            if let name = context.attemptIfPresent({ () throws(HostReadError) in try host.readAttribute("/proc/self/task/\(tid)/comm") }) {
                names.insert(name)
            }
        }
        context.emit("process.thread_names", names.sorted())
    }
}
