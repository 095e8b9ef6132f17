import FingerlyEngine
import FingerlyHost
#if canImport(Glibc)
import Glibc
#endif

/// Why a command line, a configuration file or what it names cannot be used: said once, on stderr.
/// `exit` is 78 for a setting that is wrong (a restart cannot fix it), 69 for a resource that is
/// unavailable now (an address in use).
package struct ConfigurationError: Error, Sendable, Hashable {
    package let message: String
    package let exit: ServerExit
    package init(_ message: String, exit: ServerExit = .configuration) {
        self.message = message
        self.exit = exit
    }
}

/// An address to listen on: IPv4 `a.b.c.d:port` or IPv6 `[addr]:port`. Port 0 lets the kernel pick.
package struct ListenAddress: Sendable, Hashable, CustomStringConvertible {
    package let host: String
    package let port: UInt16
    package let isIPv6: Bool

    package static func parse(_ text: String) -> ListenAddress? {
        let host: Substring, portText: Substring, isIPv6: Bool
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]"), text[text.index(after: close)...].hasPrefix(":") else { return nil }
            host = text[text.index(after: text.startIndex)..<close]
            portText = text[text.index(close, offsetBy: 2)...]
            isIPv6 = true
        } else {
            guard let colon = text.lastIndex(of: ":") else { return nil }
            host = text[..<colon]
            portText = text[text.index(after: colon)...]
            isIPv6 = false
        }
        guard (1...5).contains(portText.utf8.count), portText.utf8.allSatisfy({ (48...57).contains($0) }),
              let port = UInt16(portText) else { return nil }
        let address = ListenAddress(host: String(host), port: port, isIPv6: isIPv6)
        guard address.withSocketAddress({ _, _ in true }) != nil else { return nil }
        return address
    }

    /// Calls `body` with the binary socket address, or returns nil when the host is not a literal address.
    package func withSocketAddress<Result>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> Result) -> Result? {
        if isIPv6 {
            var address = sockaddr_in6()
            address.sin6_family = sa_family_t(AF_INET6)
            address.sin6_port = port.bigEndian
            guard inet_pton(AF_INET6, host, &address.sin6_addr) == 1 else { return nil }
            return withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_in6>.size)) }
            }
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        guard inet_pton(AF_INET, host, &address.sin_addr) == 1 else { return nil }
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
    }

    package var description: String { isIPv6 ? "[\(host)]:\(port)" : "\(host):\(port)" }
}

/// Everything `serve` can be told, from flags and a configuration file (flags win).
package struct ServerConfiguration: Sendable, Hashable {
    package var listen = ListenAddress(host: "127.0.0.1", port: 8080, isIPv6: false)
    package var database: String
    /// Largest request body; larger is 413 without buffering it.
    package var bodyLimit = 1_048_576
    /// Identify requests per public key per second (and event reads per secret key).
    package var rateLimit = 100
    /// Events older than this many days are purged at start and hourly; 0 keeps them forever.
    package var retentionDays = Retention.defaultEventDays
    /// Visitors not seen for this many days are purged with their components and device keys,
    /// on the same passes; 0 keeps them forever.
    package var visitorRetentionDays = Retention.defaultVisitorDays
    /// Bytes of event documents an organization may keep (as stored) unless `keys quota` gives
    /// it its own; 0 for no limit. Past it, identify answers 507 until retention frees room.
    package var storageQuota: Int64 = 256 * 1_048_576
    /// Percent of its organization's quota the events of one visitor (one device) may take; 0 for
    /// no share. Past it that device is answered 507 `device_quota_exceeded` and the others go on:
    /// one client cannot lock its whole organization out.
    package var deviceShare = 5
    /// Refusals before the key's budget (unknown key, missing or bad signature, ...) per source address
    /// per second; past it, that address's requests without a verifying signature get 429, and past it
    /// in signed ones, all but the devices admitted before (FailureLimiter).
    package var failureLimit = 10
    package var threads = 4
    package var connectionLimit = 512
    /// Connections open at once from one client address (an IPv6 one whole); more are closed as they
    /// are accepted, so one address holding slow connections leaves the rest of `connectionLimit` to
    /// others. 64 is far more than a client needs (one request at a time) and lets eight addresses
    /// behind one NAT's address share it.
    package var connectionsPerAddress = 64
    /// Seconds an idle connection is kept, and seconds a connection gets to send a whole request head
    /// however slowly it trickles in (libmicrohttpd alone counts only idleness).
    package var connectionTimeout = 10
    /// Per-connection memory (request line, headers, buffers): bounds the header size.
    package var headerMemoryLimit = 32 * 1024
    /// Seconds in-flight requests get to finish after SIGTERM.
    package var shutdownGrace = 20
    /// Accept unsigned identify requests (third-party clients), which bind no visitor to a key;
    /// by default they are refused with 401 missing_signature.
    package var allowUnsigned = false
    package var tlsCertificate: String?
    package var tlsKey: String?
    /// A file holding the database URL (a systemd credential), read in place of `database`: a
    /// password never needs to be on a command line or in a world-readable file.
    package var databaseFile: String?
    package var policy: String?
    /// Freshness window of a signature's `created`, seconds either way.
    package var signatureWindow: Int64 = 300

    package init(database: String) { self.database = database }

    /// The database path when none is given: systemd's StateDirectory when set, else the conventional one.
    package static func defaultDatabase(environment: [String: String]) -> String {
        if let state = environment["STATE_DIRECTORY"], !state.isEmpty {
            // StateDirectory= may list several, separated by ':'; the first is ours.
            return String(state.split(separator: ":").first ?? Substring(state)) + "/fingerly-server.sqlite"
        }
        return "/var/lib/fingerly-server/fingerly-server.sqlite"
    }

    /// The keys a configuration file and `--flags` share.
    package static let keys = ["listen", "database", "database-file",
                               "body-limit", "rate-limit", "retention-days", "visitor-retention-days",
                               "storage-quota", "device-share", "failure-limit", "threads",
                               "connection-limit", "connections-per-address", "connection-timeout", "header-limit",
                               "shutdown-grace",
                               "allow-unsigned", "tls-cert", "tls-key", "policy"]

    /// Applies one setting; `origin` names where it came from for the error.
    package mutating func set(_ key: String, _ value: String, origin: String) throws(ConfigurationError) {
        func number(_ range: ClosedRange<Int>) throws(ConfigurationError) -> Int {
            guard (1...10).contains(value.utf8.count), value.utf8.allSatisfy({ (48...57).contains($0) }),
                  let number = Int(value), range.contains(number) else {
                throw ConfigurationError("\(origin): \(key) must be an integer in \(range.lowerBound)...\(range.upperBound)")
            }
            return number
        }
        switch key {
        case "listen":
            guard let address = ListenAddress.parse(value) else {
                throw ConfigurationError("\(origin): listen must be IPV4:PORT or [IPV6]:PORT with a literal address")
            }
            listen = address
        case "database":
            guard !value.isEmpty else { throw ConfigurationError("\(origin): database must not be empty") }
            database = value
            databaseFile = nil
        case "database-file":
            guard !value.isEmpty else { throw ConfigurationError("\(origin): database-file must not be empty") }
            databaseFile = value
        case "body-limit": bodyLimit = try number(1024...64 * 1_048_576)
        case "rate-limit": rateLimit = try number(1...1_000_000)
        case "retention-days": retentionDays = try number(0...36_500)
        case "visitor-retention-days": visitorRetentionDays = try number(0...36_500)
        case "storage-quota":
            guard let bytes = StorageSize.parse(value) else {
                throw ConfigurationError("\(origin): storage-quota must be bytes, optionally with KiB, MiB, GiB or TiB (0: no limit)")
            }
            storageQuota = bytes
        case "device-share": deviceShare = try number(0...100)
        case "failure-limit": failureLimit = try number(1...1_000_000)
        case "threads": threads = try number(1...256)
        case "connection-limit": connectionLimit = try number(1...65_536)
        case "connections-per-address": connectionsPerAddress = try number(1...65_536)
        case "connection-timeout": connectionTimeout = try number(1...3600)
        case "header-limit": headerMemoryLimit = try number(4096...1_048_576)
        case "shutdown-grace": shutdownGrace = try number(0...3600)
        case "allow-unsigned":
            switch value {
            case "true", "yes", "1": allowUnsigned = true
            case "false", "no", "0": allowUnsigned = false
            default: throw ConfigurationError("\(origin): allow-unsigned must be true or false")
            }
        case "require-signatures":
            // Named so a configuration written before the default changed fails with the way out.
            throw ConfigurationError("\(origin): require-signatures is gone: signatures are required by default, and allow-unsigned "
                + "accepts unsigned requests")
        case "tls-cert": tlsCertificate = value
        case "tls-key": tlsKey = value
        case "policy": policy = value
        default: throw ConfigurationError("\(origin): unknown setting '\(key)'")
        }
    }

    /// The configuration file: UTF-8, one `key = value` per line, `#` starts a comment line,
    /// blank lines ignored. Keys are those of the flags without `--`; each at most once; no
    /// quoting (values are taken verbatim after trimming spaces). Anything else is an error
    /// naming the line, so a typo never silently falls back to a default.
    package mutating func apply(file text: String, name: String) throws(ConfigurationError) -> Set<String> {
        var seen: Set<String> = []
        var lineNumber = 0
        // "\r\n" is one Character in Swift: it must end a line as "\n" does.
        for rawLine in text.split(omittingEmptySubsequences: false, whereSeparator: { $0 == "\n" || $0 == "\r\n" }) {
            lineNumber += 1
            let line = rawLine.trimmingSpaces
            if line.isEmpty || line.hasPrefix("#") { continue }
            guard let equals = line.firstIndex(of: "=") else {
                throw ConfigurationError("\(name):\(lineNumber): expected key = value")
            }
            let key = String(line[..<equals].trimmingSpaces)
            let value = String(line[line.index(after: equals)...].trimmingSpaces)
            guard Self.keys.contains(key) || key == "require-signatures" else {
                throw ConfigurationError("\(name):\(lineNumber): unknown setting '\(key)'")
            }
            guard seen.insert(key).inserted else { throw ConfigurationError("\(name):\(lineNumber): '\(key)' is set twice") }
            if let other = Self.exclusive[key], seen.contains(other) {
                throw ConfigurationError(
                    "\(name):\(lineNumber): '\(key)' and '\(other)' both name the database: set one")
            }
            try set(key, value, origin: "\(name):\(lineNumber)")
        }
        return seen
    }

    /// Settings of which one source gives at most one; a later source's replaces an earlier's.
    package static let exclusive = ["database": "database-file", "database-file": "database"]

    /// Reads `databaseFile`, when set, into `database`: its one line, a final newline dropped.
    package mutating func resolveDatabaseFile() throws(ConfigurationError) {
        guard let path = databaseFile else { return }
        let bytes: [UInt8]
        do { bytes = try OperatorFile.readRegularFile(path, limit: 8192) } catch {
            throw ConfigurationError("cannot read the database-file \(path): \(error.message)")
        }
        var line = bytes[...]
        if line.last == 10 { line = line.dropLast() }
        if line.last == 13 { line = line.dropLast() }
        guard !line.isEmpty, !line.contains(where: { $0 < 0x20 || $0 == 0x7f }),
              let text = String(validating: line, as: UTF8.self) else {
            throw ConfigurationError("the database-file \(path) must hold one line: a SQLite path or a postgres:// URL")
        }
        database = text
    }

    /// Whether settings that must come together do.
    package func validate() throws(ConfigurationError) {
        if (tlsCertificate == nil) != (tlsKey == nil) {
            throw ConfigurationError("tls-cert and tls-key come together")
        }
    }
}

extension Substring {
    var trimmingSpaces: Substring {
        var text = self
        while let first = text.first, first == " " || first == "\t" || first == "\r" { text = text.dropFirst() }
        while let last = text.last, last == " " || last == "\t" || last == "\r" { text = text.dropLast() }
        return text
    }
}

/// A size in bytes as an operator writes it: digits, optionally followed by KiB, MiB, GiB or
/// TiB; at most 1 PiB.
package enum StorageSize {
    static let units: [(suffix: String, factor: Int64)] = [("KiB", 1 << 10), ("MiB", 1 << 20), ("GiB", 1 << 30), ("TiB", 1 << 40)]
    static let maximum: Int64 = 1 << 50

    package static func parse(_ text: String) -> Int64? {
        var digits = Substring(text)
        var factor: Int64 = 1
        if let unit = units.first(where: { text.hasSuffix($0.suffix) }) {
            digits = digits.dropLast(unit.suffix.count)
            factor = unit.factor
        }
        guard (1...16).contains(digits.utf8.count), digits.utf8.allSatisfy({ (48...57).contains($0) }), let number = Int64(digits) else {
            return nil
        }
        let (bytes, overflow) = number.multipliedReportingOverflow(by: factor)
        return overflow || bytes > maximum ? nil : bytes
    }

    /// `bytes` in the largest unit that divides it, as `parse` reads it back.
    package static func describe(_ bytes: Int64) -> String {
        guard bytes > 0, let unit = units.reversed().first(where: { bytes % $0.factor == 0 }) else { return String(bytes) }
        return "\(bytes / unit.factor)\(unit.suffix)"
    }
}
