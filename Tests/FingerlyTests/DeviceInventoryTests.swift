import Foundation
import Testing
@testable import Fingerly
@testable import FingerlyHost
@testable import FingerlyModel
@testable import FingerlyPolicy
@testable import FingerlyProbes

/// The deferred tier through libudev, on device trees umockdev plays back.
@Suite(.serialized) struct DeviceInventoryTests {
    private func probes(_ output: ProcessOutput) throws -> [String: ProbeEntry] {
        try #require(output.status == 0, "\(output.standardError)")
        return Dictionary(try output.identifyResult().report.probes.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
    }

    private func udev(_ recordings: [String]) throws -> [String: ProbeEntry] {
        try #require(DeviceFixtures.umockdevAvailable, "umockdev-run is missing: scripts/install-deps --test installs it")
        return try probes(try DeviceFixtures.runUnderUmockdev(recordings, ["--no-submit", "--json", "--tiers", "deferred", "--free-text", "keep"]))
    }

    @Test func laptopWithNVMeUSBHubAndWebcam() throws {
        let found = try udev([DeviceFixtures.laptop])
        for probe in ["pci", "usb", "block", "net", "input", "drm", "sound", "tpm"] {
            #expect(found[probe]?.status == .ok, "\(probe)")
        }
        let disks = try #require(found["block"]?.signals["block.disks"]?.strings)
        #expect(disks == ["nvme0n1 transport=nvme removable=false rotational=false size=1000204886016 model='Samsung SSD 980 PRO 1TB'"])
        let usb = try #require(found["usb"]?.signals["usb.devices"]?.strings)
        #expect(usb.contains { $0.hasPrefix("1-3 05e3:0610 bus 1 port 3 removable=removable") })
        #expect(usb.contains { $0.hasPrefix("1-3.1 04f2:b6dd bus 1 port 3.1 removable=fixed 'Integrated Camera'") })
        #expect(found["pci"]?.signals["pci.devices"]?.strings?.contains("0000:04:00.0 144d:a80a sub 144d:a801 class 010802 driver nvme") == true)
        #expect(found["net"]?.signals["net.interfaces"]?.strings == ["wlp0s20f3 driver=iwlwifi bus=pci virtual=false"])
        #expect(found["net"]?.signals["net.nic_vendor_classes"]?.strings == ["physical-or-unknown"])
        #expect(found["net"]?.signals["net.permanent_macs"]?.strings?.count == 1)
        #expect(found["input"]?.signals["input.devices"]?.strings == ["input0 'AT Translated Set 2 keyboard' bus=serio 0001:0001 physical=true"])
        #expect(found["drm"]?.signals["drm.gpus"]?.strings == ["card0 8086:9a49 driver=i915"])
        #expect(found["drm"]?.signals["drm.monitors"]?.strings == ["eDP-1 BOE product 0xa1c 'NE140FHM-N61'"])
        #expect(found["sound"]?.signals["sound.cards"]?.strings == ["card0 PCH bus=pci"])
        #expect(found["tpm"]?.signals["tpm.present"] == .bool(true) && found["tpm"]?.signals["tpm.version"] == .int(2))
        if !FileManager.default.fileExists(atPath: "/run/udev/data") {
            #expect(found["pci"]?.detail?.contains("udev database missing") == true)
        }
    }

    @Test func serverWithSATADisksAndTwoNICs() throws {
        let found = try udev([DeviceFixtures.server])
        let disks = try #require(found["block"]?.signals["block.disks"]?.strings)
        #expect(disks.count == 2)
        #expect(disks.allSatisfy { $0.contains("transport=ata removable=false rotational=true size=4000787030016") && $0.contains("model='ST4000NM0035-1V4'") })
        #expect(found["block"]?.signals["block.fixed_disks"] == .int(2))
        let interfaces = try #require(found["net"]?.signals["net.interfaces"]?.strings)
        #expect(interfaces.contains("eno1 driver=ixgbe bus=pci virtual=false") && interfaces.contains("eno2 driver=ixgbe bus=pci virtual=false"))
        #expect(Set(found["net"]?.signals["net.virtual_interfaces"]?.strings ?? []) == ["docker0", "lo", "veth1a2b3c"])
        #expect(found["net"]?.signals["net.permanent_macs"]?.strings?.count == 2)
        #expect(found["net"]?.signals["net.nic_vendor_classes"]?.strings == ["physical-or-unknown"])
        let inputs = try #require(found["input"]?.signals["input.devices"]?.strings)
        #expect(inputs.contains { $0.contains("'American Megatrends Inc. Virtual Keyboard and Mouse' bus=usb 046b:ff10 physical=true") })
        #expect(found["input"]?.signals["input.virtual_devices"]?.strings == ["py-evdev-uinput"])
        #expect(found["sound"]?.signals["sound.cards"]?.strings == [])
        #expect(found["drm"]?.signals["drm.gpus"]?.strings == ["card0 1a03:2000 driver=ast"])
        #expect(found["drm"]?.signals["drm.monitors"]?.strings == [])
    }

    @Test(.enabled(if: DeviceFixtures.sharedAvailable, "../shared/fixtures/umockdev is not beside this checkout"))
    func sharedRecordingsOfRealDevices() throws {
        let shared = DeviceFixtures.sharedRecordings
        let keyboard = try udev([shared + "usbkbd.umockdev"])
        #expect(keyboard["input"]?.signals["input.devices"]?.strings == ["input5 'HID 05f3:0007' bus=usb 05f3:0007 physical=true"])
        #expect(keyboard["usb"]?.signals["usb.devices"]?.strings?.contains { $0.hasPrefix("1-1.5.4.2 05f3:0007") } == true)
        let touchpad = try udev([shared + "synaptics-touchpad.umockdev"])
        #expect(touchpad["input"]?.signals["input.devices"]?.strings?.first?.contains("'SynPS/2 Synaptics TouchPad' bus=serio") == true)
        #expect(touchpad["input"]?.signals["input.virtual_devices"]?.strings == [])
        let camera = try udev([shared + "canon-powershot-sx200.umockdev"])
        #expect(camera["usb"]?.signals["usb.serials"]?.strings?.contains { $0.hasPrefix("04a9:31c0 ") } == true)
        let key = try udev([shared + "fido2.umockdev"])
        #expect(key["usb"]?.signals["usb.devices"]?.strings?.contains { $0.contains("1050:0120") && $0.contains("Security Key by Yubico") } == true)
    }

    /// Every serial, WWN, MAC and UUID a recording holds, for grepping the output.
    static func rawIdentifiers(in recording: String) throws -> [String] {
        let text = try String(contentsOfFile: recording, encoding: .utf8)
        let keys = ["A: serial=", "A: wwid=", "A: address=", "A: uniq=", "E: ID_SERIAL_SHORT=", "E: ID_SERIAL=", "E: ID_WWN=",
                    "E: ID_FS_UUID=", "E: ID_PART_TABLE_UUID=", "E: ID_PART_ENTRY_UUID="]
        var values: [String] = []
        for line in text.split(separator: "\n") {
            guard let key = keys.first(where: { line.hasPrefix($0) }) else { continue }
            let value = line.dropFirst(key.count).replacingOccurrences(of: "\\n", with: "").trimmingCharacters(in: .whitespaces)
            // Short or all-zero values and PCI slot names (a root hub's "serial") identify nothing.
            let isSlot = value.range(of: #"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9]$"#, options: .regularExpression) != nil
            if value.count >= 6, !isSlot, value.contains(where: { $0 != "0" && $0 != ":" }) { values.append(value) }
        }
        return values
    }

    @Test func noRawSerialMACOrUUIDAppearsInTheOutput() throws {
        var recordings = [DeviceFixtures.laptop, DeviceFixtures.server, DeviceFixtures.peripherals]
        recordings += ["usbkbd", "canon-powershot-sx200", "sony-xperia-mini-pro", "fido2"].map { DeviceFixtures.sharedRecordings + $0 + ".umockdev" }
            .filter { FileManager.default.fileExists(atPath: $0) }
        for recording in recordings {
            let raw = try Self.rawIdentifiers(in: recording) + (recording == DeviceFixtures.laptop ? ["BOE-PANEL-77A", "16909060"] : [])
            #expect(!raw.isEmpty, "\(recording) has no identifiers to look for")
            let viaUdev = try DeviceFixtures.runUnderUmockdev(
                recording == DeviceFixtures.peripherals ? [DeviceFixtures.laptop, recording] : [recording], ["--no-submit", "--json"])
            let root = try DeviceFixtures.hostRoot(recordings: recording == DeviceFixtures.peripherals ? [DeviceFixtures.laptop, recording] : [recording],
                                                   label: "raw")
            let viaSysfs = try runCLI(["--no-submit", "--json", "--root", root])
            let human = try runCLI(["--no-submit", "--root", root])
            for output in [viaUdev, viaSysfs, human] {
                #expect(output.status == 0, "\(output.standardError)")
                let text = (output.standardOutput + output.standardError).lowercased()
                for value in raw {
                    #expect(!text.contains(value.lowercased()), "\((recording as NSString).lastPathComponent): \(value) appears in the output")
                }
            }
        }
    }

    @Test func ignoredDeviceSignalsAreNotReported() throws {
        let output = try DeviceFixtures.runUnderUmockdev([DeviceFixtures.laptop],
            ["--no-submit", "--json", "--tiers", "deferred", "--ignore", "net.permanent_macs,block.serials,usb"])
        let found = try probes(output)
        #expect(found["net"]?.signals["net.permanent_macs"] == nil)
        #expect(found["block"]?.signals["block.serials"] == nil)
        #expect(found["usb"]?.status == .skipped)
    }
}
