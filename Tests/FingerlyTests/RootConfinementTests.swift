import CFingerlyFiles
@testable import FingerlyCatalogue
import Foundation
import Testing
@testable import Fingerly
@testable import FingerlyHost
@testable import FingerlyModel
@testable import FingerlyPolicy
@testable import FingerlyProbes

@Suite struct RootConfinementTests {
    @Test func absoluteLinksInARootTreeStayInsideIt() async throws {
        let root = try TestPaths.temporaryDirectory("confined")
        try DeviceFixtures.write("0123456789abcdef0123456789abcdef\n", to: root + "/etc/machine-id")
        // As Debian ships it: the D-Bus copy is an absolute link to /etc/machine-id.
        try DeviceFixtures.link(root + "/var/lib/dbus/machine-id", to: "/etc/machine-id")
        try DeviceFixtures.link(root + "/etc/os-release", to: "../usr/lib/os-release")
        try DeviceFixtures.write("ID=confined\n", to: root + "/usr/lib/os-release")
        let result = try await identify(root: root)
        let hasher = IdentifierHasher(organization: "acme")
        #expect(result.signals["machine.dbus_machine_id"] == .string(hasher.hash("0123456789abcdef0123456789abcdef")))
        #expect(result.signals["machine.dbus_machine_id_matches"] == .bool(true))
        #expect(result.signals["os.id"] == .string("confined"))
    }

    @Test func linksCannotClimbOutWithDotDot() throws {
        let root = try TestPaths.temporaryDirectory("climb")
        try DeviceFixtures.link(root + "/etc/machine-id", to: "../../../../../../etc/machine-id")
        let host = HostFileSystem(root: root)
        #expect(throws: HostReadError.self) { try host.read("/etc/machine-id") }
    }

    /// A directory's links read relative to it say what linkTarget says of each path, under a root and live.
    @Test func listedLinksAreTheLinksOwnTextAndNothingElseIsALink() throws {
        let root = try TestPaths.temporaryDirectory("listed-links")
        let directory = root + "/etc/ssl/certs"
        try DeviceFixtures.link(directory + "/Shipped.pem", to: "/usr/share/ca-certificates/mozilla/Shipped.crt")
        try DeviceFixtures.link(directory + "/relative.pem", to: "../../local.crt")
        try DeviceFixtures.write("not a link\n", to: directory + "/plain.pem")
        try DeviceFixtures.write("skipped\n", to: directory + "/other.txt")
        for (host, path) in [(HostFileSystem(root: root), "/etc/ssl/certs"), (HostFileSystem(root: "/"), directory)] {
            let listed = try host.listLinks(path) { $0.hasSuffix(".pem") }
            #expect(listed.map(\.name) == ["Shipped.pem", "plain.pem", "relative.pem"])
            #expect(listed.map { try? $0.target.get() } == ["/usr/share/ca-certificates/mozilla/Shipped.crt", .some(nil),
                                                            "../../local.crt"])
            for (name, target) in listed {
                let expected = try host.linkTarget(path + "/" + name)
                #expect((try? target.get()) == .some(expected), "\(name)")
            }
        }
    }

    @Test func interfaceNamesThatCarryAMACAreRedacted() {
        #expect(NetworkInterfacesProbe.displayName("enx00e04c680001") == "enx<mac>")
        #expect(NetworkInterfacesProbe.displayName("wlx7cdd90a1b2c3") == "wlx<mac>")
        #expect(NetworkInterfacesProbe.displayName("eno1") == "eno1")
        #expect(NetworkInterfacesProbe.displayName("enxfoo") == "enxfoo")
    }

    // MARK: hostile trees: links out of the root

    static let resolutions: [fingerly_resolution] = [fingerly_resolution_automatic, fingerly_resolution_walk]

    /// A tree that only links to the live host's directories must yield nothing of the live host.
    @Test func topLevelLinksToTheLiveHostYieldNothingOfIt() async throws {
        let root = try TestPaths.temporaryDirectory("live-links")
        for name in ["etc", "proc", "sys", "run", "var", "usr", "dev"] {
            try DeviceFixtures.link(root + "/" + name, to: "/" + name)
        }
        let result = try await identify(root: root)
        let liveMachineId = try String(contentsOfFile: "/etc/machine-id", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        let liveHash = IdentifierHasher(organization: "acme").hash(liveMachineId)
        let encoded = String(decoding: try JSONEncoder().encode(result), as: UTF8.self)
        #expect(!encoded.contains(liveHash))
        #expect(result.signals["machine.machine_id"] == nil)
        #expect(result.signals["os.id"] == nil)
        #expect(result.signals["net.interfaces"] == nil || result.signals["net.interfaces"] == .strings([]))
        #expect(result.report.identity.instanceComponents.isEmpty)
    }

    /// Links at every depth of a path, absolute or climbing with "..", towards a directory
    /// outside the root that holds the same path: only the copy inside the root may be read.
    @Test(arguments: resolutions)
    func linksAtEveryDepthResolveInsideTheRoot(resolution: fingerly_resolution) throws {
        let outside = try TestPaths.temporaryDirectory("outside")
        let components = ["sys", "firmware", "acpi", "tables", "deep", "DSDT"]
        let relative = components.joined(separator: "/")
        try DeviceFixtures.write("OUTSIDE", to: outside + "/" + relative)
        for depth in 0..<components.count {
            for style in ["absolute", "climbing"] {
                let root = try TestPaths.temporaryDirectory("depth-\(depth)-\(style)")
                try DeviceFixtures.write("INSIDE", to: root + "/inside/" + relative)
                let prefix = components[0...depth].joined(separator: "/")
                let outsideTarget = outside + "/" + prefix
                let climb = String(repeating: "../", count: depth + 12) + outsideTarget.dropFirst()
                try DeviceFixtures.link(root + "/" + prefix, to: style == "absolute" ? outsideTarget : climb)
                let host = HostFileSystem(root: root, log: nil, resolution: resolution)
                #expect(throws: HostReadError.self, "depth \(depth) \(style)") { try host.read("/" + relative) }
                if depth < components.count - 1 {
                    #expect(throws: HostReadError.self) { try host.listDirectory("/" + prefix) }
                    #expect(!host.exists("/" + relative))
                }
                #expect(throws: HostReadError.self) { try host.status("/" + relative) }
                // The same link, pointed into the tree, is followed there.
                try FileManager.default.removeItem(atPath: root + "/" + prefix)
                try DeviceFixtures.link(root + "/" + prefix, to: style == "absolute" ? "/inside/" + prefix
                                        : String(repeating: "../", count: depth + 12) + "inside/" + prefix)
                #expect(String(decoding: try host.read("/" + relative), as: UTF8.self) == "INSIDE")
            }
        }
    }

    /// A chain of 45 links inside the tree whose last hop leaves it: the kernel's and the
    /// walk's 40-hop limit ends it as a loop, never with the outside file's bytes.
    @Test(arguments: resolutions)
    func longLinkChainsEndInsideTheRoot(resolution: fingerly_resolution) throws {
        let outside = try TestPaths.temporaryDirectory("chain-outside")
        try DeviceFixtures.write("OUTSIDE-SECRET", to: outside + "/shadow")
        let root = try TestPaths.temporaryDirectory("chain")
        let tables = root + "/sys/firmware/acpi/tables"
        try FileManager.default.createDirectory(atPath: tables, withIntermediateDirectories: true)
        for hop in 0..<45 {
            try DeviceFixtures.link(tables + "/L\(hop)", to: hop == 44 ? outside + "/shadow" : "L\(hop + 1)")
        }
        let host = HostFileSystem(root: root, log: nil, resolution: resolution)
        #expect(throws: HostReadError.self) { try host.read("/sys/firmware/acpi/tables/L0") }
        // Within the hop limit the absolute target is taken as inside the root.
        try DeviceFixtures.write("INSIDE", to: root + outside + "/shadow")
        #expect(String(decoding: try host.read("/sys/firmware/acpi/tables/L10"), as: UTF8.self) == "INSIDE")
        let report = try runCLI(["--root", root, "--no-submit", "--json"])
        #expect(report.status == 0 || report.status == 3)
        #expect(!report.standardOutput.contains("OUTSIDE"))
    }

    /// A directory swapped for a link to the outside while reads run: no read may see outside.
    @Test(arguments: resolutions)
    func swappingADirectoryForALinkNeverEscapes(resolution: fingerly_resolution) throws {
        let outside = try TestPaths.temporaryDirectory("swap-outside")
        try DeviceFixtures.write("OUTSIDE", to: outside + "/etc/machine-id")
        let root = try TestPaths.temporaryDirectory("swap")
        try DeviceFixtures.write("INSIDE", to: root + "/real/machine-id")
        try DeviceFixtures.link(root + "/outlink", to: outside + "/etc")
        try DeviceFixtures.link(root + "/climblink", to: "../../../../../../../.." + outside + "/etc")
        try FileManager.default.createDirectory(atPath: root + "/etc", withIntermediateDirectories: true)
        try DeviceFixtures.write("INSIDE", to: root + "/etc/machine-id")
        let stop = Locked(false)
        let swapper = Thread {
            var flip = false
            while !stop.value {
                // rename(2) replaces atomically: /etc is a directory one moment, a link the next.
                _ = rename(root + "/etc", root + "/spare")
                _ = rename(root + (flip ? "/outlink" : "/climblink"), root + "/etc")
                _ = rename(root + "/etc", root + (flip ? "/outlink" : "/climblink"))
                _ = rename(root + "/spare", root + "/etc")
                flip.toggle()
            }
        }
        swapper.start()
        defer { stop.set(true) }
        let host = HostFileSystem(root: root, log: nil, resolution: resolution)
        var escapes = 0, insideReads = 0
        for _ in 0..<3000 {
            if let bytes = try? host.read("/etc/machine-id") {
                if String(decoding: bytes, as: UTF8.self) == "OUTSIDE" { escapes += 1 } else { insideReads += 1 }
            }
            if (try? host.listDirectory("/etc"))?.contains("machine-id") == true, (try? host.readLink("/etc")) != nil { escapes += 0 }
        }
        stop.set(true)
        #expect(escapes == 0)
        #expect(insideReads > 0)
    }

    /// A FIFO, a socket or a device where a file is expected is refused at once, never read.
    @Test(arguments: resolutions)
    func specialFilesAreNotRead(resolution: fingerly_resolution) throws {
        let root = try TestPaths.temporaryDirectory("fifo")
        try FileManager.default.createDirectory(atPath: root + "/etc", withIntermediateDirectories: true)
        #expect(mkfifo(root + "/etc/machine-id", 0o644) == 0)
        let host = HostFileSystem(root: root, log: nil, resolution: resolution)
        #expect { try host.read("/etc/machine-id") } throws: { ($0 as? HostReadError)?.failure == .malformed }
        #expect(throws: HostReadError.self) { try host.withReadableDevice("/etc/machine-id") { _ in 0 } }
    }

    /// libblkid is handed a descriptor opened inside the root: a device node linked to the
    /// live host's disk is not probed.
    @Test func libblkidNeverFollowsALinkOutOfTheRoot() throws {
        let outside = try TestPaths.temporaryDirectory("blkid-outside")
        let image = outside + "/disk.img"
        let made = try runShell("truncate -s 8M \"$1\" && mkfs.ext4 -q -F -U 01234567-89ab-cdef-0123-456789abcdef \"$1\"", image)
        try #require(made.status == 0, "mkfs.ext4: \(made.standardError)")
        let root = try TestPaths.temporaryDirectory("blkid")
        try DeviceFixtures.link(root + "/dev/vda1", to: image)
        let host = HostFileSystem(root: root)
        #expect(throws: HostReadError.self) { try Blkid.superblock(at: "/dev/vda1", on: host) }
        // The same image inside the tree is read.
        try FileManager.default.copyItem(atPath: image, toPath: root + "/dev/inside.img")
        #expect(try Blkid.superblock(at: "/dev/inside.img", on: host).values["UUID"] == "01234567-89ab-cdef-0123-456789abcdef")
    }

    // MARK: numbers the host writes

    @Test func memoryTotalsPastIntMaxAreMalformedNotATrap() async throws {
        let root = try TestPaths.temporaryDirectory("meminfo")
        try DeviceFixtures.write("MemTotal:       9223372036854775807 kB\n", to: root + "/proc/meminfo")
        let result = try await identify(root: root)
        #expect(try result.probe("memory").status == .malformed)
        #expect(result.signals["memory.total_bytes"] == nil)
    }

    @Test func blockSizesPastIntMaxAreLeftOutNotATrap() async throws {
        let root = try TestPaths.temporaryDirectory("blocksize")
        let device = root + "/sys/devices/pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0/block/sda"
        try DeviceFixtures.write("MAJOR=8\nMINOR=0\nDEVNAME=sda\nDEVTYPE=disk\n", to: device + "/uevent")
        try DeviceFixtures.write("9223372036854775807\n", to: device + "/size")
        try DeviceFixtures.write("0\n", to: device + "/removable")
        try DeviceFixtures.link(root + "/sys/class/block/sda", to: "../../devices/pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0/block/sda")
        try DeviceFixtures.link(device + "/subsystem", to: "../../../../../../../../../class/block")
        let result = try await identify(root: root)
        let block = try result.probe("block")
        #expect(block.issues.contains { $0.path.hasSuffix("/size") && $0.status == .malformed })
        if case .strings(let disks)? = result.signals["block.disks"] {
            #expect(disks.allSatisfy { !$0.contains("size=") })
        }
    }
}
