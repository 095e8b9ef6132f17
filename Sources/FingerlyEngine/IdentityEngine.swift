import FoundationEssentials
import FingerlyHost
import FingerlyModel
import FingerlyPolicy
import FingerlyStore
import Synchronization

/// An answer of the engine: an HTTP status and its JSON body (an `IdentifyAnswer`, an event,
/// or a `WireError`), and the error code when it is one. The server writes it as is; the local
/// mode decodes it.
package struct EngineAnswer: Sendable, Hashable {
    package let status: Int
    package let body: [UInt8]
    package let code: String?
    /// Members of the body no type reads, dropped from the event this answer stored (`/metrics`).
    package let unknownMembersDropped: Int

    package init(status: Int, body: [UInt8], code: String?, unknownMembersDropped: Int = 0) {
        self.status = status
        self.body = body
        self.code = code
        self.unknownMembersDropped = unknownMembersDropped
    }
}

/// One visitor of the local listing (`fingerly-identify visitors`).
package struct VisitorSummary: Codable, Sendable, Hashable {
    package let visitorId: String
    package let firstSeen: Date
    package let lastSeen: Date
    package let instanceId: String?
    package let hardwareId: String?
    package let identifiable: Bool
    package let components: Int
    package let deviceKeys: Int
}

/// What `GET /v1/events/{requestId}` answers (docs/api.md): the identify answer as first
/// stored, when it arrived, the report's tag, the signature facts and the report as judged.
package struct StoredEvent: Codable, Sendable {
    package struct Signature: Codable, Sendable, Hashable {
        package let verified: Bool
        /// The verified `keyid`; null when there was none or it did not verify.
        package let keyId: String?
    }
    package let requestId: String
    package let receivedAt: Date
    package let visitorId: String
    package let visitorIsNew: Bool
    package let visitorConfidence: Int
    package let identifiable: Bool
    package let duplicate: Bool
    package let suspectScore: Int?
    package let suspectLevel: SuspectLevel?
    package let triggers: [IdentifyTrigger]
    package let verdicts: Verdicts
    package let policy: String?
    package let tag: String?
    package let signature: Signature
    package let report: SignalReport
}

/// Resolution, idempotency and scoring over a store (server.md), shared by `fingerly-server`
/// and the local mode. Every piece of state is in the store, so several processes may share it.
/// `now` is Unix time in seconds.
package final class IdentityEngine: Sendable {
    package let store: any IdentityStore
    package let policy: Policy
    private let verdictEngine: VerdictEngine
    private let writer: AnswerWriter
    /// How the clients hashed the identifiers this engine recomputes.
    private let clientKeying: ClientIdentifierKeying
    /// Each organization's identifier secret once a transaction that read it committed: it is
    /// written once and never changes, so a copy here is never stale.
    private let identifierSecrets = Mutex<[String: [UInt8]]>([:])

    /// An in-flight marker younger than this answers 409; an older one belongs to an attempt
    /// that died (a killed process), and the next attempt takes it over.
    package static let inFlightTakeoverSeconds: Int64 = 30
    /// How long an idempotency key is remembered (docs/api.md: 24 hours).
    package static let idempotencyRetentionSeconds: Int64 = 86_400
    /// Longest idempotency key accepted; the client's are 36-byte UUIDs.
    package static let idempotencyKeyByteLimit = 255
    /// Longest device keyid kept; RFC 9421 keyids of the wire contract are 64 hex digits.
    package static let deviceKeyIDByteLimit = 128
    /// Most bytes of a report kept as stored (re-keyed, canonical): a collected report of both
    /// tiers takes 10–40 KB; a body of free-form signals up to `--body-limit` is refused.
    package static let storedReportByteLimit = 128 * 1024
    /// Longest requestId looked up; minted ones are 30 bytes.
    package static let requestIdByteLimit = 128

    /// `collectedHere`: the local mode, whose reports this process collected itself; a server
    /// takes no sender's word that a probe or source was `absent` or `skipped`.
    package init(store: any IdentityStore, policy: Policy, clientKeying: ClientIdentifierKeying = .organizationName,
                 collectedHere: Bool = false) {
        self.store = store
        self.policy = policy
        self.clientKeying = clientKeying
        verdictEngine = VerdictEngine(policy: policy, catalogue: .embedded,
                                      absence: collectedHere ? .missingEvidenceCollectedHere : .missingEvidence)
        writer = AnswerWriter(policyName: policy.name)
    }

    private enum Step {
        case answer(EngineAnswer)
        /// Go on; `createdAt` of the idempotency record this attempt holds.
        case proceed(createdAt: Int64)
    }

    /// Longest identifier, component name or hash stored: the client writes 64 hex digits and
    /// short kind names.
    package static let identifierByteLimit = 128

    /// The first identifier the store would keep that is not 1–128 printable ASCII characters.
    /// They become indexed text columns: a NUL, which JSON allows, is refused by PostgreSQL and
    /// kept by SQLite, and both backends must answer alike (and a megabyte id is no id).
    static func invalidIdentifierField(_ report: SignalReport) -> String? {
        func valid(_ text: String) -> Bool {
            text.utf8.count <= identifierByteLimit && !text.isEmpty && text.utf8.allSatisfy { $0 >= 0x20 && $0 < 0x7F }
        }
        if let id = report.identity.instanceId, !valid(id) { return "report.identity.instanceId" }
        if let id = report.identity.hardwareId, !valid(id) { return "report.identity.hardwareId" }
        for (probeIndex, probe) in report.probes.enumerated() {
            for (index, component) in probe.identityComponents.enumerated() where !valid(component.name) || !valid(component.hash) {
                return "report.probes[\(probeIndex)].identityComponents[\(index)].\(valid(component.name) ? "hash" : "name")"
            }
        }
        return nil
    }

    /// The index of the first probe whose id an earlier probe has: the verdicts judge the first,
    /// a reader of the stored event that keeps the last would see another report.
    static func repeatedProbeIndex(_ report: SignalReport) -> Int? {
        var seen = Set<String>(minimumCapacity: report.probes.count)
        return report.probes.firstIndex { !seen.insert($0.id).inserted }
    }

    /// The first identity summary that lists more entries than the report has components: each
    /// entry stands for one component, and each is re-keyed against them (tens of thousands of
    /// made-up ones cost seconds of CPU a request).
    static func oversizedSummaryField(_ report: SignalReport) -> String? {
        let components = report.probes.reduce(0) { $0 + $1.identityComponents.count }
        let identity = report.identity
        for (field, summaries) in [("hardwareComponents", identity.hardwareComponents),
                                   ("instanceComponents", identity.instanceComponents),
                                   ("rootOnlyEvidence", identity.rootOnlyEvidence)] where summaries.count > components {
            return "report.identity." + field
        }
        return nil
    }

    /// `POST /v1/identify` for an authenticated organization.
    package func identify(organization: String, idempotencyKey: String, body: [UInt8], deviceKeyID: String?,
                          signatureVerified: Bool, rotatedFrom: String? = nil, now: Int64) -> EngineAnswer {
        identify(idempotencyKey: idempotencyKey, body: body, deviceKeyID: deviceKeyID, signatureVerified: signatureVerified,
                 rotatedFrom: rotatedFrom, organizationHint: organization, now: now) { (tx) throws(StoreError) in
            // No key admitted it: the organization may not exist yet, and its secret lives in its row.
            _ = try tx.ensureOrganization(named: organization, now: now)
            return .admitted(organization: organization)
        }
    }

    /// What the caller's admission step decides, inside the engine's transaction.
    package enum Admission {
        /// `deviceStorageLimit`: bytes of events one visitor (one device) may keep, nil for no
        /// bound; a visitor at it is answered 507 `device_quota_exceeded`, the others go on.
        case admitted(organization: String, deviceStorageLimit: Int64? = nil)
        /// Not admitted: the engine stores nothing more and answers this.
        case refused(EngineAnswer)
    }

    /// `POST /v1/identify` with the caller's admission (key, organization, rate limit) in one
    /// transaction with everything the request stores: one commit a request, and one wait for
    /// the store's writer. `admit` may run more than once (a busy store is retried), so it must
    /// have no effect outside the transaction.
    ///
    /// The body is read, checked and judged before the transaction, since none of that depends
    /// on the store. What depends on the organization (the identifiers the client derived, the
    /// report keyed with the organization's secret) is prepared before it too when
    /// `organizationHint` names the organization and its secret is known here; inside it the
    /// admission's organization is compared with the hint, and the work is done again there when
    /// they differ. Either way the answers come in the order they did: an unknown key is told so
    /// before anything about the body, and a refused request stores nothing but its admission.
    /// `rotatedFrom`: the keyid of an old key whose rotation statement for the verified key the
    /// caller checked; it lets the new key join a visitor bound to the old one.
    /// `judgeEarly` false leaves all of that to the transaction, after the admission: for a
    /// request the caller expects to be refused (a key past its budget), which then costs no
    /// more than its admission.
    package func identify(idempotencyKey: String, body: [UInt8], deviceKeyID: String?, signatureVerified: Bool,
                          rotatedFrom: String? = nil, organizationHint: String? = nil, judgeEarly: Bool = true, now: Int64,
                          admit: (any StoreTransaction) throws(StoreError) -> Admission) -> EngineAnswer {
        let keyIsValid = !idempotencyKey.isEmpty && idempotencyKey.utf8.count <= Self.idempotencyKeyByteLimit
        // Only a verified keyid is the sender's; an unverified one is whatever it wrote.
        let verifiedKeyID = signatureVerified
            ? deviceKeyID.flatMap { $0.isEmpty || $0.utf8.count > Self.deviceKeyIDByteLimit ? nil : $0 } : nil
        let binding = IdempotencyBinding(body: body, deviceKeyID: verifiedKeyID, rotatedFrom: rotatedFrom)
        let early = judgeEarly ? judge(body) : nil
        var hinted: (organization: String, keyed: Keyed)?
        if case .judged(let submission)? = early, let organization = organizationHint,
           let secret = identifierSecrets.withLock({ $0[organization] }) {
            hinted = (organization, keyed(submission, organization: organization, keys: StoredIdentifierKeys(secret: secret)))
        }
        let milliseconds = Int64((Date().timeIntervalSince1970 * 1000).rounded(.down))
        let request = Request(key: idempotencyKey, binding: binding, deviceKeyID: verifiedKeyID,
                              signatureVerified: signatureVerified, rotatedFrom: verifiedKeyID == nil ? nil : rotatedFrom,
                              requestId: EngineWire.mintTimeOrderedId(prefix: "req_", unixMilliseconds: milliseconds), now: now)
        var known: (organization: String, secret: [UInt8])?
        let answer: EngineAnswer
        do {
            answer = try store.transaction { (tx) throws(StoreError) -> EngineAnswer in
                known = nil
                let organization: String, deviceStorageLimit: Int64?
                switch try admit(tx) {
                case .refused(let answer): return answer
                case .admitted(let name, let limit): (organization, deviceStorageLimit) = (name, limit)
                }
                guard let secret = try self.identifierSecret(tx, organization: organization) else {
                    return .error(500, "internal", "The organization has no identifier secret.")
                }
                known = (organization, secret)
                guard keyIsValid else {
                    return .badRequest("The Idempotency-Key is empty or longer than \(Self.idempotencyKeyByteLimit) bytes.")
                }
                let createdAt: Int64
                switch try self.begin(tx, organization: organization, key: idempotencyKey, binding: binding, now: now) {
                case .answer(let answer): return answer
                case .proceed(let created): createdAt = created
                }
                let submission: JudgedSubmission
                switch early ?? self.judge(body) {
                case .refused(let answer): return answer
                case .judged(let judged): submission = judged
                }
                let keyed = hinted.flatMap { $0.organization == organization ? $0.keyed : nil }
                    ?? self.keyed(submission, organization: organization, keys: StoredIdentifierKeys(secret: secret))
                switch keyed {
                case .refused(let answer):
                    return answer
                case .keyed(let ready):
                    return try self.store(submission, ready, request, organization: organization, createdAt: createdAt,
                                          deviceStorageLimit: deviceStorageLimit, tx)
                }
            }
        } catch {
            return .storeFailure(error)
        }
        // Only once committed: a secret made in a transaction that rolled back was never kept.
        if let known { identifierSecrets.withLock { $0[known.organization] = known.secret } }
        return answer
    }

    /// What an identify request brings beside its body.
    private struct Request {
        let key: String
        let binding: IdempotencyBinding
        /// Verified, or nil.
        let deviceKeyID: String?
        let signatureVerified: Bool
        let rotatedFrom: String?
        let requestId: String
        let now: Int64
    }

    /// The organization's identifier secret, made on its first request; nil when it does not exist.
    private func identifierSecret(_ tx: any StoreTransaction, organization: String) throws(StoreError) -> [UInt8]? {
        if let known = identifierSecrets.withLock({ $0[organization] }) { return known }
        let candidate = randomBytes(StoredIdentifierKeys.secretLength)
        let secret = try tx.identifierSecret(organization: organization, candidate: candidate)
        if let secret, secret == candidate {
            // Made now: visitors stored before the organization had a secret hold the values
            // clients sent, and are keyed like every later one before anything looks them up.
            let keys = StoredIdentifierKeys(secret: secret)
            _ = try tx.rekeyVisitors(organization: organization, keys.rekey)
        }
        return secret
    }

    /// What the key's record says before any work. Nothing is written here: the request's one
    /// transaction writes the completed record at its end, or nothing. A concurrent attempt with
    /// the same key waits for the store's writer (SQLite) or for the record's row (PostgreSQL:
    /// `putIdempotency` of a key read as absent fails as transient and the transaction runs
    /// again), and then replays the answer. An in-flight marker is what a build before the one
    /// transaction wrote, or a process killed mid-request left: young, it answers 409; stale,
    /// the request takes it over.
    private func begin(_ tx: any StoreTransaction, organization: String, key: String, binding: IdempotencyBinding,
                       now: Int64) throws(StoreError) -> Step {
        if let record = try tx.idempotency(organization: organization, key: key),
           !Self.expired(record.createdAt, now: now) {
            guard binding.matches(record.bodyHash) else { return .answer(.keyReused) }
            switch record.state {
            case .complete:
                return .answer(try replay(record, tx))
            case .inFlight:
                let age = now.subtractingReportingOverflow(record.updatedAt)
                if !age.overflow, age.partialValue < Self.inFlightTakeoverSeconds { return .answer(.inProgress) }
                return .proceed(createdAt: record.createdAt)
            }
        }
        return .proceed(createdAt: now)
    }

    private static func expired(_ createdAt: Int64, now: Int64) -> Bool {
        let age = now.subtractingReportingOverflow(createdAt)
        return !age.overflow && age.partialValue >= idempotencyRetentionSeconds
    }

    /// The stored answer again, identical but for `duplicate: true`. A completed record holds the
    /// requestId of the event its answer is part of (an answer with a report's missing evidence
    /// took more than the kilobyte an idempotency row keeps in its page); records written before
    /// hold the answer itself.
    private func replay(_ record: IdempotencyRecord, _ tx: any StoreTransaction) throws(StoreError) -> EngineAnswer {
        let unreadable = EngineAnswer.error(500, "internal", "The stored answer for this idempotency key is unreadable.")
        guard let stored = record.response else { return unreadable }
        var answer: IdentifyAnswer
        if stored.first == UInt8(ascii: "{") {
            guard let decoded = try? JSONDecoder.fingerly.decode(IdentifyAnswer.self, from: Data(stored)) else { return unreadable }
            answer = decoded
        } else {
            let requestId = String(decoding: stored, as: UTF8.self)
            guard let event = try tx.event(requestId: requestId, organization: record.organization),
                  let stored = try? JSONDecoder.fingerly.decode(StoredEvent.self, from: Data(event.document)) else {
                return unreadable
            }
            answer = IdentifyAnswer(storedIn: stored)
        }
        answer.duplicate = true
        guard let bytes = try? JSONEncoder.fingerly.encode(answer) else {
            return .error(500, "internal", "The stored answer could not be encoded.")
        }
        return EngineAnswer(status: 200, body: Array(bytes), code: nil)
    }

    /// A body read, checked and judged: nothing of this depends on the organization or the store.
    private struct JudgedSubmission {
        let report: SignalReport
        /// The report's own bytes in the body, when the reader found them canonical.
        let canonicalReport: ArraySlice<UInt8>?
        let unknownMembers: Int
        let verdicts: Verdicts
        let verdictsJSON: [UInt8]
        let assessment: SuspectScoring.Assessment?
    }

    private enum Judged {
        case judged(JudgedSubmission)
        case refused(EngineAnswer)
    }

    /// Reads and judges the body: judged here from the signals, whatever verdicts a client may claim.
    private func judge(_ body: [UInt8]) -> Judged {
        let submission: SubmissionBody
        let canonicalRange: Range<Int>?
        let unknownMembers: Int
        do {
            (submission, canonicalRange, unknownMembers) = try SubmissionBody.decode(body)
        } catch let duplicate as DuplicateMember {
            return .refused(.error(400, "duplicate_member",
                                   "Member '\(duplicate.path)' is given twice; readers disagree on which one counts."))
        } catch let outOfRange as OutOfRangeInteger {
            return .refused(.badRequest("Field '\(outOfRange.path)' is out of range: integers here are 64-bit "
                                        + "(-9223372036854775808 to 9223372036854775807)."))
        } catch let error as DecodingError {
            return .refused(.badRequest(EngineWire.decodingMessage(error)))
        } catch {
            return .refused(.badRequest("The body is not a valid submission."))
        }
        let report = submission.report
        guard report.schemaVersion == SignalReport.currentSchemaVersion else {
            return .refused(.badRequest("Field 'report.schemaVersion' is \(report.schemaVersion); "
                                        + "this server reads \(SignalReport.currentSchemaVersion)."))
        }
        if let index = Self.repeatedProbeIndex(report) {
            return .refused(.error(400, "duplicate_member", "Probe '\(report.probes[index].id)' is given twice "
                                   + "(report.probes[\(index)]); readers disagree on which one counts."))
        }
        if let field = Self.invalidIdentifierField(report) {
            return .refused(.badRequest("Field '\(field)' must be 1 to \(Self.identifierByteLimit) printable ASCII characters."))
        }
        if let field = Self.oversizedSummaryField(report) {
            return .refused(.badRequest("Field '\(field)' lists more entries than the report has identity components."))
        }
        let verdicts = Verdicts(verdictEngine.evaluate(report))
        return .judged(JudgedSubmission(report: report, canonicalReport: canonicalRange.map { body[$0] },
                                        unknownMembers: unknownMembers, verdicts: verdicts,
                                        verdictsJSON: AnswerWriter.verdicts(verdicts), assessment: policy.suspect?.assess(verdicts)))
    }

    /// A judged body under its organization: identifiers checked, everything kept keyed with the
    /// organization's secret.
    private struct KeyedSubmission {
        let observed: ObservedIdentity
        /// The report as stored: what was judged, in the canonical form and re-keyed.
        let judgedReport: [UInt8]
    }

    private enum Keyed {
        case keyed(KeyedSubmission)
        case refused(EngineAnswer)
    }

    private func keyed(_ submission: JudgedSubmission, organization: String, keys: StoredIdentifierKeys) -> Keyed {
        let report = submission.report
        if let field = IdentityDerivationCheck.underivedField(report, hasher: clientKeying.hasher(organization: organization)) {
            return .refused(.error(400, "identity_mismatch", "Field '\(field)' is not what the report's identity components derive."))
        }
        // Everything kept from here on is keyed with the organization's secret.
        let rekeying = keys.rekeying(report)
        let storedReport = rekeying.report
        // What is stored is what was judged, in the canonical form and re-keyed: a member given twice
        // never gets here, one no type reads is not kept (storage at the sender's pace otherwise),
        // and the client's identifiers are replaced by the server's. When the reader found the
        // client's bytes canonical already, only the re-keyed values are replaced in them.
        let judgedReport = submission.canonicalReport.flatMap { keys.rekeyed(reportText: $0, of: report, rekeying: rekeying) }
            ?? ReportWriter.report(storedReport)
        // Free-form signals would let one request keep most of a megabyte for the retention period.
        guard judgedReport.count <= Self.storedReportByteLimit else {
            return .refused(.error(413, "report_too_large", "The report takes \(judgedReport.count) bytes as stored; "
                + "this server keeps reports of at most \(Self.storedReportByteLimit)."))
        }
        return .keyed(KeyedSubmission(observed: ObservedIdentity(report: storedReport), judgedReport: judgedReport))
    }

    /// Resolution and the writes, inside the request's transaction: two first reports of one host
    /// cannot both make a visitor, and the event, the visitor and the completed key land together
    /// or not at all.
    private func store(_ submission: JudgedSubmission, _ keyed: KeyedSubmission, _ request: Request, organization: String,
                       createdAt: Int64, deviceStorageLimit: Int64?, _ tx: any StoreTransaction) throws(StoreError) -> EngineAnswer {
        let observed = keyed.observed
        let (now, deviceKeyID, rotatedFrom) = (request.now, request.deviceKeyID, request.rotatedFrom)
        // Other processes may resolve the same host at this moment: the lock makes a second first
        // report wait, then find the visitor the first one made.
        try tx.lockIdentity(organization: organization, key: observed.instanceId ?? observed.hardwareId ?? "")
        var holders: [VisitorRecord] = []
        if let instanceId = observed.instanceId {
            // A farm may hold thousands of clones of one instanceId: the store puts this
            // hardware's visitor first, so the limit never hides it.
            holders = try tx.visitors(instanceId: instanceId, organization: organization,
                                      preferringHardwareId: observed.hardwareId, limit: ResolutionThresholds.candidateLimit)
        }
        var candidates: [VisitorRecord] = []
        let strongHashes = observed.strongHashes
        if holders.isEmpty, !strongHashes.isEmpty {
            candidates = try tx.visitors(sharingAnyOf: strongHashes, organization: organization,
                                         limit: ResolutionThresholds.candidateLimit)
        }
        let resolution = resolveVisitor(observed, instanceHolders: holders, candidates: candidates)
        var findings = resolution.findings
        // A claim is answered as a visitor of its own and stores nothing the bound visitor's
        // host can find: its components, keys and later scores stay as they were.
        let claimed = claimsWithoutKey(resolution, instanceHolders: holders, verifiedKeyID: deviceKeyID, rotatedFrom: rotatedFrom)
        // A key that claimed a bound visitor before was settled as a visitor of its own, without
        // identifiers (a reinstalled host, or an impostor: the server cannot tell): it is that
        // visitor again, found by its key alone, and the claim is not news. Unsigned claims have
        // no key to settle by.
        var settled: VisitorRecord?
        if claimed, let key = deviceKeyID {
            settled = try tx.unidentifiedVisitor(boundToKey: key, organization: organization)
        }
        if claimed && settled == nil { findings.insert(.identityClaimedWithoutKey, at: 0) }
        // One device's events fill at most its share of the quota: its flood is refused, the
        // others are answered.
        if let limit = deviceStorageLimit, let device = claimed ? settled : resolution.matched, device.eventBytes >= limit {
            return .error(507, "device_quota_exceeded", "This device's events take \(device.eventBytes) bytes, "
                + "its share of the organization's quota is \(limit).")
        }

        var score: Int?, level: SuspectLevel?, triggers: [IdentifyTrigger]?
        if let assessment = submission.assessment, let scoring = policy.suspect {
            let scored = addingFindings(findings, to: assessment, scoring: scoring)
            (score, level, triggers) = (scored.score, scored.level, scored.triggers)
        }

        let visitorId: String
        if claimed, let settled {
            var visitor = settled
            visitor.lastSeen = max(settled.lastSeen, now)
            try tx.putVisitor(visitor, stored: settled)
            visitorId = visitor.id
        } else if claimed, let key = deviceKeyID {
            // Stored without identifiers or components: nothing the bound visitor's host sends
            // can find it, so its resolution and score stay as they were.
            let visitor = VisitorRecord(id: EngineWire.mintId(prefix: "vis_"), organization: organization,
                                        instanceId: nil, hardwareId: nil, firstSeen: now, lastSeen: now, components: [],
                                        deviceKeys: [DeviceKeyRecord(keyId: key, firstProvenAt: now)])
            try tx.putVisitor(visitor, stored: nil)
            visitorId = visitor.id
        } else if claimed {
            visitorId = EngineWire.mintId(prefix: "vis_")
        } else if let matched = resolution.matched {
            let visitor = updatedVisitor(matched, with: observed, provenKeyID: matched.isBound ? deviceKeyID : nil, now: now)
            try tx.putVisitor(visitor, stored: matched)
            visitorId = visitor.id
        } else {
            let visitor = VisitorRecord(id: EngineWire.mintId(prefix: "vis_"), organization: organization,
                                        instanceId: observed.instanceId, hardwareId: observed.hardwareId,
                                        firstSeen: now, lastSeen: now, components: observed.components,
                                        deviceKeys: deviceKeyID.map { [DeviceKeyRecord(keyId: $0, firstProvenAt: now)] } ?? [])
            try tx.putVisitor(visitor, stored: nil)
            visitorId = visitor.id
        }

        let joined = claimed ? settled != nil : resolution.matched != nil
        let claimConfidence = settled != nil ? ResolutionThresholds.settledClaimConfidence : ResolutionThresholds.claimConfidence
        let answer = IdentifyAnswer(requestId: request.requestId, visitorId: visitorId, visitorIsNew: !joined,
                                    visitorConfidence: claimed ? claimConfidence : resolution.confidence,
                                    identifiable: resolution.identifiable,
                                    duplicate: false, suspectScore: score, suspectLevel: level, triggers: triggers,
                                    verdicts: submission.verdicts, policy: policy.name)
        let answerBytes = writer.answer(answer, verdicts: submission.verdictsJSON)
        let document = writer.event(answer, verdicts: submission.verdictsJSON, receivedAt: now, tag: submission.report.tag,
                                    signature: StoredEvent.Signature(verified: request.signatureVerified, keyId: deviceKeyID),
                                    report: keyed.judgedReport)
        try tx.insertEvent(EventRecord(requestId: request.requestId, organization: organization, visitorId: visitorId,
                                       receivedAt: now, document: document))
        try tx.putIdempotency(IdempotencyRecord(organization: organization, key: request.key, bodyHash: request.binding.hash,
                                                state: .complete, response: Array(request.requestId.utf8), status: 200,
                                                createdAt: createdAt, updatedAt: now))
        return EngineAnswer(status: 200, body: answerBytes, code: nil, unknownMembersDropped: submission.unknownMembers)
    }

    /// `GET /v1/events/{requestId}` for an authenticated organization. Another organization's
    /// requestId is 404, exactly as an unknown one.
    package func event(requestId: String, organization: String) -> EngineAnswer {
        guard !requestId.isEmpty, requestId.utf8.count <= Self.requestIdByteLimit else { return .notFound }
        do {
            let record = try store.transaction { (tx) throws(StoreError) -> EventRecord? in
                try tx.event(requestId: requestId, organization: organization)
            }
            guard let record, record.organization == organization else { return .notFound }
            return EngineAnswer(status: 200, body: record.document, code: nil)
        } catch {
            return .storeFailure(error)
        }
    }

    /// The organization's visitors, for the local listing.
    package func visitors(organization: String, limit: Int) throws(StoreError) -> [VisitorSummary] {
        let records = try store.transaction { (tx) throws(StoreError) -> [VisitorRecord] in
            try tx.visitors(organization: organization, limit: max(0, limit))
        }
        return records.map { record in
            let observed = ObservedIdentity(instanceId: record.instanceId, hardwareId: record.hardwareId, components: record.components)
            return VisitorSummary(visitorId: record.id, firstSeen: EngineWire.timestamp(record.firstSeen),
                                  lastSeen: EngineWire.timestamp(record.lastSeen), instanceId: record.instanceId,
                                  hardwareId: record.hardwareId, identifiable: observed.identifiable,
                                  components: record.components.count, deviceKeys: record.deviceKeys.count)
        }
    }
}

extension IdentifyAnswer {
    /// The answer an event was stored with (duplicate: false): the event writes every member,
    /// absent ones as null and no triggers as `[]`, which an answer without a score leaves out.
    init(storedIn event: StoredEvent) {
        self.init(requestId: event.requestId, visitorId: event.visitorId, visitorIsNew: event.visitorIsNew,
                  visitorConfidence: event.visitorConfidence, identifiable: event.identifiable, duplicate: false,
                  suspectScore: event.suspectScore, suspectLevel: event.suspectLevel,
                  triggers: event.suspectScore == nil ? nil : event.triggers, verdicts: event.verdicts, policy: event.policy)
    }
}
