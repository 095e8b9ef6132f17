import FingerlyStore

/// The passwords a PostgreSQL connection string carries, so that no text libpq writes about it
/// repeats one: libpq quotes the part of a URL it cannot parse (`invalid percent-encoded token:
/// "S3cr%zzPassw0rd"`), and its messages reach `migrate`'s output and `serve`'s log.
package struct ConnectionSecrets: Sendable, Hashable {
    /// Each password as written and percent-decoded, longest first.
    package let values: [String]

    package init(_ conninfo: String) {
        var found: Set<String> = []
        func add(_ text: Substring) {
            guard !text.isEmpty else { return }
            found.insert(String(text))
            let decoded = Self.percentDecoded(text)
            if !decoded.isEmpty { found.insert(decoded) }
        }
        if let scheme = conninfo.firstRange(of: "://") {
            let rest = conninfo[scheme.upperBound...]
            // libpq takes the userinfo up to the last "@" before the first "/"; a "?" may be
            // inside it. A password with an unencoded "/" is cut there: libpq then reads its first
            // part as the host's port and quotes it, so each part between "/" counts as well.
            if let at = rest.lastIndex(of: "@") {
                let userinfo = rest[..<at]
                if let colon = userinfo.firstIndex(of: ":") {
                    let password = userinfo[userinfo.index(after: colon)...]
                    add(password)
                    for part in password.split(separator: "/") { add(part) }
                }
            }
            // Any query parameter whose decoded name speaks of a password, wherever the "?" is.
            for question in rest.indices where rest[question] == "?" {
                for parameter in rest[rest.index(after: question)...].split(separator: "&") {
                    guard let equals = parameter.firstIndex(of: "=") else { continue }
                    if Self.percentDecoded(parameter[..<equals]).lowercased().contains("pass") {
                        add(parameter[parameter.index(after: equals)...])
                    }
                }
            }
        } else {
            // key=value form: password=value or password='quoted value'.
            for word in conninfo.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" }) {
                guard let equals = word.firstIndex(of: "="), word[..<equals].lowercased().contains("pass") else { continue }
                var value = word[word.index(after: equals)...]
                if value.hasPrefix("'") { value = value.dropFirst() }
                if value.hasSuffix("'") { value = value.dropLast() }
                add(value)
            }
        }
        values = found.sorted { $0.utf8.count != $1.utf8.count ? $0.utf8.count > $1.utf8.count : $0 < $1 }
    }

    /// `message` with every password replaced by `***`.
    package func redacting(_ message: String) -> String {
        var text = message
        for secret in values { text = text.replacing(secret, with: "***") }
        return text
    }

    /// `%XX` escapes decoded; a malformed one is kept as written.
    package static func percentDecoded(_ text: Substring) -> String {
        let bytes = Array(text.utf8)
        var decoded: [UInt8] = []
        var index = 0
        while index < bytes.count {
            if bytes[index] == UInt8(ascii: "%"), index + 2 < bytes.count,
               let value = UInt8(String(decoding: bytes[(index + 1)...(index + 2)], as: UTF8.self), radix: 16) {
                decoded.append(value)
                index += 3
            } else {
                decoded.append(bytes[index])
                index += 1
            }
        }
        return String(decoding: decoded, as: UTF8.self)
    }
}
