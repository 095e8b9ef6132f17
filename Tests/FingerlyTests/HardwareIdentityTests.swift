import Foundation
import Testing
@testable import Fingerly
@testable import FingerlyHost
@testable import FingerlyModel
@testable import FingerlyPolicy
@testable import FingerlyProbes

/// hardwareId and instanceId against the failure cases real fleets show.
@Suite(.serialized) struct HardwareIdentityTests {
    static let nvme = "/sys/devices/pci0000:00/0000:00:1d.0/0000:04:00.0/nvme/nvme0"
    static let wifi = "/sys/devices/pci0000:00/0000:00:14.3"
    static let panel = "/sys/devices/pci0000:00/0000:00:02.0/drm/card0/card0-eDP-1"

    private func identity(_ root: String, asNobody: Bool = false) throws -> HostIdentity {
        try report(root, asNobody: asNobody).identity
    }

    private func report(_ root: String, asNobody: Bool = false) throws -> SignalReport {
        let arguments = ["--no-submit", "--json", "--api-key", TestKeys.key(org: "org-a"), "--root", root]
        let output = asNobody
            ? try runProcess("/usr/bin/setpriv", ["--reuid=nobody", "--regid=nogroup", "--clear-groups", TestPaths.cli] + arguments)
            : try runCLI(arguments)
        try #require(output.status == 0, "\(output.standardError)")
        return try output.identifyResult().report
    }

    private func laptop(_ label: String, recordings: [String] = [DeviceFixtures.laptop]) throws -> String {
        try #require(DeviceFixtures.umockdevAvailable, "umockdev-run is missing: scripts/install-deps --test installs it")
        return try DeviceFixtures.hostRoot(recordings: recordings, label: label)
    }

    private func set(_ root: String, _ path: String, _ value: String) throws {
        try DeviceFixtures.write(value + "\n", to: root + path)
    }

    @Test func laptopHasBothIdentifiersFromTheExpectedComponents() throws {
        let base = try identity(try laptop("id-base"))
        let hardwareId = try #require(base.hardwareId)
        #expect(hardwareId.count == 64)
        #expect(base.instanceId != nil)
        let kinds = Set(base.hardwareComponents.map { String($0.prefix { $0 != ":" }) })
        #expect(kinds == ["cpu-model", "dmi-model", "pci-inventory", "disk", "nic", "built-in-panel"])
        #expect(base.instanceComponents.map { String($0.prefix { $0 != ":" }) } == ["machine-id"])
        // The DMI UUID and serials are root-only on a real kernel: evidence, never a component.
        #expect(base.rootOnlyEvidence.contains { $0.hasPrefix("hardware/dmi-uuid:") })
    }

    @Test func stableAcrossReboots() throws {
        let base = try laptop("id-reboot-a")
        let rebooted = try TestPaths.copyOfTree(base, label: "id-reboot-b")
        try set(rebooted, "/proc/sys/kernel/random/boot_id", "6c1e0a52-7d4f-4b8e-a1c3-9f2e5d7b8a60")
        try set(rebooted, "/proc/uptime", "12.53 20.11")
        let (before, after) = (try identity(base), try identity(rebooted))
        #expect(before.hardwareId == after.hardwareId && before.instanceId == after.instanceId)
    }

    @Test func stableAcrossHostnameAndAddressChanges() throws {
        let base = try laptop("id-name-a")
        let renamed = try TestPaths.copyOfTree(base, label: "id-name-b")
        try set(renamed, "/etc/hostname", "build-agent-17")
        try set(renamed, "/proc/sys/kernel/hostname", "build-agent-17")
        try set(renamed, "/etc/hosts", "10.20.30.40 build-agent-17")
        let (before, after) = (try identity(base), try identity(renamed))
        #expect(before.hardwareId == after.hardwareId && before.instanceId == after.instanceId)
    }

    @Test func stableWhenUSBSticksMiceAndKeyboardsComeAndGo() throws {
        let bare = try identity(try laptop("id-usb-a"))
        let pluggedReport = try report(try laptop("id-usb-b", recordings: [DeviceFixtures.laptop, DeviceFixtures.peripherals]))
        let plugged = pluggedReport.identity
        // The devices really were seen…
        #expect((try pluggedReport.probe("usb").signals["usb.count"]?.int ?? 0) >= 6)
        #expect(try pluggedReport.probe("block").signals["block.disks"]?.strings?.contains { $0.hasPrefix("sdb transport=usb removable=true") } == true)
        // …and moved nothing.
        #expect(bare.hardwareId == plugged.hardwareId && bare.instanceId == plugged.instanceId)
        #expect(bare.hardwareComponents == plugged.hardwareComponents)
    }

    @Test func stableAcrossAKernelUpgrade() throws {
        let base = try laptop("id-kernel-a")
        let upgraded = try TestPaths.copyOfTree(base, label: "id-kernel-b")
        try set(upgraded, "/proc/sys/kernel/osrelease", "6.8.0-45-generic")
        try set(upgraded, "/proc/sys/kernel/version", "#45~22.04.1-Ubuntu SMP PREEMPT_DYNAMIC Mon Sep 23 2024")
        // A new kernel reserves a little more memory, knows a new CPU flag, and renames a driver.
        let meminfo = try String(contentsOfFile: upgraded + "/proc/meminfo", encoding: .utf8)
        try meminfo.replacingOccurrences(of: "16107348", with: "16101204").write(toFile: upgraded + "/proc/meminfo", atomically: false, encoding: .utf8)
        let cpuinfo = try String(contentsOfFile: upgraded + "/proc/cpuinfo", encoding: .utf8)
        try cpuinfo.replacingOccurrences(of: "flags\t\t: ", with: "flags\t\t: user_shstk ").write(toFile: upgraded + "/proc/cpuinfo", atomically: false, encoding: .utf8)
        try DeviceFixtures.link(upgraded + Self.wifi + "/driver", to: "../../../bus/pci/drivers/iwlwifi_mld")
        try set(upgraded, Self.wifi + "/uevent", "DRIVER=iwlwifi_mld\nPCI_SLOT_NAME=0000:00:14.3")
        let (before, after) = (try identity(base), try identity(upgraded))
        #expect(before.hardwareId == after.hardwareId && before.instanceId == after.instanceId)
    }

    @Test(.enabled(if: geteuid() == 0, "needs root: compares a run as root with one setpriv makes as nobody"))
    func stableForRootAndForAnUnprivilegedUser() throws {
        let root = try laptop("id-privilege")
        for file in ["product_uuid", "product_serial", "board_serial", "chassis_serial"] {
            #expect(chmod(root + "/sys/class/dmi/id/" + file, 0o400) == 0)
        }
        #expect(chmod(root, 0o755) == 0)
        let asRoot = try identity(root)
        let asNobody = try identity(root, asNobody: true)
        #expect(asRoot.hardwareId != nil && asRoot.hardwareId == asNobody.hardwareId)
        #expect(asRoot.instanceId == asNobody.instanceId)
        #expect(!asRoot.rootOnlyEvidence.isEmpty && asNobody.rootOnlyEvidence.isEmpty)
    }

    @Test func differentForTwoVMsClonedFromOneImage() throws {
        let first = try laptop("id-clone-a")
        let second = try TestPaths.copyOfTree(first, label: "id-clone-b")
        // The clone got a fresh machine-id (systemd-firstboot) and a new MAC from the hypervisor;
        // its filesystem UUIDs are the image's.
        try set(second, "/etc/machine-id", "7d3e9b1c04a2485f96e1c2b7a8d5f310")
        try set(second, "/var/lib/dbus/machine-id", "7d3e9b1c04a2485f96e1c2b7a8d5f310")
        try set(second, Self.wifi + "/net/wlp0s20f3/address", "3c:a9:f4:5e:21:c8")
        let (a, b) = (try identity(first), try identity(second))
        #expect(a.hardwareId != b.hardwareId)
        #expect(a.instanceId != b.instanceId)
    }

    @Test func differentForTwoHostsOfTheSameModel() throws {
        let first = try laptop("id-model-a")
        let second = try TestPaths.copyOfTree(first, label: "id-model-b")
        try set(second, "/etc/machine-id", "0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e")
        try set(second, Self.nvme + "/serial", "S69ENF0R654321B")
        try set(second, Self.nvme + "/nvme0n1/wwid", "eui.002538b221b3ffee")
        try set(second, Self.wifi + "/net/wlp0s20f3/address", "3c:a9:f4:77:10:02")
        let (a, b) = (try identity(first), try identity(second))
        #expect(a.hardwareId != b.hardwareId)
        #expect(a.instanceId != b.instanceId)
        // Same model: the model-level components agree.
        for kind in ["cpu-model", "dmi-model", "pci-inventory"] {
            #expect(a.hardwareComponents.first { $0.hasPrefix(kind + ":") } == b.hardwareComponents.first { $0.hasPrefix(kind + ":") })
        }
    }

    @Test func aReplacedDiskChangesOneComponentOnly() throws {
        let first = try laptop("id-disk-a")
        let second = try TestPaths.copyOfTree(first, label: "id-disk-b")
        try set(second, Self.nvme + "/serial", "S69ENF0R999999Z")
        try set(second, Self.nvme + "/nvme0n1/wwid", "eui.002538b221b30000")
        let (a, b) = (try identity(first), try identity(second))
        #expect(a.hardwareId != b.hardwareId)
        let changed = Set(a.hardwareComponents).symmetricDifference(b.hardwareComponents)
        #expect(changed.count == 2 && changed.allSatisfy { $0.hasPrefix("disk:") }, "\(changed)")
        #expect(a.instanceId == b.instanceId)
    }

    @Test func containersOnOneHostShareTheHardwareId() throws {
        let host = try laptop("id-container-a")
        let web = try TestPaths.copyOfTree(host, label: "id-container-b")
        let worker = try TestPaths.copyOfTree(host, label: "id-container-c")
        for (container, machineId) in [(web, "aa11bb22cc33dd44ee55ff6600778899"), (worker, "1234567890abcdef1234567890abcdef")] {
            try set(container, "/.dockerenv", "")
            try set(container, "/etc/machine-id", machineId)
            // A bridged container sees its veth, not the host's NIC.
            try FileManager.default.removeItem(atPath: container + "/sys/class/net/wlp0s20f3")
        }
        let (a, b) = (try identity(web), try identity(worker))
        #expect(a.hardwareId == b.hardwareId)
        #expect(a.instanceId != b.instanceId)
    }

    @Test func sysfsFallbackAndLibudevAgreeOnDeviceComponents() throws {
        let root = try laptop("id-udev-vs-sysfs")
        let sysfs = try runCLI(["--no-submit", "--json", "--api-key", TestKeys.key(org: "org-a"), "--tiers", "deferred", "--root", root])
        let udev = try DeviceFixtures.runUnderUmockdev([DeviceFixtures.laptop], ["--no-submit", "--json", "--api-key", TestKeys.key(org: "org-a"), "--tiers", "deferred"])
        try #require(sysfs.status == 0 && udev.status == 0, "\(sysfs.standardError)\(udev.standardError)")
        func components(_ output: ProcessOutput) throws -> Set<String> {
            let probes = try output.identifyResult().report.probes
            return Set(probes.flatMap(\.identityComponents)
                .filter { ["pci-inventory", "disk", "nic", "built-in-panel"].contains($0.name) }
                .map { $0.name + "=" + $0.hash })
        }
        let fromSysfs = try components(sysfs), fromUdev = try components(udev)
        #expect(fromSysfs.count == 4)
        #expect(fromSysfs == fromUdev)
    }
}
