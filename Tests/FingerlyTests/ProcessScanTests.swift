@testable import FingerlyCatalogue
import Foundation
import Testing
@testable import FingerlyHost
@testable import FingerlyModel
@testable import FingerlyProbes

/// Other processes that automate input: the uinput holders, on root trees made in the test.
@Suite struct ProcessScanTests {
    /// A tree where pid 7, ydotoold, holds /dev/uinput open on descriptor 3; `misc` says what
    /// /sys/class/misc lists (nil: no such directory).
    static func tree(_ name: String, misc: [String]?) throws -> String {
        let root = try TestPaths.temporaryDirectory(name)
        try DeviceFixtures.write("ydotoold\n", to: root + "/proc/7/comm")
        try FileManager.default.createDirectory(atPath: root + "/proc/7/fd", withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: root + "/proc/7/fd/3", withDestinationPath: "/dev/uinput")
        if let misc {
            try FileManager.default.createDirectory(atPath: root + "/sys/class/misc", withIntermediateDirectories: true)
            for device in misc {
                try FileManager.default.createSymbolicLink(atPath: root + "/sys/class/misc/" + device,
                                                           withDestinationPath: "../../devices/virtual/misc/" + device)
            }
        }
        return root
    }

    static func uinputHolders(root: String) throws -> SignalValue? {
        let context = ProbeContext(host: HostFileSystem(root: root), tables: .embedded, filter: .none,
                                   hasher: IdentifierHasher(organization: "acme"))
        try ProcessScanProbe().collect(into: context)
        #expect(context.signals["automation.input_injector_processes"] == .strings(["ydotoold (pid 7)"]))
        return context.signals["automation.uinput_holders"]
    }

    @Test func aProcessHoldingUinputIsNamedWhileTheKernelListsTheDevice() throws {
        let listed = try Self.tree("scan-uinput-listed", misc: ["fuse", "uinput"])
        #expect(try Self.uinputHolders(root: listed) == .strings(["ydotoold (pid 7)"]))
        // A tree saved without its sysfs says nothing either way: the descriptors are read.
        let unknown = try Self.tree("scan-uinput-no-sysfs", misc: nil)
        #expect(try Self.uinputHolders(root: unknown) == .strings(["ydotoold (pid 7)"]))
    }

    /// An open uinput pins its module, which lists it in /sys/class/misc: without it there, no
    /// descriptor can be uinput's, and none is read.
    @Test func withoutUinputInTheKernelsListNoDescriptorIsRead() throws {
        let root = try Self.tree("scan-uinput-unlisted", misc: ["fuse", "tun"])
        #expect(!ProcessScanProbe.uinputMayBeHeld(on: HostFileSystem(root: root)))
        #expect(try Self.uinputHolders(root: root) == .strings([]))
    }
}
