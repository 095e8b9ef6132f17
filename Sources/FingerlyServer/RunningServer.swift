import FingerlyEngine
import FingerlyHost
import FingerlyStore
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A started server: the HTTP daemon, its routes and the maintenance thread. The command runs
/// one until SIGTERM; tests run one in-process on port 0.
package final class RunningServer: Sendable {
    package let routes: ServerRoutes
    private let http: HTTPServer
    private let stopping = Atomic<Bool>(false)
    private let maintenanceStopped = Atomic<Bool>(false)

    package var port: UInt16 { http.port }
    package var metrics: ServerMetrics { routes.metrics }
    package var requestsInFlight: Int { http.requestsInFlight }

    package init(configuration: ServerConfiguration, store: any IdentityStore, engine: IdentityEngine,
                 log: @escaping @Sendable (String) -> Void, clock: @escaping @Sendable () -> Int64 = { Int64(time(nil)) })
        throws(ConfigurationError) {
        try configuration.validate()
        var certificate: [UInt8]?, key: [UInt8]?
        if let path = configuration.tlsCertificate, let keyPath = configuration.tlsKey {
            let credentials = try TLSCredentials(certificate: path, key: keyPath)
            certificate = credentials.certificatePEM
            key = credentials.keyPEM
        }
        let box = ServerBox()
        let routes = ServerRoutes(configuration: configuration, store: store, engine: engine, metrics: ServerMetrics(), log: log,
                                  clock: clock, inFlight: { box.server?.requestsInFlight ?? 0 })
        self.routes = routes
        let settings = HTTPServer.Settings(
            listen: configuration.listen, threads: configuration.threads, connectionLimit: configuration.connectionLimit,
            connectionsPerAddress: configuration.connectionsPerAddress,
            connectionTimeout: configuration.connectionTimeout, connectionMemoryLimit: configuration.headerMemoryLimit,
            tlsCertificatePEM: certificate, tlsKeyPEM: key)
        http = try HTTPServer(settings: settings, application: routes)
        box.server = http
        purgeExpired(clock())
        let retention = self
        _ = startDetachedThread {
            var elapsed = 0
            while !retention.stopping.load(ordering: .acquiring) {
                usleep(50_000)
                elapsed += 1
                // Hourly; idempotency keys and rate counters age out on the same pass.
                if elapsed % 72_000 == 0 { retention.purgeExpired(clock()) }
            }
            retention.maintenanceStopped.store(true, ordering: .releasing)
        }
    }

    /// Removes events past retention, visitors unseen past theirs, idempotency records past
    /// 24 h and old rate counters; the counts go to `/metrics`.
    package func purgeExpired(_ now: Int64) {
        let retention = Retention(eventDays: routes.configuration.retentionDays,
                                  visitorDays: routes.configuration.visitorRetentionDays)
        do {
            for (kind, count) in try retention.purge(routes.store, now: now) { routes.metrics.purged(kind, count) }
        } catch {
            routes.metrics.storeError()
        }
    }

    /// Graceful: no new connections, requests in flight finish (up to the configured grace).
    package func shutdown() {
        stopping.store(true, ordering: .releasing)
        http.shutdown(graceSeconds: routes.configuration.shutdownGrace)
        while !maintenanceStopped.load(ordering: .acquiring) { usleep(10_000) }
    }
}

/// Lets the routes read the daemon's in-flight count though the daemon is made after them.
private final class ServerBox: @unchecked Sendable {
    private let lock = Mutex<HTTPServer?>(nil)
    var server: HTTPServer? {
        get { lock.withLock { $0 } }
        set { lock.withLock { $0 = newValue } }
    }
}
