import Synchronization
import FingerlyHost

/// How much slower this process runs code it has not run before than code it has: the mark of
/// a binary translator (valgrind, DynamoRIO, Pin, QEMU user mode), which must translate each new
/// block before running it. Natively the two workloads cost about the same CPU time (0.4 to 2.5
/// times, measured across optimisation levels, `nice 19` and a CPU shared with four busy loops);
/// under valgrind the fresh code costs 30 to 500 times more. Both figures are this thread's CPU
/// time, so a busy machine, which delays the thread without making its code slower, moves
/// neither: slowness is evidence, load is not.
package struct CodeSlowdown: Sendable, Hashable {
    /// Above this the run is instrumented (the policy's `code_translation_slowdown` uses the
    /// same figure); natively the ratio stays under 3.
    package static let instrumentedFactor = 12
    /// Timeouts grow with the slowdown up to this factor (the budget still bounds the run).
    static let longestTimeoutScale = 100
    /// Below this the reference took too little CPU time for the clock to measure it.
    static let shortestReferenceNanoseconds: Int64 = 2_000

    /// The fresh code's CPU time over the reference's, rounded: about 1 natively.
    package let factor: Int
    /// The highest factor any measurement in this process gave. A translator keeps what it
    /// translated, so once the blocks are known a later run costs less: the first measurement
    /// is the one that tells, and the process does not lose its instrumentation afterwards.
    package let highestFactorInProcess: Int
    package let freshCodeMicroseconds: Int
    package let referenceMicroseconds: Int
    /// What the measurement cost the caller, in wall-clock microseconds.
    package let costMicroseconds: Int

    /// The highest factor seen, kept for the life of a process (or of a test).
    package final class Memory: Sendable {
        let highest = Atomic<Int>(0)
        package init() {}
        package static let process = Memory()
    }

    /// Measures in the calling thread; nil when its CPU clock cannot be read or is too coarse.
    ///
    /// A reading past the bound is taken again with other paths through the branches before it
    /// counts: natively about one reading in 80,000 crosses it (an interrupt landing in the 20 µs
    /// of the branches), and the process would keep that reading for good. A translator meets
    /// new blocks the second time too, so its reading stays high.
    package static func measure(seed: UInt64, memory: Memory = .process,
                                measuring: (UInt64) -> CodeCost? = ProcessIntegrity.measureCodeCost) -> CodeSlowdown? {
        guard let cost = measuring(seed) else { return nil }
        guard let first = ratio(cost), first > Double(instrumentedFactor) else { return CodeSlowdown(cost, memory: memory) }
        guard let again = measuring(~seed &* 0x9E37_79B9_7F4A_7C15), let second = ratio(again) else {
            return CodeSlowdown(cost, memory: memory)
        }
        return CodeSlowdown(second < first ? again : cost, memory: memory)
    }

    /// The fresh code's CPU time over the reference's; nil when the reference is too short for the clock.
    static func ratio(_ cost: CodeCost) -> Double? {
        let (finest, overflow) = cost.cpuClockResolutionNanoseconds.multipliedReportingOverflow(by: 100)
        guard cost.referenceCPUNanoseconds >= Self.shortestReferenceNanoseconds, !overflow,
              cost.cpuClockResolutionNanoseconds >= 0, finest <= cost.referenceCPUNanoseconds,
              cost.freshCodeCPUNanoseconds >= 0, cost.wallNanoseconds >= 0 else { return nil }
        return Double(cost.freshCodeCPUNanoseconds) / Double(cost.referenceCPUNanoseconds)
    }

    init?(_ cost: CodeCost, memory: Memory) {
        guard let ratio = Self.ratio(cost) else { return nil }
        factor = Int(min(ratio, 1_000_000).rounded())
        highestFactorInProcess = memory.highest.max(factor, ordering: .relaxed).newValue
        freshCodeMicroseconds = Int(cost.freshCodeCPUNanoseconds / 1000)
        referenceMicroseconds = Int(cost.referenceCPUNanoseconds / 1000)
        costMicroseconds = Int(cost.wallNanoseconds / 1000)
    }

    /// Whether this process runs under a binary translator.
    package var isInstrumented: Bool { highestFactorInProcess > Self.instrumentedFactor }

    /// What every probe timeout is multiplied by: the probes that would see the instrumentation
    /// are the ones its slowdown would otherwise time out.
    package var timeoutScale: Int { isInstrumented ? min(highestFactorInProcess, Self.longestTimeoutScale) : 1 }
}
