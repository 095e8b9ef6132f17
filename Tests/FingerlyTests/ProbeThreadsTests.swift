import Dispatch
import Foundation
import Synchronization
import Testing
@testable import Fingerly
@testable import FingerlyModel
@testable import FingerlyProbes

/// Probe threads are kept between runs, and a stuck probe keeps its thread to itself.
@Suite(.serialized) struct ProbeThreadsTests {
    private static func threadOfNextProbe(_ pool: ProbeThreads) -> UInt {
        let thread = Mutex<UInt>(0)
        let done = DispatchSemaphore(value: 0)
        #expect(pool.start {
            thread.withLock { $0 = UInt(pthread_self()) }
            done.signal()
        })
        done.wait()
        return thread.withLock { $0 }
    }

    /// Waits until a thread done with its probe has parked; no time is asserted.
    /// Waits for a thread to park, at most ten seconds: a pool that never parks fails the test, not hangs the suite.
    private static func waitForIdleThread(_ pool: ProbeThreads,
                                          sourceLocation: SourceLocation = #_sourceLocation) {
        for _ in 0..<10_000 where pool.idleCount == 0 { usleep(1000) }
        #expect(pool.idleCount > 0, "no thread parked within ten seconds", sourceLocation: sourceLocation)
    }

    @Test func aThreadDoneWithItsProbeRunsTheNextOne() {
        let pool = ProbeThreads()
        let first = Self.threadOfNextProbe(pool)
        Self.waitForIdleThread(pool)
        let second = Self.threadOfNextProbe(pool)
        #expect(first == second)
        #expect(pool.idleCount <= 1)
    }

    @Test func aStuckProbeKeepsItsThreadAndTheNextProbeStillRuns() {
        let pool = ProbeThreads()
        let gate = DispatchSemaphore(value: 0)
        let stuckThread = Mutex<UInt>(0)
        let stuckStarted = DispatchSemaphore(value: 0)
        #expect(pool.start {
            stuckThread.withLock { $0 = UInt(pthread_self()) }
            stuckStarted.signal()
            gate.wait()
        })
        stuckStarted.wait()
        #expect(pool.idleCount == 0)
        let next = Self.threadOfNextProbe(pool)
        #expect(next != stuckThread.withLock { $0 })
        gate.signal()
    }
}

/// Status fields found on bytes read as the whole-file parse reads them.
@Suite struct StatusFieldTests {
    static let status = "Name:\tfingerly\nUmask:\t0022\nState:\tS (sleeping)\nXTracerPid:\t99\nTracerPid:\t0\n"
        + "Uid:\t1000\t1000\t1000\t1000\nPPid:\t 42 \nTracerPid:\t7\nSeccomp:\t2"

    @Test func namedFieldsMatchTheWholeParseAndALaterLineWins() {
        let all = ProcessContextProbe.parseStatus(Self.status)
        let named = ProcessContextProbe.statusFields(["Uid", "TracerPid", "PPid", "Seccomp", "Missing"], in: Self.status)
        #expect(named == ["Uid": all["Uid"]!, "TracerPid": "7", "PPid": "42", "Seccomp": "2"])
        #expect(all["TracerPid"] == "7")
    }

    @Test func oneFieldIsTheFirstLineStartingWithItsName() {
        #expect(ProcessContextProbe.field("TracerPid", in: Self.status) == "0")
        #expect(ProcessContextProbe.field("Name", in: Self.status) == "fingerly")
        #expect(ProcessContextProbe.field("Seccomp", in: Self.status) == "2")
        #expect(ProcessContextProbe.field("Pid", in: Self.status) == nil)
    }
}

/// Text with nothing to escape is appended whole, and cut as the scalar-by-scalar path cuts it.
@Suite struct BoundedTextWholePieceTests {
    @Test func plainTextThatFitsComesOutAsItWent() {
        #expect(BoundedText.bounded("libc.so.6 -> /usr/lib", limit: 100) == "libc.so.6 -> /usr/lib")
        var text = BoundedText(limit: 100)
        text.append("a")
        text.append("b\tc")
        text.append("d")
        #expect(text.text == "ab\\tcd")
    }

    @Test func plainTextPastTheLimitIsCutWithTheMarker() {
        // The marker is three bytes: two of "abcdef" fit before it in five.
        #expect(BoundedText.bounded("abcdef", limit: 5) == "ab…")
        #expect(BoundedText.bounded("abcde", limit: 5) == "abcde")
        var text = BoundedText(limit: 6)
        text.append("abc")
        text.append("def")
        text.append("g")
        #expect(text.text == "abc…")
    }
}
