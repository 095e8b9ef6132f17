#if canImport(Glibc)
import Glibc
#endif
import FingerlyHost
import FingerlyModel

/// Distribution, kernel and architecture.
package struct OSProbe: Probe {
    package let id = "os"

    package func collect(into context: ProbeContext) throws(ProbeFailure) {
        let host = context.host
        let release = context.attemptIfPresent { () throws(HostReadError) in try host.readText("/etc/os-release") }
            ?? context.attempt { () throws(HostReadError) in try host.readText("/usr/lib/os-release") }
        if let release {
            let fields = Self.parseOSRelease(release)
            if fields.isEmpty {
                context.recordMalformed("/etc/os-release", "no KEY=value lines")
            }
            for (key, signal) in [("ID", "os.id"), ("VERSION_ID", "os.version_id"),
                                  ("PRETTY_NAME", "os.pretty_name"), ("ID_LIKE", "os.id_like")] {
                if let value = fields[key], !value.isEmpty { context.emit(signal, value) }
            }
        }
        if context.wants("os.kernel_release"),
           let value = context.attempt({ () throws(HostReadError) in try host.readAttribute("/proc/sys/kernel/osrelease") }) {
            context.emit("os.kernel_release", value)
        }
        if context.wants("os.kernel_version"),
           let value = context.attempt({ () throws(HostReadError) in try host.readAttribute("/proc/sys/kernel/version") }) {
            context.emit("os.kernel_version", value)
        }
        if context.wants("os.architecture") {
            // /proc/sys/kernel/arch only exists on recent kernels; uname answers for the live host.
            if let value = context.attemptIfPresent({ () throws(HostReadError) in try host.readAttribute("/proc/sys/kernel/arch") }) {
                context.emit("os.architecture", value)
            } else if host.isLiveHost {
                context.emit("os.architecture", Self.unameMachine())
            }
        }
    }

    /// os-release(5): KEY=value, value optionally quoted with shell-style escapes.
    static func parseOSRelease(_ text: String) -> [String: String] {
        var fields: [String: String] = [:]
        for line in text.split(whereSeparator: \.isNewline) {
            let trimmed = line.trimmingWhitespace()
            guard !trimmed.hasPrefix("#"), let equals = trimmed.firstIndex(of: "=") else { continue }
            let key = String(trimmed[..<equals])
            guard !key.isEmpty, key.allSatisfy({ $0.isUppercase || $0.isNumber || $0 == "_" }) else { continue }
            var value = Substring(trimmed[trimmed.index(after: equals)...])
            if let quote = value.first, quote == "\"" || quote == "'", value.count >= 2, value.last == quote {
                value = value.dropFirst().dropLast()
            }
            fields[key] = value.replacingBackslashEscapes()
        }
        return fields
    }

    static func unameMachine() -> String {
        var names = utsname()
        uname(&names)
        return withUnsafeBytes(of: names.machine) { raw in
            String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
        }
    }
}

extension Substring {
    fileprivate func replacingBackslashEscapes() -> String {
        var result = ""
        var escaping = false
        for character in self {
            if escaping || character != "\\" {
                result.append(character)
                escaping = false
            } else {
                escaping = true
            }
        }
        return result
    }
}
