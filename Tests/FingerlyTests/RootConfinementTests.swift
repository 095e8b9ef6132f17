import Foundation
import Testing
@testable import Fingerly

@Suite struct RootConfinementTests {
    @Test func absoluteLinksInARootTreeStayInsideIt() async throws {
        let root = try TestPaths.temporaryDirectory("confined")
        try DeviceFixtures.write("0123456789abcdef0123456789abcdef\n", to: root + "/etc/machine-id")
        // As Debian ships it: the D-Bus copy is an absolute link to /etc/machine-id.
        try DeviceFixtures.link(root + "/var/lib/dbus/machine-id", to: "/etc/machine-id")
        try DeviceFixtures.link(root + "/etc/os-release", to: "../usr/lib/os-release")
        try DeviceFixtures.write("ID=confined\n", to: root + "/usr/lib/os-release")
        let result = try await identify(root: root)
        let hasher = IdentifierHasher(apiKey: "test-key")
        #expect(result.signals["machine.dbus_machine_id"] == .string(hasher.hash("0123456789abcdef0123456789abcdef")))
        #expect(result.signals["machine.dbus_machine_id_matches"] == .bool(true))
        #expect(result.signals["os.id"] == .string("confined"))
    }

    @Test func linksCannotClimbOutWithDotDot() throws {
        let root = try TestPaths.temporaryDirectory("climb")
        try DeviceFixtures.link(root + "/etc/machine-id", to: "../../../../../../etc/machine-id")
        let host = HostFileSystem(root: root)
        #expect(host.hostPath("/etc/machine-id") == root + "/etc/machine-id")
        #expect(throws: HostReadError.self) { try host.read("/etc/machine-id") }
    }

    @Test func interfaceNamesThatCarryAMACAreRedacted() {
        #expect(NetworkInterfacesProbe.displayName("enx00e04c680001") == "enx<mac>")
        #expect(NetworkInterfacesProbe.displayName("wlx7cdd90a1b2c3") == "wlx<mac>")
        #expect(NetworkInterfacesProbe.displayName("eno1") == "eno1")
        #expect(NetworkInterfacesProbe.displayName("enxfoo") == "enxfoo")
    }
}
