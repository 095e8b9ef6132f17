import FingerlyStore

/// The database behind `serve` and `keys`; `serve` checkpoints from a thread of its own.
func openStore(path: String, serving: Bool = false) throws(StoreError) -> any IdentityStore {
    var options = SQLiteStore.Options()
    options.backgroundCheckpoints = serving
    return try SQLiteStore(path: path, options: options)
}

/// Waits for a running transaction, then closes the database (the WAL is checkpointed).
func closeStore(_ store: any IdentityStore) {
    (store as? SQLiteStore)?.close()
}
