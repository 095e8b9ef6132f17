import FoundationEssentials
import FingerlyHost
import FingerlyModel

/// The CPUID hypervisor bit (leaf 1, ECX bit 31) and vendor leaf 0x40000000.
///
/// A root tree is not the CPU this process runs on, so under `--root` the probe replays
/// `<root>/.fingerly/cpuid.json` and never mixes in the live CPU.
package struct CPUIDProbe: Probe {
    package let id = "cpuid"
    static let replayPath = "/.fingerly/cpuid.json"

    struct Observation: Codable {
        let vendor: String?
        let hypervisorBit: Bool?
    }

    package func collect(into context: ProbeContext) throws(ProbeFailure) {
        let observation = context.host.isLiveHost ? try Self.liveObservation() : try Self.replayed(from: context.host)
        if let bit = observation.hypervisorBit { context.emit("cpu.hypervisor_bit", bit) }
        var kind: String?
        let vendor = observation.vendor.map(Self.normalised) ?? ""
        if !vendor.isEmpty {
            context.emit("cpu.hypervisor_vendor", vendor)
            // Table keys keep the signature's own padding ("bhyve bhyve "), which the
            // normalised vendor has lost.
            kind = context.tables.mapping("cpuidHypervisorVendors")[vendor]
                ?? context.tables.mapping("cpuidHypervisorVendors").first { Self.normalised($0.key) == vendor }?.value
            if let kind {
                context.emit("cpu.hypervisor_kind", kind)
            }
        }
        // A Xen dom0 is a host, yet it sees Xen's vendor leaf and the hypervisor bit as a guest
        // does; under any other vendor, or none, the bit means a guest. Said whenever CPUID was
        // read, so the fast tier can judge the bit without the deferred tier's dom0 test.
        if observation.hypervisorBit != nil || !vendor.isEmpty {
            context.emit("cpu.hypervisor_vendor_is_xen", kind == "xen")
        }
    }

    /// Recorded vendor strings may come quoted ('KVMKVMKVM') or as a capture's placeholder
    /// ("?", "@"): only letters, digits and inner spaces name a hypervisor.
    static func normalised(_ vendor: String) -> String {
        let trimmed = vendor.trimmingWhitespace().trimmingCharacters(in: "'\"")
        return trimmed.contains(where: { $0.isLetter || $0.isNumber }) ? trimmed : ""
    }

    static func liveObservation() throws(ProbeFailure) -> Observation {
        guard let features = CPUID.query(leaf: 1) else {
            throw ProbeFailure(.skipped, "this architecture has no CPUID instruction")
        }
        let hypervisorBit = features.ecx & (1 << 31) != 0
        // Leaf 0x40000000 is only defined under a hypervisor; on bare metal it returns
        // whatever the highest basic leaf holds.
        guard hypervisorBit, let registers = CPUID.query(leaf: 0x4000_0000) else {
            return Observation(vendor: nil, hypervisorBit: hypervisorBit)
        }
        var bytes: [UInt8] = []
        for register in [registers.ebx, registers.ecx, registers.edx] {
            withUnsafeBytes(of: register.littleEndian) { bytes.append(contentsOf: $0) }
        }
        let vendor = String(decoding: bytes.prefix(while: { $0 != 0 }), as: UTF8.self)
        return Observation(vendor: vendor, hypervisorBit: true)
    }

    static func replayed(from host: HostFileSystem) throws(ProbeFailure) -> Observation {
        let bytes: [UInt8]
        do {
            bytes = try host.read(replayPath, limit: 64 * 1024)
        } catch where error.failure == .absent {
            throw ProbeFailure(.skipped, "a root tree is not the running CPU, and it has no \(replayPath) to replay")
        } catch {
            throw ProbeFailure(error)
        }
        do {
            return try JSONDecoder().decode(Observation.self, from: Data(bytes))
        } catch {
            throw ProbeFailure(.malformed, "\(replayPath): expected {\"vendor\": string, \"hypervisorBit\": bool|null}")
        }
    }
}
