import FingerlyHost
import FingerlyModel

/// How this process is confined, beyond marker files: cgroup paths, pid 1's `container=`
/// variable (often denied, even to root), an overlay root, user namespaces, WSL, flatpak, snap,
/// OpenVZ and illumos LX branded zones.
package struct ContainerRuntimeProbe: Probe {
    package let id = "container-runtime"

    package func collect(into context: ProbeContext) throws(ProbeFailure) {
        let host = context.host
        let tables = context.tables
        func text(_ path: String) -> String? {
            context.attemptIfPresent { () throws(HostReadError) in try host.readText(path, limit: 256 * 1024) }
        }

        // pid 1's environment: container=lxc/oci/podman/systemd-nspawn. Denied is missing evidence, recorded.
        if let bytes = context.attemptIfPresent({ () throws(HostReadError) in try host.read("/proc/1/environ", limit: 256 * 1024) }) {
            for entry in bytes.split(separator: 0) where entry.starts(with: Array("container=".utf8)) {
                context.emit("container.pid1_container_variable", String(decoding: entry.dropFirst(10), as: UTF8.self))
            }
        }

        var cgroupKinds: [String] = []
        var readOwnCgroup = false
        for path in ["/proc/self/cgroup", "/proc/1/cgroup"] {
            guard let cgroups = text(path) else { continue }
            // "0::/" alone proves nothing: without systemd (runit, OpenRC, busybox init) every
            // process of a bare-metal host stays in the root cgroup and reads exactly that.
            if path == "/proc/self/cgroup" { readOwnCgroup = true }
            for row in tables.patterns("cgroupMarkers") where cgroups.containsUTF8(row.pattern) && !cgroupKinds.contains(row.kind) {
                cgroupKinds.append(row.kind)
            }
        }
        context.emit("container.cgroup_kinds", cgroupKinds)
        // The cgroup filesystem mounted here is a nested cgroup seen as the root: cgroup v2 has
        // cgroup.events (and, on kernels with cgroup.type, that too) only below the root, v1's
        // systemd hierarchy has release_agent only at the root.
        let nestedV2 = host.exists("/sys/fs/cgroup/cgroup.events")
            && (host.exists("/sys/fs/cgroup/cgroup.type") || !host.exists("/sys/kernel/cgroup/features"))
        let nestedV1 = !nestedV2 && host.exists("/sys/fs/cgroup/systemd") && !host.exists("/sys/fs/cgroup/systemd/release_agent")
        if readOwnCgroup || nestedV2 || nestedV1 { context.emit("container.cgroup_namespace", nestedV2 || nestedV1) }

        if let mountinfo = text("/proc/self/mountinfo"), let root = FilesystemIdentityProbe.rootMount(in: mountinfo) {
            context.emit("container.overlay_root", ["overlay", "fuse-overlayfs", "aufs"].contains(root.type))
        }
        // A user namespace maps ids; the initial one maps 0 4294967295 onto itself, for uids
        // and gids alike, and never denies setgroups.
        func isIdentityMap(_ map: String) -> Bool {
            let fields = map.split(whereSeparator: { $0 == " " || $0 == "\n" || $0 == "\t" })
            return fields.count == 3 && fields[0] == "0" && fields[1] == "0" && fields[2] == "4294967295"
        }
        let uidMap = text("/proc/self/uid_map"), gidMap = text("/proc/self/gid_map")
        let setgroupsDenied = text("/proc/self/setgroups").map { $0.trimmingWhitespace() == "deny" }
        if let setgroupsDenied { context.emit("container.setgroups_denied", setgroupsDenied) }
        if uidMap != nil || gidMap != nil {
            let mapped = [uidMap, gidMap].contains { $0.map { !isIdentityMap($0) } ?? false }
            context.emit("container.user_namespace", mapped || setgroupsDenied == true)
        }
        let status = text("/proc/self/status")
        if let status, let levels = ProcessContextProbe.field("NSpid", in: status) {
            context.emit("container.pid_namespace", levels.split(whereSeparator: { $0 == " " || $0 == "\t" }).count > 1)
        }
        // Pid 1 with no parent is a namespace's init: a container's entrypoint. A microVM may run its application as
        // the machine's own init, though; there the kernel's kthreadd is pid 2, which no pid namespace but the first
        // holds.
        if let status, let pid = ProcessContextProbe.field("Pid", in: status),
           let parent = ProcessContextProbe.field("PPid", in: status) {
            let isInit = pid.trimmingWhitespace() == "1" && parent.trimmingWhitespace() == "0"
            let kernelThreads = isInit && text("/proc/2/comm")?.trimmingWhitespace() == "kthreadd"
            context.emit("container.namespace_init", isInit && !kernelThreads)
        }

        if let version = text("/proc/version") {
            if version.contains("BrandZ virtual linux") { context.emit("container.platform_kind", "illumos-lx") }
            else if version.contains("Microsoft") && !version.lowercased().contains("wsl2") { context.emit("container.platform_kind", "wsl") }
        }
        if host.exists("/proc/vz") && !host.exists("/proc/bc") { context.emit("container.platform_kind", "openvz") }
        // Linux-VServer gives every process a context; 0 is the host's.
        if let status, let vxid = ProcessContextProbe.field("VxID", in: status).flatMap({ UInt32($0) }), vxid != 0 {
            context.emit("container.platform_kind", "linux-vserver")
        }
        // proot fakes a root with ptrace instead of namespaces: its tracer is the container.
        if let status, let tracer = ProcessContextProbe.field("TracerPid", in: status).flatMap({ Int32($0) }), tracer > 0,
           let comm = context.attemptIfPresent({ () throws(HostReadError) in try host.readAttribute("/proc/\(tracer)/comm") }),
           comm.hasPrefix("proot") {
            context.emit("container.platform_kind", "proot")
        }
        if host.exists("/.flatpak-info") { context.emit("container.sandbox_kind", "flatpak") }
        if let environment = context.attemptIfPresent({ () throws(HostReadError) in try ProcessEnvironment.read(from: host) }) {
            if environment["SNAP"] != nil && environment["SNAP_NAME"] != nil { context.emit("container.sandbox_kind", "snap") }
            if environment["WSL_DISTRO_NAME"] != nil || environment["WSL_INTEROP"] != nil { context.emit("container.wsl_environment", true) }
        }
    }
}
