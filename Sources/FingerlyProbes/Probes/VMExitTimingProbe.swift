import CFingerlyCPUID
import FingerlyHost
import FingerlyModel

/// What is left once CPUID, firmware and device strings are scrubbed: CPUID still exits to the hypervisor, which
/// costs thousands of timestamp ticks where bare metal spends a few hundred. Measured against nine LFENCEs, which
/// never exit, so frequency scaling and the timestamp reads themselves fall on both series alike.
///
/// Noisy by nature (preemption, SMIs, a hypervisor offsetting the TSC): the policy lets it only corroborate, at low
/// confidence. Under `--root` it replays `<root>/.fingerly/timing.json` and is skipped without it.
package struct VMExitTimingProbe: Probe {
    package let id = "vm-exit-timing"
    static let replayPath = "/.fingerly/timing.json"
    static let samples = 64
    static let replayLimit = 4096
    static let largestExactTicks: Double = 9_007_199_254_740_992
    /// Bare metal: CPUID leaf 0 takes 100–300 core cycles against 40–160 for the fences, a ratio under 4, and at
    /// most about 700 ticks when the core idles far below the TSC's rate. A VM exit costs 1,000 cycles and more
    /// (about 9,150 ticks, 59 times the fences, in the Firecracker guest this was written on).
    static let suspectedRatio = 8
    static let suspectedMedianTicks: UInt64 = 750

    package func collect(into context: ProbeContext) throws(ProbeFailure) {
        var (exiting, baseline) = context.host.isLiveHost ? try Self.measured() : try Self.replayed(from: context.host)
        guard !exiting.isEmpty, !baseline.isEmpty else {
            throw ProbeFailure(.malformed, "\(Self.replayPath): both series need at least one sample")
        }
        exiting.sort()
        baseline.sort()
        let exitingMedian = Self.median(exiting), baselineMedian = Self.median(baseline)
        // Ratios of medians: a sample a preemption stretched moves neither.
        let ratio = baselineMedian == 0 ? 0 : exitingMedian / baselineMedian
        context.emit("timing.cpuid_median_ticks", Self.clamped(exitingMedian))
        context.emit("timing.cpuid_spread_ticks", Self.clamped(Self.spread(exiting)))
        context.emit("timing.baseline_median_ticks", Self.clamped(baselineMedian))
        context.emit("timing.baseline_spread_ticks", Self.clamped(Self.spread(baseline)))
        context.emit("timing.cpuid_to_baseline_ratio", Self.clamped(ratio))
        context.emit("timing.cpuid_exit_suspected",
                     exitingMedian >= Self.suspectedMedianTicks && ratio >= UInt64(Self.suspectedRatio))
    }

    static func median(_ sorted: [UInt64]) -> UInt64 { sorted[sorted.count / 2] }

    /// From the tenth to the ninetieth percentile.
    static func spread(_ sorted: [UInt64]) -> UInt64 {
        sorted[sorted.count * 9 / 10] - sorted[sorted.count / 10]
    }

    static func clamped(_ value: UInt64) -> Int { value > UInt64(Int.max) ? Int.max : Int(value) }

    static func measured() throws(ProbeFailure) -> ([UInt64], [UInt64]) {
        var exiting = [UInt64](repeating: 0, count: samples), baseline = [UInt64](repeating: 0, count: samples)
        let done = exiting.withUnsafeMutableBufferPointer { exitingBuffer in
            baseline.withUnsafeMutableBufferPointer { baselineBuffer in
                fingerly_time_vm_exits(UInt32(samples), exitingBuffer.baseAddress, baselineBuffer.baseAddress)
            }
        }
        guard done else { throw ProbeFailure(.skipped, "this architecture has no CPUID instruction to time") }
        return (exiting, baseline)
    }

    /// `{"cpuidTicks": [integers], "baselineTicks": [integers]}`, each of 1 to 4096 integers from 0 to 2^53.
    static func replayed(from host: HostFileSystem) throws(ProbeFailure) -> ([UInt64], [UInt64]) {
        let bytes: [UInt8]
        do {
            bytes = try host.read(replayPath, limit: 256 * 1024)
        } catch where error.failure == .absent {
            throw ProbeFailure(.skipped, "a root tree is not the running CPU, and it has no \(replayPath) to replay")
        } catch {
            throw ProbeFailure(error)
        }
        let shape = "{\"cpuidTicks\": [1 to \(replayLimit) integers], \"baselineTicks\": [1 to \(replayLimit) integers]}"
        guard case .object(let members)? = try? JSONParser.parse(bytes) else {
            throw ProbeFailure(.malformed, "\(replayPath): expected \(shape)")
        }
        var exiting: [UInt64]?, baseline: [UInt64]?
        for (key, value) in members {
            guard case .array(let items) = value, (1...replayLimit).contains(items.count) else {
                throw ProbeFailure(.malformed, "\(replayPath): expected \(shape)")
            }
            var series: [UInt64] = []
            for item in items {
                // Numbers arrive as doubles: above 2^53 they would round, so a count that large is refused.
                guard case .number(let number) = item, number <= Self.largestExactTicks,
                      let ticks = UInt64(exactly: number) else {
                    throw ProbeFailure(.malformed, "\(replayPath): \(key) holds a value that is not a tick count")
                }
                series.append(ticks)
            }
            switch key {
            case "cpuidTicks": exiting = series
            case "baselineTicks": baseline = series
            default: throw ProbeFailure(.malformed, "\(replayPath): unknown member '\(key)'; expected \(shape)")
            }
        }
        guard let exiting, let baseline else { throw ProbeFailure(.malformed, "\(replayPath): expected \(shape)") }
        return (exiting, baseline)
    }
}
