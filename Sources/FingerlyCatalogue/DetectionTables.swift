import FingerlyHost
import FingerlyModel

/// Detection tables (`probes/detection-tables.json`): vendor strings and the like, as data.
///
/// Tables are held by name and typed by their shape in the data, so adding a table is an edit
/// of the JSON alone (then `scripts/generate-embedded-data`): a probe asks for it by name
/// (`strings`, `mapping`, `patterns`, `group`) and the policy's `inTable` finds every list of
/// strings without a list of names in Swift.
///
/// Read with `JSONParser` rather than Codable: the document has no fixed schema any more, which
/// Codable could only walk by guessing each value's type (a thrown error per wrong guess), and
/// the strict reader refuses a duplicate key (the same OUI or chassis number listed twice would
/// otherwise be decided by whichever came last) and names the path of every value it refuses.
package struct DetectionTables: Sendable, Equatable {
    /// One row of a pattern table: a substring and what it means.
    package struct PatternRow: Sendable, Hashable {
        /// Matched as a substring (case-insensitively where the probe says so).
        package let pattern: String
        /// What the pattern names ("kvm", "docker", "frida"…). "" in a table whose rows carry
        /// something else (interception CAs name a product); the shape test checks every table a
        /// probe reads for the attributes it relies on.
        package let kind: String
        /// The cloud a DMI vendor string names, when it does.
        package var cloud: String? = nil
        /// DMI attributes the pattern is tested against, when not every vendor string: a
        /// product name such as "Virtual Machine" names a hypervisor only beside its maker.
        package var fields: [String]? = nil
        /// Attribute -> substring that must also be present for the row to apply.
        package var requires: [String: String]? = nil
        /// Attribute -> substring whose presence keeps the row from applying.
        package var excludes: [String: String]? = nil
        /// A cloud that also rents bare metal and sets the SMBIOS "virtual machine" bit only
        /// on its VMs: where that bit can be read, it decides.
        package var smbiosVMBitDecides: Bool? = nil
        /// A cloud whose bare metal carries its VMs' strings, product name included: the row names a kind only where
        /// the SMBIOS "virtual machine" bit can be read (as root) and is set, and otherwise only the cloud.
        package var vmBitRequired: Bool? = nil
        /// The product an interception CA belongs to.
        package var product: String = ""
        /// "interception tool" or "corporate TLS inspection": users treat them differently.
        package var category: String = ""
        /// How a DMI row's pattern is found: "contains" anywhere; by default it begins the string as a word.
        package var match: String? = nil

        /// Attribute names a row may carry. An unknown one is refused at load: a misspelt
        /// `requries` would otherwise be ignored and the row would match more than meant.
        package static let attributeNames: Set<String> = ["pattern", "kind", "cloud", "fields", "requires", "excludes",
                                                          "smbiosVMBitDecides", "vmBitRequired", "product", "category",
                                                          "match"]
        /// Attributes present in the data, for the shape test.
        package var presentAttributes: Set<String> = ["pattern"]
    }

    /// A table, typed by the shape of its value.
    package enum Table: Sendable, Hashable {
        /// A list of strings: the only shape a policy's `inTable` can name.
        case strings([String])
        /// An object of strings: key -> meaning.
        case mapping([String: String])
        /// A list of objects, each with a `pattern`.
        case patterns([PatternRow])
        /// An object of tables (`hypervisorMarkers`).
        case group([String: Table])

        package var shapeName: String {
            switch self {
            case .strings: return "a list of strings"
            case .mapping: return "an object of strings"
            case .patterns: return "a list of pattern rows"
            case .group: return "a group of tables"
            }
        }
    }

    package struct LoadError: Error, Sendable, CustomStringConvertible {
        /// The refused value, e.g. `$.dmiVendors[3].fields`.
        package let path: String
        package let message: String
        package var description: String { "\(message) at \(path)" }
    }

    package let tables: [String: Table]

    package init(json bytes: [UInt8]) throws(LoadError) {
        let document: JSONValue
        do { document = try JSONParser.parse(bytes) } catch { throw LoadError(path: error.path, message: error.message) }
        guard case .object(let members) = document else {
            throw LoadError(path: "$", message: "the detection tables must be an object of tables, not \(document.typeName)")
        }
        tables = try Self.tables(members, at: "$")
    }

    /// What the generated `embedded` (CompiledDetectionTables.swift) is built with.
    init(tables: [String: Table]) {
        self.tables = tables
    }

    package func table(_ name: String) -> Table? { tables[name] }

    /// Typed look-ups for callers outside a probe (tests, tools): nil when the table is missing
    /// or of another shape. Probes read through `ProbeContext.tables`, which records that instead.
    package func strings(_ name: String) -> [String]? { if case .strings(let rows)? = tables[name] { rows } else { nil } }
    package func mapping(_ name: String) -> [String: String]? { if case .mapping(let rows)? = tables[name] { rows } else { nil } }
    package func patterns(_ name: String) -> [PatternRow]? { if case .patterns(let rows)? = tables[name] { rows } else { nil } }

    /// Every list of strings, by name, found in the data: what a policy's `inTable` may name.
    /// A list inside a group is named by its path, `group.table`.
    package var stringTables: [String: [String]] {
        var found: [String: [String]] = [:]
        func collect(_ tables: [String: Table], prefix: String) {
            for (name, table) in tables {
                switch table {
                case .strings(let rows): found[prefix + name] = rows
                case .group(let members): collect(members, prefix: prefix + name + ".")
                case .mapping, .patterns: break
                }
            }
        }
        collect(tables, prefix: "")
        return found
    }
}

extension DetectionTables {
    private static func tables(_ members: [String: JSONValue], at path: String) throws(LoadError) -> [String: Table] {
        var tables: [String: Table] = [:]
        for (name, value) in members {
            tables[name] = try table(value, at: path + "." + name)
        }
        return tables
    }

    /// The shape is read from the value: an empty list or object is an empty table of strings
    /// or mapping, which the accessors also hand out as an empty table of any other shape.
    private static func table(_ value: JSONValue, at path: String) throws(LoadError) -> Table {
        switch value {
        case .array(let items):
            if items.allSatisfy({ if case .string = $0 { true } else { false } }) {
                return .strings(items.compactMap { if case .string(let text) = $0 { text } else { nil } })
            }
            var rows: [PatternRow] = []
            for (index, item) in items.enumerated() {
                rows.append(try row(item, at: "\(path)[\(index)]"))
            }
            return .patterns(rows)
        case .object(let members):
            if members.values.allSatisfy({ if case .string = $0 { true } else { false } }) {
                return .mapping(members.compactMapValues { if case .string(let text) = $0 { text } else { nil } })
            }
            if let stray = members.sorted(by: { $0.key < $1.key }).first(where: { if case .string = $0.value { true } else { false } }) {
                throw LoadError(path: path + "." + stray.key,
                                message: "an object mixes strings and tables; it must be a mapping of strings or a group of tables")
            }
            return .group(try tables(members, at: path))
        case .null, .bool, .number, .string:
            throw LoadError(path: path, message: "a table must be a list or an object, not \(value.typeName)")
        }
    }

    private static func row(_ value: JSONValue, at path: String) throws(LoadError) -> PatternRow {
        guard case .object(let members) = value else {
            throw LoadError(path: path, message: "a table mixes strings with \(value.typeName); a pattern row is an object")
        }
        func string(_ name: String) throws(LoadError) -> String? {
            guard let value = members[name] else { return nil }
            guard case .string(let text) = value else { throw LoadError(path: path + "." + name, message: "must be a string, not \(value.typeName)") }
            return text
        }
        func strings(_ name: String) throws(LoadError) -> [String]? {
            guard let value = members[name] else { return nil }
            guard case .array(let items) = value else { throw LoadError(path: path + "." + name, message: "must be a list of strings, not \(value.typeName)") }
            var texts: [String] = []
            for (index, item) in items.enumerated() {
                guard case .string(let text) = item else {
                    throw LoadError(path: "\(path).\(name)[\(index)]", message: "must be a string, not \(item.typeName)")
                }
                texts.append(text)
            }
            return texts
        }
        func mapping(_ name: String) throws(LoadError) -> [String: String]? {
            guard let value = members[name] else { return nil }
            guard case .object(let entries) = value else { throw LoadError(path: path + "." + name, message: "must be an object of strings, not \(value.typeName)") }
            var mapped: [String: String] = [:]
            for (key, entry) in entries {
                guard case .string(let text) = entry else {
                    throw LoadError(path: path + "." + name + "." + key, message: "must be a string, not \(entry.typeName)")
                }
                mapped[key] = text
            }
            return mapped
        }
        func flag(_ name: String) throws(LoadError) -> Bool? {
            guard let value = members[name] else { return nil }
            guard case .bool(let flag) = value else {
                throw LoadError(path: path + "." + name, message: "must be a boolean, not \(value.typeName)")
            }
            return flag
        }
        if let unknown = members.keys.sorted().first(where: { !PatternRow.attributeNames.contains($0) }) {
            throw LoadError(path: path + "." + unknown,
                            message: "unknown row attribute; a row may carry \(PatternRow.attributeNames.sorted().joined(separator: ", "))")
        }
        guard let pattern = try string("pattern") else {
            throw LoadError(path: path, message: "a pattern row needs a string 'pattern'")
        }
        var row = PatternRow(pattern: pattern, kind: try string("kind") ?? "")
        row.cloud = try string("cloud")
        row.fields = try strings("fields")
        row.requires = try mapping("requires")
        row.excludes = try mapping("excludes")
        row.smbiosVMBitDecides = try flag("smbiosVMBitDecides")
        row.vmBitRequired = try flag("vmBitRequired")
        row.product = try string("product") ?? ""
        row.category = try string("category") ?? ""
        row.match = try string("match")
        if let match = row.match, match != "contains" {
            throw LoadError(path: path + ".match", message: "must be \"contains\", not \"\(match)\"")
        }
        row.presentAttributes = Set(members.keys)
        return row
    }
}
