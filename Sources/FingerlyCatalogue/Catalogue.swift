import FoundationEssentials
import FingerlyHost
import FingerlyModel

/// What kind of data a signal carries; identifiers are always hashed before they leave a probe.
package enum DataClass: String, Sendable, Codable, Hashable {
    case identifier, hardware, configuration, integrity
}

/// The probe catalogue (`probes/catalogue.json`): what each probe reads and reports, as data.
package struct ProbeCatalogue: Sendable, Codable, Hashable {
    package struct SignalSpec: Sendable, Codable, Hashable {
        package let name: String
        package let type: String
        package let `class`: DataClass
        package let stability: String
        package let description: String
        /// Free text that can name a person (a CA subject, a device name): reported as a
        /// fingerprint unless the policy's `privacy.freeText` is `keep`.
        package let personal: Bool?
        /// Paths that can carry a user's home directory (/home/alice/…): the directory's name is
        /// reported as a fingerprint unless the policy's `privacy.freeText` is `keep`.
        package let personalPaths: Bool?
        /// For identifiers: roughly how many bits of the raw value an attacker does not know,
        /// i.e. how hard it is to recover from its hash for someone who holds the key.
        package let entropyBits: Int?
        package let entropyNote: String?
    }

    package struct ComponentSpec: Sendable, Codable, Hashable {
        package let name: String
        package let scope: IdentityComponent.Scope
        /// nil: decided per value by the source's file mode.
        package let worldReadable: Bool?
        package let description: String
    }

    package struct Entry: Sendable, Codable, Hashable {
        package let id: String
        package let tier: Tier
        package let timeoutMs: Int?
        /// Taken before every probe of either tier: the run's longest probe, which would otherwise end it.
        package let startsFirst: Bool?
        package let description: String
        /// Host paths, with `*` matching one path component.
        package let reads: [String]
        package let syscalls: [String]
        package let signals: [SignalSpec]
        /// Values the probe offers to hardwareId/instanceId.
        package let identityComponents: [ComponentSpec]?
        /// Known benign causes that still fire a verdict (read by people, printed by `probes`).
        package let falsePositiveNotes: [String]?
    }

    package let catalogueVersion: Int
    package let stabilityClasses: [String: String]
    package let probes: [Entry]

    // `embedded`, the shipped catalogue, is in CompiledCatalogue.swift, generated from the JSON:
    // decoding it at every start cost about 12 M instructions.

    package func entry(_ id: String) -> Entry? { probes.first { $0.id == id } }

    package var signalNames: Set<String> { Set(probes.flatMap { $0.signals.map(\.name) }) }

    /// Signal name -> the id of the probe that reports it.
    package var signalOwners: [String: String] {
        var owners: [String: String] = [:]
        for probe in probes { for signal in probe.signals where owners[signal.name] == nil { owners[signal.name] = probe.id } }
        return owners
    }

    /// Probe id -> the tier it runs in.
    package var probeTiers: [String: Tier] {
        Dictionary(probes.map { ($0.id, $0.tier) }, uniquingKeysWith: { first, _ in first })
    }
}
