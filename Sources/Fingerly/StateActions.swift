#if canImport(Glibc)
import Glibc
#endif
import FoundationEssentials
import Synchronization
import FingerlyHost
import FingerlyModel
import FingerlyProbes
import FingerlyTransport

/// The deferred tier collected ahead of an `identify` (`FingerlyOptions.prefetch`).
struct Prefetched: Sendable {
    let entries: [ProbeEntry]
    let ids: Set<String>
    /// Monotonic milliseconds.
    let collectedAt: Double
}

/// What changing consent did beside recording it.
package struct ConsentChange: Sendable {
    /// Reports deleted unsent (consent denied).
    package var purged: Int?
    /// What the flush after granting did (with an API key).
    package var flushed: FlushResult?
}

/// Why the state directory could not be read or changed.
package struct StateError: Error, Sendable, CustomStringConvertible {
    package let description: String
}

/// Runs blocking work (libcurl, fsync, flock) on a thread of its own, off Swift's cooperative pool.
func offCooperativePool<Value: Sendable>(_ work: @escaping @Sendable () -> Value) async -> Value {
    await withCheckedContinuation { continuation in
        let run: @Sendable () -> Void = { continuation.resume(returning: work()) }
        if !startDetachedThread(run) { run() }
    }
}

extension Fingerly {
    /// The consent persisted in `stateDirectory`, nil when none is; an error when a record is
    /// there but cannot be trusted (callers fail closed).
    package static func persistedConsent(stateDirectory: String) -> Result<ConsentState?, StateError> {
        switch ConsentRecord.read(stateDirectory: stateDirectory) {
        case .absent: return .success(nil)
        case .recorded(let value): return .success(ConsentState(rawValue: value.rawValue))
        case .invalid(let why): return .failure(StateError(description: why))
        }
    }

    /// The administrator's consent for the whole host (`/etc/fingerly/consent`), nil when none
    /// is recorded; an error when a record is there but cannot be trusted.
    package static func systemConsent() -> Result<ConsentState?, StateError> {
        persistedConsent(stateDirectory: ConsentRecord.systemDirectory)
    }

    /// Records the host-wide consent: root's `consent` command with root's default state
    /// directory. The file is readable by every user, so their runs obey it.
    package static func recordSystemConsent(_ consent: ConsentState) throws(StateError) {
        let directory = ConsentRecord.systemDirectory
        if mkdir(directory, 0o755) != 0 && errno != EEXIST { throw StateError(description: "\(directory): \(SystemError(errno))") }
        do {
            try ConsentRecord.write(ConsentRecord.Value(rawValue: consent.rawValue) ?? .pending, stateDirectory: directory, mode: 0o644)
        } catch {
            throw StateError(description: error.description)
        }
    }

    /// Records `consent` for this instance and, with a configured state directory, on disk;
    /// denying purges the outbox, granting flushes it (now, or on a thread of its own).
    @discardableResult
    func applyConsent(_ consent: ConsentState, flushInBackground: Bool) throws(StateError) -> ConsentChange {
        self.consent.withLock { $0 = consent }
        var change = ConsentChange()
        var failure: StateError?
        // The refused reports go first, whatever becomes of recording the refusal.
        if consent == .denied {
            prefetched.withLock { $0 = nil }
            if let outbox = openOutbox() {
                do {
                    if !flushInBackground {
                        // A command about to exit: a purge on a thread of its own would die with it.
                        change.purged = try outbox.purge()
                    } else if let purged = try outbox.purgeUnlessBusy() {
                        change.purged = purged
                    } else {
                        // A flush holds the outbox: it sees the denial before its next item and
                        // stops; this purge then runs, without keeping the caller waiting.
                        change.purged = 0
                        _ = startDetachedThread { _ = try? outbox.purge() }
                    }
                } catch {
                    failure = StateError(description: "the outbox could not be purged: \(error)")
                }
            }
        }
        if let directory = options.stateDirectory {
            if let problem = StateDirectory.makeDirectories(directory) { throw failure ?? StateError(description: problem) }
            do {
                try ConsentRecord.write(ConsentRecord.Value(rawValue: consent.rawValue) ?? .pending, stateDirectory: directory)
            } catch {
                throw failure ?? StateError(description: error.description)
            }
        }
        if let failure { throw failure }
        switch consent {
        case .denied: break
        case .pending:
            prefetched.withLock { $0 = nil }
        case .granted:
            if flushInBackground { startBackgroundWork() } else if apiKey != nil { change.flushed = flushBlocking() }
        }
        return change
    }

    /// Whether consent holds: this instance's, the host's, and the state directory's record
    /// (which another process, `fingerly-identify consent`, may have changed meanwhile).
    func consentStillGranted() -> Bool {
        guard consentState == .granted, (try? requireConsent()) != nil else { return false }
        guard let directory = options.stateDirectory else { return true }
        switch Self.persistedConsent(stateDirectory: directory) {
        case .success(nil), .success(.granted?): return true
        default: return false
        }
    }

    /// Whether this instance, or the state directory's record, says denied.
    func consentWasDenied() -> Bool {
        if consentState == .denied { return true }
        guard let directory = options.stateDirectory else { return false }
        return (try? Self.persistedConsent(stateDirectory: directory).get()) == .denied
    }

    /// `applyConsent` for the CLI: the flush after granting runs before it returns.
    package func changeConsent(to consent: ConsentState) async throws(StateError) -> ConsentChange {
        let outcome = await offCooperativePool { () -> Result<ConsentChange, StateError> in
            do throws(StateError) { return .success(try self.applyConsent(consent, flushInBackground: false)) } catch { return .failure(error) }
        }
        return try outcome.get()
    }

    /// Sends the queued reports, oldest first, each with the key and body it was queued with.
    /// One sender at a time: a flush of another process in progress leaves this one with nothing
    /// sent and `lastError.code` `busy`.
    /// - Throws: `ConsentError` while consent is not granted; nothing is sent then.
    public func flush() async throws(ConsentError) -> FlushResult {
        try requireConsent()
        return await offCooperativePool { self.flushBlocking() }
    }

    /// `flush` on the calling thread, for the CLI.
    package func flushWithConsentBlocking() throws(ConsentError) -> FlushResult {
        try requireConsent()
        return flushBlocking()
    }

    func flushBlocking() -> FlushResult {
        guard let apiKey else {
            return FlushResult(delivered: 0, dropped: 0, remaining: 0,
                               lastError: TransportError(message: "flushing needs an API key", status: nil, retryable: false, code: "no_api_key"))
        }
        return flushGate.withLock { _ in
            guard let outbox = openOutbox() else {
                return FlushResult(delivered: 0, dropped: 0, remaining: 0,
                                   lastError: TransportError(message: "no usable state directory holds an outbox", status: nil,
                                                             retryable: false, code: "no_state_directory"))
            }
            var lastError: TransportError?
            let destination = APIAddress(endpoint: endpoint).identifyURL
            let summary = outbox.flush(organization: apiKey.organization) { item in
                // Consent may be withdrawn while a flush runs, here or by another process (the
                // record in the state directory, the host's): nothing more is sent once it is.
                guard consentStillGranted() else {
                    return .retryLater(TransportError(message: "consent was withdrawn", status: nil, retryable: false, code: "consent_withdrawn"))
                }
                // The configured address wins (an operator who moved the API keeps the queue); a
                // report the first server stored but never answered then becomes an event there too.
                if !item.destination.isEmpty && item.destination != destination {
                    logger?.log(.warning, "request \(item.idempotencyKey): queued for \(item.destination), sent to \(destination)")
                }
                let delivery = deliver(item)
                switch delivery.outcome {
                case .delivered(let response):
                    // Only the API's answer shows the report arrived (not a captive portal's page).
                    guard (try? JSONDecoder.fingerly.decode(IdentifyAnswer.self, from: Data(response.body))) != nil else {
                        let error = TransportError(message: "HTTP \(response.status) with an answer that is not the API's; still queued",
                                                   status: response.status, retryable: true, code: "bad_response")
                        lastError = error
                        return .retryLater(error)
                    }
                    return .delivered
                case .rejected(let status, let code, _):
                    let error = status == 407
                        ? Self.interceptingProxyError(destination)
                        : TransportError(message: Self.rejectionMessage(status: status, code: code), status: status,
                                         retryable: false, code: code)
                    lastError = error
                    // Only these blame the report itself; a refused key, a wrong address (3xx,
                    // 404, 405, 501) or another server's answer keeps it for a later flush.
                    if [400, 413, 422].contains(status) { return .rejected(error) }
                    return .retryLater(error)
                case .failed(let failure):
                    let error = TransportError(message: failure.description, status: nil, retryable: false, code: Self.code(of: failure))
                    lastError = error
                    // The report is fine; the connection is not to be trusted. Keep it.
                    return .retryLater(error)
                case .exhausted(let last, _):
                    var status: Int?
                    let code: String
                    // As identify reports it: the server's code when one answered, else what failed.
                    switch last {
                    case .response(let answered, let answeredCode): status = answered; code = answeredCode ?? "http_\(answered)"
                    case .failure(let failure): code = Self.code(of: failure)
                    }
                    let error = TransportError(message: "\(delivery.attempts.count) attempt(s) failed (last: \(last)); still queued",
                                               status: status, retryable: true, code: code)
                    lastError = error
                    return .retryLater(error)
                }
            }
            if consentWasDenied() { _ = try? outbox.purge() }
            if summary.busy {
                return FlushResult(delivered: 0, dropped: 0, remaining: summary.remaining,
                                   lastError: TransportError(message: "another process is flushing this outbox", status: nil,
                                                             retryable: true, code: "busy"))
            }
            if lastError == nil, let error = summary.lastError {
                lastError = TransportError(message: "the outbox: \(error)", status: nil, retryable: true, code: "outbox")
            }
            let dropped = summary.dropped + outbox.openMaintenance.dropped.total
            if summary.delivered + dropped > 0 || summary.remaining > 0 {
                logger?.log(.info, "flush: \(summary.delivered) delivered, \(dropped) dropped, \(summary.remaining) remaining")
            }
            return FlushResult(delivered: summary.delivered, dropped: dropped, remaining: summary.remaining, lastError: lastError)
        }
    }

    /// Deletes this installation's signing key; the next submission makes a new one (a server
    /// then sees a new installation).
    /// - Throws: `FingerlyError.invalidConfiguration` (`options.stateDirectory`) when the key
    ///   file cannot be removed.
    public func clearDeviceIdentity() throws(FingerlyError) {
        signingKey.withLock { $0 = nil }
        guard let directory = stateDirectory else { return }
        do {
            try DeviceKey.delete(in: directory)
        } catch {
            throw .invalidConfiguration(field: "options.stateDirectory", reason: "the device key cannot be removed: \(error)")
        }
    }

    /// `fingerly-identify reset`: the device key, the queued reports, the local store and the
    /// installation secret go; consent stays (an administrator's denial must survive a reset).
    /// Returns what was removed.
    package static func resetState(stateDirectory directory: String) -> Result<[String], StateError> {
        var removed: [String] = []
        var info = stat()
        guard lstat(directory, &info) == 0 else {
            return errno == ENOENT ? .success([]) : .failure(StateError(description: "\(directory): \(SystemError(errno))"))
        }
        if lstat(directory + "/" + DeviceKey.fileName, &info) == 0 {
            do { try DeviceKey.delete(in: directory) } catch { return .failure(StateError(description: error.description)) }
            removed.append("the device key")
        }
        if lstat(directory + "/outbox", &info) == 0 {
            do {
                let outbox = try Outbox.open(directory: directory + "/outbox")
                let count = try outbox.purge()
                removed.append("\(count) queued report(s)")
            } catch {
                return .failure(StateError(description: "the outbox: \(error)"))
            }
        }
        // The local mode's visitors and events go with the secret that keyed them; a damaged store
        // is cleared the same way. Its journal files go with it, or SQLite would replay them
        // into the next store of that name.
        var storeRemoved = false
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let path = directory + "/" + localDatabaseName + suffix
            guard lstat(path, &info) == 0 else { continue }
            guard unlink(path) == 0 else { return .failure(StateError(description: "\(path): \(SystemError(errno))")) }
            storeRemoved = true
        }
        if storeRemoved { removed.append("the local store") }
        let secret = directory + "/" + InstallationSecret.fileName
        if lstat(secret, &info) == 0 {
            guard unlink(secret) == 0 else { return .failure(StateError(description: "\(secret): \(SystemError(errno))")) }
            removed.append("the installation secret")
        }
        return .success(removed)
    }

    /// After load and after consent is granted: send what is queued, and collect the deferred
    /// tier ahead of time when asked to. Nothing of the host is read without consent.
    func startBackgroundWork() {
        guard consentState == .granted else { return }
        if options.flushInBackground, apiKey != nil, let directory = stateDirectory, Self.outboxMayHoldItems(directory + "/outbox") {
            _ = startDetachedThread { _ = self.flushBlocking() }
        }
        if options.prefetch { startPrefetch() }
    }

    /// Whether an outbox directory exists: flushing an absent one would only create it.
    static func outboxMayHoldItems(_ path: String) -> Bool {
        var info = stat()
        return lstat(path, &info) == 0 && info.st_mode & S_IFMT == S_IFDIR
    }

    func startPrefetch() {
        let requestedAt = monotonicMilliseconds()
        _ = startDetachedThread {
            guard self.consentState == .granted else { return }
            let report = self.collectBlocking(tag: nil, tiers: [.deferred], startedAt: requestedAt, log: self.options.accessLog)
            let entries = report.probes.filter { $0.tier == .deferred && $0.id != CollectorProbe.probeId }
            // Consent may have been withdrawn meanwhile: then nothing collected is kept.
            guard self.consentState == .granted else { return }
            self.prefetched.withLock {
                $0 = Prefetched(entries: entries, ids: Set(entries.map(\.id)), collectedAt: requestedAt)
            }
        }
    }

    /// The report of `tiers`, with the prefetched deferred tier when it is young enough; the
    /// fast tier always runs fresh.
    func collectReusingPrefetch(tag: String?, tiers: Set<Tier>) async throws(ConsentError) -> SignalReport {
        try await run(tag: tag, tiers: tiers, only: nil, reusing: usablePrefetch(for: tiers))
    }

    func collectReusingPrefetchBlocking(tag: String?, tiers: Set<Tier>) throws(ConsentError) -> SignalReport {
        try runBlocking(tag: tag, tiers: tiers, only: nil, reusing: usablePrefetch(for: tiers))
    }

    private func usablePrefetch(for tiers: Set<Tier>) -> Prefetched? {
        guard options.prefetch, tiers.contains(.deferred), let prefetch = prefetched.withLock({ $0 }),
              monotonicMilliseconds() - prefetch.collectedAt <= Double(options.prefetchMaxAgeMs) else { return nil }
        return prefetch
    }
}
