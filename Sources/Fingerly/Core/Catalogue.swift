import FoundationEssentials

/// What kind of data a signal carries; identifiers are always hashed before they leave a probe.
public enum DataClass: String, Sendable, Codable, Hashable {
    case identifier, hardware, configuration, integrity
}

/// The probe catalogue (`probes/catalogue.json`): what each probe reads and reports, as data.
public struct ProbeCatalogue: Sendable, Codable, Hashable {
    public struct SignalSpec: Sendable, Codable, Hashable {
        public let name: String
        public let type: String
        public let `class`: DataClass
        public let stability: String
        public let description: String
        /// Free text that can name a person (a CA subject, a device name): reported as a
        /// fingerprint unless the policy's `privacy.freeText` is `keep`.
        public let personal: Bool?
        /// Paths that can carry a user's home directory (/home/alice/…): the directory's name is
        /// reported as a fingerprint unless the policy's `privacy.freeText` is `keep`.
        public let personalPaths: Bool?
        /// For identifiers: roughly how many bits of the raw value an attacker does not know,
        /// i.e. how hard it is to recover from its hash for someone who holds the key.
        public let entropyBits: Int?
        public let entropyNote: String?
    }

    public struct ComponentSpec: Sendable, Codable, Hashable {
        public let name: String
        public let scope: IdentityComponent.Scope
        /// nil: decided per value by the source's file mode.
        public let worldReadable: Bool?
        public let description: String
    }

    public struct Entry: Sendable, Codable, Hashable {
        public let id: String
        public let tier: Tier
        public let timeoutMs: Int?
        public let description: String
        /// Host paths, with `*` matching one path component.
        public let reads: [String]
        public let syscalls: [String]
        public let signals: [SignalSpec]
        /// Values the probe offers to hardwareId/instanceId.
        public let identityComponents: [ComponentSpec]?
        /// Known benign causes that still fire a verdict (read by people, printed by `probes`).
        public let falsePositiveNotes: [String]?
    }

    public let catalogueVersion: Int
    public let stabilityClasses: [String: String]
    public let probes: [Entry]

    public static let embedded: ProbeCatalogue = {
        do {
            return try JSONDecoder.fingerly.decode(ProbeCatalogue.self, from: Data(PackageResources.catalogue_json))
        } catch {
            fatalError("the embedded probe catalogue does not decode: \(error)")
        }
    }()

    public func entry(_ id: String) -> Entry? { probes.first { $0.id == id } }

    public var signalNames: Set<String> { Set(probes.flatMap { $0.signals.map(\.name) }) }

    /// Signal name -> the id of the probe that reports it.
    public var signalOwners: [String: String] {
        var owners: [String: String] = [:]
        for probe in probes { for signal in probe.signals where owners[signal.name] == nil { owners[signal.name] = probe.id } }
        return owners
    }
}

/// Detection tables (`probes/detection-tables.json`): vendor strings and the like, as data.
struct DetectionTables: Sendable, Codable {
    struct VendorPattern: Sendable, Codable {
        /// Matched case-insensitively as a substring.
        let pattern: String
        let kind: String
        /// The cloud a DMI vendor string names, when it does.
        var cloud: String? = nil
        /// DMI attributes the pattern is tested against, when not every vendor string: a
        /// product name such as "Virtual Machine" names a hypervisor only beside its maker.
        var fields: [String]? = nil
        /// Attribute -> substring that must also be present for the row to apply.
        var requires: [String: String]? = nil
        /// Attribute -> substring whose presence keeps the row from applying.
        var excludes: [String: String]? = nil
        /// A cloud that also rents bare metal and sets the SMBIOS "virtual machine" bit only
        /// on its VMs: where that bit can be read, it decides.
        var smbiosVMBitDecides: Bool? = nil
    }

    struct HypervisorMarkers: Sendable, Codable {
        /// /proc/sysinfo substrings (s390).
        let sysinfo: [VendorPattern]
        /// /proc/cpuinfo substrings (POWER, Lx86).
        let cpuinfo: [VendorPattern]
        /// ACPI table OEM id -> hypervisor.
        let acpiOemIds: [String: String]
        /// Clocksource name prefixes.
        let clocksources: [VendorPattern]
        /// Guest driver modules in /sys/module.
        let guestDrivers: [VendorPattern]
        /// Substrings of /proc/device-tree/hypervisor/compatible (ARM, POWER, RISC-V).
        let deviceTreeHypervisors: [VendorPattern]
        /// Substrings of the device tree's root /proc/device-tree/compatible.
        let deviceTreeCompatible: [VendorPattern]
    }

    let cpuidHypervisorVendors: [String: String]
    let dmiVendors: [VendorPattern]
    let chassisTypes: [String: String]
    let placeholderUUIDs: [String]
    let placeholderSerials: [String]
    /// Bundle and directory paths that are the system trust store itself, not an override.
    let systemTrustPaths: [String]
    let debuggerProcesses: [String]
    let containerMarkers: [VendorPattern]
    /// DMI product names that say "bare metal" although the vendor is a cloud (EC2 .metal).
    let bareMetalProductSuffixes: [String]
    let hypervisorMarkers: HypervisorMarkers
    struct InterceptionCA: Sendable, Codable {
        /// Matched case-insensitively in the subject or issuer.
        let pattern: String
        let product: String
        /// "interception tool" or "corporate TLS inspection": users treat them differently.
        let category: String
    }

    let interceptionCAs: [InterceptionCA]
    /// machine-ids that many installations share (images that ship one).
    let sharedMachineIds: [String]
    /// Path fragments of plugins that programs dlopen themselves (NSS, gconv, PKCS#11…).
    let dlopenPlugins: [String]
    /// What well-known preloaded objects are, for the reason sentence.
    let knownPreloads: [VendorPattern]
    /// Substrings of /proc/*/cgroup paths and the container manager they belong to.
    let cgroupMarkers: [VendorPattern]
    /// Substrings of mapped file paths, with the tool they belong to ("valgrind", "frida", "rr"…).
    let mappingMarkers: [VendorPattern]
    /// Port -> the instrumentation server that listens there by default.
    let instrumentationPorts: [String: String]
    /// Variable name -> CI product.
    let ciEnvironmentVariables: [VendorPattern]
    let virtualDisplayProcesses: [String]
    let inputInjectorProcesses: [String]
    /// MAC prefix (OUI, or shorter) -> the virtual NIC's class ("qemu", "vmware", "docker"…).
    let nicVendorClasses: [String: String]

    static let embedded: DetectionTables = {
        do {
            return try JSONDecoder.fingerly.decode(DetectionTables.self, from: Data(PackageResources.tables_json))
        } catch {
            fatalError("the embedded detection tables do not decode: \(error)")
        }
    }()
}
