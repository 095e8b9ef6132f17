@testable import FingerlyCatalogue
import Foundation
import Synchronization
import Testing
@testable import Fingerly
@testable import FingerlyHost
@testable import FingerlyModel
@testable import FingerlyPolicy
@testable import FingerlyProbes

/// A source that exists but cannot be read is an issue of the probe that wanted it, never a
/// silent "nothing there"; a source that is simply missing is not.
@Suite struct RecordedFailureTests {
    private static func tree(_ label: String, _ files: [String: String]) throws -> String {
        let root = try TestPaths.temporaryDirectory(label)
        for (path, text) in files {
            try FileManager.default.createDirectory(atPath: root + (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try text.write(toFile: root + path, atomically: true, encoding: .utf8)
        }
        return root
    }

    private static func run(_ probe: any Probe, root: String, log: HostAccessLog? = nil) -> ProbeContext {
        let context = ProbeContext(host: HostFileSystem(root: root, log: log), tables: .embedded, filter: .none,
                                   hasher: IdentifierHasher(organization: "acme"))
        try? probe.collect(into: context)
        return context
    }

    @Test func aMalformedFirefoxPolicyIsAnIssueNamingTheFailingValue() throws {
        let path = "/usr/lib/firefox/distribution/policies.json"
        let root = try Self.tree("firefox-policy", [path: #"{"policies": {"Certificates": {"Install": ["a.crt", 01]}}}"#,
                                                    "/etc/firefox/policies/policies.json": #"{"policies": {"Certificates": {"Install": ["b.crt"]}}}"#])
        let context = Self.run(TrustStoreProbe(), root: root)
        let issue = try #require(context.issues.first { $0.path == path }, "\(context.issues)")
        #expect(issue.status == .malformed)
        #expect(issue.detail.contains("$.policies.Certificates.Install[1]"), "\(issue.detail)")
        // The readable one still counts.
        #expect(context.signals["tls.firefox_policy_certificates"] == .int(1))
    }

    @Test func anUnreadableSysfsAttributeIsRecordedAndAMissingOneIsNot() throws {
        let card = "/sys/class/drm/card0"
        let root = try Self.tree("sysfs-attribute", [card + "/uevent": "DEVTYPE=drm_minor\nDEVNAME=dri/card0\n",
                                                     "/sys/class/drm/card1/uevent": "DEVTYPE=drm_minor\n"])
        #expect(mkfifo(root + card + "/status", 0o644) == 0)

        var failures: [HostReadError] = []
        let inventory = SysfsInventory(host: HostFileSystem(root: root), recordFailure: { failures.append($0) })
        let devices = try inventory.devices(DeviceQuery(subsystem: "drm", attributes: ["status"]))
        #expect(devices.map(\.sysname) == ["card0", "card1"])
        #expect(devices.allSatisfy { $0.attributes["status"] == nil })
        // card1 has no status at all: normal. card0's is there and could not be read.
        #expect(failures.map(\.path) == [card + "/status"], "\(failures)")
        #expect(failures.first?.failure == .malformed)

        // Through a probe, it lands in the probe's issues.
        let context = Self.run(DisplayProbe(), root: root)
        #expect(context.issues.contains { $0.path == card + "/status" && $0.status == .malformed }, "\(context.issues)")
    }

    /// A class link may name a path thousands of directories deep; each prefix would be read and kept.
    @Test func aDeviceNestedDeeperThanSysfsEverIsIsListedWithoutItsParents() throws {
        let deep = "/sys/devices/" + (0..<SysfsInventory.deepestDevice).map { "d\($0)" }.joined(separator: "/")
        let root = try Self.tree("sysfs-deep", [deep + "/net/eth9/uevent": "INTERFACE=eth9\nIFINDEX=9\n",
                                                "/sys/devices/pci0000:00/0000:00:03.0/net/eth0/uevent": "INTERFACE=eth0\n"])
        try FileManager.default.createDirectory(atPath: root + "/sys/class/net", withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: root + "/sys/class/net/eth9",
                                                   withDestinationPath: "../../devices/" + deep.dropFirst(13) + "/net/eth9")
        try FileManager.default.createSymbolicLink(atPath: root + "/sys/class/net/eth0",
                                                   withDestinationPath: "../../devices/pci0000:00/0000:00:03.0/net/eth0")
        try FileManager.default.createSymbolicLink(atPath: root + "/sys/devices/pci0000:00/0000:00:03.0/subsystem",
                                                   withDestinationPath: "../../../bus/pci")

        var failures: [HostReadError] = []
        let inventory = SysfsInventory(host: HostFileSystem(root: root), recordFailure: { failures.append($0) })
        let devices = try inventory.devices(DeviceQuery(subsystem: "net"))
        #expect(Set(devices.map(\.sysname)) == ["eth0", "eth9"])
        #expect(devices.first { $0.sysname == "eth0" }?.ancestors.map(\.subsystem) == ["pci"])
        #expect(devices.first { $0.sysname == "eth9" }?.ancestors.isEmpty == true)
        #expect(failures.map(\.path) == [deep + "/net/eth9"], "\(failures)")
        #expect(failures.first?.failure == .malformed)
    }

    @Test func processMapsStatsLoadedObjectsThroughTheHostLayer() throws {
        let log = HostAccessLog()
        let context = Self.run(ProcessMapsProbe(), root: "/", log: log)
        #expect(context.signals["loader.objects_mapped_without_loader"] != nil)
        let recorded = log.recorded
        #expect(recorded.contains("/proc/self/exe"), "\(recorded)")
        #expect(recorded.contains { $0.hasPrefix("/") && $0.contains("libc.so") }, "\(recorded)")
    }

    /// Tests run as root, for whom a chmod 000 directory is readable: a symlink loop is a
    /// directory that exists and cannot be listed whoever asks.
    @Test func anUnlistableAptDirectoryIsAnIssueAndMissingProxyEvidence() async throws {
        let root = try Self.tree("apt-loop", ["/etc/apt/apt.conf": "APT::Install-Recommends \"0\";\n"])
        try FileManager.default.createSymbolicLink(atPath: root + "/etc/apt/apt.conf.d", withDestinationPath: "apt.conf.d")

        let context = Self.run(ProxyConfigurationProbe(), root: root)
        let issue = try #require(context.issues.first { $0.path == "/etc/apt/apt.conf.d" }, "\(context.issues)")
        #expect(issue.status.hidesEvidence)
        #expect(context.signals["proxy.apt"] == .strings([]), "what could be read is still reported")

        let result = try await identify(root: root)
        #expect(try result.probe("proxy-configuration").issues.contains { $0.path == "/etc/apt/apt.conf.d" })
        let proxy = result.verdicts.proxy
        #expect(proxy.missingEvidence.contains { $0.probe == "proxy-configuration" && $0.message.contains("/etc/apt/apt.conf.d") },
                "\(proxy.missingEvidence)")

        // A tree without the directory at all: nothing is missing.
        let plain = try Self.tree("apt-none", ["/etc/apt/apt.conf": "APT::Install-Recommends \"0\";\n"])
        #expect(Self.run(ProxyConfigurationProbe(), root: plain).issues.isEmpty)
    }

    @Test func aDanglingCertificateLinkIsNotAnIssueButALoopIs() throws {
        let root = try Self.tree("cert-links", ["/etc/ssl/certs/ca-certificates.crt": ""])
        try FileManager.default.createSymbolicLink(atPath: root + "/etc/ssl/certs/gone.pem", withDestinationPath: "/nowhere/gone.crt")
        let quiet = Self.run(TrustStoreProbe(), root: root)
        #expect(!quiet.issues.contains { $0.path.hasSuffix("gone.pem") && $0.status != .absent }, "\(quiet.issues)")
        try FileManager.default.createDirectory(atPath: root + "/usr/local/share", withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: root + "/usr/local/share/ca-certificates", withDestinationPath: "ca-certificates")
        let loud = Self.run(TrustStoreProbe(), root: root)
        #expect(loud.issues.contains { $0.path == "/usr/local/share/ca-certificates" && $0.status.hidesEvidence }, "\(loud.issues)")
    }

    /// ESRCH is what reading a /proc file gives once its thread has ended after the listing: the
    /// thread is not there, which is no failure of the probe.
    @Test func aThreadThatEndedBetweenListingAndReadingIsAbsentNotAnError() throws {
        #expect(HostReadError(path: "/proc/self/task/1/status", systemError: SystemError(ESRCH)).failure == .absent)
        #expect(HostReadError(path: "/proc/self/status", systemError: SystemError(EIO)).failure == .error)

        // Threads that start and end while the process-context probe reads every thread's status.
        let stop = Atomic<Bool>(false)
        let churning = DispatchGroup()
        for _ in 0..<2 {
            churning.enter()
            Thread.detachNewThread {
                while !stop.load(ordering: .relaxed) {
                    var thread = pthread_t()
                    if pthread_create(&thread, nil, { _ in nil }, nil) == 0 { pthread_join(thread, nil) }
                }
                churning.leave()
            }
        }
        defer {
            stop.store(true, ordering: .relaxed)
            churning.wait()
        }
        for _ in 0..<300 {
            let context = Self.run(ProcessContextProbe(), root: "/")
            #expect(context.issues.isEmpty, "\(context.issues)")
            if !context.issues.isEmpty { break }
        }
    }
}
