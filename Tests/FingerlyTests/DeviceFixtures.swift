import Foundation
import Testing

/// Builds root trees for device tests from umockdev recordings and small disk images.
enum DeviceFixtures {
    static let recordings = TestPaths.packageRoot + "/Tests/Fixtures/umockdev/"
    static let sharedRecordings = TestPaths.packageRoot + "/../shared/fixtures/umockdev/"
    static let laptop = recordings + "laptop-nvme.umockdev"
    static let server = recordings + "server-sata.umockdev"
    static let peripherals = recordings + "usb-peripherals.umockdev"

    static var sharedAvailable: Bool { FileManager.default.fileExists(atPath: sharedRecordings + "usbkbd.umockdev") }
    static var umockdevAvailable: Bool { FileManager.default.isExecutableFile(atPath: "/usr/bin/umockdev-run") }

    /// Runs the built CLI with libudev seeing the given recordings (umockdev-run preloads its
    /// /sys and /dev redirection into the process).
    static func runUnderUmockdev(_ recordings: [String], _ arguments: [String]) throws -> ProcessOutput {
        try runProcess("/usr/bin/umockdev-run", recordings.flatMap { ["--device", $0] } + ["--", TestPaths.cli] + arguments)
    }

    /// A root tree: a host fixture's /etc and /proc, plus the /sys that umockdev builds from the
    /// recordings, copied out of its testbed so the sysfs walker reads it under `--root`.
    static func hostRoot(fixture: String = "laptop-baremetal", recordings: [String], label: String) throws -> String {
        let root = try TestPaths.copyOfTree(TestPaths.fixture(fixture), label: label)
        let testbed = try runProcess("/usr/bin/umockdev-run", recordings.flatMap { ["--device", $0] }
            + ["--", "/bin/sh", "-c", "cp -a \"$UMOCKDEV_DIR/sys/.\" \"$1/sys/\"", "sh", root])
        try #require(testbed.status == 0, "\(testbed.standardError)")
        return root
    }

    static func write(_ text: String, to path: String) throws {
        try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try text.write(toFile: path, atomically: false, encoding: .utf8)
    }

    static func link(_ path: String, to target: String) throws {
        try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try? FileManager.default.removeItem(atPath: path)
        try FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: target)
    }

    static let rootUUID = "3b1f9e2a-5c7d-4e8f-9a0b-1c2d3e4f5a6b"
    static let diskLabelId = "9f8e7d6c-5b4a-4938-8271-605f4e3d2c1b"
    static let partitionUUIDs = ["a1a2a3a4-b1b2-4c1c-9d1d-e1e2e3e4e5e6", "f1f2f3f4-a1a2-4b1b-8c1c-d1d2d3d4d5d6"]

    enum FilesystemSource { case images(worldReadable: Bool), udevDatabase, byUUIDLinks }

    /// A virtio VM's root tree whose / is /dev/vda2 (254:2) on a GPT disk /dev/vda (254:0).
    static func filesystemRoot(_ source: FilesystemSource, label: String) throws -> String {
        let root = try TestPaths.temporaryDirectory(label)
        let disk = "/sys/devices/pci0000:00/0000:00:05.0/virtio2/block/vda"
        try write("25 1 254:2 / / rw,relatime shared:1 - ext4 /dev/vda2 rw\n26 25 0:5 / /proc rw - proc proc rw\n", to: root + "/proc/self/mountinfo")
        try write("MAJOR=254\nMINOR=0\nDEVNAME=vda\nDEVTYPE=disk\n", to: root + disk + "/uevent")
        try write("254:0\n", to: root + disk + "/dev")
        try write("MAJOR=254\nMINOR=2\nDEVNAME=vda2\nDEVTYPE=partition\nPARTN=2\n", to: root + disk + "/vda2/uevent")
        try write("254:2\n", to: root + disk + "/vda2/dev")
        try write("2\n", to: root + disk + "/vda2/partition")
        try write("254:1\n", to: root + disk + "/vda1/dev")
        try write("1\n", to: root + disk + "/vda1/partition")
        try link(root + "/sys/dev/block/254:2", to: "../../devices/pci0000:00/0000:00:05.0/virtio2/block/vda/vda2")
        try link(root + "/sys/dev/block/254:0", to: "../../devices/pci0000:00/0000:00:05.0/virtio2/block/vda")
        try link(root + "/sys/class/block/vda", to: "../../devices/pci0000:00/0000:00:05.0/virtio2/block/vda")
        switch source {
        case .images(let worldReadable):
            try FileManager.default.createDirectory(atPath: root + "/dev", withIntermediateDirectories: true)
            let table = """
                label: gpt
                label-id: \(diskLabelId)
                start=2048, size=2048, type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B, uuid=\(partitionUUIDs[0])
                start=4096, size=8192, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, uuid=\(partitionUUIDs[1])

                """
            #expect(try runProcess("/usr/bin/truncate", ["-s", "8M", root + "/dev/vda"]).status == 0)
            let partitioned = try runShell("printf '%s' \"$1\" | /usr/sbin/sfdisk -q \"$2\"", table, root + "/dev/vda")
            try #require(partitioned.status == 0, "\(partitioned.standardError)")
            #expect(try runProcess("/usr/bin/truncate", ["-s", "4M", root + "/dev/vda2"]).status == 0)
            let formatted = try runProcess("/usr/sbin/mkfs.ext4", ["-q", "-F", "-U", rootUUID, root + "/dev/vda2"])
            try #require(formatted.status == 0, "\(formatted.standardError)")
            for node in ["/dev/vda", "/dev/vda2"] { #expect(chmod(root + node, worldReadable ? 0o644 : 0o600) == 0) }
        case .udevDatabase:
            try write("E:ID_FS_UUID=\(rootUUID)\nE:ID_FS_TYPE=ext4\nE:ID_PART_ENTRY_UUID=\(partitionUUIDs[1])\n", to: root + "/run/udev/data/b254:2")
            try write("E:ID_PART_ENTRY_UUID=\(partitionUUIDs[0])\n", to: root + "/run/udev/data/b254:1")
            try write("E:ID_PART_TABLE_UUID=\(diskLabelId)\nE:ID_PART_TABLE_TYPE=gpt\n", to: root + "/run/udev/data/b254:0")
        case .byUUIDLinks:
            try link(root + "/dev/disk/by-uuid/\(rootUUID)", to: "../../vda2")
            try link(root + "/dev/disk/by-uuid/0A1B-2C3D", to: "../../vda1")
        }
        return root
    }
}
