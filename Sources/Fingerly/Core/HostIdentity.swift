/// A value offered to the stable identifiers, already hashed.
public struct IdentityComponent: Sendable, Codable, Hashable {
    public enum Scope: String, Sendable, Codable, Hashable {
        /// The physical or virtual machine: containers on one host share it.
        case hardware
        /// This OS installation.
        case instance
    }

    public let scope: Scope
    /// A kind, not an instance name: "disk", "nic", "dmi-model"… Kernel names such as sda
    /// can swap between boots and are kept out of it.
    public let name: String
    public let hash: String
    /// Readable by an unprivileged user as well as root. Only these shape an identifier, so
    /// that running as root or not never flips it; the rest is extra evidence.
    public let worldReadable: Bool
}

/// The two stable identifiers and what went into them.
public struct HostIdentity: Sendable, Codable, Hashable {
    public static let hardwareIdVersion = 1
    public static let instanceIdVersion = 1

    public let hardwareId: String?
    public let hardwareIdVersion: Int
    public let instanceId: String?
    public let instanceIdVersion: Int
    /// `name:hash-prefix` of every component that shaped each identifier, so a server can
    /// match fuzzily when one of them changes (a disk replaced).
    public let hardwareComponents: [String]
    public let instanceComponents: [String]
    /// Components seen but only readable by root: evidence, never part of an identifier.
    public let rootOnlyEvidence: [String]

    static func derive(from components: [IdentityComponent], hasher: IdentifierHasher) -> HostIdentity {
        func identifier(_ scope: IdentityComponent.Scope, version: Int) -> (String?, [String]) {
            let parts = components.filter { $0.scope == scope && $0.worldReadable }
                .map { "\($0.name)=\($0.hash)" }
            // A set: the order probes finish in, or kernel enumeration order, must not matter.
            let unique = Array(Set(parts)).sorted()
            guard !unique.isEmpty else { return (nil, []) }
            let id = hasher.hash("fingerly-\(scope.rawValue)-id-v\(version)\n" + unique.joined(separator: "\n"))
            return (id, unique.map { String($0.prefix(while: { $0 != "=" })) + ":" + String($0.split(separator: "=")[1].prefix(12)) })
        }
        let (hardwareId, hardwareParts) = identifier(.hardware, version: hardwareIdVersion)
        let (instanceId, instanceParts) = identifier(.instance, version: instanceIdVersion)
        let rootOnly = Array(Set(components.filter { !$0.worldReadable }.map { "\($0.scope.rawValue)/\($0.name):\($0.hash.prefix(12))" })).sorted()
        return HostIdentity(hardwareId: hardwareId, hardwareIdVersion: hardwareIdVersion,
                            instanceId: instanceId, instanceIdVersion: instanceIdVersion,
                            hardwareComponents: hardwareParts, instanceComponents: instanceParts,
                            rootOnlyEvidence: rootOnly)
    }
}
