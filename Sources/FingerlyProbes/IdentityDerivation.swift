import FingerlyHost
import FingerlyModel

extension HostIdentity {
    package static func derive(from components: [IdentityComponent], hasher: IdentifierHasher) -> HostIdentity {
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
