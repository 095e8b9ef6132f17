import FingerlyCatalogue
import FoundationEssentials
import FingerlyHost
import FingerlyModel
import FingerlyPolicy

extension PolicyVocabulary {
    /// What the shipped catalogue and detection tables let a policy name.
    package static let embedded = PolicyVocabulary(catalogue: .embedded, tables: .embedded)

    package init(catalogue: ProbeCatalogue, tables: DetectionTables) {
        self.init(signalOwners: catalogue.signalOwners, stringTables: tables.stringTables)
    }
}

extension PolicyLoader {
    package func load(_ data: Data, source: String) throws(PolicyError) -> Policy {
        try load(Array(data), source: source)
    }

    package init(catalogue: ProbeCatalogue, tables: DetectionTables) {
        self.init(vocabulary: PolicyVocabulary(catalogue: catalogue, tables: tables))
    }
}

extension VerdictEngine {
    package init(policy: Policy, catalogue: ProbeCatalogue, absence: Absence = .askedFor) {
        self.init(policy: policy, signalOwners: catalogue.signalOwners, probeTiers: catalogue.probeTiers, absence: absence)
    }
}

extension Policy {
    /// The policy compiled into the binary: policies/default.json as the loader validates it
    /// (CompiledDataTests loads the file and compares).
    package static func embedded() -> Policy { compiledDefault }

    /// Largest policy file read; a larger one is refused, never cut short.
    package static let fileSizeLimit = 4 * 1024 * 1024

    /// Reads and validates a policy file. The reading is here, not in the policy engine, which
    /// only ever sees bytes.
    package static func load(contentsOf path: String) throws(PolicyError) -> Policy {
        let bytes: [UInt8]
        do {
            bytes = try OperatorFile.readRegularFile(path, limit: fileSizeLimit)
        } catch {
            throw PolicyError(file: path, location: nil, field: nil, message: error.message)
        }
        return try PolicyLoader(vocabulary: .embedded).load(bytes, source: path)
    }
}
