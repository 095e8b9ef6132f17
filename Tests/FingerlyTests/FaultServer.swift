import Foundation
import Glibc

/// A TCP listener on 127.0.0.1 (a port of the kernel's choosing) that runs `handler` on a thread per
/// connection, until `stop` or deinit. Stopping is ordered so that no descriptor number is closed while
/// a thread may still use it: the accept thread returns before the listening socket is closed, and a
/// connection's sockets are shut down (never closed) by `stop`, closed only by their own thread, under
/// the lock. The threads hold the `ServerCore`, never the server, so dropping the server stops it.
final class LoopbackServer: Sendable {
    let port: Int
    let core: ServerCore

    init(handler: @escaping @Sendable (Int32, ServerCore) -> Void) throws {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw POSIXError(.EMFILE) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(descriptor, 32) == 0 else {
            close(descriptor)
            throw POSIXError(.EADDRINUSE)
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
        }
        port = Int(UInt16(bigEndian: address.sin_port))
        core = ServerCore(listening: descriptor)
        core.start(handler)
    }

    func stop() { core.stop() }

    deinit { core.stop() }
}

final class ServerCore: @unchecked Sendable {
    private let listening: Int32
    private let state = NSCondition()
    private var stopping = false
    private var stopped = false
    private var open: Set<Int32> = []
    private let connections = DispatchGroup()
    private let acceptThreadExited = DispatchSemaphore(value: 0)

    init(listening: Int32) { self.listening = listening }

    func start(_ handler: @escaping @Sendable (Int32, ServerCore) -> Void) {
        Thread { [self] in
            defer { acceptThreadExited.signal() }
            while true {
                let client = accept(listening, nil, nil)
                if client < 0 {
                    if isStopping { return }
                    if errno == EINTR || errno == ECONNABORTED { continue }
                    return
                }
                guard register(client) else { return }
                connections.enter()
                Thread { [self] in
                    handler(client, self)
                    closeRegistered(client)
                    connections.leave()
                }.start()
            }
        }.start()
    }

    var isStopping: Bool { state.withLock { stopping } }

    /// Tracks a descriptor so that `stop` can wake whoever blocks on it; false (and closed) when stopping.
    func register(_ descriptor: Int32) -> Bool {
        state.withLock {
            if stopping {
                close(descriptor)
                return false
            }
            open.insert(descriptor)
            return true
        }
    }

    func closeRegistered(_ descriptor: Int32) {
        state.withLock {
            open.remove(descriptor)
            close(descriptor)
        }
    }

    /// Waits `milliseconds`, or less if the server stops meanwhile.
    func pause(milliseconds: Int) {
        let until = Date(timeIntervalSinceNow: Double(milliseconds) / 1000)
        state.lock()
        while !stopping, state.wait(until: until) {}
        state.unlock()
    }

    func stop() {
        let first = state.withLock {
            defer { stopping = true }
            return !stopping
        }
        guard first else {
            // A second caller returns only once the first has finished.
            state.withLock { while !stopped { state.wait() } }
            return
        }
        // shutdown wakes the blocked accept; the descriptor stays open until its thread has returned.
        shutdown(listening, Int32(SHUT_RDWR))
        acceptThreadExited.wait()
        state.withLock {
            for descriptor in open { shutdown(descriptor, Int32(SHUT_RDWR)) }
            state.broadcast()
        }
        connections.wait()
        close(listening)
        state.withLock {
            stopped = true
            state.broadcast()
        }
    }
}

/// Socket helpers for the servers below.
enum SocketIO {

    /// Reads up to and including the blank line that ends a header block; nil if the peer stops first
    /// or the block exceeds `limit`. Bytes read past the block are returned too.
    static func readHead(_ descriptor: Int32, limit: Int = 65536) -> (head: [UInt8], rest: [UInt8])? {
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 16384)
        while received.count <= limit {
            if let end = find([13, 10, 13, 10], in: received) {
                return (Array(received[..<(end + 4)]), Array(received[(end + 4)...]))
            }
            let count = recv(descriptor, &buffer, buffer.count, 0)
            if count <= 0 { return nil }
            received.append(contentsOf: buffer[0..<count])
        }
        return nil
    }

    static func find(_ needle: [UInt8], in haystack: [UInt8]) -> Int? {
        guard haystack.count >= needle.count else { return nil }
        for start in 0...(haystack.count - needle.count) where haystack[start..<(start + needle.count)].elementsEqual(needle) {
            return start
        }
        return nil
    }

    @discardableResult
    static func sendAll(_ descriptor: Int32, _ bytes: [UInt8]) -> Bool {
        var sent = 0
        while sent < bytes.count {
            let count = bytes[sent...].withUnsafeBytes { send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if count <= 0 { return false }
            sent += count
        }
        return true
    }

    /// A close after this sends RST instead of FIN.
    static func resetOnClose(_ descriptor: Int32) {
        var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
        setsockopt(descriptor, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
    }
}

/// A request as the fault server read it.
struct RecordedRequest: Sendable {
    let method: String
    let path: String
    /// As sent: original case and order.
    let headers: [(name: String, value: String)]
    let body: [UInt8]

    func header(_ name: String) -> String? {
        headers.first { $0.name.lowercased() == name.lowercased() }?.value
    }
}

/// An HTTP/1.1 server that answers the n-th request with the n-th scripted reply (500 "unscripted"
/// once the script is used up), one request per connection, and records every request it read whole.
final class FaultServer: Sendable {
    enum Fault: Sendable {
        /// Reads the request, then resets the connection without a byte of answer.
        case resetAfterRequest
        /// Sends the status line, the headers and half the body, then resets.
        case resetMidResponse
        /// Reads the request, then closes cleanly without a byte of answer.
        case closeWithoutAnswer
    }

    struct Reply: Sendable {
        var status: Int
        var headers: [(name: String, value: String)] = []
        var body: [UInt8] = []
        var delayMs = 0
        var fault: Fault?

        static func status(_ status: Int, _ headers: [(name: String, value: String)] = [], body: String = "", delayMs: Int = 0) -> Reply {
            Reply(status: status, headers: headers, body: Array(body.utf8), delayMs: delayMs)
        }

        static func fault(_ fault: Fault) -> Reply {
            Reply(status: 200, body: Array(String(repeating: "x", count: 4096).utf8), fault: fault)
        }
    }

    static let maximumBody = 2 << 20
    static let maximumRequests = 1000

    private let recorded: Locked<[RecordedRequest]>
    private let server: LoopbackServer

    init(_ script: [Reply]) throws {
        let recorded = Locked<[RecordedRequest]>([])
        let order = NSLock()
        self.recorded = recorded
        server = try LoopbackServer { client, core in
            guard let request = Self.readRequest(client) else { return }
            let reply: Reply? = order.withLock {
                let seen = recorded.value
                guard seen.count < Self.maximumRequests else { return nil }
                recorded.set(seen + [request])
                return seen.count < script.count ? script[seen.count] : Reply.status(500, body: "unscripted")
            }
            guard let reply else { return }
            if reply.delayMs > 0 { core.pause(milliseconds: reply.delayMs) }
            if core.isStopping { return }
            Self.answer(client, reply)
        }
    }

    var port: Int { server.port }
    var url: String { "http://127.0.0.1:\(port)" }

    /// Every request read whole, in arrival order.
    var requests: [RecordedRequest] { recorded.value }

    func stop() { server.stop() }

    private static func answer(_ client: Int32, _ reply: Reply) {
        var head = "HTTP/1.1 \(reply.status) Scripted\r\n"
        for header in reply.headers { head += "\(header.name): \(header.value)\r\n" }
        head += "Content-Length: \(reply.body.count)\r\nConnection: close\r\n\r\n"
        switch reply.fault {
        case .resetAfterRequest?:
            SocketIO.resetOnClose(client)
        case .closeWithoutAnswer?:
            break
        case .resetMidResponse?:
            SocketIO.sendAll(client, Array(head.utf8) + reply.body.prefix(reply.body.count / 2))
            SocketIO.resetOnClose(client)
        case nil:
            SocketIO.sendAll(client, Array(head.utf8) + reply.body)
        }
    }

    static func readRequest(_ client: Int32) -> RecordedRequest? {
        guard let (head, rest) = SocketIO.readHead(client) else { return nil }
        let lines = String(decoding: head, as: UTF8.self).components(separatedBy: "\r\n")
        let requestLine = lines[0].split(separator: " ")
        guard requestLine.count == 3 else { return nil }
        var headers: [(name: String, value: String)] = []
        for line in lines.dropFirst() where !line.isEmpty {
            guard let colon = line.firstIndex(of: ":") else { return nil }
            headers.append((String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)))
        }
        var length = 0
        if let field = headers.first(where: { $0.name.lowercased() == "content-length" }) {
            guard let value = Int(field.value), (0...maximumBody).contains(value) else { return nil }
            length = value
        }
        var body = Array(rest.prefix(length))
        var buffer = [UInt8](repeating: 0, count: 65536)
        while body.count < length {
            let count = recv(client, &buffer, min(buffer.count, length - body.count), 0)
            if count <= 0 { return nil }
            body.append(contentsOf: buffer[0..<count])
        }
        return RecordedRequest(method: String(requestLine[0]), path: String(requestLine[1]), headers: headers, body: body)
    }
}

/// A minimal HTTP proxy that only tunnels: CONNECT to a loopback port gets "200" and a byte relay
/// (or, made with `refusingWith`, that status and no tunnel); anything else is refused with 405
/// and recorded apart. The transport always tunnels, so an absolute-URI
/// request reaching this proxy would itself be a finding.
final class ConnectProxy: Sendable {
    private let record: Record
    private let server: LoopbackServer

    /// Written by the connection threads, one change at a time.
    final class Record: @unchecked Sendable {
        private let lock = NSLock()
        private var targets: [String] = []
        private var refused: [String] = []
        private var relayed = 0
        func connect(_ target: String) { lock.withLock { targets.append(target) } }
        func refuse(_ line: String) { lock.withLock { refused.append(line) } }
        func relay(_ count: Int) { lock.withLock { relayed += count } }
        var snapshot: (targets: [String], refused: [String], relayed: Int) { lock.withLock { (targets, refused, relayed) } }
    }

    /// `refusingWith`: the status every CONNECT gets instead of a tunnel (407 comes with a
    /// Proxy-Authenticate challenge, as a real proxy sends it).
    init(refusingWith refusal: Int? = nil) throws {
        let record = Record()
        self.record = record
        server = try LoopbackServer { client, core in
            Self.serve(client, core: core, record: record, refusal: refusal)
        }
    }

    var port: Int { server.port }
    var url: String { "http://127.0.0.1:\(port)" }

    func stop() { server.stop() }

    /// The CONNECT targets, in arrival order.
    var connectTargets: [String] { record.snapshot.targets }
    /// The request lines of anything but CONNECT.
    var refusedRequests: [String] { record.snapshot.refused }
    /// Bytes carried from the client to the origin, over all tunnels.
    var bytesRelayedToOrigin: Int { record.snapshot.relayed }

    private static func serve(_ client: Int32, core: ServerCore, record: Record, refusal: Int?) {
        guard let (head, rest) = SocketIO.readHead(client, limit: 16384) else { return }
        let requestLine = String(decoding: head, as: UTF8.self).components(separatedBy: "\r\n")[0]
        let parts = requestLine.split(separator: " ")
        guard parts.count == 3, parts[0] == "CONNECT" else {
            record.refuse(requestLine)
            SocketIO.sendAll(client, Array("HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n".utf8))
            return
        }
        let target = String(parts[1])
        record.connect(target)
        if let refusal {
            let challenge = refusal == 407 ? "Proxy-Authenticate: Basic realm=\"fingerly-test\"\r\n" : ""
            SocketIO.sendAll(client, Array("HTTP/1.1 \(refusal) Refused\r\n\(challenge)Content-Length: 0\r\n\r\n".utf8))
            return
        }
        guard let colon = target.lastIndex(of: ":"), ["127.0.0.1", "localhost"].contains(target[..<colon]),
              let port = UInt16(target[target.index(after: colon)...]), let upstream = Self.connectLoopback(port: port) else {
            SocketIO.sendAll(client, Array("HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n".utf8))
            return
        }
        guard core.register(upstream) else { return }
        defer { core.closeRegistered(upstream) }
        guard SocketIO.sendAll(client, Array("HTTP/1.1 200 Connection established\r\n\r\n".utf8)),
              SocketIO.sendAll(upstream, rest) else { return }
        record.relay(rest.count)
        relay(client, upstream, core: core, record: record)
    }

    /// Copies bytes both ways until both directions have ended or either fails.
    private static func relay(_ client: Int32, _ upstream: Int32, core: ServerCore, record: Record) {
        var fds = [pollfd(fd: client, events: Int16(POLLIN), revents: 0), pollfd(fd: upstream, events: Int16(POLLIN), revents: 0)]
        var buffer = [UInt8](repeating: 0, count: 65536)
        var open = [true, true]
        while open[0] || open[1] {
            for index in 0..<2 { fds[index].fd = open[index] ? (index == 0 ? client : upstream) : -1 }
            let ready = poll(&fds, 2, 30_000)
            if ready < 0, errno == EINTR { continue }
            if ready <= 0 || core.isStopping { return }
            for index in 0..<2 where open[index] && fds[index].revents != 0 {
                let from = index == 0 ? client : upstream
                let to = index == 0 ? upstream : client
                let count = recv(from, &buffer, buffer.count, 0)
                if count <= 0 {
                    open[index] = false
                    shutdown(to, Int32(SHUT_WR))
                    continue
                }
                if index == 0 { record.relay(count) }
                if !SocketIO.sendAll(to, Array(buffer[0..<count])) { return }
            }
        }
    }

    static func connectLoopback(port: UInt16) -> Int32? {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { return nil }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = port.bigEndian
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            close(descriptor)
            return nil
        }
        return descriptor
    }
}
