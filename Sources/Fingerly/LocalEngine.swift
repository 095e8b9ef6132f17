#if canImport(Glibc)
import FingerlySQLiteStore
import Glibc
#endif
import FoundationEssentials
import FingerlyEngine
import FingerlyModel
import FingerlyStore
import FingerlyTransport

/// The embedded local mode: with no API key and no endpoint, `identify` resolves the visitor
/// in this process with the server's own engine, against SQLite in the state directory.
extension Fingerly {
    /// The organization every local visitor and event belongs to.
    package static let localOrganization = "local"
    static let localDatabaseName = "local.sqlite"
    /// How often a long-lived instance purges its local store: hourly, as the server does.
    static let localPurgeIntervalSeconds: Int64 = 3600

    /// Whether `identify` resolves here rather than submitting.
    var resolvesLocally: Bool { apiKey == nil && !endpointWasGiven }

    /// The engine over this installation's local store; opened on first use.
    func localEngine() throws(FingerlyError) -> IdentityEngine {
        try localEngineCache.withLock { (cached) throws(FingerlyError) -> IdentityEngine in
            if let cached {
                // A host process may keep one instance for weeks: the store ages as a server's
                // does, at most one pass an hour.
                let now = Int64(time(nil))
                if localPurgedAt.withLock({ (last) -> Bool in
                    guard now - last >= Self.localPurgeIntervalSeconds else { return false }
                    last = now
                    return true
                }) {
                    do { _ = try Retention().purge(cached.store, now: now) } catch {
                        throw .localStore(path: (stateDirectory ?? "") + "/" + Self.localDatabaseName,
                                          reason: "cannot be purged: \(error); 'fingerly-identify reset' removes it")
                    }
                }
                return cached
            }
            guard let directory = stateDirectory else {
                throw .invalidConfiguration(field: "options.stateDirectory",
                                            reason: "the local mode keeps its visitors in a state directory, and none can be named")
            }
            // The rule of the installation secret beside it: a store another user may write is
            // one whose visitors and events they may rewrite.
            if let problem = Self.untrustedLocalStore(in: directory) {
                throw .invalidConfiguration(field: "options.stateDirectory", reason: problem)
            }
            let path = directory + "/" + Self.localDatabaseName
            do {
                let store = try SQLiteStore(path: path)
                let now = Int64(time(nil))
                _ = try store.transaction { (tx) throws(StoreError) in
                    try tx.ensureOrganization(named: Self.localOrganization, now: now)
                }
                // A local store ages as a server's does; a process of the CLI lives one run, so
                // the pass runs once per opening rather than hourly.
                _ = try Retention().purge(store, now: now)
                localPurgedAt.withLock { $0 = now }
                // The reports resolved here are keyed by this installation's secret, which the engine
                // needs to recompute their identifiers.
                let engine = IdentityEngine(store: store, policy: policy, clientKeying: .hasher(identifierHasher()),
                                            collectedHere: true)
                cached = engine
                return engine
            } catch {
                throw .localStore(path: path,
                                  reason: "cannot be opened: \(error); 'fingerly-identify reset' removes it")
            }
        }
    }

    /// Why the local store in `directory` cannot be trusted, nil when it can: the directory
    /// must be writable by this user alone, and the database and its WAL files, where they
    /// exist, regular files of this user that nobody else may write.
    static func untrustedLocalStore(in directory: String) -> String? {
        let directoryFd: Int32
        switch StateDirectory.openOwned(directory) {
        case .success(let fd): directoryFd = fd
        case .failure(let problem): return problem.description
        }
        defer { close(directoryFd) }
        for name in [localDatabaseName, localDatabaseName + "-wal", localDatabaseName + "-shm"] {
            var info = stat()
            guard fstatat(directoryFd, name, &info, AT_SYMLINK_NOFOLLOW) == 0 else {
                if errno == ENOENT { continue }
                return "\(directory)/\(name): \(String(cString: strerror(errno)))"
            }
            if let problem = StateDirectory.untrustedFile(info, othersMode: 0o022) { return "\(directory)/\(name): \(problem)" }
        }
        return nil
    }

    /// Resolves a collected report here: the same body a server would get, the same engine.
    func resolveLocallyBlocking(_ report: SignalReport, verdicts: Verdicts) -> Result<IdentifyResult, FingerlyError> {
        let engine: IdentityEngine
        do { engine = try localEngine() } catch { return .failure(error) }
        let prepared: PreparedSubmission
        do {
            prepared = try prepareSubmission(report)
        } catch {
            return .failure(.invalidConfiguration(field: "report", reason: error.message))
        }
        let keyID = localSignature(prepared.outgoing)
        let answer = engine.identify(organization: Self.localOrganization, idempotencyKey: prepared.outgoing.idempotencyKey,
                                     body: prepared.outgoing.body, deviceKeyID: keyID, signatureVerified: keyID != nil,
                                     now: prepared.outgoing.createdAt)
        guard answer.status == 200, let decoded = try? JSONDecoder.fingerly.decode(IdentifyAnswer.self, from: Data(answer.body)) else {
            let said = (try? JSONDecoder.fingerly.decode(WireError.self, from: Data(answer.body)))?.error.message ?? "HTTP \(answer.status)"
            if answer.status >= 500 { return .failure(localStoreFailure("cannot be written: \(said)")) }
            return .failure(.invalidConfiguration(field: "options.stateDirectory", reason: "the local engine refused the report: \(said)"))
        }
        return .success(IdentifyResult.resolved(decoded, state: .local, report: report, localVerdicts: verdicts, policy: policy,
                                                request: nil))
    }

    /// The device key's id once the request is signed with it and the signature verifies, as a
    /// server verifies it: local visitors are bound to this installation's key as remote ones
    /// are. nil (an unsigned request, which binds nothing) when there is no key to sign with.
    func localSignature(_ outgoing: OutgoingRequest) -> String? {
        guard let key = deviceKey() else { return nil }
        let path = "/v1/identify", idempotencyKey = "\"\(outgoing.idempotencyKey)\""
        guard let fields = try? MessageSignature.sign(method: "POST", path: path, body: outgoing.body, idempotencyKey: idempotencyKey,
                                                      created: outgoing.createdAt, with: key),
              let verified = try? MessageSignature.verify(method: "POST", path: path,
                                                          fields: fields.headers + [("Idempotency-Key", idempotencyKey)],
                                                          body: outgoing.body, now: outgoing.createdAt, window: 0)
        else { return nil }
        return verified.keyID
    }

    /// A stored local event, as `GET /v1/events/{requestId}` would return it; nil when unknown.
    package func localEvent(requestId: String) throws(FingerlyError) -> [UInt8]? {
        let answer = try localEngine().event(requestId: requestId, organization: Self.localOrganization)
        if answer.status >= 500 { throw localStoreFailure("cannot be read (HTTP \(answer.status))") }
        return answer.status == 200 ? answer.body : nil
    }

    /// The visitors of the local store, most recently seen first.
    package func localVisitors(limit: Int) throws(FingerlyError) -> [VisitorSummary] {
        do {
            return try localEngine().visitors(organization: Self.localOrganization, limit: limit)
        } catch let error as FingerlyError {
            throw error
        } catch {
            throw localStoreFailure("cannot be read: \(error)")
        }
    }

    func localStoreFailure(_ reason: String) -> FingerlyError {
        .localStore(path: (stateDirectory ?? "") + "/" + Self.localDatabaseName,
                    reason: reason + "; 'fingerly-identify reset' removes it")
    }
}
