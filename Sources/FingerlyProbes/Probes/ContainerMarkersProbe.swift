import FingerlyHost
import FingerlyModel

/// Files that container managers leave in the root filesystem they run.
package struct ContainerMarkersProbe: Probe {
    package let id = "container-markers"
    /// Files whose whole content is the manager's name (systemd's container interface).
    static let managerNameFiles: Set<String> = ["/run/systemd/container", "/run/host/container-manager"]

    package func collect(into context: ProbeContext) throws(ProbeFailure) {
        var found: [String] = []
        var kind: String?
        // Table order ranks the markers: the first one present names the kind.
        for marker in context.tables.patterns("containerMarkers") where context.host.exists(marker.pattern) {
            found.append(marker.pattern)
            var markerKind = marker.kind
            if Self.managerNameFiles.contains(marker.pattern),
               let name = context.attempt({ () throws(HostReadError) in try context.host.readAttribute(marker.pattern) }),
               !name.isEmpty {
                markerKind = name
            }
            if kind == nil { kind = markerKind }
        }
        context.emit("container.markers", found)
        if let kind { context.emit("container.marker_kind", kind) }
    }
}
