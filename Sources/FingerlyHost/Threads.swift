#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Dispatch
import Synchronization

private final class ThreadBody {
    let run: @Sendable () -> Void
    init(_ run: @escaping @Sendable () -> Void) { self.run = run }
}

/// Starts `body` on a new detached OS thread. Probes block in system calls, and a blocked call
/// must never hold a thread of Swift's cooperative pool; a detached thread can also be abandoned
/// when it never returns (a FIFO, a hung network filesystem).
package func startDetachedThread(_ body: @escaping @Sendable () -> Void) -> Bool {
    let box = Unmanaged.passRetained(ThreadBody(body)).toOpaque()
    var thread = pthread_t()
    var attributes = pthread_attr_t()
    pthread_attr_init(&attributes)
    defer { pthread_attr_destroy(&attributes) }
    // Probes are shallow; a 512 KiB stack instead of 8 MiB keeps thread start-up cheap.
    pthread_attr_setstacksize(&attributes, 512 * 1024)
    let result = pthread_create(&thread, &attributes, { raw in
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
package func monotonicMilliseconds() -> Double {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return Double(now.tv_sec) * 1000 + Double(now.tv_nsec) / 1_000_000
}

/// A value computed once on a thread of its own, starting at once; reading it waits for it.
package final class Prepared<Value: Sendable>: Sendable {
    private let state = Mutex<Value?>(nil)
    private let ready = DispatchSemaphore(value: 0)

    package init(_ make: @escaping @Sendable () -> Value) {
        if !startDetachedThread({ self.finish(make()) }) { finish(make()) }
    }

    private func finish(_ value: Value) {
        state.withLock { $0 = value }
        ready.signal()
    }

    package var value: Value {
        if let value = state.withLock({ $0 }) { return value }
        ready.wait()
        ready.signal()  // let every later reader through too
        return state.withLock { $0 }!
    }
}
