#if canImport(Glibc)
import Glibc
#endif
import FingerlyHost
import FingerlyModel

/// How long ago this installation was made: the age of machine-id, of the SSH host keys, of
/// the root filesystem (its birth time) and of the package log; and cloud-init's instance
/// markers. Fresh everything on a host that claims to be a long-lived user's is how farms of
/// reset or freshly cloned machines look.
///
/// A clock that reads before those files' own times says something about the clock (set back,
/// or faked for this process), nothing about the machine's age: then no age is reported, since
/// every one would be measured against a wrong "now", and the files ahead are named instead.
package struct ProvisioningProbe: Probe {
    package let id = "provisioning"
    static let secondsPerDay = 86_400.0
    /// How far a file may be dated after the clock and still count as skew: a hardware clock
    /// kept in local time but read as UTC, dpkg.log's local timestamps read as UTC (up to 14 h
    /// either way), and a boot before the time is synchronised.
    static let clockSkewToleranceSeconds = 86_400.0

    /// One file time the ages are measured from.
    struct DatedFile {
        let ageSignal: String
        let described: String
        let seconds: Double
    }

    package func collect(into context: ProbeContext) throws(ProbeFailure) {
        let host = context.host
        var dated: [DatedFile] = []
        func add(_ ageSignal: String, _ described: String, _ seconds: Double?) {
            if let seconds { dated.append(DatedFile(ageSignal: ageSignal, described: described, seconds: seconds)) }
        }

        let machineIdWritten = Self.modificationTime("/etc/machine-id", context: context)
        add("provision.machine_id_age_days", "/etc/machine-id", machineIdWritten)
        let keys = (context.attemptIfPresent { () throws(HostReadError) in try host.listDirectory("/etc/ssh") } ?? [])
            .filter { $0.hasPrefix("ssh_host_") && $0.hasSuffix("_key.pub") }
        let keyTimes = keys.compactMap { key in
            Self.modificationTime("/etc/ssh/" + key, context: context).map { (path: "/etc/ssh/" + key, seconds: $0) }
        }
        if let newest = keyTimes.max(by: { $0.seconds < $1.seconds }) {
            add("provision.ssh_host_key_age_days", newest.path, newest.seconds)
        }
        // Under a root prefix "/" is whatever directory was given (an unpacked tree, a fixture):
        // its birth says nothing about the installation.
        if host.isLiveHost {
            let root = context.attempt { () throws(HostReadError) in try host.status("/") }
            add("provision.root_birth_age_days", "the root filesystem's birth", root?.birthSeconds.map(Double.init))
        }

        // dpkg.log starts "YYYY-MM-DD HH:MM:SS": its first line is the oldest entry kept.
        if let log = context.attemptIfPresent({ () throws(HostReadError) in try host.read("/var/log/dpkg.log", limit: 64) }),
           let first = Self.parseDate(String(decoding: log.prefix(19), as: UTF8.self)),
           !host.exists("/var/log/dpkg.log.1") && !host.exists("/var/log/dpkg.log.1.gz") {
            add("provision.package_log_age_days", "the first entry of /var/log/dpkg.log", first)
        }

        let now = Double(time(nil))
        let ahead = dated.filter { $0.seconds - now > Self.clockSkewToleranceSeconds }
        if ahead.isEmpty {
            for file in dated { context.emit(file.ageSignal, max(0, Int((now - file.seconds) / Self.secondsPerDay))) }
        }
        if !dated.isEmpty {
            context.emit("provision.clock_behind_files", ahead.map { file in
                let days = Int(((file.seconds - now) / Self.secondsPerDay).rounded())
                return "\(file.described) is dated \(days) day(s) after the clock"
            })
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
