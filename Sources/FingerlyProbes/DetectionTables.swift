import FoundationEssentials
import FingerlyHost
import FingerlyModel

/// Detection tables (`probes/detection-tables.json`): vendor strings and the like, as data.
package struct DetectionTables: Sendable, Codable {
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

    package static let embedded: DetectionTables = {
        do {
            return try JSONDecoder.fingerly.decode(DetectionTables.self, from: Data(PackageResources.tables_json))
        } catch {
            fatalError("the embedded detection tables do not decode: \(error)")
        }
    }()
}

extension DetectionTables {
    package static let stringTableNames = ["debuggerProcesses", "placeholderUUIDs", "placeholderSerials", "systemTrustPaths"]

    package func stringTable(named name: String) -> [String]? {
        switch name {
        case "debuggerProcesses": return debuggerProcesses
        case "placeholderUUIDs": return placeholderUUIDs
        case "placeholderSerials": return placeholderSerials
        case "systemTrustPaths": return systemTrustPaths
        default: return nil
        }
    }

    /// Every table of strings, by name.
    package var stringTables: [String: [String]] {
        Dictionary(uniqueKeysWithValues: Self.stringTableNames.compactMap { name in stringTable(named: name).map { (name, $0) } })
    }
}
