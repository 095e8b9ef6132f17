import Foundation
import Testing
@testable import Fingerly
@testable import FingerlyHost
@testable import FingerlyModel
@testable import FingerlyPolicy
@testable import FingerlyProbes

// Reason templates come from the policy, the values they quote from the measured host: DMI
// strings, the environment, LD_PRELOAD. None of them may make the verdicts grow without bound.

/// What the reasons of all verdicts weigh once encoded: codes and messages.
private func reasonBytes(_ verdicts: [VerdictName: Verdict]) -> Int {
    verdicts.values.flatMap(\.reasons).reduce(0) { $0 + $1.code.utf8.count + $1.message.utf8.count }
}

/// A string of about `bytes` bytes that quotes each placeholder `copies` times between filler.
private func laced(_ bytes: Int, with placeholders: [String], copies: Int = 4) -> String {
    let markers = (0..<copies).flatMap { _ in placeholders.map { "{\($0)}" } }
    let filler = String(repeating: "A", count: max(0, (bytes - markers.joined().utf8.count) / max(1, markers.count + 1)))
    return markers.reduce(filler) { $0 + $1 + filler }
}

/// The host values of the review: 12 KB of DMI strings, an 86 KB environment value, a 29 KB
/// LD_PRELOAD, each quoting the placeholders of the others.
private let hostileSignals: [String: SignalValue] = {
    let dmi = ["dmi.sys_vendor", "dmi.product_name", "dmi.bios_vendor", "value"]
    let proxies = ["proxy.env.https_proxy", "proxy.env.http_proxy", "proxy.env.all_proxy", "proxy.env_variables", "value"]
    return [
        "dmi.virtualization_kind": .string(laced(4096, with: dmi)),
        "dmi.sys_vendor": .string(laced(4096, with: dmi)),
        "dmi.product_name": .string(laced(4096, with: dmi)),
        "dmi.bios_vendor": .string(laced(4096, with: dmi)),
        "proxy.env_variables": .strings(["https_proxy", "http_proxy", "all_proxy"] + (0..<2000).map { "X\($0)_{value}" }),
        "proxy.env.https_proxy": .string(laced(86 * 1024, with: proxies)),
        "proxy.env.http_proxy": .string(laced(86 * 1024, with: proxies)),
        "proxy.env.all_proxy": .string(laced(86 * 1024, with: proxies)),
        "loader.ld_preload": .string(laced(29 * 1024, with: ["loader.ld_preload", "loader.preload_description", "value"])),
        "loader.preload_description": .string(laced(29 * 1024, with: ["loader.ld_preload", "value"])),
    ]
}()

@Suite struct ReasonRenderingTests {
    @Test func insertedValuesAreNeverExpandedAgain() throws {
        let policy = try loadPolicy(#"{"policyVersion": 1, "verdicts": {"virtualization": {"rules": [{"id": "r", "#
            + #""when": {"signal": "dmi.sys_vendor", "present": true}, "confidence": "low", "#
            + #""reason": "{value} / {dmi.product_name} / {dmi.sys_vendor} / {dmi.product_name}"}]}}}"#)
        let verdict = try #require(evaluate(policy, ["dmi.sys_vendor": .string("V{dmi.product_name}"),
                                                     "dmi.product_name": .string("P{dmi.sys_vendor}{value}")])[.virtualization])
        #expect(verdict.reasons.map(\.message)
            == ["V{dmi.product_name} / P{dmi.sys_vendor}{value} / V{dmi.product_name} / P{dmi.sys_vendor}{value}"])
    }

    @Test func hostileHostValuesGiveBoundedReasons() throws {
        for policy in [Policy.embedded(), try everyPlaceholderPolicy()] {
            let verdicts = evaluate(policy, hostileSignals)
            let reasons = verdicts.values.flatMap(\.reasons)
            #expect(!reasons.isEmpty)
            #expect(reasonBytes(verdicts) < 64 * 1024, "\(policy.name): \(reasonBytes(verdicts)) bytes of reasons")
            for reason in reasons {
                #expect(reason.message.utf8.count <= 1024, "\(reason.code): \(reason.message.utf8.count) bytes")
            }
            for verdict in verdicts.values {
                #expect((verdict.kind?.utf8.count ?? 0) <= 256)
            }
            let encoded = try JSONEncoder().encode(verdicts)
            #expect(encoded.count < 64 * 1024, "\(encoded.count) bytes of verdicts")
        }
    }

    /// Every string signal the hostile host sets, quoted by a rule of its own, several times.
    private func everyPlaceholderPolicy() throws -> Policy {
        let rules = hostileSignals.keys.sorted().map { name in
            #"{"id": "quote_\#(name)", "when": {"signal": "\#(name)", "present": true}, "confidence": "low", "#
                + #""reason": "{value} {\#(name)} {value} {\#(name)}"}"#
        }
        return try loadPolicy(#"{"policyVersion": 1, "name": "quotes", "verdicts": {"farm": {"rules": ["#
            + rules.joined(separator: ",") + "]}}}")
    }

    @Test func aValueIsCutOnAScalarBoundaryWithAMarker() throws {
        let policy = try loadPolicy(#"{"policyVersion": 1, "verdicts": {"farm": {"rules": [{"id": "r", "#
            + #""when": {"signal": "os.id", "present": true}, "confidence": "low", "reason": "<{value}>"}]}}}"#)
        // Three-byte scalars, so a cut at a fixed byte count lands inside one.
        let message = try #require(evaluate(policy, ["os.id": .string(String(repeating: "€", count: 1000))])[.farm]?.reasons.first?.message)
        #expect(message.hasPrefix("<€€€") && message.hasSuffix("…>"))
        #expect(message.utf8.count <= 256 + 2)
        #expect(message.unicodeScalars.allSatisfy { $0 == "€" || $0 == "<" || $0 == ">" || $0 == "…" })
        // A value under the limit is quoted whole.
        let short = try #require(evaluate(policy, ["os.id": .string("debian")])[.farm]?.reasons.first?.message)
        #expect(short == "<debian>")
    }

    @Test func aListValueIsCutWithoutJoiningAllOfIt() throws {
        let policy = try loadPolicy(#"{"policyVersion": 1, "verdicts": {"container": {"rules": [{"id": "r", "#
            + #""when": {"signal": "container.markers", "present": true}, "confidence": "low", "kindFrom": "container.markers", "reason": "{value}"}]}}}"#)
        let items = (0..<100_000).map { "/marker-\($0)" }
        let verdict = try #require(evaluate(policy, ["container.markers": .strings(items)])[.container])
        #expect(verdict.reasons.first?.message.hasPrefix("/marker-0, /marker-1, ") == true)
        #expect((verdict.reasons.first?.message.utf8.count ?? .max) <= 256)
        #expect((verdict.kind?.utf8.count ?? .max) <= 256)
    }

    @Test func twentyThousandPlaceholdersRenderOneBoundedReason() throws {
        let names = ["dmi.sys_vendor", "dmi.product_name", "dmi.bios_vendor", "os.id", "process.tracer_comm", "value"]
        let template = (0..<20_000).map { "{\(names[$0 % names.count])}" }.joined(separator: " ")
        let policy = try loadPolicy(#"{"policyVersion": 1, "verdicts": {"farm": {"rules": [{"id": "r", "#
            + #""when": {"signal": "os.id", "present": true}, "confidence": "low", "reason": ""# + template + #""}]}}}"#)
        let message = try #require(evaluate(policy, hostileSignals.merging(["os.id": .string("deb{os.id}")]) { $1 })[.farm]?.reasons.first?.message)
        #expect(message.utf8.count <= 1024)
        #expect(message.hasSuffix("…"))
        let unknownsOnly = try #require(evaluate(policy, ["os.id": .string("x")])[.farm]?.reasons.first?.message)
        #expect(unknownsOnly.hasPrefix("unknown unknown unknown x unknown x unknown unknown unknown x"))
        #expect(unknownsOnly.utf8.count <= 1024)
    }

    @Test func controlCharactersFromTheHostAreEscapedInReasons() throws {
        let policy = try loadPolicy(#"{"policyVersion": 1, "verdicts": {"virtualization": {"rules": [{"id": "r", "#
            + #""when": {"signal": "dmi.sys_vendor", "present": true}, "confidence": "low", "kindFrom": "dmi.sys_vendor", "reason": "vendor {value}"}]}}}"#)
        let verdict = try #require(evaluate(policy, ["dmi.sys_vendor": .string("Q\u{1B}[2J\r\nEMU\u{9B}1m")])[.virtualization])
        #expect(verdict.reasons.first?.message == #"vendor Q\u001B[2J\r\nEMU\u009B1m"#)
        #expect(verdict.kind == #"Q\u001B[2J\r\nEMU\u009B1m"#)
    }

    @Test func manyFiringRulesAreCutAndCounted() throws {
        let rules = (0..<5_000).map { index in
            #"{"id": "rule_\#(index)", "when": {"signal": "os.id", "present": true}, "confidence": "low", "reason": "os {value} {os.id}"}"#
        }
        let policy = try loadPolicy(#"{"policyVersion": 1, "verdicts": {"# + VerdictName.allCases.map { name in
            #""\#(name.rawValue)": {"rules": ["# + rules.joined(separator: ",") + "]}"
        }.joined(separator: ",") + "}}")
        let verdicts = evaluate(policy, ["os.id": .string(String(repeating: "d", count: 300))])
        #expect(reasonBytes(verdicts) < 64 * 1024)
        for (name, verdict) in verdicts {
            #expect(verdict.value && verdict.confidence == .low, "\(name): every rule still counts")
            #expect(verdict.reasons.count + (verdict.reasonsOmitted ?? 0) == 5_000, "\(name): what was cut is counted")
            #expect(verdict.reasons.first?.code == "rule_0")
        }
        let result = IdentifyResult.judgedHere(state: .collected, report: singleProbeReport([:]), verdicts: Verdicts(verdicts), policy: policy)
        #expect(try JSONEncoder().encode(result).count < 128 * 1024)
    }
}
