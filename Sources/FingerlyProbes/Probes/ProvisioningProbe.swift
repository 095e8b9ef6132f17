#if canImport(Glibc)
import Glibc
#endif
import FingerlyHost
import FingerlyModel

/// How long ago this installation was made: the age of machine-id, of the SSH host keys, of
/// the root filesystem (its birth time) and of the package log; and cloud-init's instance
/// markers. Fresh everything on a host that claims to be a long-lived user's is how farms of
/// reset or freshly cloned machines look.
package struct ProvisioningProbe: Probe {
    package let id = "provisioning"
    static let secondsPerDay = 86_400.0

    package func collect(into context: ProbeContext) throws(ProbeFailure) {
        let host = context.host
        let now = Double(time(nil))
        func ageDays(_ seconds: Double) -> Int { max(0, Int((now - seconds) / Self.secondsPerDay)) }

        if let modified = Self.modificationTime("/etc/machine-id", context: context) {
            context.emit("provision.machine_id_age_days", ageDays(modified))
        }
        let keys = (context.attemptIfPresent { () throws(HostReadError) in try host.listDirectory("/etc/ssh") } ?? []).filter { $0.hasPrefix("ssh_host_") && $0.hasSuffix("_key.pub") }
        let keyTimes = keys.compactMap { Self.modificationTime("/etc/ssh/" + $0, context: context) }
        if let newest = keyTimes.max() { context.emit("provision.ssh_host_key_age_days", ageDays(newest)) }
        // Under a root prefix "/" is whatever directory was given (an unpacked tree, a fixture):
        // its birth says nothing about the installation.
        if host.isLiveHost, let birth = context.attempt({ () throws(HostReadError) in try host.status("/") })?.birthSeconds.map(Double.init) { context.emit("provision.root_birth_age_days", ageDays(birth)) }

        // dpkg.log starts "YYYY-MM-DD HH:MM:SS": its first line is the oldest entry kept.
        if let log = context.attemptIfPresent({ () throws(HostReadError) in try host.read("/var/log/dpkg.log", limit: 64) }),
           let first = Self.parseDate(String(decoding: log.prefix(19), as: UTF8.self)) {
            let rotated = host.exists("/var/log/dpkg.log.1") || host.exists("/var/log/dpkg.log.1.gz")
            if !rotated { context.emit("provision.package_log_age_days", ageDays(first)) }
        }
        context.emit("provision.cloud_init", host.exists("/var/lib/cloud/instance") || host.exists("/run/cloud-init/result.json"))
    }

    static func modificationTime(_ path: String, context: ProbeContext) -> Double? {
        context.attemptIfPresent { () throws(HostReadError) in try context.host.status(path) }.map { Double($0.modifiedSeconds) }
    }

    static func parseDate(_ text: String) -> Double? {
        let parts = text.split(whereSeparator: { $0 == "-" || $0 == " " || $0 == ":" }).compactMap { Int32($0) }
        guard parts.count == 6 else { return nil }
        var fields = tm()
        fields.tm_year = parts[0] - 1900
        fields.tm_mon = parts[1] - 1
        fields.tm_mday = parts[2]
        fields.tm_hour = parts[3]
        fields.tm_min = parts[4]
        fields.tm_sec = parts[5]
        let seconds = timegm(&fields)
        return seconds < 0 ? nil : Double(seconds)
    }
}
