import FingerlyPostgresStore
import FingerlySQLiteStore
import FingerlyStore

/// The database behind `serve`, `keys` and `migrate`: a `postgres://` or `postgresql://` URL is
/// PostgreSQL (libpq reads the PG* environment variables for what the URL leaves out), anything
/// else a SQLite path. Both apply pending migrations on opening and refuse a newer schema.
/// `serve` checkpoints SQLite from a thread of its own.
func openStore(path: String, serving: Bool = false) throws(StoreError) -> any IdentityStore {
    if let problem = databaseSpellingProblem(path) { throw StoreError(problem) }
    if PostgresStore.isURL(path) {
        return try PostgresStore(url: path)
    }
    var options = SQLiteStore.Options()
    options.backgroundCheckpoints = serving
    return try SQLiteStore(path: path, options: options)
}

/// Why `path` can never name a database, nil when it may: a setting to correct (exit 78), not an
/// outage to retry. A URL of another spelling (POSTGRES://, pgsql://, one slash) or a libpq keyword
/// string is a mistake, not a file to create named after its password; an "@" left unencoded in
/// a URL's password makes libpq read the password's tail as the host and quote it in its error.
func databaseSpellingProblem(_ path: String) -> String? {
    if PostgresStore.isURL(path) {
        let afterScheme = path[path.firstRange(of: "://")!.upperBound...]
        let authority = afterScheme.prefix { $0 != "/" && $0 != "?" }
        guard authority.filter({ $0 == "@" }).count <= 1 else {
            return "its user information holds more than one '@': write an '@' of the password as %40"
        }
        return nil
    }
    if path.contains(":/") || keywordPairs(path) {
        return "it is neither a SQLite path nor a URL that starts postgres:// or postgresql:// (lower case)"
    }
    return nil
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

/// The database as it may appear in a message: a URL's password is never printed, neither the
/// userinfo's nor a `password` query parameter's (libpq reads both; it decodes the parameter's
/// name, so `p%61ssword` is one too).
func databaseLabel(_ path: String) -> String {
    // Any scheme, as any spelling of one: what is redacted is what could be a password.
    guard let scheme = path.firstRange(of: ":/") ?? path.firstRange(of: "://") else {
        guard keywordPairs(path) else { return path }
        return path.split(separator: " ", omittingEmptySubsequences: false).map { pair in
            guard let equals = pair.firstIndex(of: "="), pair[..<equals].lowercased().contains("pass") else { return String(pair) }
            return pair[...equals] + "***"
        }.joined(separator: " ")
    }
    let afterScheme = path[scheme.upperBound...].drop { $0 == "/" }.startIndex
    var label = String(path[..<afterScheme])
    var rest = path[afterScheme...]
    // libpq looks for the userinfo up to the first "/", a "?" included; a password may hold an
    // unencoded "/" all the same, so everything up to the last "@" is taken for the userinfo.
    if let at = rest.lastIndex(of: "@") {
        let userinfo = rest[..<at]
        label += userinfo.firstIndex(of: ":").map { userinfo[..<$0] + ":***" } ?? String(userinfo)
        rest = rest[at...]
    }
    guard let question = rest.firstIndex(of: "?") else { return label + rest }
    label += rest[...question]
    let parameters = rest[rest.index(after: question)...].split(separator: "&", omittingEmptySubsequences: false).map { parameter in
        guard let equals = parameter.firstIndex(of: "="), ConnectionSecrets.percentDecoded(parameter[..<equals]).lowercased().contains("pass") else {
            return String(parameter)
        }
        return parameter[...equals] + "***"
    }
    return label + parameters.joined(separator: "&")
}

/// Whether a `--db` value reads as libpq's `keyword=value` pairs (`host=… password=…`).
private func keywordPairs(_ value: String) -> Bool {
    value.split(separator: " ").contains { pair in
        guard let equals = pair.firstIndex(of: "=") else { return false }
        let keyword = pair[..<equals].lowercased()
        return ["host", "hostaddr", "port", "dbname", "user", "password", "passfile", "sslmode"].contains(keyword)
    }
}
