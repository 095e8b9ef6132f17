import FingerlyCatalogue

/// The detection tables as a probe reads them: by name, typed by the accessor.
///
/// A table that is missing or of another shape yields an empty table and a recorded issue of the
/// probe, never a crash: the probe's other evidence still counts, and the issue says which
/// evidence it could not weigh. The embedded tables are checked once, by a test that finds
/// every name the probes ask for in their sources, so this is a guard against a future edit.
package struct ProbeTables {
    fileprivate let tables: [String: DetectionTables.Table]
    /// `group.` for a group's tables, so an issue names the full path.
    fileprivate let prefix: String
    fileprivate let context: ProbeContext

    private func lookup<Rows>(_ name: String, _ expected: String, empty: Rows,
                              _ extract: (DetectionTables.Table) -> Rows?) -> Rows {
        guard let table = tables[name] else {
            context.recordTableProblem(prefix + name, "no detection table named '\(prefix + name)'; \(expected) expected")
            return empty
        }
        if let rows = extract(table) { return rows }
        switch table {
        case .strings(let rows) where rows.isEmpty: return empty
        case .mapping(let rows) where rows.isEmpty: return empty
        default:
            context.recordTableProblem(prefix + name, "the detection table '\(prefix + name)' is \(table.shapeName); \(expected) expected")
            return empty
        }
    }

    package func strings(_ name: String) -> [String] {
        lookup(name, "a list of strings", empty: []) { if case .strings(let rows) = $0 { rows } else { nil } }
    }

    package func mapping(_ name: String) -> [String: String] {
        lookup(name, "an object of strings", empty: [:]) { if case .mapping(let rows) = $0 { rows } else { nil } }
    }

    package func patterns(_ name: String) -> [DetectionTables.PatternRow] {
        lookup(name, "a list of pattern rows", empty: []) { if case .patterns(let rows) = $0 { rows } else { nil } }
    }

    package func group(_ name: String) -> ProbeTables {
        let members: [String: DetectionTables.Table] = lookup(name, "a group of tables", empty: [:]) {
            if case .group(let members) = $0 { members } else { nil }
        }
        return ProbeTables(tables: members, prefix: prefix + name + ".", context: context)
    }
}

extension ProbeContext {
    /// The detection tables, by name; see `ProbeTables`.
    var tables: ProbeTables { ProbeTables(tables: detectionTables.tables, prefix: "", context: self) }
}
