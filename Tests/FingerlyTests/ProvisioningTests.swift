import Foundation
import Testing
@testable import Fingerly
@testable import FingerlyHost
@testable import FingerlyModel
@testable import FingerlyPolicy
@testable import FingerlyProbes

/// The farm verdict: fresh, cloned or mass-provisioned installations.
@Suite struct ProvisioningTests {
    static let day: TimeInterval = 86_400

    private func installation(ageDays: Double, machineId: String = "4f1c9a7e2b6d48e0a3c5f7819d2e6b40", cloudInit: Bool = false) throws -> String {
        let root = try TestPaths.temporaryDirectory("provisioned")
        let written = Date(timeIntervalSinceNow: -ageDays * Self.day)
        let formatter = DateFormatter()
        formatter.dateFormat = "yyyy-MM-dd HH:mm:ss"
        formatter.timeZone = TimeZone(identifier: "UTC")
        try DeviceFixtures.write(machineId + "\n", to: root + "/etc/machine-id")
        try DeviceFixtures.write("ssh-ed25519 AAAAC3Nza host\n", to: root + "/etc/ssh/ssh_host_ed25519_key.pub")
        try DeviceFixtures.write("\(formatter.string(from: written)) startup archives unpack\n", to: root + "/var/log/dpkg.log")
        if cloudInit { try DeviceFixtures.link(root + "/var/lib/cloud/instance", to: "/var/lib/cloud/instances/i-0abc") }
        for path in ["/etc/machine-id", "/etc/ssh/ssh_host_ed25519_key.pub"] {
            try FileManager.default.setAttributes([.modificationDate: written], ofItemAtPath: root + path)
        }
        return root
    }

    @Test func aLongLivedInstallationIsNotAFarm() async throws {
        let result = try await identify(root: try installation(ageDays: 400))
        #expect(result.signals["provision.machine_id_age_days"] == .int(400))
        #expect(result.signals["provision.ssh_host_key_age_days"] == .int(400))
        #expect(result.signals["provision.package_log_age_days"] == .int(400))
        let farm = result.verdicts[.farm]
        #expect(!farm.value && farm.reasons.isEmpty)
    }

    @Test func oneFreshInstallHintIsLowConfidence() async throws {
        let root = try installation(ageDays: 400)
        try FileManager.default.setAttributes([.modificationDate: Date()], ofItemAtPath: root + "/etc/ssh/ssh_host_ed25519_key.pub")
        let farm = try await identify(root: root).verdicts[.farm]
        #expect(farm.value && farm.confidence == .low && farm.reasons.map(\.code) == ["fresh_ssh_host_keys"])
    }

    @Test func severalFreshHintsCorroborate() async throws {
        let farm = try await identify(root: try installation(ageDays: 0, cloudInit: true)).verdicts[.farm]
        #expect(farm.value && farm.confidence == .medium)
        #expect(farm.reasons.map(\.code) == ["fresh_machine_id", "fresh_ssh_host_keys", "fresh_package_log"])
        // cloud-init alone corroborates only beside a clue of medium confidence.
        #expect(!farm.reasons.contains { $0.code == "cloud_init_instance" })
    }

    @Test func aSharedMachineIdIsHighConfidence() async throws {
        let root = try installation(ageDays: 400, machineId: "b08dfa6083e7567a1921a715000001fb", cloudInit: true)
        let farm = try await identify(root: root).verdicts[.farm]
        #expect(farm.value && farm.confidence == .high)
        #expect(farm.reasons.map(\.code) == ["machine_id_shared_value", "cloud_init_instance"])
    }

    /// Files dated 400 days after "now": what a clock set back (or faked) reads.
    @Test func aClockBehindTheFilesIsTamperingNotAFreshInstall() async throws {
        let result = try await identify(root: try installation(ageDays: -400))
        for name in ["provision.machine_id_age_days", "provision.ssh_host_key_age_days",
                     "provision.package_log_age_days"] {
            #expect(result.signals[name] == nil, "\(name) is measured against a clock shown wrong")
        }
        #expect(result.signals["provision.clock_behind_files"] == .strings([
            "/etc/machine-id is dated 400 day(s) after the clock",
            "/etc/ssh/ssh_host_ed25519_key.pub is dated 400 day(s) after the clock",
            "the first entry of /var/log/dpkg.log is dated 400 day(s) after the clock",
        ]))
        let farm = result.verdicts[.farm]
        #expect(!farm.value && farm.reasons.isEmpty, "\(farm.reasons)")
        let tampering = result.verdicts[.tampering]
        #expect(tampering.value && tampering.confidence == .medium)
        #expect(tampering.reasons.map(\.code) == ["clock_behind_files"])
        let message = try #require(tampering.reasons.first?.message)
        #expect(message.contains("/etc/machine-id is dated 400 day(s) after the clock"), "\(message)")
    }

    /// Six hours ahead is skew (a local-time clock read as UTC), not a clock set back.
    @Test func filesLessThanADayAheadAreSkewAndFresh() async throws {
        let result = try await identify(root: try installation(ageDays: -0.25))
        #expect(result.signals["provision.clock_behind_files"] == .strings([]))
        #expect(result.signals["provision.machine_id_age_days"] == .int(0))
        #expect(result.signals["provision.ssh_host_key_age_days"] == .int(0))
        #expect(!result.verdicts[.tampering].value)
        let farm = result.verdicts[.farm]
        #expect(farm.reasons.map(\.code) == ["fresh_machine_id", "fresh_ssh_host_keys", "fresh_package_log"])
    }

    @Test func aMachineIdMadeFromTheFirmwareUUIDIsSaid() async throws {
        let root = try installation(ageDays: 400, machineId: "5e2c8f412d7a11b2a85cc4e1f39a7b62")
        try DeviceFixtures.write("5E2C8F41-2D7A-11B2-A85C-C4E1F39A7B62\n", to: root + "/sys/class/dmi/id/product_uuid")
        let result = try await identify(root: root)
        #expect(result.signals["machine.machine_id_equals_dmi_uuid"] == .bool(true))
        #expect(result.verdicts[.farm].reasons.map(\.code) == ["machine_id_equals_dmi_uuid"])
    }
}
