import Foundation
import Testing
@testable import Fingerly
@testable import FingerlyHost
@testable import FingerlyModel
@testable import FingerlyPolicy
@testable import FingerlyProbes

/// The fresh-code slowdown: what it computes from a measurement, what it remembers, what it does
/// to the probes' timeouts, and what this very process measures.
@Suite struct CodeSlowdownTests {
    static func cost(fresh: Int64, reference: Int64, resolution: Int64 = 1) -> CodeCost {
        CodeCost(freshCodeCPUNanoseconds: fresh, referenceCPUNanoseconds: reference, wallNanoseconds: fresh + reference,
                 cpuClockResolutionNanoseconds: resolution)
    }

    @Test func theFactorIsTheFreshCodesCostOverTheReferences() throws {
        let native = try #require(CodeSlowdown(Self.cost(fresh: 16_000, reference: 19_000), memory: .init()))
        #expect(native.factor == 1 && !native.isInstrumented && native.timeoutScale == 1)
        #expect(native.freshCodeMicroseconds == 16 && native.referenceMicroseconds == 19 && native.costMicroseconds == 35)
        let translated = try #require(CodeSlowdown(Self.cost(fresh: 20_467_000, reference: 283_000), memory: .init()))
        #expect(translated.factor == 72 && translated.isInstrumented && translated.timeoutScale == 72)
        let extreme = try #require(CodeSlowdown(Self.cost(fresh: .max / 2, reference: 2_000), memory: .init()))
        #expect(extreme.factor == 1_000_000 && extreme.timeoutScale == CodeSlowdown.longestTimeoutScale)
    }

    @Test func aClockTooCoarseOrAReferenceTooShortMeasuresNothing() {
        #expect(CodeSlowdown(Self.cost(fresh: 5_000, reference: 1_000), memory: .init()) == nil)
        #expect(CodeSlowdown(Self.cost(fresh: 0, reference: 4_000_000, resolution: 1_000_000), memory: .init()) == nil)
        #expect(CodeSlowdown(Self.cost(fresh: -1, reference: 40_000), memory: .init()) == nil)
    }

    /// A translator keeps what it translated: later calls of an instrumented process cost less,
    /// and the process stays instrumented.
    @Test func theHighestFactorOfTheProcessIsKept() throws {
        let memory = CodeSlowdown.Memory()
        let first = try #require(CodeSlowdown(Self.cost(fresh: 4_000_000, reference: 50_000), memory: memory))
        let later = try #require(CodeSlowdown(Self.cost(fresh: 100_000, reference: 50_000), memory: memory))
        #expect(first.highestFactorInProcess == 80 && later.factor == 2 && later.highestFactorInProcess == 80)
        #expect(later.isInstrumented)
        let elsewhere = try #require(CodeSlowdown(Self.cost(fresh: 100_000, reference: 50_000), memory: .init()))
        #expect(!elsewhere.isInstrumented)
    }

    /// A native reading past the bound (an interrupt in the 20 µs of the branches) is taken again
    /// before it counts, and the process does not keep it; a translator's second reading stays high.
    @Test func aReadingPastTheBoundCountsOnlyWhenTakenAgain() throws {
        let memory = CodeSlowdown.Memory()
        var readings = [Self.cost(fresh: 263_000, reference: 20_000), Self.cost(fresh: 17_000, reference: 20_000)][...]
        let fluke = try #require(CodeSlowdown.measure(seed: 1, memory: memory) { _ in readings.popFirst() })
        #expect(fluke.factor == 1 && !fluke.isInstrumented && memory.highest.load(ordering: .relaxed) == 1)
        readings = [Self.cost(fresh: 20_000_000, reference: 280_000), Self.cost(fresh: 10_000_000, reference: 280_000)][...]
        let translated = try #require(CodeSlowdown.measure(seed: 2, memory: memory) { _ in readings.popFirst() })
        #expect(translated.factor == 36 && translated.isInstrumented)
        var calls = 0
        _ = CodeSlowdown.measure(seed: 3, memory: .init()) { _ in calls += 1; return Self.cost(fresh: 16_000, reference: 19_000) }
        #expect(calls == 1, "a native reading is taken once")
    }

    @Test func aClockThatCannotBeTrustedMeasuresNothing() {
        #expect(CodeSlowdown(Self.cost(fresh: 5_000, reference: 40_000, resolution: .max / 2), memory: .init()) == nil)
        #expect(CodeSlowdown(Self.cost(fresh: 5_000, reference: 40_000, resolution: -1), memory: .init()) == nil)
    }

    /// The bound above which timeouts grow is the policy's bound for the verdict.
    @Test func theTimeoutBoundIsThePolicysBound() throws {
        let rules = try #require(Policy.embedded().verdicts[.instrumentation]?.rules)
        let rule = try #require(rules.first { $0.id == "code_translation_slowdown" })
        guard case .greaterThan(let bound)? = rule.conditions.first?.test else {
            Issue.record("code_translation_slowdown is not a greaterThan rule"); return
        }
        #expect(bound == CodeSlowdown.instrumentedFactor)
    }

    @Test func timeoutsGrowWithTheSlowdownButNeverPastTheBudget() {
        #expect(Fingerly.scaled(100, by: 1, within: 1200) == 100)
        #expect(Fingerly.scaled(100, by: 5, within: 1200) == 500)
        #expect(Fingerly.scaled(100, by: 72, within: 1200) == 1200)
        #expect(Fingerly.scaled(400, by: 72, within: 300) == 400, "a timeout is never cut below the catalogue's")
        #expect(Fingerly.scaled(.max / 2, by: 100, within: 1200) == .max / 2, "no overflow")
    }

    /// This test process runs natively: its factor is far below the instrumented bound. Under a
    /// translator (valgrind on the whole suite) the scenario tests are the ones that speak.
    @Test func thisProcessMeasuresNative() throws {
        let slowdown = try #require(CodeSlowdown.measure(seed: 0x5EED, memory: .init()))
        let figures = "fresh \(slowdown.freshCodeMicroseconds) µs, reference \(slowdown.referenceMicroseconds) µs"
        #expect(slowdown.factor <= CodeSlowdown.instrumentedFactor / 2, "\(figures)")
        #expect(slowdown.referenceMicroseconds > 0)
    }
}
