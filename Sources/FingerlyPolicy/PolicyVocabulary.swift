import FingerlyModel

/// What a policy may name. The caller derives it from the probe catalogue and the detection
/// tables: the policy engine reads no catalogue or table itself, only what it is handed.
package struct PolicyVocabulary: Sendable {
    /// Signal name -> the id of the probe that reports it.
    package let signalOwners: [String: String]
    /// Tables of strings that `inTable` may name, by name.
    package let stringTables: [String: [String]]

    package init(signalOwners: [String: String], stringTables: [String: [String]]) {
        self.signalOwners = signalOwners
        self.stringTables = stringTables
    }
}
