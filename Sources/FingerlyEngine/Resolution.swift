import FingerlyCatalogue
import FingerlyModel
import FingerlyPolicy
import FingerlyStore

/// How much one kind of identity component says about a host, by the component names the
/// probes emit (IdentityDerivation, MachineIdentityProbe, BlockProbe, NetworkInterfacesProbe…).
///
/// A table in code rather than a data file: the names only change with probe code (a new
/// component is a Swift change and a test anyway), a data file would need a resource, a loader
/// and its validation in this target, and the probes' own tables ship to every client, which
/// never resolves anything. The policy's `suspect` block is about verdicts, not components.
package enum ComponentWeights {
    /// Points per component name. Serials and hardware UUIDs name one unit; a MAC burned into a
    /// NIC or a disk's serial/WWN names one part; the OS installation's ids name one install.
    /// Model strings are shared by every unit of a model and only break ties.
    package static let table: [String: Int] = [
        // hardware, one unit
        "dmi-uuid": 40,
        "dmi-product-serial": 25,
        "dmi-board-serial": 25,
        "dmi-chassis-serial": 15,
        // hardware, one part
        "disk": 30,
        "nic": 30,
        "built-in-panel": 20,
        // installation
        "machine-id": 40,
        "root-filesystem": 30,
        "partition-table": 25,
        // model-level: the same on every host of a model
        "pci-inventory": 5,
        "cpu-model": 2,
        "dmi-model": 2,
    ]
    /// A name this table does not know yet (a newer collector) counts a little, never decides.
    package static let unknownWeight = 5
    /// From this weight a component names one host (or one part) rather than a model, and is
    /// worth looking candidates up by.
    package static let strongFrom = 15
    /// Strong weight a report must carry to be `identifiable`: one machine-id, or a NIC, or a disk.
    package static let identifiableFloor = 30

    package static func weight(_ name: String) -> Int { table[name] ?? unknownWeight }
}

/// The thresholds of resolution (server.md): one place, so tests and the report quote them.
package enum ResolutionThresholds {
    /// Weighted overlap from which a report without an exact instanceId joins a visitor.
    package static let fuzzyMatch = 0.6
    /// Hardware overlap from which an exact instanceId with another hardwareId is the same
    /// machine with a part replaced, not a clone on other hardware.
    package static let sameHardware = 0.5
    /// Components kept per visitor (a report's are already bounded per probe).
    package static let componentLimit = 256
    /// Device keys remembered per visitor, newest-proven last.
    package static let deviceKeyLimit = 8
    /// Confidence of the visitor a claim without key is first answered as: only its own key,
    /// when it signed, will know it next time.
    package static let claimConfidence = 20
    /// Confidence of the visitor a key's earlier claim was settled as: the key proves it is the
    /// same device as that claim's, and nothing more.
    package static let settledClaimConfidence = 80
    /// Visitors fetched as fuzzy candidates.
    package static let candidateLimit = 64
}

/// What resolution found beside the visitor: it becomes a trigger in the farm group.
package struct ResolutionFinding: Sendable, Hashable {
    package let signal: String
    package let group: VerdictName
    package let confidence: Confidence

    /// The instanceId of this report is held by a visitor on other hardware: a cloned image or VM.
    package static let duplicatedMachineIdentity = ResolutionFinding(signal: "duplicated_machine_identity", group: .farm, confidence: .high)
    /// The report claims the identity of a visitor bound to device keys (its instanceId, or the
    /// components that would join it) without a signature by one of them: copied identifiers, or
    /// an installation that lost its key. High: only the key proves the host, and the request is
    /// answered as a visitor of its own.
    package static let identityClaimedWithoutKey = ResolutionFinding(signal: "identity_claimed_without_key", group: .farm,
                                                                     confidence: .high)
}

/// The identity of one report as resolution sees it.
package struct ObservedIdentity: Sendable, Hashable {
    package let instanceId: String?
    package let hardwareId: String?
    /// Every component the probes offered, root-only ones included (they are evidence for
    /// matching even though they never shape an identifier), without duplicates.
    package let components: [ComponentRecord]

    package init(instanceId: String?, hardwareId: String?, components: [ComponentRecord]) {
        self.instanceId = instanceId
        self.hardwareId = hardwareId
        var seen = Set<ComponentRecord>()
        self.components = Array(components.filter { seen.insert($0).inserted }.prefix(ResolutionThresholds.componentLimit))
    }

    package init(report: SignalReport) {
        self.init(instanceId: report.identity.instanceId, hardwareId: report.identity.hardwareId,
                  components: report.probes.flatMap(\.identityComponents).map {
                      ComponentRecord(scope: $0.scope.rawValue, name: $0.name, hash: $0.hash)
                  })
    }

    /// Weight of the distinct strong component names present.
    package var strongWeight: Int {
        Set(components.map(\.name)).map(ComponentWeights.weight).filter { $0 >= ComponentWeights.strongFrom }.reduce(0, +)
    }

    package var identifiable: Bool { strongWeight >= ComponentWeights.identifiableFloor }

    /// Hashes worth looking candidates up by: model-level ones would match every host of a model.
    package var strongHashes: [String] {
        components.filter { ComponentWeights.weight($0.name) >= ComponentWeights.strongFrom }.map(\.hash)
    }
}

/// How two component sets agree, over the component kinds both carry: a kind one side lacks
/// (a probe denied, a run without root) is no evidence either way.
package struct Overlap: Sendable, Hashable {
    /// Weighted agreement 0…1 over the comparable kinds; 0 when none is comparable.
    package let score: Double
    /// Weight of the comparable kinds.
    package let comparableWeight: Int
    /// Weight of the comparable strong kinds.
    package let comparableStrongWeight: Int
    /// Instance-scope kinds were comparable and none shared a hash: another OS installation.
    package let otherInstallation: Bool

    package static func between(_ left: [ComponentRecord], _ right: [ComponentRecord], scope: String? = nil) -> Overlap {
        struct Kind: Hashable { let scope: String; let name: String }
        func grouped(_ records: [ComponentRecord]) -> [Kind: Set<String>] {
            var groups: [Kind: Set<String>] = [:]
            for record in records where scope == nil || record.scope == scope {
                groups[Kind(scope: record.scope, name: record.name), default: []].insert(record.hash)
            }
            return groups
        }
        let (a, b) = (grouped(left), grouped(right))
        var agreed = 0.0, comparable = 0, strong = 0
        var instanceComparable = false, instanceShared = false
        for (kind, hashes) in a {
            guard let other = b[kind] else { continue }
            let weight = ComponentWeights.weight(kind.name)
            let shared = hashes.intersection(other).count
            agreed += Double(weight) * Double(shared) / Double(hashes.union(other).count)
            comparable += weight
            if weight >= ComponentWeights.strongFrom { strong += weight }
            if kind.scope == IdentityComponent.Scope.instance.rawValue {
                instanceComparable = true
                if shared > 0 { instanceShared = true }
            }
        }
        return Overlap(score: comparable > 0 ? agreed / Double(comparable) : 0, comparableWeight: comparable,
                       comparableStrongWeight: strong, otherInstallation: instanceComparable && !instanceShared)
    }
}

/// The outcome of resolving one report against an organization's visitors.
package struct Resolution: Sendable, Hashable {
    /// The visitor the report joins; nil: a new visitor.
    package let matched: VisitorRecord?
    package let confidence: Int
    package let identifiable: Bool
    package let findings: [ResolutionFinding]
}

/// Resolution as server.md sets it, over what the store returned: pure, so tests need no store.
///
/// 1. A visitor with this exact instanceId and consistent hardware (the same hardwareId, one
///    of them absent, or hardware overlap ≥ `sameHardware`: a disk or NIC replaced) is the
///    visitor: 98 for the same hardwareId, 95 with one absent, 70–90 by overlap otherwise.
///    Holders of the instanceId on other hardware are clones: the farm finding; when every
///    holder is one, a new visitor.
/// 2. Otherwise the candidate with the best weighted overlap ≥ `fuzzyMatch` over at least
///    `identifiableFloor` of comparable strong weight, and not another installation
///    (instance kinds comparable, none shared): confidence 50 at the threshold to 90 at 1.
/// 3. Otherwise a new visitor: 95 less half the best near miss when identifiable, else 20
///    (nothing stable to know it by next time).
package func resolveVisitor(_ observed: ObservedIdentity, instanceHolders: [VisitorRecord], candidates: [VisitorRecord]) -> Resolution {
    let identifiable = observed.identifiable
    var findings: [ResolutionFinding] = []

    if observed.instanceId != nil, !instanceHolders.isEmpty {
        struct Judged { let visitor: VisitorRecord; let rank: Int; let confidence: Int; let hardware: Double }
        var consistent: [Judged] = []
        var bestOtherHardware = 0.0
        for holder in instanceHolders {
            if holder.hardwareId != nil, holder.hardwareId == observed.hardwareId {
                consistent.append(Judged(visitor: holder, rank: 2, confidence: 98, hardware: 1))
            } else if holder.hardwareId == nil || observed.hardwareId == nil {
                consistent.append(Judged(visitor: holder, rank: 1, confidence: 95, hardware: 1))
            } else {
                let hardware = Overlap.between(observed.components, holder.components, scope: IdentityComponent.Scope.hardware.rawValue)
                if hardware.comparableWeight > 0, hardware.score >= ResolutionThresholds.sameHardware {
                    let confidence = min(90, max(70, Int((50 + 40 * hardware.score).rounded())))
                    consistent.append(Judged(visitor: holder, rank: 0, confidence: confidence, hardware: hardware.score))
                } else {
                    bestOtherHardware = max(bestOtherHardware, hardware.score)
                }
            }
        }
        if consistent.count < instanceHolders.count { findings.append(.duplicatedMachineIdentity) }
        let best = consistent.max { a, b in
            (a.rank, a.hardware, a.visitor.lastSeen, b.visitor.id) < (b.rank, b.hardware, b.visitor.lastSeen, a.visitor.id)
        }
        if let best {
            return Resolution(matched: best.visitor, confidence: best.confidence, identifiable: identifiable, findings: findings)
        }
        // Every holder runs on other hardware: a clone is a visitor of its own.
        let confidence = identifiable ? min(95, max(50, Int((95 - 50 * bestOtherHardware).rounded()))) : 20
        return Resolution(matched: nil, confidence: confidence, identifiable: identifiable, findings: findings)
    }

    var best: (visitor: VisitorRecord, score: Double)?
    var bestNearMiss = 0.0
    for candidate in candidates {
        let overlap = Overlap.between(observed.components, candidate.components)
        guard !overlap.otherInstallation, overlap.comparableStrongWeight >= ComponentWeights.identifiableFloor else { continue }
        guard overlap.score >= ResolutionThresholds.fuzzyMatch else {
            bestNearMiss = max(bestNearMiss, overlap.score)
            continue
        }
        if let current = best,
           (current.score, current.visitor.lastSeen, candidate.id) >= (overlap.score, candidate.lastSeen, current.visitor.id) {
            continue
        }
        best = (candidate, overlap.score)
    }
    if let best {
        let confidence = min(90, max(50, Int((50 + 100 * (best.score - ResolutionThresholds.fuzzyMatch)).rounded())))
        return Resolution(matched: best.visitor, confidence: confidence, identifiable: identifiable, findings: findings)
    }
    let confidence = identifiable ? min(95, max(50, Int((95 - 50 * bestNearMiss).rounded()))) : 20
    return Resolution(matched: nil, confidence: confidence, identifiable: identifiable, findings: findings)
}

/// The visitor as it is stored after this report: components of the kinds the report carries
/// replace the stored ones (a replaced disk is learned), kinds it lacks are kept (a run without
/// root forgets nothing). `provenKeyID`, the key this request proved the visitor with, is kept
/// with the time it was first proven, oldest-proven first; past the limit the oldest-proven goes.
/// A visitor without keys (first seen unsigned) is never bound afterwards: nil is passed for it.
package func updatedVisitor(_ visitor: VisitorRecord, with observed: ObservedIdentity, provenKeyID: String?,
                            now: Int64) -> VisitorRecord {
    var next = visitor
    struct Kind: Hashable { let scope: String; let name: String }
    let reported = Set(observed.components.map { Kind(scope: $0.scope, name: $0.name) })
    let kept = visitor.components.filter { !reported.contains(Kind(scope: $0.scope, name: $0.name)) }
    next.components = Array((observed.components + kept).prefix(ResolutionThresholds.componentLimit))
    if let instanceId = observed.instanceId { next.instanceId = instanceId }
    if let hardwareId = observed.hardwareId { next.hardwareId = hardwareId }
    next.lastSeen = max(visitor.lastSeen, now)
    if let key = provenKeyID, !visitor.isBound(to: key) {
        let ordered = visitor.deviceKeys.sorted { ($0.firstProvenAt, $0.keyId) < ($1.firstProvenAt, $1.keyId) }
        // Never at or before the newest key's time, so a key proven within the same second as
        // the one before it is still the newest, and a keyid never decides which key goes.
        let newest = ordered.last?.firstProvenAt ?? Int64.min
        let proven = newest < now ? now : (newest == Int64.max ? newest : newest + 1)
        let added = ordered + [DeviceKeyRecord(keyId: key, firstProvenAt: proven)]
        next.deviceKeys = Array(added.suffix(ResolutionThresholds.deviceKeyLimit))
    }
    return next
}

/// Resolution findings as triggers, scored like the policy scores verdicts: a finding adds its
/// group's weight times the factor of its confidence, but a group never adds more than its
/// weight in all (a farm verdict already true leaves less room), so the server's evidence and
/// the report's are one group, not two. Zero-weight groups add nothing and no trigger, as in
/// `SuspectScoring.assess`. The score stays capped at 100 and the level is the policy's.
package func addingFindings(_ findings: [ResolutionFinding], to assessment: SuspectScoring.Assessment,
                            scoring: SuspectScoring) -> (score: Int, level: SuspectLevel, triggers: [IdentifyTrigger]) {
    var triggers = assessment.triggers
    var added = 0
    for finding in findings {
        guard let weight = scoring.weights[finding.group], weight > 0 else { continue }
        let usedByGroup = triggers.filter { $0.group == finding.group.rawValue }.map(\.weight).reduce(0, +)
        let points = min(max(0, weight - usedByGroup),
                         Int((Double(weight) * (scoring.confidenceFactors[finding.confidence] ?? 0)).rounded()))
        triggers.append(IdentifyTrigger(signal: finding.signal, group: finding.group.rawValue, weight: points, confidence: finding.confidence))
        added += points
    }
    let score = min(100, assessment.score + added)
    let level: SuspectLevel = score >= scoring.highFrom ? .high : score >= scoring.mediumFrom ? .medium : .low
    return (score, level, triggers)
}
