#if canImport(Glibc)
import Glibc
#endif
import FingerlyHost
import FingerlyModel

/// Who this process runs as, whether any of its threads is traced, and who started it.
package struct ProcessContextProbe: Probe {
    package let id = "process-context"

    package func collect(into context: ProbeContext) throws(ProbeFailure) {
        let host = context.host
        let status: [String: String]
        do { status = Self.parseStatus(try host.readTextBypassingLibc("/proc/self/status")) } catch { throw ProbeFailure(error) }

        if let ids = status["Uid"]?.split(whereSeparator: { $0 == " " || $0 == "\t" }).compactMap({ Int($0) }), ids.count == 4 {
            context.emit("process.uid", ids[0])
            context.emit("process.euid", ids[1])
        } else {
            context.recordMalformed("/proc/self/status", "no Uid line of four numbers")
        }

        // Every thread, not just the main one: a tracer may attach to a single thread.
        var tracers: [Int] = []
        var threads = 0
        if let tids = context.attempt({ () throws(HostReadError) in try host.listDirectory("/proc/self/task") }) {
            for tid in tids {
                let path = "/proc/self/task/\(tid)/status"
                // A thread may exit between listing and reading.
                guard let text = context.attemptIfPresent({ () throws(HostReadError) in try host.readTextBypassingLibc(path) }) else { continue }
                threads += 1
                guard let tracer = Self.field("TracerPid", in: text).flatMap({ Int($0) }) else {
                    context.recordMalformed(path, "TracerPid is missing or not a number")
                    continue
                }
                if tracer != 0 && !tracers.contains(tracer) { tracers.append(tracer) }
            }
        } else if let tracer = status["TracerPid"].flatMap({ Int($0) }) {
            threads = 1
            if tracer != 0 { tracers.append(tracer) }
        } else {
            context.recordMalformed("/proc/self/status", "TracerPid is missing or not a number")
        }
        if threads > 0 {
            context.emit("process.thread_count", threads)
            context.emit("process.tracer_pids", tracers.map(String.init))
            context.emit("process.tracer_pid", tracers.first ?? 0)
        }
        if let tracer = tracers.first {
            if let comm = context.attemptIfPresent({ () throws(HostReadError) in try host.readAttribute("/proc/\(tracer)/comm") }) {
                context.emit("process.tracer_comm", comm)
            }
            if let exe = context.attemptIfPresent({ () throws(HostReadError) in try host.readLink("/proc/\(tracer)/exe") }) {
                context.emit("process.tracer_exe", exe)
            }
        }

        if let parent = status["PPid"].flatMap({ Int($0) }), parent > 0 {
            if let comm = context.attemptIfPresent({ () throws(HostReadError) in try host.readAttribute("/proc/\(parent)/comm") }) {
                context.emit("process.parent_comm", comm)
            }
            if let exe = context.attemptIfPresent({ () throws(HostReadError) in try host.readLink("/proc/\(parent)/exe") }) {
                context.emit("process.parent_exe", exe)
            }
        }

        if let mode = status["Seccomp"].flatMap({ Int($0) }) { context.emit("process.seccomp_mode", mode) }

        // File descriptors belong to this process, not to a root tree.
        if host.isLiveHost {
            context.emit("process.stdin_tty", isatty(0) == 1)
            context.emit("process.stdout_tty", isatty(1) == 1)
        }
    }

    /// One field of a status file, without parsing the other fifty (every thread's is read).
    static func field(_ name: String, in text: String) -> String? {
        guard let start = text.firstRange(of: "\n" + name + ":")?.upperBound ?? (text.hasPrefix(name + ":") ? text.index(text.startIndex, offsetBy: name.count + 1) : nil) else { return nil }
        let end = text[start...].firstIndex(of: "\n") ?? text.endIndex
        return text[start..<end].trimmingWhitespace()
    }

    static func parseStatus(_ text: String) -> [String: String] {
        var fields: [String: String] = [:]
        for line in text.split(separator: "\n") {
            guard let colon = line.firstIndex(of: ":") else { continue }
            fields[String(line[..<colon])] = line[line.index(after: colon)...].trimmingWhitespace()
        }
        return fields
    }
}
