import FingerlyStore
#if canImport(Glibc)
import Glibc
#endif

/// `fingerly-server keys …`: the operator's view of organizations and their keys.
enum KeyCommands {
    static func run(_ arguments: [String], io: ServerIO) -> ServerExit {
        guard let action = arguments.first else {
            io.standardError("fingerly-server: keys needs an action: add, list, suspend, resume, revoke or quota\n")
            return .usage
        }
        var options: [String: String] = [:]
        var index = 1
        while index < arguments.count {
            let name = arguments[index]
            guard ["--org", "--env", "--region", "--db", "--database", "--key", "--bytes"].contains(name) else {
                io.standardError("fingerly-server: keys \(action): unexpected argument '\(name)'\n")
                return .usage
            }
            guard index + 1 < arguments.count else {
                io.standardError("fingerly-server: keys \(action): \(name) needs a value\n")
                return .usage
            }
            let key = name == "--database" ? "db" : String(name.dropFirst(2))
            guard options[key] == nil else {
                io.standardError("fingerly-server: keys \(action): \(name) given twice\n")
                return .usage
            }
            options[key] = arguments[index + 1]
            index += 2
        }
        let allowed: Set<String> = switch action {
        case "add": ["org", "env", "region", "db"]
        case "list": ["org", "db"]
        case "suspend", "resume": ["org", "db"]
        case "revoke": ["key", "db"]
        case "quota": ["org", "bytes", "db"]
        default: []
        }
        guard !allowed.isEmpty else {
            io.standardError("fingerly-server: unknown keys action '\(action)'; expected add, list, suspend, resume, revoke or quota\n")
            return .usage
        }
        if let extra = options.keys.sorted().first(where: { !allowed.contains($0) }) {
            io.standardError("fingerly-server: keys \(action) takes no --\(extra)\n")
            return .usage
        }
        if let organization = options["org"], !ServerKey.isName(organization) {
            io.standardError("fingerly-server: --org must be 1-64 of a-z, 0-9 and -\n")
            return .usage
        }
        if action != "list" && action != "revoke" && options["org"] == nil {
            io.standardError("fingerly-server: keys \(action) needs --org NAME\n")
            return .usage
        }

        let path = options["db"] ?? ServerConfiguration.defaultDatabase(environment: io.environment)
        let store: any IdentityStore
        do { store = try openStore(path: path) } catch {
            io.standardError("fingerly-server: cannot open the database \(databaseLabel(path)): \(error.message)\n")
            return .unavailable
        }
        do throws(StoreError) {
            switch action {
            case "add": return try add(options, store: store, io: io)
            case "list": return try list(organization: options["org"], store: store, io: io)
            case "quota": return try quota(organization: options["org"] ?? "", bytes: options["bytes"], store: store, io: io)
            case "suspend", "resume":
                let organization = options["org"] ?? ""
                let found = try store.transaction { tx throws(StoreError) in try tx.setSuspended(action == "suspend", organization: organization) }
                guard found else {
                    io.standardError("fingerly-server: no organization '\(organization)'\n")
                    return .noUser
                }
                io.standardOutput("organization \(organization) \(action == "suspend" ? "suspended: its keys get 402" : "accepting traffic")\n")
                return .success
            default:
                guard let text = options["key"], let key = ServerKey(text), key.kind == .publicKey else {
                    io.standardError("fingerly-server: --key must be a public key fly_pk_<region>_<env>_<org>_<random>\n")
                    return .usage
                }
                let found = try store.transaction { tx throws(StoreError) in try tx.revokeKey(publicKey: key.text) }
                guard found else {
                    io.standardError("fingerly-server: no such key\n")
                    return .noUser
                }
                io.standardOutput("revoked; its secret key is revoked with it\n")
                return .success
            }
        } catch {
            io.standardError("fingerly-server: the database failed: \(error.message)\n")
            return .ioError
        }
    }

    private static func add(_ options: [String: String], store: any IdentityStore, io: ServerIO) throws(StoreError) -> ServerExit {
        let organization = options["org"] ?? ""
        let environment = options["env"] ?? "production"
        let region = options["region"] ?? "us"
        guard ServerKey.isName(environment) else {
            io.standardError("fingerly-server: --env must be 1-64 of a-z, 0-9 and -\n")
            return .usage
        }
        guard ServerKey.regions.contains(region) else {
            io.standardError("fingerly-server: --region must be one of \(ServerKey.regions.joined(separator: ", "))\n")
            return .usage
        }
        let pair = ServerKey.generatePair(region: region, environment: environment, organization: organization)
        let now = Int64(time(nil))
        let suspended = try store.transaction { tx throws(StoreError) -> Bool in
            let record = try tx.ensureOrganization(named: organization, now: now)
            try tx.insertKey(KeyRecord(publicKey: pair.publicKey, secretKeyHash: ServerKey.secretHash(pair.secretKey),
                                       organization: organization, environment: environment, revoked: false, createdAt: now))
            return record.suspended
        }
        io.standardOutput("public key: \(pair.publicKey)\nsecret key: \(pair.secretKey)\n")
        io.standardError("The secret key is shown once and stored only as its SHA-256: keep it on your servers.\n"
            + (suspended ? "Note: organization \(organization) is suspended; its keys get 402 until `keys resume`.\n" : ""))
        return .success
    }

    /// Sets (`--bytes SIZE`, 0 for no limit, `default` for the server's) or shows an
    /// organization's storage quota and what its events take.
    private static func quota(organization: String, bytes: String?, store: any IdentityStore,
                              io: ServerIO) throws(StoreError) -> ServerExit {
        var quota: Int64?
        if let bytes, bytes != "default" {
            guard let parsed = StorageSize.parse(bytes) else {
                io.standardError("fingerly-server: --bytes must be a size (bytes, or with KiB, MiB, GiB or TiB), "
                    + "0 for no limit, or default\n")
                return .usage
            }
            quota = parsed
        }
        let record = try store.transaction { tx throws(StoreError) -> OrganizationRecord? in
            if bytes != nil, !(try tx.setStorageQuota(quota, organization: organization)) { return nil }
            return try tx.organization(named: organization)
        }
        guard let record else {
            io.standardError("fingerly-server: no organization '\(organization)'\n")
            return .noUser
        }
        let limit = record.storageQuota.map { $0 == 0 ? "none" : StorageSize.describe($0) } ?? "the server's storage-quota"
        io.standardOutput("organization \(organization): quota \(limit); events stored \(record.storedBytes) bytes\n")
        return .success
    }

    private static func list(organization: String?, store: any IdentityStore, io: ServerIO) throws(StoreError) -> ServerExit {
        let rows = try store.transaction { tx throws(StoreError) -> [(KeyRecord, Bool)] in
            var suspended: [String: Bool] = [:]
            return try tx.keys(organization: organization).map { key throws(StoreError) in
                if suspended[key.organization] == nil {
                    suspended[key.organization] = try tx.organization(named: key.organization)?.suspended ?? false
                }
                return (key, suspended[key.organization] ?? false)
            }
        }
        // Public keys only: a secret key is never printed after `keys add`, and cannot be, since
        // only its hash is kept.
        for (key, suspended) in rows.sorted(by: { ($0.0.organization, $0.0.createdAt, $0.0.publicKey) < ($1.0.organization, $1.0.createdAt, $1.0.publicKey) }) {
            let state = key.revoked ? "revoked" : suspended ? "suspended" : "active"
            io.standardOutput("\(key.organization)\t\(key.environment)\t\(state)\t\(key.createdAt)\t\(key.publicKey)\n")
        }
        return .success
    }
}
