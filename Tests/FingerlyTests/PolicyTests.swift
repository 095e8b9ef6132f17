import Foundation
import Testing
@testable import Fingerly
@testable import FingerlyHost
@testable import FingerlyModel
@testable import FingerlyPolicy
@testable import FingerlyProbes

private func policy(_ verdicts: String) throws -> Policy {
    try loadPolicy(#"{"policyVersion": 1, "name": "t", "verdicts": {"# + verdicts + "}}")
}

@Suite struct PolicyTests {
    @Test func embeddedPolicyIsTheFileInPolicies() throws {
        let onDisk = try Policy.load(contentsOf: TestPaths.packageRoot + "/policies/default.json")
        #expect(onDisk.name == Policy.embedded().name)
        #expect(VerdictName.allCases.allSatisfy { onDisk.signals(of: $0) == Policy.embedded().signals(of: $0) })
    }

    @Test func noEvidenceMeansFalseWithNoReasons() throws {
        let verdicts = evaluate(Policy.embedded(), [:])
        #expect(verdicts.count == VerdictName.allCases.count)
        for (_, verdict) in verdicts {
            #expect(!verdict.value && verdict.reasons.isEmpty && verdict.kind == nil && verdict.missingEvidence.isEmpty)
        }
    }

    @Test func everyTestOperatorFiresAndHolds() throws {
        let cases: [(String, [String: SignalValue], Bool)] = [
            (#"{"signal": "cpu.hypervisor_bit", "equals": true}"#, ["cpu.hypervisor_bit": .bool(true)], true),
            (#"{"signal": "cpu.hypervisor_bit", "equals": true}"#, ["cpu.hypervisor_bit": .bool(false)], false),
            (#"{"signal": "cpu.hypervisor_bit", "equals": true}"#, [:], false),
            (#"{"signal": "os.id", "notEquals": "debian"}"#, ["os.id": .string("ubuntu")], true),
            (#"{"signal": "os.id", "notEquals": "debian"}"#, [:], false),
            (#"{"signal": "os.id", "in": ["fedora", "rhel"]}"#, ["os.id": .string("rhel")], true),
            (#"{"signal": "os.id", "in": ["fedora", "rhel"]}"#, ["os.id": .string("debian")], false),
            (#"{"signal": "loader.ld_preload", "present": true}"#, ["loader.ld_preload": .string("/x.so")], true),
            (#"{"signal": "loader.ld_preload", "present": true}"#, ["loader.ld_preload": .string("")], false),
            (#"{"signal": "container.markers", "present": false}"#, ["container.markers": .strings([])], true),
            (#"{"signal": "os.kernel_release", "contains": "WSL2"}"#, ["os.kernel_release": .string("5.15-microsoft-standard-wsl2")], true),
            (#"{"signal": "container.markers", "containsAny": ["docker", "zzz"]}"#, ["container.markers": .strings(["/.dockerenv"])], true),
            (#"{"signal": "container.markers", "containsAny": ["zzz"]}"#, ["container.markers": .strings(["/.dockerenv"])], false),
            (#"{"signal": "process.parent_comm", "inTable": "debuggerProcesses"}"#, ["process.parent_comm": .string("strace")], true),
            (#"{"signal": "process.parent_comm", "inTable": "debuggerProcesses"}"#, ["process.parent_comm": .string("bash")], false),
            (#"{"signal": "process.tracer_pid", "greaterThan": 0}"#, ["process.tracer_pid": .int(7)], true),
            (#"{"signal": "process.tracer_pid", "greaterThan": 0}"#, ["process.tracer_pid": .int(0)], false),
            (#"{"signal": "process.uid", "lessThan": 1}"#, ["process.uid": .int(0)], true),
            (#"{"signal": "process.uid", "lessThan": 1}"#, ["process.uid": .string("0")], false),
        ]
        for (condition, signals, expected) in cases {
            let policy = try policy(#""farm": {"rules": [{"id": "r", "when": "# + condition + #", "confidence": "low", "reason": "because {value}"}]}"#)
            #expect(evaluate(policy, signals)[.farm]?.value == expected, "\(condition) on \(signals)")
        }
    }

    @Test func allConditionsMustHoldForAnAllRule() throws {
        let policy = try policy(#""farm": {"rules": [{"id": "r", "all": [{"signal": "os.id", "equals": "debian"}, {"signal": "process.uid", "equals": 0}], "confidence": "low", "reason": "x"}]}"#)
        #expect(evaluate(policy, ["os.id": .string("debian"), "process.uid": .int(0)])[.farm]?.value == true)
        #expect(evaluate(policy, ["os.id": .string("debian"), "process.uid": .int(1)])[.farm]?.value == false)
    }

    @Test func confidenceIsTheStrongestRuleAndCorroborationRaisesIt() throws {
        let rules = #"[{"id": "a", "when": {"signal": "os.id", "present": true}, "confidence": "low", "reason": "a"},"#
            + #" {"id": "b", "when": {"signal": "process.uid", "equals": 0}, "confidence": "medium", "reason": "b"}]"#
        let plain = try policy(#""debugger": {"rules": "# + rules + "}")
        let corroborating = try policy(#""debugger": {"corroborate": true, "rules": "# + rules + "}")
        let both: [String: SignalValue] = ["os.id": .string("x"), "process.uid": .int(0)]
        #expect(evaluate(plain, both)[.debugger]?.confidence == .medium)
        #expect(evaluate(corroborating, both)[.debugger]?.confidence == .high)
        #expect(evaluate(corroborating, ["os.id": .string("x")])[.debugger]?.confidence == .low)
        #expect(evaluate(corroborating, both)[.debugger]?.reasons.map(\.code) == ["a", "b"])
    }

    @Test func corroboratingRulesNeedAStrongerRuleAndDoNotCount() throws {
        let policy = try policy(#""automation": {"corroborate": true, "rules": ["#
            + #"{"id": "weak", "when": {"signal": "os.id", "present": true}, "confidence": "low", "reason": "w"},"#
            + #"{"id": "strong", "when": {"signal": "process.uid", "equals": 0}, "confidence": "medium", "reason": "s"},"#
            + #"{"id": "hint", "when": {"signal": "process.stdin_tty", "equals": false}, "confidence": "low", "corroboratesOnly": true, "reason": "h"}]}"#)
        let alone = evaluate(policy, ["process.stdin_tty": .bool(false)])[.automation]
        #expect(alone?.value == false)
        let besideLow = evaluate(policy, ["process.stdin_tty": .bool(false), "os.id": .string("x")])[.automation]
        #expect(besideLow?.reasons.map(\.code) == ["weak"] && besideLow?.confidence == .low)
        let besideMedium = evaluate(policy, ["process.stdin_tty": .bool(false), "process.uid": .int(0)])[.automation]
        #expect(besideMedium?.reasons.map(\.code) == ["strong", "hint"])
        #expect(besideMedium?.confidence == .medium, "a corroborating hint does not raise confidence")
    }

    @Test func kindComesFromTheStrongestRuleThenPolicyOrder() throws {
        let policy = try policy(#""virtualization": {"rules": ["#
            + #"{"id": "weak", "when": {"signal": "dmi.virtualization_kind", "present": true}, "confidence": "medium", "kindFrom": "dmi.virtualization_kind", "reason": "x"},"#
            + #"{"id": "strong", "when": {"signal": "cpu.hypervisor_kind", "present": true}, "confidence": "high", "kindFrom": "cpu.hypervisor_kind", "reason": "y"},"#
            + #"{"id": "literal", "when": {"signal": "cpu.hypervisor_bit", "equals": true}, "confidence": "high", "kind": "some-vm", "reason": "z"}]}"#)
        #expect(evaluate(policy, ["dmi.virtualization_kind": .string("qemu"), "cpu.hypervisor_kind": .string("kvm"),
                                  "cpu.hypervisor_bit": .bool(true)])[.virtualization]?.kind == "kvm")
        #expect(evaluate(policy, ["dmi.virtualization_kind": .string("qemu"), "cpu.hypervisor_bit": .bool(true)])[.virtualization]?.kind == "some-vm")
        #expect(evaluate(policy, ["dmi.virtualization_kind": .string("qemu")])[.virtualization]?.kind == "qemu")
    }

    @Test func reasonTemplatesNameTheEvidence() throws {
        let policy = try policy(#""debugger": {"rules": [{"id": "t", "when": {"signal": "process.tracer_pid", "greaterThan": 0}, "confidence": "high", "reason": "pid {value} is {process.tracer_comm} ({process.tracer_exe})"}]}"#)
        let verdict = evaluate(policy, ["process.tracer_pid": .int(42), "process.tracer_comm": .string("gdb")])[.debugger]
        #expect(verdict?.reasons.first?.message == "pid 42 is gdb (unknown)")
    }

    @Test func hiddenEvidenceIsSaidNotHidden() throws {
        for status in [ProbeStatus.denied, .timeout, .malformed, .error] {
            let verdicts = evaluate(Policy.embedded(), [:], status: status, probe: "process-context")
            let debugger = try #require(verdicts[.debugger])
            #expect(!debugger.value && debugger.confidence == .low)
            #expect(debugger.missingEvidence.map(\.probe) == ["process-context"])
            #expect(debugger.missingEvidence.first?.status == status)
            #expect(verdicts[.mitm]?.missingEvidence.isEmpty == true)
        }
        // An absent source is an answer, not hidden evidence.
        #expect(evaluate(Policy.embedded(), [:], status: .absent, probe: "process-context")[.debugger]?.missingEvidence.isEmpty == true)
    }

    @Test(arguments: [
        (#"{"#, "not valid JSON"),
        (#"[]"#, "must be a JSON object"),
        (#"{"verdicts": {}}"#, "field 'policyVersion'"),
        (#"{"policyVersion": 9, "verdicts": {}}"#, "version 9 is not supported"),
        (#"{"policyVersion": 1}"#, "field 'verdicts'"),
        (#"{"policyVersion": 1, "verdicts": {"psychic": {"rules": []}}}"#, "verdict 'psychic': unknown verdict"),
        (#"{"policyVersion": 1, "verdicts": {"farm": {"rules": [], "colour": 1}}}"#, "verdict 'farm': field 'colour': unknown field"),
        (#"{"policyVersion": 1, "verdicts": {"farm": {"rules": [{"id": "r1", "when": {"signal": "no.such", "equals": 1}, "confidence": "low", "reason": "x"}]}}}"#,
         "verdict 'farm', rule 1 ('r1'): field 'when.signal': unknown signal 'no.such'"),
        (#"{"policyVersion": 1, "verdicts": {"farm": {"rules": [{"id": "r1", "when": {"signal": "os.id", "equals": "x"}, "confidence": "extreme", "reason": "x"}]}}}"#,
         "rule 1 ('r1'): field 'confidence': expected low, medium or high, got 'extreme'"),
        (#"{"policyVersion": 1, "verdicts": {"farm": {"rules": [{"id": "r1", "when": {"signal": "os.id", "matches": "x"}, "confidence": "low", "reason": "x"}]}}}"#,
         "field 'when.matches': unknown test"),
        (#"{"policyVersion": 1, "verdicts": {"farm": {"rules": [{"id": "r1", "when": {"signal": "os.id", "equals": "x", "in": ["y"]}, "confidence": "low", "reason": "x"}]}}}"#,
         "exactly one test"),
        (#"{"policyVersion": 1, "verdicts": {"farm": {"rules": [{"id": "r1", "confidence": "low", "reason": "x"}]}}}"#,
         "field 'when': a rule needs"),
        (#"{"policyVersion": 1, "verdicts": {"farm": {"rules": [{"id": "r1", "when": {"signal": "os.id", "equals": "x"}, "confidence": "low", "reason": "{bogus.signal}"}]}}}"#,
         "field 'reason': the placeholder {bogus.signal} names no known signal"),
        (#"{"policyVersion": 1, "verdicts": {"farm": {"rules": [{"id": "r1", "when": {"signal": "os.id", "inTable": "nope"}, "confidence": "low", "reason": "x"}]}}}"#,
         "unknown detection table 'nope'"),
        (#"{"policyVersion": 1, "verdicts": {"farm": {"rules": [{"id": "r1", "when": {"signal": "os.id", "greaterThan": "3"}, "confidence": "low", "reason": "x"}]}}}"#,
         "field 'when.greaterThan': expected a whole number"),
        (#"{"policyVersion": 1, "verdicts": {"farm": {"rules": [{"id": "r1", "when": {"signal": "os.id", "equals": "x"}, "confidence": "low", "reason": "x"}, {"id": "r1", "when": {"signal": "os.id", "equals": "y"}, "confidence": "low", "reason": "y"}]}}}"#,
         "rule 2 ('r1'): field 'id': duplicate rule id"),
        (#"{"policyVersion": 1, "verdicts": {"farm": {"rules": [{"id": "r1", "when": {"signal": "os.id", "equals": "x"}, "confidence": "low", "reason": "x", "kindFrom": "nope"}]}}}"#,
         "field 'kindFrom': unknown signal 'nope'"),
        (#"{"policyVersion": 1, "verdicts": {}, "suspect": {"weights": {"farm": -1}}}"#, "field 'farm': expected a number from 0 to 100"),
        (#"{"policyVersion": 1e300, "verdicts": {}}"#, "is not supported"),
        (#"{"policyVersion": 1, "verdicts": {}, "suspect": {"weights": {"farm": 1e300}}}"#, "expected a number from 0 to 100"),
        (#"{"policyVersion": 1, "verdicts": {"farm": {"rules": [{"id": "r1", "when": {"signal": "process.uid", "equals": 1e300}, "confidence": "low", "reason": "x"}]}}}"#,
         "field 'when.equals': expected a string, whole number or boolean"),
        (#"{"policyVersion": 1, "name": "\uD800\u0041", "verdicts": {}}"#, "not valid JSON"),
    ])
    func malformedPoliciesNameFileRuleAndField(_ json: String, _ expected: String) {
        do {
            _ = try loadPolicy(json)
            Issue.record("accepted: \(json)")
        } catch {
            #expect(error.description.hasPrefix("test.json"), "\(error)")
            #expect(error.description.contains(expected), "\(error.description) does not contain \(expected)")
        }
    }

    @Test func unreadablePolicyFileIsAnError() {
        #expect(throws: PolicyError.self) { try Policy.load(contentsOf: "/nonexistent/policy.json") }
    }

    @Test func suspectScoreFollowsWeights() throws {
        let policy = try loadPolicy(#"{"policyVersion": 1, "verdicts": {"debugger": {"rules": [{"id": "t", "when": {"signal": "process.tracer_pid", "greaterThan": 0}, "confidence": "high", "reason": "x"}]}}, "suspect": {"weights": {"debugger": 70}, "confidenceFactors": {"low": 0.25, "medium": 0.6, "high": 1}, "levels": {"medium": 30, "high": 60}}}"#)
        let signals: [String: SignalValue] = ["process.tracer_pid": .int(3)]
        let result = IdentifyResult.judgedHere(state: .collected, report: singleProbeReport(signals), verdicts: Verdicts(evaluate(policy, signals)), policy: policy)
        #expect(result.suspectScore == 70 && result.suspectLevel == .high)
        #expect(result.triggers == [IdentifyTrigger(signal: "t", group: "debugger", weight: 70, confidence: .high)])
        let calm = IdentifyResult.judgedHere(state: .collected, report: singleProbeReport([:]), verdicts: Verdicts(evaluate(policy, [:])), policy: policy)
        #expect(calm.suspectScore == 0 && calm.suspectLevel == .low && calm.triggers.isEmpty)
    }
}
