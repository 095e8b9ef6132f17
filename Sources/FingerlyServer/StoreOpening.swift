import FingerlyStore

/// The database behind `serve` and `keys`. Filled in when the SQLite store lands on main.
func openStore(path: String) throws(StoreError) -> any IdentityStore {
    throw StoreError("the SQLite store is not built yet")
}
