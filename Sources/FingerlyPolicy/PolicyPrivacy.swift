import FingerlyModel

extension FreeTextHandling {
    /// The `privacy.freeText` of a policy document:
    /// `"privacy": {"freeText": "fingerprint" | "keep"}`. A policy that says nothing gets
    /// `fingerprint`, so a report never carries personal text unless someone asked for it.
    static func fromPolicySection(_ section: JSONValue?, source: String) throws(PolicyError) -> FreeTextHandling {
        func fail(_ field: String?, _ message: String) -> PolicyError {
            PolicyError(file: source, location: "privacy", field: field, message: message)
        }
        guard let section else { return .fingerprint }
        guard case .object(let fields) = section else { throw fail(nil, "expected an object, got \(section.typeName)") }
        if let unknown = fields.keys.sorted().first(where: { $0 != "freeText" }) { throw fail(unknown, "unknown field") }
        guard let value = fields["freeText"] else { return .fingerprint }
        guard case .string(let text) = value, let handling = FreeTextHandling(rawValue: text) else {
            throw fail("freeText", "expected \(allCases.map { "'\($0.rawValue)'" }.joined(separator: " or "))")
        }
        return handling
    }

    static func fromPolicy(_ bytes: [UInt8], source: String) throws(PolicyError) -> FreeTextHandling {
        guard case .object(let top)? = try? JSONParser.parse(bytes) else {
            throw PolicyError(file: source, location: nil, field: nil, message: "not a JSON object")
        }
        return try fromPolicySection(top["privacy"], source: source)
    }

    /// What the embedded default policy says.
    package static var embeddedDefault: FreeTextHandling { Policy.compiledDefault.freeText }
}
