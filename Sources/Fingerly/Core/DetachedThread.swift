#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

private final class ThreadBody {
    let run: @Sendable () -> Void
    init(_ run: @escaping @Sendable () -> Void) { self.run = run }
}

/// Starts `body` on a new detached OS thread. Probes block in system calls, and a blocked call
/// must never hold a thread of Swift's cooperative pool; a detached thread can also be abandoned
/// when it never returns (a FIFO, a hung network filesystem).
func startDetachedThread(_ body: @escaping @Sendable () -> Void) -> Bool {
    let box = Unmanaged.passRetained(ThreadBody(body)).toOpaque()
    var thread = pthread_t()
    let result = pthread_create(&thread, nil, { raw in
        Unmanaged<ThreadBody>.fromOpaque(raw!).takeRetainedValue().run()
        return nil
    }, box)
    guard result == 0 else {
        Unmanaged<ThreadBody>.fromOpaque(box).release()
        return false
    }
    pthread_detach(thread)
    return true
}

/// Monotonic milliseconds, for deadlines and durations.
func monotonicMilliseconds() -> Double {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return Double(now.tv_sec) * 1000 + Double(now.tv_nsec) / 1_000_000
}
