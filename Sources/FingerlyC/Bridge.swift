import FoundationEssentials
import Dispatch
import Fingerly
import FingerlyHost
import FingerlyModel
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A failure as it crosses to C: the `fingerly_error` kinds of fingerly.h.
struct CallFailure: Error {
    static let consentKind: Int32 = 1
    static let transportKind: Int32 = 2
    static let configurationKind: Int32 = 3
    static let internalKind: Int32 = 4

    let kind: Int32
    var status: Int32 = 0
    var retryable = false
    let message: String

    static func configuration(_ message: String) -> CallFailure { CallFailure(kind: configurationKind, message: message) }

    /// Every error the library throws has a kind; what is left is internal, never a trap.
    init(_ error: any Error) {
        switch error {
        case let failure as CallFailure:
            self = failure
        case let consent as ConsentError:
            self.init(kind: Self.consentKind, message: consent.description)
        case let transport as TransportError:
            // A status outside Int32 cannot come from HTTP; 0 says "no server answer".
            self.init(kind: Self.transportKind, status: transport.status.flatMap { Int32(exactly: $0) } ?? 0,
                      retryable: transport.retryable, message: transport.description)
        case FingerlyError.invalidConfiguration(let field, let reason):
            self.init(kind: Self.configurationKind, message: "\(CConfiguration.member(forField: field)): \(reason)")
        case FingerlyError.localStore:
            // The state directory's store is what the caller can act on (the CLI's reset removes
            // it), so it comes as that argument's error, not an internal one.
            self.init(kind: Self.configurationKind, message: "stateDirectory: \(error)")
        default:
            self.init(kind: Self.internalKind, message: "internal error: \(error)")
        }
    }

    init(kind: Int32, status: Int32 = 0, retryable: Bool = false, message: String) {
        self.kind = kind
        self.status = status
        self.retryable = retryable
        self.message = message
    }
}

/// `fingerly_error`'s C layout: int kind; int status; bool retryable; char message[256].
/// Written by offset so the Swift side needs no C module of its own; a test checks it against
/// the header's struct through a C program.
enum ErrorRecord {
    static let kindOffset = 0
    static let statusOffset = 4
    static let retryableOffset = 8
    static let messageOffset = 9
    static let messageCapacity = 256
    static let size = 268

    /// Clears the record (a success) or fills it; the message is cut on a character boundary and
    /// always NUL-terminated.
    static func write(_ failure: CallFailure?, to record: UnsafeMutableRawPointer?) {
        guard let record else { return }
        record.initializeMemory(as: UInt8.self, repeating: 0, count: size)
        guard let failure else { return }
        record.storeBytes(of: failure.kind, toByteOffset: kindOffset, as: Int32.self)
        record.storeBytes(of: failure.status, toByteOffset: statusOffset, as: Int32.self)
        record.storeBytes(of: failure.retryable, toByteOffset: retryableOffset, as: Bool.self)
        let text = Array(BoundedText.bounded(failure.message, limit: messageCapacity - 1).utf8.prefix(messageCapacity - 1))
        text.withUnsafeBytes { bytes in
            (record + messageOffset).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
        }
    }

    /// The result code of fingerly.h: 0, or the negated kind.
    static func finish(_ failure: CallFailure?, _ record: UnsafeMutableRawPointer?) -> Int32 {
        write(failure, to: record)
        return failure.map { -$0.kind } ?? 0
    }
}

/// The one C string limit: a config document or a tag longer than this is a caller's mistake.
let longestCString = 1 << 20

/// A C string argument as UTF-8 text; nil only when the pointer is NULL and that is allowed.
func text(_ pointer: UnsafePointer<CChar>?, _ name: String, optional: Bool = false) throws(CallFailure) -> String? {
    guard let pointer else {
        if optional { return nil }
        throw .configuration("\(name) is NULL")
    }
    let length = strnlen(pointer, longestCString + 1)
    guard length <= longestCString else { throw .configuration("\(name) is longer than \(longestCString) bytes") }
    let bytes = UnsafeRawBufferPointer(start: pointer, count: length)
    guard let decoded = String(validating: bytes, as: UTF8.self) else { throw .configuration("\(name) is not UTF-8") }
    return decoded
}

/// The `tiers` bit set of fingerly.h: 0 is the default.
func tierSet(_ bits: UInt32) throws(CallFailure) -> Set<Tier>? {
    guard bits != 0 else { return nil }
    guard bits & ~UInt32(3) == 0 else { throw .configuration("tiers: unknown bit(s) \(bits & ~UInt32(3)); use FINGERLY_TIER_FAST | FINGERLY_TIER_DEFERRED") }
    var tiers: Set<Tier> = []
    if bits & 1 != 0 { tiers.insert(.fast) }
    if bits & 2 != 0 { tiers.insert(.deferred) }
    return tiers
}

/// A copy the C caller owns and hands back to `fingerly_free`.
func mallocCopy(_ bytes: some Collection<UInt8>) throws(CallFailure) -> UnsafeMutablePointer<CChar> {
    guard let copy = malloc(bytes.count + 1)?.assumingMemoryBound(to: UInt8.self) else {
        throw CallFailure(kind: CallFailure.internalKind, message: "out of memory for a \(bytes.count)-byte result")
    }
    var index = 0
    for byte in bytes {
        copy[index] = byte
        index += 1
    }
    copy[index] = 0
    return UnsafeMutableRawPointer(copy).assumingMemoryBound(to: CChar.self)
}

func encoded(_ value: some Encodable) throws(CallFailure) -> [UInt8] {
    do {
        return Array(try JSONEncoder.fingerly.encode(value))
    } catch {
        throw CallFailure(kind: CallFailure.internalKind, message: "cannot encode the result: \(error)")
    }
}

/// Carries a value from the task to the waiting C thread; the semaphore orders the accesses.
private final class Outcome<Value>: @unchecked Sendable {
    var result: Result<Value, CallFailure>?
}

/// Set by the first call that starts a task. fork() copies only the calling thread, so a child of a
/// process that used the library has no Swift runtime threads: a task started there never runs, and
/// waiting for it hung the child for ever (Python's multiprocessing forks by default on Linux).
private let processThatStartedTasks = getpid()

/// Runs async library work for a C thread that waits. The caller's thread is not one of the
/// Swift cooperative pool's (C code never runs on it), so waiting here starves no task.
func blocking<Value>(_ work: @escaping @Sendable () async throws -> Value) -> Result<Value, CallFailure> {
    guard getpid() == processThatStartedTasks else {
        return .failure(CallFailure(kind: CallFailure.internalKind, message: "libfingerly ran in this process's parent before fork(): "
            + "its threads stayed there, so nothing can run here; load it in a process started by exec (Python: multiprocessing's 'spawn')"))
    }
    let outcome = Outcome<Value>()
    let done = DispatchSemaphore(value: 0)
    Task.detached {
        do {
            outcome.result = .success(try await work())
        } catch {
            outcome.result = .failure(CallFailure(error))
        }
        done.signal()
    }
    done.wait()
    return outcome.result ?? .failure(CallFailure(kind: CallFailure.internalKind, message: "the call ended without a result"))
}

/// The live handles. A `fingerly *` is a number issued here, never an object's address, and
/// numbers are not reused: a closed handle used again, a double close or a close racing another
/// thread's call (a binding's close on one thread while another identifies) is refused or
/// ignored instead of reaching freed memory. A call holds its own reference, so a close only
/// stops new calls.
enum Handles {
    private struct Table {
        var next: UInt = 1
        var live: [UInt: Fingerly] = [:]
    }

    private static let table = Mutex(Table())

    static func open(_ fingerly: Fingerly) -> OpaquePointer {
        table.withLock { table in
            let number = table.next
            // 2^64 loads do not happen; the wrap only keeps the arithmetic from trapping.
            table.next = table.next &+ 1 == 0 ? 1 : table.next &+ 1
            table.live[number] = fingerly
            return OpaquePointer(bitPattern: number)!
        }
    }

    static func find(_ handle: OpaquePointer) -> Fingerly? {
        table.withLock { $0.live[UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(handle)))] }
    }

    /// Releases the table's reference, outside the lock: the last release runs the instance's deinit.
    static func close(_ handle: OpaquePointer) {
        _ = table.withLock { $0.live.removeValue(forKey: UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(handle)))) }
    }
}

/// The instance behind a `fingerly *`.
func instance(_ handle: OpaquePointer?) throws(CallFailure) -> Fingerly {
    guard let handle else { throw .configuration("handle is NULL (fingerly_load did not succeed?)") }
    guard let fingerly = Handles.find(handle) else {
        throw .configuration("handle is not open (closed with fingerly_close, or not from fingerly_load)")
    }
    return fingerly
}

/// Where a JSON result goes: checked before the work, so a NULL out-pointer costs no collection.
func resultSlot(_ pointer: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?, _ name: String) throws(CallFailure)
    -> UnsafeMutablePointer<UnsafeMutablePointer<CChar>?> {
    guard let pointer else { throw .configuration("\(name) is NULL") }
    pointer.pointee = nil
    return pointer
}
