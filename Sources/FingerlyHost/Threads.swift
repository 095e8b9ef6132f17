#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CFingerlyCPUID
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

/// Names the calling thread as `ps -L` and a debugger show it (15 bytes at most, the kernel's
/// limit). Written through procfs: glibc's pthread_setname_np is not visible to Swift.
package func nameCurrentThread(_ name: String) {
    let descriptor = open("/proc/thread-self/comm", O_WRONLY | O_CLOEXEC)
    guard descriptor >= 0 else { return }
    defer { close(descriptor) }
    let bytes = Array(name.utf8.prefix(15))
    _ = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
}

/// The CPUs this process may run on: its affinity mask, as taskset and a cgroup's cpuset leave it, at most what a
/// cgroup v2 CPU quota allows. A system call and one small read: Foundation's count read four files besides.
package func usableProcessorCount() -> Int { Int(fingerly_usable_processor_count()) }

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

/// A mutex with a condition variable, for state several threads wait on (a connection pool, a
/// group commit). Timed waits run on the monotonic clock, so setting the wall clock neither
/// ends them early nor stretches them.
package final class ConditionLock: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

    package init() {
        pthread_mutex_init(mutex, nil)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    package func lock() { pthread_mutex_lock(mutex) }
    package func unlock() { pthread_mutex_unlock(mutex) }

    /// Waits for a signal with the lock held; it is held again on return. Wake-ups may be spurious.
    package func wait() { pthread_cond_wait(condition, mutex) }

    /// Waits as `wait()` does, until `deadline` (``monotonicMilliseconds()``) at the latest;
    /// false once the deadline has passed.
    package func wait(untilMonotonicMilliseconds deadline: Double) -> Bool {
        // Int(_:) traps past Int.max: a deadline from a configured timeout is held to about 30,000 years.
        let clamped = deadline.isNaN ? 0 : min(max(deadline, 0), 1e15)
        var until = timespec()
        until.tv_sec = Int(clamped / 1000)
        until.tv_nsec = Int((clamped - Double(until.tv_sec) * 1000) * 1_000_000)
        return pthread_cond_timedwait(condition, mutex, &until) != ETIMEDOUT
    }

    package func signal() { pthread_cond_signal(condition) }
    package func broadcast() { pthread_cond_broadcast(condition) }
}
