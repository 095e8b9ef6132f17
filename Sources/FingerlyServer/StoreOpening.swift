import FingerlyStore

/// The database behind `serve` and `keys`.
func openStore(path: String) throws(StoreError) -> any IdentityStore {
    try SQLiteStore(path: path)
}

/// Waits for a running transaction, then closes the database (the WAL is checkpointed).
func closeStore(_ store: any IdentityStore) {
    (store as? SQLiteStore)?.close()
}
