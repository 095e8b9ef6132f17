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
        do {
            status = Self.statusFields(["Uid", "TracerPid", "PPid", "Seccomp"],
                                       in: try host.readTextBypassingLibc("/proc/self/status"))
        } catch { throw ProbeFailure(error) }

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

    /// One field of a status file, without parsing the other fifty (every thread's is read): the
    /// first line that starts with `name:`, found on bytes, where a Character search costs
    /// thousands of instructions a line.
    static func field(_ name: String, in text: String) -> String? {
        let key = Array(name.utf8) + [UInt8(ascii: ":")]
        var text = text
        return text.withUTF8 { bytes -> String? in
            var lineStart = 0
            while bytes.count - lineStart >= key.count {
                let lineEnd = bytes[lineStart...].firstIndex(of: UInt8(ascii: "\n")) ?? bytes.count
                if bytes[lineStart..<lineStart + key.count].elementsEqual(key) {
                    return trimmed(bytes[(lineStart + key.count)..<lineEnd])
                }
                lineStart = lineEnd + 1
            }
            return nil
        }
    }

    /// The fields `names` of a status file, a later line winning over an earlier one as in
    /// `parseStatus`, without building the strings of the fields nobody reads.
    static func statusFields(_ names: [String], in text: String) -> [String: String] {
        let keys = names.map { Array($0.utf8) }
        var fields: [String: String] = [:]
        var text = text
        text.withUTF8 { bytes in
            var lineStart = 0
            while lineStart < bytes.count {
                let lineEnd = bytes[lineStart...].firstIndex(of: UInt8(ascii: "\n")) ?? bytes.count
                if let colon = bytes[lineStart..<lineEnd].firstIndex(of: UInt8(ascii: ":")),
                   let which = keys.firstIndex(where: { bytes[lineStart..<colon].elementsEqual($0) }) {
                    fields[names[which]] = trimmed(bytes[(colon + 1)..<lineEnd])
                }
                lineStart = lineEnd + 1
            }
        }
        return fields
    }

    /// What `trimmingWhitespace` keeps of these bytes.
    private static func trimmed(_ bytes: Slice<UnsafeBufferPointer<UInt8>>) -> String {
        let isSpace: (UInt8) -> Bool = { $0 == 0x20 || $0 == 0x09 || $0 == 0x0A || $0 == 0x0D || $0 == 0 }
        guard let first = bytes.firstIndex(where: { !isSpace($0) }) else { return "" }
        let last = bytes.lastIndex(where: { !isSpace($0) })!
        return String(decoding: bytes[first...last], as: UTF8.self)
    }

    static func parseStatus(_ text: String) -> [String: String] {
        var fields: [String: String] = [:]
        for line in text.lines {
            guard let colon = line.firstIndex(of: ":") else { continue }
            fields[String(line[..<colon])] = line[line.index(after: colon)...].trimmingWhitespace()
        }
        return fields
    }
}
