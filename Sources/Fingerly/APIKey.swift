import FoundationEssentials

/// A public key, `fly_pk_<region>_<environment>_<org>_<random>`: the region picks the API origin,
/// the organization keys every identifier hash, and the rest names one key among the
/// organization's, which can be rotated without changing any identifier.
package struct APIKey: Sendable, Hashable {
    package let region: Region
    package let environment: String
    package let organization: String

    /// Lengths the parts may take: enough for any real name, short enough that a key pasted from
    /// the wrong place (a whole file, a secret) is refused rather than used.
    static let nameLengths = 1...64
    static let randomLengths = 16...128

    /// Reads a key, or says why `text` is not one. Said without quoting the key: it may be a
    /// secret pasted by mistake, and errors end up in logs.
    package static func parse(_ text: String) -> Result<APIKey, Problem> {
        let parts = text.split(separator: "_", omittingEmptySubsequences: false)
        guard parts.count == 6, parts[0] == "fly" else {
            return .failure(Problem("expected fly_pk_<region>_<environment>_<org>_<random>"))
        }
        guard parts[1] == "pk" else {
            return .failure(Problem(parts[1] == "sk" ? "a secret key (fly_sk_…) must never ship in a client; use the public key (fly_pk_…)"
                                                     : "expected a public key, fly_pk_…"))
        }
        guard let region = Region(rawValue: String(parts[2])) else {
            return .failure(Problem("unknown region; expected \(Region.allCases.map(\.rawValue).joined(separator: ", "))"))
        }
        func isName(_ part: Substring) -> Bool {
            nameLengths.contains(part.utf8.count) && part.utf8.allSatisfy { (97...122).contains($0) || (48...57).contains($0) || $0 == 45 }
        }
        guard isName(parts[3]) else { return .failure(Problem("the environment must be 1-64 of a-z, 0-9 and -")) }
        guard isName(parts[4]) else { return .failure(Problem("the organization must be 1-64 of a-z, 0-9 and -")) }
        guard randomLengths.contains(parts[5].utf8.count),
              parts[5].utf8.allSatisfy({ (65...90).contains($0) || (97...122).contains($0) || (48...57).contains($0) }) else {
            return .failure(Problem("the key's last part must be 16-128 letters and digits"))
        }
        return .success(APIKey(region: region, environment: String(parts[3]), organization: String(parts[4])))
    }

    /// Why a text is not a key.
    package struct Problem: Error, Sendable, Hashable {
        package let reason: String
        init(_ reason: String) { self.reason = reason }
    }

    private init(region: Region, environment: String, organization: String) {
        self.region = region
        self.environment = environment
        self.organization = organization
    }

    package init?(_ text: String) {
        guard case .success(let key) = Self.parse(text) else { return nil }
        self = key
    }
}

/// The service region a key names.
package enum Region: String, Sendable, Codable, CaseIterable {
    case us, eu, ap

    /// The API origin of each region; a non-empty `endpoint` replaces it.
    package var origin: String { "https://\(rawValue).api.fingerly.io" }
}

/// Why `text` cannot be an endpoint, or nil: an http or https URL with a host, without user
/// information, query or fragment (a path prefix, for a first-party proxy, is fine).
package func endpointProblem(_ text: String) -> String? {
    guard let url = URL(string: text), let scheme = url.scheme?.lowercased() else { return "not a URL" }
    guard scheme == "https" || scheme == "http" else { return "the scheme must be https or http" }
    guard let host = url.host, !host.isEmpty else { return "the URL names no host" }
    guard url.user == nil, url.password == nil else { return "user information does not belong in an endpoint" }
    guard url.query == nil, url.fragment == nil else { return "a query or fragment does not belong in an endpoint" }
    guard text.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7f }) else {
        return "only printable ASCII, without spaces"
    }
    // libcurl removes dot segments before sending, while the request signature covers the path
    // as written: no server could verify it. Percent-encoded dots and empty segments likewise.
    let afterScheme = text.split(separator: "/", maxSplits: 3, omittingEmptySubsequences: false)
    if afterScheme.count == 4 {
        let segments = afterScheme[3].split(separator: "/", omittingEmptySubsequences: false)
        for (index, segment) in segments.enumerated() {
            let lowered = segment.lowercased()
            if [".", "..", "%2e", "%2e%2e", ".%2e", "%2e."].contains(lowered) { return "the path has a dot segment ('\(segment)')" }
            if segment.isEmpty && index < segments.count - 1 { return "the path has an empty segment (//)" }
        }
    }
    return nil
}
