import FingerlyHost
import FingerlyModel

extension HostIdentity {
    package static func derive(from components: [IdentityComponent], hasher: IdentifierHasher) -> HostIdentity {
        func scoped(_ scope: IdentityComponent.Scope, version: Int) -> (String?, [String]) {
            let unique = identifierParts(scope, of: components)
            let summaries = unique.map {
                String($0.prefix(while: { $0 != "=" })) + ":" + String($0.split(separator: "=")[1].prefix(12))
            }
            return (identifier(scope, version: version, parts: unique, hasher: hasher), summaries)
        }
        let (hardwareId, hardwareParts) = scoped(.hardware, version: hardwareIdVersion)
        let (instanceId, instanceParts) = scoped(.instance, version: instanceIdVersion)
        let rootOnly = Array(Set(components.filter { !$0.worldReadable }.map { "\($0.scope.rawValue)/\($0.name):\($0.hash.prefix(12))" })).sorted()
        return HostIdentity(hardwareId: hardwareId, hardwareIdVersion: hardwareIdVersion,
                            instanceId: instanceId, instanceIdVersion: instanceIdVersion,
                            hardwareComponents: hardwareParts, instanceComponents: instanceParts,
                            rootOnlyEvidence: rootOnly)
    }

    /// The two identifiers `derive` gives, without its summaries: what a server recomputes for
    /// every report it is sent.
    package static func derivedIdentifiers(from components: [IdentityComponent],
                                           hasher: IdentifierHasher) -> (hardwareId: String?, instanceId: String?) {
        let hardware = identifierParts(.hardware, of: components), instance = identifierParts(.instance, of: components)
        return (identifier(.hardware, version: hardwareIdVersion, parts: hardware, hasher: hasher),
                identifier(.instance, version: instanceIdVersion, parts: instance, hasher: hasher))
    }

    /// `name=hash` of the scope's world-readable components, each once, sorted: the order probes
    /// finish in, or kernel enumeration order, must not matter.
    private static func identifierParts(_ scope: IdentityComponent.Scope,
                                        of components: [IdentityComponent]) -> [String] {
        Array(Set(components.filter { $0.scope == scope && $0.worldReadable }.map { "\($0.name)=\($0.hash)" })).sorted()
    }

    private static func identifier(_ scope: IdentityComponent.Scope, version: Int, parts: [String],
                                   hasher: IdentifierHasher) -> String? {
        parts.isEmpty ? nil : hasher.hash("fingerly-\(scope.rawValue)-id-v\(version)\n" + parts.joined(separator: "\n"))
    }
}
