#if canImport(Glibc)
import Glibc
#endif
import FoundationEssentials

extension FreeTextHandling {
    /// The `privacy.freeText` of a policy document:
    /// `"privacy": {"freeText": "fingerprint" | "keep"}`. A policy that says nothing gets
    /// `fingerprint`, so a report never carries personal text unless someone asked for it.
    public static func fromPolicy(contentsOf path: String) throws(PolicyError) -> FreeTextHandling {
        let bytes: [UInt8]
        do {
            bytes = try HostFileSystem().read(path.hasPrefix("/") ? path : currentWorkingDirectory() + "/" + path, limit: 4 * 1024 * 1024)
        } catch {
            throw PolicyError(file: path, location: nil, field: nil, message: "cannot read: \(error.failure.rawValue) (\(error.detail))")
        }
        return try fromPolicy(bytes, source: path)
    }

    static func fromPolicy(_ bytes: [UInt8], source: String) throws(PolicyError) -> FreeTextHandling {
        func fail(_ field: String?, _ message: String) -> PolicyError {
            PolicyError(file: source, location: "privacy", field: field, message: message)
        }
        guard case .object(let top)? = try? JSONParser.parse(bytes) else {
            throw PolicyError(file: source, location: nil, field: nil, message: "not a JSON object")
        }
        guard let section = top["privacy"] else { return .fingerprint }
        guard case .object(let fields) = section else { throw fail(nil, "expected an object, got \(section.typeName)") }
        if let unknown = fields.keys.sorted().first(where: { $0 != "freeText" }) { throw fail(unknown, "unknown field") }
        guard let value = fields["freeText"] else { return .fingerprint }
        guard case .string(let text) = value, let handling = FreeTextHandling(rawValue: text) else {
            throw fail("freeText", "expected \(allCases.map { "'\($0.rawValue)'" }.joined(separator: " or "))")
        }
        return handling
    }

    /// What the embedded default policy says.
    static var embeddedDefault: FreeTextHandling {
        (try? fromPolicy(PackageResources.default_policy_json, source: "policies/default.json (embedded)")) ?? .fingerprint
    }
}

private func currentWorkingDirectory() -> String {
    var buffer = [CChar](repeating: 0, count: 4096)
    guard getcwd(&buffer, buffer.count) != nil else { return "." }
    return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}
