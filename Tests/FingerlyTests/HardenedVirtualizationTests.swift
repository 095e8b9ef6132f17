import Foundation
import Testing
@testable import FingerlyCatalogue
@testable import FingerlyHost
@testable import FingerlyModel
@testable import FingerlyPolicy
@testable import FingerlyProbes

/// VMs that hide: the CPUID leaves read behind a clear bit, the replay formats, the device matches and the rules that
/// may only corroborate.
@Suite struct HardenedVirtualizationTests {
    static let vendors = DetectionTables.embedded.mapping("cpuidHypervisorVendors") ?? [:]

    static func registers(_ vendor: String, eax: UInt32) -> CPUIDRegisters {
        var bytes = Array(vendor.utf8)
        bytes += [UInt8](repeating: 0, count: 12 - bytes.count)
        func word(_ offset: Int) -> UInt32 {
            (0..<4).reduce(0) { $0 | UInt32(bytes[offset + $1]) << (8 * UInt32($1)) }
        }
        return CPUIDRegisters(eax: eax, ebx: word(0), ecx: word(4), edx: word(8))
    }

    @Test func aVendorLeafBehindAClearBitIsTakenOnlyWithinItsOwnRange() {
        var answers = CPUIDProbe.Answers(hypervisorBit: false)
        answers.leaves[0x4000_0000] = Self.registers("KVMKVMKVM", eax: 0x4000_0001)
        #expect(CPUIDProbe.hypervisors(in: answers, vendors: Self.vendors).map(\.kind) == ["kvm"])
        // The same bytes under a maximum leaf outside 0x40000000...0x400000FF are not a hypervisor's answer.
        answers.leaves[0x4000_0000] = Self.registers("KVMKVMKVM", eax: 0x16)
        #expect(CPUIDProbe.hypervisors(in: answers, vendors: Self.vendors).isEmpty)
    }

    @Test func behindAClearBitAnUnlistedVendorIsNotAHypervisor() {
        var answers = CPUIDProbe.Answers(hypervisorBit: false)
        answers.leaves[0x4000_0000] = Self.registers("GenuineIntel", eax: 0x4000_0001)
        #expect(CPUIDProbe.hypervisors(in: answers, vendors: Self.vendors).isEmpty)
        answers.hypervisorBit = true
        #expect(CPUIDProbe.hypervisors(in: answers, vendors: Self.vendors).map(\.vendor) == ["GenuineIntel"])
    }

    @Test func bareMetalRegistersAtTheHypervisorLeavesNameNothing() {
        // Intel repeats its highest basic leaf (here 0x16: base, maximum and bus MHz); AMD answers zeros.
        for registers in [CPUIDRegisters(eax: 0xbb8, ebx: 0x12c0, ecx: 0x64, edx: 0), CPUIDRegisters(eax: 0, ebx: 0, ecx: 0, edx: 0)] {
            var answers = CPUIDProbe.Answers(hypervisorBit: false)
            for base in CPUIDProbe.hypervisorBases { answers.leaves[base] = registers }
            #expect(CPUIDProbe.hypervisors(in: answers, vendors: Self.vendors).isEmpty)
        }
    }

    @Test func theHighestLeafTheTableNamesGivesTheKind() {
        var answers = CPUIDProbe.Answers(hypervisorBit: true)
        answers.leaves[0x4000_0000] = Self.registers("Microsoft Hv", eax: 0x4000_0005)
        answers.leaves[0x4000_0100] = Self.registers("XenVMMXenVMM", eax: 0x4000_0105)
        let found = CPUIDProbe.hypervisors(in: answers, vendors: Self.vendors)
        #expect(found.map(\.kind) == ["hyperv", "xen"])
        #expect(found.last(where: { $0.kind != nil })?.kind == "xen")
    }

    @Test(arguments: [
        #"{"leaves": {"0x40000000": ["0x1", "0x2", "0x3"]}}"#,
        #"{"leaves": {"0x40000000": ["0x+1", "0x2", "0x3", "0x4"]}}"#,
        #"{"leaves": {"40000000": ["0x1", "0x2", "0x3", "0x4"]}}"#,
        #"{"leaves": {"0x100000000": ["0x1", "0x2", "0x3", "0x4"]}}"#,
        #"{"leaves": {"0x40000000": [1, 2, 3, 4]}}"#,
        #"{"hypervisorBit": "yes"}"#,
        #"{"vendor": 7}"#,
        #"{"vendor": "KVMKVMKVM\u0000evil"}"#,
        #"{"vendor": "KVM\u001b[31m"}"#,
        #"{"registers": {}}"#,
        #"["KVMKVMKVM"]"#,
    ])
    func aMalformedCPUIDReplayIsRefused(_ text: String) {
        #expect(throws: (any Error).self) { try CPUIDReplay.parse(Array(text.utf8)) }
    }

    @Test func aReplayOfMoreLeavesThanTheLimitIsRefused() {
        let leaves = (0...CPUIDReplay.leafLimit).map { #""0x\#(String($0, radix: 16))": ["0x0", "0x0", "0x0", "0x0"]"# }
        let text = #"{"leaves": {"# + leaves.joined(separator: ", ") + "}}"
        #expect(throws: (any Error).self) { try CPUIDReplay.parse(Array(text.utf8)) }
    }

    @Test func theReplaysBitComesFromLeafOneWhenNotGiven() throws {
        let answers = try CPUIDReplay.parse(Array(#"{"leaves": {"0x1": ["0x0", "0x0", "0x80000000", "0x0"]}}"#.utf8))
        #expect(answers.hypervisorBit == true)
        let older = try CPUIDReplay.parse(Array(#"{"vendor": null, "hypervisorBit": true}"#.utf8))
        #expect(older.hypervisorBit == true && older.recordedVendor == nil)
    }

    @Test(arguments: [("QM00001", "QM000##", true), ("QM0000G", "QM000##", false), ("QM000011", "QM000##", false),
                      ("VB1a2b3c4d-5e6f7a8b", "VB########-########", true), ("VB1a2b3c4d_5e6f7a8b", "VB########-########", false)])
    func aDiskSerialHasTheShapeOnlyExactly(_ serial: String, _ shape: String, _ expected: Bool) {
        #expect(BlockProbe.hasShape(serial, shape) == expected)
    }

    @Test(arguments: [("Xen", true), ("Xen HVM domU", true), ("XENITH X670E", false), ("Xenon", false), ("VMware7,1", true),
                      ("ROG Xen", false), ("Xen\u{00E9}", false)])
    func aDMIRowMatchesAWordAtTheStart(_ value: String, _ expected: Bool) {
        let word = value.hasPrefix("VMware") ? "VMware" : "Xen"
        #expect(DMIProbe.beginsWithWord(value, word) == expected)
    }

    /// Weak evidence alone is never a verdict: each of these rules fires only beside a medium one.
    @Test(arguments: [
        ["cpu.hypervisor_bit": SignalValue.bool(false), "cpu.hypervisor_vendor_is_xen": .bool(false), "virt.xen_guest": .bool(false)],
        ["timing.cpuid_exit_suspected": .bool(true), "timing.cpuid_median_ticks": .int(9152), "timing.cpuid_to_baseline_ratio": .int(58)],
        ["usb.virtual_device_kind": .string("qemu")],
        ["net.nic_vendor_classes": .strings(["vmware"])],
        ["block.emulated_disk_serial_kind": .string("virtualbox")],
    ])
    func weakEvidenceAloneIsNoVerdict(_ signals: [String: SignalValue]) {
        #expect(evaluate(.embedded(), signals)[.virtualization]?.value == false)
    }

    @Test func aClearBitOnAXenGuestIsNotHidingAnything() throws {
        // A Xen PV guest runs user-space CPUID natively: the clear bit is the host CPU's, not a hidden hypervisor.
        let verdicts = evaluate(.embedded(), ["cpu.hypervisor_bit": .bool(false), "cpu.hypervisor_vendor_is_xen": .bool(false),
                                              "virt.xen_guest": .bool(true)])
        let virtualization = try #require(verdicts[.virtualization])
        #expect(virtualization.value && virtualization.kind == "xen")
        #expect(!virtualization.reasons.contains { $0.code == "hypervisor_hidden" })
    }

    @Test(arguments: [
        #"{"cpuidTicks": [], "baselineTicks": [1]}"#,
        #"{"cpuidTicks": [1.5], "baselineTicks": [1]}"#,
        #"{"cpuidTicks": [18446744073709551615], "baselineTicks": [1]}"#,
        #"{"cpuidTicks": [-1], "baselineTicks": [1]}"#,
        #"{"cpuidTicks": [1]}"#,
        #"{"cpuidTicks": [1], "baselineTicks": [1], "other": [1]}"#,
        #"{"cpuidTicks": "9000", "baselineTicks": [1]}"#,
    ])
    func aMalformedTimingReplayIsMalformed(_ text: String) throws {
        let root = try TestPaths.temporaryDirectory("timing")
        defer { try? FileManager.default.removeItem(atPath: root) }
        try FileManager.default.createDirectory(atPath: root + "/.fingerly", withIntermediateDirectories: true)
        try text.write(toFile: root + "/.fingerly/timing.json", atomically: true, encoding: .utf8)
        let context = ProbeContext(host: HostFileSystem(root: root), tables: .embedded, filter: .none,
                                   hasher: IdentifierHasher(organization: "acme"))
        #expect(throws: ProbeFailure.self) { try VMExitTimingProbe().collect(into: context) }
    }

    /// A root tree of the given files (a value of nil makes a directory) and symbolic links.
    static func tree(_ label: String, files: [String: [UInt8]?], links: [String: String] = [:]) throws -> String {
        let root = try TestPaths.temporaryDirectory(label)
        for (path, bytes) in files {
            let full = root + path
            if let bytes {
                try FileManager.default.createDirectory(atPath: (full as NSString).deletingLastPathComponent,
                                                        withIntermediateDirectories: true)
                #expect(FileManager.default.createFile(atPath: full, contents: Data(bytes)))
            } else {
                try FileManager.default.createDirectory(atPath: full, withIntermediateDirectories: true)
            }
        }
        for (path, target) in links {
            try FileManager.default.createDirectory(atPath: (root + path as NSString).deletingLastPathComponent,
                                                    withIntermediateDirectories: true)
            try FileManager.default.createSymbolicLink(atPath: root + path, withDestinationPath: target)
        }
        return root
    }

    static func signals(of probe: some Probe, root: String) -> [String: SignalValue] {
        let context = ProbeContext(host: HostFileSystem(root: root), tables: .embedded, filter: .none,
                                   hasher: IdentifierHasher(organization: "acme"))
        try? probe.collect(into: context)
        return context.signals
    }

    static func acpiHeader(_ signature: String, oem: String, tableId: String, creator: String) -> [UInt8] {
        func padded(_ text: String, _ count: Int) -> [UInt8] { Array((text + String(repeating: " ", count: count)).utf8.prefix(count)) }
        return padded(signature, 4) + [36, 0, 0, 0, 1, 0] + padded(oem, 6) + padded(tableId, 8) + [1, 0, 0, 0]
            + padded(creator, 4) + [1, 0, 0, 0]
    }

    /// The kernel makes /sys/firmware/qemu_fw_cfg as the driver loads, device or not; only `rev` says one was found.
    @Test func aFirmwareConfigurationDirectoryWithoutItsDeviceIsNotQEMU() throws {
        let empty = try Self.tree("fw-cfg", files: ["/sys/firmware/qemu_fw_cfg": nil])
        defer { try? FileManager.default.removeItem(atPath: empty) }
        #expect(Self.signals(of: HypervisorMarkersProbe(), root: empty)["virt.qemu_fw_cfg"] == nil)
        let found = try Self.tree("fw-cfg", files: ["/sys/firmware/qemu_fw_cfg/rev": Array("3\n".utf8)])
        defer { try? FileManager.default.removeItem(atPath: found) }
        #expect(Self.signals(of: HypervisorMarkersProbe(), root: found)["virt.qemu_fw_cfg"] == .bool(true))
    }

    /// A built-in driver has /sys/module/<name> on any machine; it counts once loaded as a module or driving a device.
    @Test(arguments: [([String](), false), (["initstate"], true), (["drivers/pci:vmxnet3/0000:0b:00.0/"], true)])
    func aGuestDriverCountsOnlyWhenLoadedOrDriving(_ extra: [String], _ counts: Bool) throws {
        var files: [String: [UInt8]?] = [:]
        for control in ["bind", "unbind", "uevent", "new_id", "remove_id"] {
            files["/sys/module/vmxnet3/drivers/pci:vmxnet3/" + control] = []
        }
        for path in extra {
            files["/sys/module/vmxnet3/" + (path.hasSuffix("/") ? String(path.dropLast()) : path)] = path.hasSuffix("/") ? nil : Array("live\n".utf8)
        }
        let root = try Self.tree("guest-driver", files: files)
        defer { try? FileManager.default.removeItem(atPath: root) }
        let signals = Self.signals(of: HypervisorMarkersProbe(), root: root)
        #expect((signals["virt.guest_driver_kind"] == .string("vmware")) == counts, "\(extra): \(signals)")
    }

    /// Every table header is judged, however many pad the directory; only the ids reported are capped.
    @Test func paddingTablesCannotHideACreatorId() throws {
        var files: [String: [UInt8]?] = [:]
        for index in 0..<(HypervisorMarkersProbe.acpiIdLimit * 3) {
            let name = "T" + String(index)
            files["/sys/firmware/acpi/tables/" + name] = Self.acpiHeader("SSDT", oem: "DELL", tableId: "PAD" + String(index),
                                                                         creator: String(format: "C%03d", index))
        }
        files["/sys/firmware/acpi/tables/ZZZZ"] = Self.acpiHeader("SSDT", oem: "DELL", tableId: "CBX3", creator: "BXPC")
        let root = try Self.tree("acpi-padding", files: files)
        defer { try? FileManager.default.removeItem(atPath: root) }
        let signals = Self.signals(of: HypervisorMarkersProbe(), root: root)
        #expect(signals["virt.acpi_id_kind"] == .string("qemu"))
        guard case .strings(let creators)? = signals["virt.acpi_creator_ids"] else { Issue.record("no creator ids"); return }
        #expect(creators.count == HypervisorMarkersProbe.acpiIdLimit)
    }

    /// Alibaba's bare metal reads as its VMs do; without the root-only SMBIOS VM bit, DMI names the cloud and leaves
    /// the answer to CPUID.
    @Test func cloudStringsThatBareMetalSharesWaitForTheVMBit() async throws {
        let strings: [String: [UInt8]?] = ["/sys/class/dmi/id/sys_vendor": Array("Alibaba Cloud\n".utf8),
                                           "/sys/class/dmi/id/product_name": Array("Alibaba Cloud ECS\n".utf8)]
        let root = try Self.tree("alibaba", files: strings)
        defer { try? FileManager.default.removeItem(atPath: root) }
        let signals = Self.signals(of: DMIProbe(), root: root)
        #expect(signals["dmi.cloud"] == .string("alibaba"))
        #expect(signals["dmi.virtualization_kind"] == nil && signals["dmi.unconfirmed_virtualization_kind"] == .string("kvm"))

        // EBM run as an unprivileged user: CPUID reads the bit clear, nothing names a hypervisor.
        var bareMetal = strings
        bareMetal["/.fingerly/cpuid.json"] = Array(#"{"hypervisorBit": false}"#.utf8)
        let ebm = try Self.tree("alibaba-ebm", files: bareMetal)
        defer { try? FileManager.default.removeItem(atPath: ebm) }
        let result = try await identify(root: ebm)
        #expect(!result.verdicts.virtualization.value, "\(result.verdicts.virtualization)")
        #expect(result.environment.cloud == "alibaba" && !result.environment.hardened)
    }

    @Test func theLiveTimingReportsBothDistributions() throws {
        let context = ProbeContext(host: HostFileSystem(root: "/"), tables: .embedded, filter: .none,
                                   hasher: IdentifierHasher(organization: "acme"))
        // A plain `do`/`catch where` over this typed throw crashes Swift 6.3.1's SIL ownership verifier.
        let outcome = Result { () throws(ProbeFailure) in try VMExitTimingProbe().collect(into: context) }
        if case .failure(let failure) = outcome {
            try #require(failure.status == .skipped, "\(failure)")
            return  // no CPUID on this architecture
        }
        let exiting = try #require(context.signals["timing.cpuid_median_ticks"])
        let baseline = try #require(context.signals["timing.baseline_median_ticks"])
        guard case .int(let cpuid) = exiting, case .int(let fences) = baseline else { Issue.record("not integers"); return }
        #expect(cpuid > 0 && fences > 0)
        // This suite runs where the build does; whatever the host, the verdict of the timing follows its own rule.
        let suspected = cpuid >= Int(VMExitTimingProbe.suspectedMedianTicks) && cpuid / fences >= VMExitTimingProbe.suspectedRatio
        #expect(context.signals["timing.cpuid_exit_suspected"] == .bool(suspected))
        #expect(context.signals["timing.cpuid_spread_ticks"] != nil && context.signals["timing.baseline_spread_ticks"] != nil)
    }
}
