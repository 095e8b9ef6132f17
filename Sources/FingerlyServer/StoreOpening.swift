import FingerlyStore

/// The database behind `serve`, `keys` and `migrate`: a `postgres://` or `postgresql://` URL is
/// PostgreSQL (libpq reads the PG* environment variables for what the URL leaves out), anything
/// else a SQLite path. Both apply pending migrations on opening and refuse a newer schema.
/// `serve` checkpoints SQLite from a thread of its own.
func openStore(path: String, serving: Bool = false) throws(StoreError) -> any IdentityStore {
    if PostgresStore.isURL(path) {
        return try PostgresStore(url: path)
    }
    var options = SQLiteStore.Options()
    options.backgroundCheckpoints = serving
    return try SQLiteStore(path: path, options: options)
}

/// Waits for a running transaction, then closes the database (SQLite's WAL is checkpointed).
func closeStore(_ store: any IdentityStore) {
    (store as? SQLiteStore)?.close()
    (store as? PostgresStore)?.close()
}

/// The schema version the store is at.
func schemaVersion(_ store: any IdentityStore) throws(StoreError) -> Int64 {
    if let store = store as? PostgresStore { return try store.schemaVersion() }
    if let store = store as? SQLiteStore { return try store.schemaVersion() }
    return 0
}

/// The database as it may appear in a message: a URL's password is never printed.
func databaseLabel(_ path: String) -> String {
    guard PostgresStore.isURL(path), let scheme = path.range(of: "://") else { return path }
    let rest = path[scheme.upperBound...]
    let authorityEnd = rest.firstIndex(where: { $0 == "/" || $0 == "?" }) ?? rest.endIndex
    guard let at = rest[..<authorityEnd].lastIndex(of: "@") else { return path }
    let userinfo = rest[..<at]
    guard let colon = userinfo.firstIndex(of: ":") else { return path }
    return String(path[..<scheme.upperBound]) + userinfo[..<colon] + ":***" + rest[at...]
}
