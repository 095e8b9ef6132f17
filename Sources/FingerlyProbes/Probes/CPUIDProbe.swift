import FingerlyHost
import FingerlyModel

/// The CPUID hypervisor bit (leaf 1, ECX bit 31) and the hypervisor vendor leaves: 0x40000000 and every 0x100 above
/// it to 0x40000F00 (where a hypervisor offering another's interface puts its own, as KVM and Xen do behind Hyper-V's),
/// read whether or not the bit is set, and leaf 0x21 (Intel TDX).
///
/// A cleared bit proves little: QEMU's `-cpu host,-hypervisor` clears it and leaves KVM's leaf answering. Bare metal
/// answers those leaves too, though, with the highest basic leaf's registers (Intel) or zeros (AMD): behind a clear
/// bit only an exact vendor of the table, under a maximum leaf within its own range, is taken.
///
/// A root tree is not the CPU this process runs on, so under `--root` the probe replays
/// `<root>/.fingerly/cpuid.json` and never mixes in the live CPU (the format is in docs/detection.md).
package struct CPUIDProbe: Probe {
    package let id = "cpuid"
    static let replayPath = "/.fingerly/cpuid.json"
    static let hypervisorBases: [UInt32] = (0..<16).map { 0x4000_0000 + $0 * 0x100 }
    static let tdxLeaf: UInt32 = 0x21

    /// What one CPU answered, from the instruction or a replay.
    struct Answers {
        /// Nil when it is not known.
        var hypervisorBit: Bool?
        /// By leaf: eax, ebx, ecx, edx.
        var leaves: [UInt32: CPUIDRegisters] = [:]
        /// An older replay's vendor string at 0x40000000, without the registers.
        var recordedVendor: String?
    }

    struct Found {
        let leaf: UInt32
        let vendor: String
        let kind: String?
    }

    package func collect(into context: ProbeContext) throws(ProbeFailure) {
        let answers = context.host.isLiveHost ? try Self.liveAnswers() : try Self.replayed(from: context.host)
        let vendors = context.tables.mapping("cpuidHypervisorVendors")
        let found = Self.hypervisors(in: answers, vendors: vendors)
        if let bit = answers.hypervisorBit { context.emit("cpu.hypervisor_bit", bit) }
        if let first = found.first(where: { $0.leaf == 0x4000_0000 }) ?? found.first {
            context.emit("cpu.hypervisor_vendor", first.vendor)
        }
        if !found.isEmpty {
            context.emit("cpu.hypervisor_leaves", found.map { Self.hex($0.leaf) + " " + $0.vendor })
        }
        // As virt-what takes it: the highest leaf the table names. KVM and Xen answer at 0x40000100 behind the
        // Hyper-V interface they offer at 0x40000000.
        let kind = found.last(where: { $0.kind != nil })?.kind
        if let kind { context.emit("cpu.hypervisor_kind", kind) }
        if answers.hypervisorBit == false { context.emit("cpu.hypervisor_hidden", kind != nil) }
        // A Xen dom0 is a host, yet it sees Xen's vendor leaf and the hypervisor bit as a guest
        // does; under any other vendor, or none, the bit means a guest. Said whenever CPUID was
        // read, so the fast tier can judge the bit without the deferred tier's dom0 test.
        if answers.hypervisorBit != nil || !found.isEmpty {
            context.emit("cpu.hypervisor_vendor_is_xen", kind == "xen")
        }
        if let tdx = answers.leaves[Self.tdxLeaf], Self.vendorString(tdx, order: .tdx) == "IntelTDX    " {
            context.emit("cpu.confidential_leaf", "tdx")
        }
    }

    /// The hypervisor vendors the leaves name, lowest leaf first. With the bit set, 0x40000000 may name one the table
    /// does not know; any other leaf, and every leaf behind a clear bit, only one it knows, exactly.
    static func hypervisors(in answers: Answers, vendors: [String: String]) -> [Found] {
        let bitSet = answers.hypervisorBit == true
        func kind(of vendor: String) -> String? {
            // Table keys keep the signature's own padding ("bhyve bhyve "), which the normalised vendor has lost.
            vendors[vendor] ?? vendors.first { normalised($0.key) == vendor }?.value
        }
        var found: [Found] = []
        if answers.leaves[0x4000_0000] == nil, let recorded = answers.recordedVendor.map(normalised), !recorded.isEmpty {
            // Without registers there is no range to check: behind a bit recorded clear, only the table's vendors.
            let named = kind(of: recorded)
            if answers.hypervisorBit != false || named != nil { found.append(Found(leaf: 0x4000_0000, vendor: recorded, kind: named)) }
        }
        for base in hypervisorBases {
            guard let registers = answers.leaves[base] else { continue }
            let vendor = normalised(vendorString(registers, order: .hypervisor))
            guard !vendor.isEmpty else { continue }
            let named = kind(of: vendor)
            // A hypervisor's range starts at its base leaf: its maximum leaf lies within the next 0x100. The first
            // leaf behind a set bit is the hypervisor's by definition (early KVM answered a maximum of 0 there).
            let inRange = registers.eax >= base && registers.eax - base < 0x100
            let announced = bitSet && base == 0x4000_0000
            if announced || named != nil && inRange {
                found.append(Found(leaf: base, vendor: vendor, kind: named))
            }
        }
        return found
    }

    enum RegisterOrder { case hypervisor, tdx }

    /// The twelve bytes of a vendor signature: ebx, ecx, edx at the hypervisor leaves; ebx, edx, ecx at leaf 0x21.
    static func vendorString(_ registers: CPUIDRegisters, order: RegisterOrder) -> String {
        var bytes: [UInt8] = []
        let words = order == .hypervisor ? [registers.ebx, registers.ecx, registers.edx]
            : [registers.ebx, registers.edx, registers.ecx]
        for word in words {
            withUnsafeBytes(of: word.littleEndian) { bytes.append(contentsOf: $0) }
        }
        let text = bytes.prefix(while: { $0 != 0 })
        // Only printable ASCII names a vendor: bare metal's unrelated registers are anything.
        guard text.allSatisfy({ (0x20...0x7e).contains($0) }) else { return "" }
        return String(decoding: text, as: UTF8.self)
    }

    /// Recorded vendor strings may come quoted ('KVMKVMKVM') or as a capture's placeholder
    /// ("?", "@"): only letters, digits and inner spaces name a hypervisor.
    static func normalised(_ vendor: String) -> String {
        let trimmed = vendor.trimmingWhitespace().trimmingCharacters(in: "'\"")
        return trimmed.contains(where: { $0.isLetter || $0.isNumber }) ? trimmed : ""
    }

    static func hex(_ leaf: UInt32) -> String { "0x" + String(leaf, radix: 16) }

    static func liveAnswers() throws(ProbeFailure) -> Answers {
        guard let features = CPUID.query(leaf: 1), let basic = CPUID.query(leaf: 0) else {
            throw ProbeFailure(.skipped, "this architecture has no CPUID instruction")
        }
        var answers = Answers(hypervisorBit: features.ecx & (1 << 31) != 0)
        for base in hypervisorBases {
            if let registers = CPUID.query(leaf: base) { answers.leaves[base] = registers }
        }
        if basic.eax >= tdxLeaf, let registers = CPUID.query(leaf: tdxLeaf) { answers.leaves[tdxLeaf] = registers }
        return answers
    }

    static func replayed(from host: HostFileSystem) throws(ProbeFailure) -> Answers {
        let bytes: [UInt8]
        do {
            bytes = try host.read(replayPath, limit: 64 * 1024)
        } catch where error.failure == .absent {
            throw ProbeFailure(.skipped, "a root tree is not the running CPU, and it has no \(replayPath) to replay")
        } catch {
            throw ProbeFailure(error)
        }
        guard let answers = try? CPUIDReplay.parse(bytes) else {
            throw ProbeFailure(.malformed, "\(replayPath): expected \(CPUIDReplay.shape)")
        }
        return answers
    }
}

/// The replay file: `{"hypervisorBit": bool|null, "vendor": string|null, "leaves": {"0x40000000": [eax, ebx, ecx, edx]}}`,
/// registers as hexadecimal strings, every member optional. `vendor` is an older capture's 0x40000000 string.
enum CPUIDReplay {
    static let shape = "{\"hypervisorBit\": bool|null, \"vendor\": string|null, \"leaves\": {\"0x…\": [4 hex strings]}}"
    static let leafLimit = 64

    struct Malformed: Error {}

    static func parse(_ bytes: [UInt8]) throws -> CPUIDProbe.Answers {
        guard case .object(let top) = try JSONParser.parse(bytes) else { throw Malformed() }
        var answers = CPUIDProbe.Answers()
        for (key, value) in top {
            switch (key, value) {
            case ("hypervisorBit", .bool(let bit)): answers.hypervisorBit = bit
            case ("hypervisorBit", .null): break
            case ("vendor", .string(let vendor)):
                // As the registers are: only printable ASCII names a vendor, and twelve bytes (quoted, padded) at most.
                guard vendor.utf8.count <= 32, vendor.utf8.allSatisfy({ (0x20...0x7e).contains($0) }) else {
                    throw Malformed()
                }
                answers.recordedVendor = vendor
            case ("vendor", .null): break
            case ("leaves", .object(let leaves)) where leaves.count <= leafLimit:
                for (leaf, registers) in leaves {
                    guard let number = hexadecimal(leaf), case .array(let words) = registers, words.count == 4 else {
                        throw Malformed()
                    }
                    var values: [UInt32] = []
                    for word in words {
                        guard case .string(let text) = word, let value = hexadecimal(text) else { throw Malformed() }
                        values.append(value)
                    }
                    answers.leaves[number] = CPUIDRegisters(eax: values[0], ebx: values[1], ecx: values[2], edx: values[3])
                }
            default: throw Malformed()
            }
        }
        if answers.hypervisorBit == nil, let features = answers.leaves[1] {
            answers.hypervisorBit = features.ecx & (1 << 31) != 0
        }
        return answers
    }

    /// "0x" and one to eight hexadecimal digits.
    static func hexadecimal(_ text: String) -> UInt32? {
        let bytes = Array(text.utf8)
        guard bytes.count > 2, bytes.count <= 10, bytes[0] == UInt8(ascii: "0"), bytes[1] == UInt8(ascii: "x") else {
            return nil
        }
        // UInt32(_:radix:) would also take a sign.
        guard bytes[2...].allSatisfy({ hexadecimalDigits.contains($0) }) else { return nil }
        return UInt32(String(decoding: bytes[2...], as: UTF8.self), radix: 16)
    }

    private static let hexadecimalDigits = Set("0123456789abcdefABCDEF".utf8)
}
