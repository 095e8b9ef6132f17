@testable import FingerlyCatalogue
import Foundation
import Testing
@testable import Fingerly
@testable import FingerlyHost
@testable import FingerlyModel
@testable import FingerlyPolicy
@testable import FingerlyProbes

@Suite(.serialized) struct FilesystemIdentityTests {
    private func run(_ root: String) throws -> (signals: [String: SignalValue], identity: HostIdentity, probe: ProbeEntry) {
        let output = try runCLI(["--no-submit", "--json", "--api-key", TestKeys.key(org: "org-a"), "--root", root])
        try #require(output.status == 0, "\(output.standardError)")
        let report = try output.identifyResult().report
        let probe = try report.probe("filesystem")
        return (probe.signals, report.identity, probe)
    }

    @Test func libblkidReadsTheRootFilesystemAndPartitionTableOfAnImage() throws {
        let root = try DeviceFixtures.filesystemRoot(.images(worldReadable: true), label: "blkid")
        let (signals, identity, probe) = try run(root)
        #expect(probe.status == .ok)
        let hasher = IdentifierHasher(organization: "org-a")
        #expect(signals["fs.root_type"] == .string("ext4"))
        #expect(signals["fs.root_uuid"] == .string(hasher.hash(DeviceFixtures.rootUUID)))
        #expect(signals["fs.root_uuid_source"] == .string("libblkid"))
        #expect(signals["fs.boot_disk_pttype"] == .string("gpt"))
        #expect(signals["fs.boot_disk_ptuuid"] == .string(hasher.hash(DeviceFixtures.diskLabelId)))
        #expect(signals["fs.boot_disk_partition_uuids"] == .strings(DeviceFixtures.partitionUUIDs.map(hasher.hash).sorted()))
        let components = identity.instanceComponents
        #expect(components.contains { $0.hasPrefix("root-filesystem:") } && components.contains { $0.hasPrefix("partition-table:") })
    }

    @Test func everySourceGivesTheSameValues() throws {
        let blkid = try run(DeviceFixtures.filesystemRoot(.images(worldReadable: true), label: "fs-blkid")).signals
        let database = try run(DeviceFixtures.filesystemRoot(.udevDatabase, label: "fs-db")).signals
        let links = try run(DeviceFixtures.filesystemRoot(.byUUIDLinks, label: "fs-links")).signals
        #expect(database["fs.root_uuid_source"] == .string("udev-database"))
        #expect(links["fs.root_uuid_source"] == .string("by-uuid"))
        for other in [database, links] {
            #expect(other["fs.root_uuid"] == blkid["fs.root_uuid"])
        }
        #expect(database["fs.boot_disk_ptuuid"] == blkid["fs.boot_disk_ptuuid"])
        #expect(database["fs.boot_disk_partition_uuids"] == blkid["fs.boot_disk_partition_uuids"])
    }

    @Test func aValueOnlyRootCanReadIsEvidenceNotAComponent() throws {
        let root = try DeviceFixtures.filesystemRoot(.images(worldReadable: false), label: "fs-private")
        let (signals, identity, _) = try run(root)
        #expect(signals["fs.root_uuid"]?.string != nil)
        #expect(!identity.instanceComponents.contains { $0.hasPrefix("root-filesystem:") })
        #expect(identity.rootOnlyEvidence.contains { $0.hasPrefix("instance/root-filesystem:") })
    }

    @Test func rawUUIDsNeverAppear() throws {
        let root = try DeviceFixtures.filesystemRoot(.images(worldReadable: true), label: "fs-raw")
        let output = try runCLI(["--no-submit", "--json", "--root", root]).standardOutput.lowercased()
        for raw in [DeviceFixtures.rootUUID, DeviceFixtures.diskLabelId] + DeviceFixtures.partitionUUIDs {
            #expect(!output.contains(raw.lowercased()), "\(raw) leaked")
        }
    }

    @Test func overlayRootIsSaidNotGuessed() throws {
        let root = try TestPaths.temporaryDirectory("fs-overlay")
        try DeviceFixtures.write("30 1 0:45 / / rw - overlay overlay rw,lowerdir=/l,upperdir=/u,workdir=/w\n", to: root + "/proc/self/mountinfo")
        let (signals, _, probe) = try run(root)
        #expect(signals["fs.root_type"] == .string("overlay"))
        #expect(signals["fs.root_uuid"] == nil)
        #expect(probe.status == .ok)
        #expect(probe.detail?.contains("not on a block device") == true)
    }

    @Test func malformedMountinfoIsRecorded() throws {
        let root = try TestPaths.temporaryDirectory("fs-bad")
        try DeviceFixtures.write("garbage without fields\n", to: root + "/proc/self/mountinfo")
        let (_, _, probe) = try run(root)
        #expect(probe.status == .malformed)
    }
}
