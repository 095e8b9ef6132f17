/// A value offered to the stable identifiers, already hashed.
public struct IdentityComponent: Sendable, Codable, Hashable {
    /// Which identifier a component may shape.
    public enum Scope: String, Sendable, Codable, Hashable {
        /// The physical or virtual machine: containers on one host share it.
        case hardware
        /// This OS installation.
        case instance
    }

    /// The identifier this component belongs to.
    public let scope: Scope
    /// A kind, not an instance name: "disk", "nic", "dmi-model"… Kernel names such as sda
    /// can swap between boots and are kept out of it.
    public let name: String
    /// The value, HMAC-SHA256 under the report's identifier keying.
    public let hash: String
    /// Readable by an unprivileged user as well as root. Only these shape an identifier, so
    /// that running as root or not never flips it; the rest is extra evidence.
    public let worldReadable: Bool

    package init(scope: Scope, name: String, hash: String, worldReadable: Bool) {
        self.scope = scope
        self.name = name
        self.hash = hash
        self.worldReadable = worldReadable
    }
}

/// The two stable identifiers and what went into them.
public struct HostIdentity: Sendable, Codable, Hashable {
    /// The version of the hardwareId derivation; a change makes every hardwareId new.
    public static let hardwareIdVersion = 1
    /// The version of the instanceId derivation; a change makes every instanceId new.
    public static let instanceIdVersion = 1

    /// The physical or virtual machine: shared by containers on one host. nil when no
    /// world-readable hardware component was found.
    public let hardwareId: String?
    /// The derivation version `hardwareId` was made with.
    public let hardwareIdVersion: Int
    /// This OS installation. nil when no world-readable instance component was found.
    public let instanceId: String?
    /// The derivation version `instanceId` was made with.
    public let instanceIdVersion: Int
    /// `name:hash-prefix` of every component that shaped each identifier, so a server can
    /// match fuzzily when one of them changes (a disk replaced).
    public let hardwareComponents: [String]
    /// `name:hash-prefix` of every component that shaped `instanceId`.
    public let instanceComponents: [String]
    /// Components seen but only readable by root: evidence, never part of an identifier.
    public let rootOnlyEvidence: [String]

    package init(hardwareId: String? = nil, hardwareIdVersion: Int, instanceId: String? = nil, instanceIdVersion: Int, hardwareComponents: [String], instanceComponents: [String], rootOnlyEvidence: [String]) {
        self.hardwareId = hardwareId
        self.hardwareIdVersion = hardwareIdVersion
        self.instanceId = instanceId
        self.instanceIdVersion = instanceIdVersion
        self.hardwareComponents = hardwareComponents
        self.instanceComponents = instanceComponents
        self.rootOnlyEvidence = rootOnlyEvidence
    }
}
