import Foundation
import Testing
@testable import Fingerly
@testable import FingerlyHost
@testable import FingerlyModel
@testable import FingerlyPolicy
@testable import FingerlyProbes
@testable import FingerlyIdentifyCommand

/// Certificates made with openssl for the pin-check scenarios: a genuine CA and its leaves, an
/// interceptor's CA and leaf, and a lookalike CA that copies the genuine CA's name with its own key.
struct TestPKI: Sendable {
    let directory: String

    static let shared: Result<TestPKI, Error> = Result { try TestPKI() }

    private init() throws {
        directory = try TestPaths.temporaryDirectory("pki")
        let script = """
            set -eu
            cd "$1"
            key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1.key" 2>/dev/null; }
            root() {
              key "$1"
              openssl req -x509 -new -key "$1.key" -days 30 -subj "$2" \
                -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign -out "$1.crt"
            }
            leaf() {
              key "$1"
              openssl req -new -key "$1.key" -subj "$2" -out "$1.csr"
              printf 'basicConstraints=CA:FALSE\\nextendedKeyUsage=serverAuth\\nsubjectAltName=%s\\n' "$4" > "$1.ext"
              openssl x509 -req -in "$1.csr" -CA "$3.crt" -CAkey "$3.key" -CAcreateserial -days 30 -extfile "$1.ext" -out "$1.crt" 2>/dev/null
            }
            names="DNS:pin-check.test,DNS:localhost,IP:127.0.0.1,IP:::1"
            root genuine-ca "/CN=Genuine Root/O=Fingerly Test"
            leaf genuine-leaf "/CN=pin-check.test" genuine-ca "$names"
            leaf elsewhere-leaf "/CN=elsewhere.test" genuine-ca "DNS:elsewhere.test"
            root interceptor-ca "/CN=Interceptor CA/O=Somebody Else"
            leaf interceptor-leaf "/CN=pin-check.test" interceptor-ca "$names"
            root lookalike-ca "/CN=Genuine Root/O=Fingerly Test"
            leaf lookalike-leaf "/CN=pin-check.test" lookalike-ca "$names"
            for c in *.crt; do
              openssl x509 -in "$c" -pubkey -noout | openssl pkey -pubin -outform der | openssl dgst -sha256 -binary | openssl base64 -A > "${c%.crt}.pin"
            done
            """
        let made = try runProcess("/bin/bash", ["-c", script, "bash", directory], timeout: 120)
        try #require(made.status == 0, "\(made.standardError)")
    }

    func path(_ name: String) -> String { directory + "/" + name }

    func pin(_ name: String) throws -> String {
        "sha256/" + (try String(contentsOfFile: path(name + ".pin"), encoding: .utf8))
    }

    /// A chain file holding the named certificates in order.
    func chain(_ names: [String]) throws -> String {
        let file = path("chain-\(UUID().uuidString).pem")
        let text = try names.map { try String(contentsOfFile: path($0 + ".crt"), encoding: .utf8) }.joined()
        try text.write(toFile: file, atomically: true, encoding: .utf8)
        return file
    }
}

/// `openssl s_server` on 127.0.0.1 and a port of the kernel's choosing, presenting `leaf` and then `extra`.
final class TLSTestServer {
    let process = Process()
    let port: Int

    init(_ pki: TestPKI, leaf: String, extra: [String]) throws {
        let log = pki.path("server-\(UUID().uuidString).log")
        _ = FileManager.default.createFile(atPath: log, contents: nil)
        process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        var arguments = ["s_server", "-accept", "127.0.0.1:0", "-www", "-cert", pki.path(leaf + ".crt"), "-key", pki.path(leaf + ".key")]
        if !extra.isEmpty { arguments += ["-cert_chain", try pki.chain(extra)] }
        process.arguments = arguments
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle(forWritingAtPath: log)
        process.standardError = FileHandle.nullDevice
        try process.run()
        var found: Int?
        for _ in 0..<400 where found == nil {
            let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            if let line = text.split(separator: "\n").first(where: { $0.hasPrefix("ACCEPT ") }), let colon = line.lastIndex(of: ":") {
                found = Int(line[line.index(after: colon)...])
            } else {
                usleep(25_000)
            }
        }
        guard let found else {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            throw POSIXError(.ETIMEDOUT)
        }
        port = found
    }

    deinit {
        // SIGKILL: the server inherits the test runner's blocked signals, SIGTERM among them.
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }
}

/// A TCP listener on 127.0.0.1 run by the test itself: a server that speaks no TLS, one that
/// never answers, or a proxy that records what it is sent.
final class LoopbackListener: @unchecked Sendable {
    let descriptor: Int32
    let port: Int
    private let received = Locked(Data())
    private let connections = Locked(0)
    private let finished = DispatchSemaphore(value: 0)
    /// Signalled when the accept thread has returned: only then may the listening descriptor be
    /// closed, or its number, reused by the next test's listener, would be accepted on by this
    /// thread (a plain-text answer on a socket meant to stay silent).
    private let threadExited = DispatchSemaphore(value: 0)

    enum Behaviour {
        /// Answers with plain text and closes.
        case plainText
        /// Accepts and holds the connection without a byte, until the client goes away.
        case silent
        /// Records everything until the client closes, answering the request's header block with 403.
        case refusingProxy
    }

    init(_ behaviour: Behaviour) throws {
        let listening = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listening, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard listening >= 0, bound == 0, listen(listening, 8) == 0 else {
            if listening >= 0 { close(listening) }
            throw POSIXError(.EADDRINUSE)
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listening, $0, &length) }
        }
        descriptor = listening
        port = Int(UInt16(bigEndian: address.sin_port))
        Thread { [received, connections, finished, threadExited] in
            defer { threadExited.signal() }
            while true {
                let client = accept(listening, nil, nil)
                if client < 0 { break }
                connections.set(connections.value + 1)
                var buffer = [UInt8](repeating: 0, count: 65536)
                switch behaviour {
                case .plainText:
                    _ = "HTTP/1.0 400 Bad Request\r\nContent-Length: 0\r\n\r\n".utf8CString.withUnsafeBufferPointer { write(client, $0.baseAddress, $0.count - 1) }
                    usleep(100_000)
                case .silent:
                    while read(client, &buffer, buffer.count) > 0 {}
                case .refusingProxy:
                    var answered = false
                    while true {
                        let count = read(client, &buffer, buffer.count)
                        if count <= 0 { break }
                        var data = received.value
                        data.append(contentsOf: buffer[0..<count])
                        received.set(data)
                        if !answered, data.range(of: Data("\r\n\r\n".utf8)) != nil {
                            answered = true
                            _ = "HTTP/1.1 403 Forbidden\r\n\r\n".utf8CString.withUnsafeBufferPointer { write(client, $0.baseAddress, $0.count - 1) }
                        }
                    }
                }
                close(client)
                finished.signal()
            }
        }.start()
    }

    /// What the clients sent, once the first connection has ended (or after `seconds`).
    func captured(waitingUpTo seconds: Double = 10) -> Data {
        _ = connectionEnded(within: seconds)
        return received.value
    }

    /// Whether a client's connection ended (it closed its socket, or died) within `seconds`.
    func connectionEnded(within seconds: Double) -> Bool {
        finished.wait(timeout: .now() + seconds) == .success
    }

    var connectionCount: Int { connections.value }

    deinit {
        // shutdown wakes the accept; the descriptor is closed once the thread is done with it.
        shutdown(descriptor, Int32(SHUT_RDWR))
        _ = threadExited.wait(timeout: .now() + 10)
        close(descriptor)
    }
}

@Suite(.serialized) struct TLSPinVerificationTests {
    static let available = FileManager.default.isExecutableFile(atPath: "/usr/bin/openssl")
        && FileManager.default.isExecutableFile(atPath: "/bin/bash")
    static let anyPin = "sha256/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="

    /// Runs the CLI's pin check and decodes its result.
    static func check(_ target: String, pins: [String], arguments: [String] = [],
                      environment: [String: String] = [:]) throws -> (result: IdentifyResult, wallMs: Double) {
        var variables = ProcessInfo.processInfo.environment
        for name in TLSScenarioTests.proxyVariables { variables[name] = nil }
        variables.merge(environment) { _, new in new }
        let output = try runProcess(TestPaths.cli, ["--no-submit", "--json", "--tiers", "deferred", "--check-tls", target,
                                                    "--pin", pins.joined(separator: ",")] + arguments,
                                    environment: variables, timeout: 60)
        try #require(output.status == 0, "exit \(output.status): \(output.standardError.prefix(500))")
        return (try output.identifyResult(), output.wallMs)
    }

    static func lines(_ result: IdentifyResult, _ signal: String) -> [String] {
        if case .strings(let lines)? = result.report.signals[signal] { return lines }
        return []
    }

    static func pki() throws -> TestPKI { try TestPKI.shared.get() }

    // MARK: what the server presents

    @Test(.enabled(if: available, "openssl or bash is missing"))
    func anInterceptorAppendingTheGenuineCAIsAMismatch() throws {
        let pki = try Self.pki()
        let server = try TLSTestServer(pki, leaf: "interceptor-leaf", extra: ["interceptor-ca", "genuine-ca"])
        let (result, _) = try Self.check("127.0.0.1:\(server.port)", pins: [try pki.pin("genuine-ca")])
        #expect(!Self.lines(result, "tls.pin_checks").contains { $0.contains("pin matches") }, "\(Self.lines(result, "tls.pin_checks"))")
        #expect(Self.lines(result, "tls.pin_mismatches").count == 1)
        let mitm = result.verdicts[.mitm]
        #expect(mitm.value && mitm.confidence == .high && mitm.reasons.contains { $0.code == "pin_mismatch" })
    }

    @Test(.enabled(if: available, "openssl or bash is missing"))
    func anInterceptorAppendingTheGenuineLeafIsAMismatch() throws {
        let pki = try Self.pki()
        let server = try TLSTestServer(pki, leaf: "interceptor-leaf", extra: ["genuine-leaf", "genuine-ca"])
        let (result, _) = try Self.check("127.0.0.1:\(server.port)", pins: [try pki.pin("genuine-leaf")])
        #expect(!Self.lines(result, "tls.pin_checks").contains { $0.contains("pin matches") }, "\(Self.lines(result, "tls.pin_checks"))")
        #expect(result.verdicts[.mitm].reasons.contains { $0.code == "pin_mismatch" } == true)
    }

    @Test(.enabled(if: available, "openssl or bash is missing"))
    func aLookalikeCAWithTheGenuineNameAndTheGenuineCAAppendedIsAMismatch() throws {
        // The name chains the interceptor's leaf to the genuine CA; only the signature says otherwise.
        let pki = try Self.pki()
        let server = try TLSTestServer(pki, leaf: "lookalike-leaf", extra: ["genuine-ca"])
        let (result, _) = try Self.check("127.0.0.1:\(server.port)", pins: [try pki.pin("genuine-ca")])
        #expect(!Self.lines(result, "tls.pin_checks").contains { $0.contains("pin matches") }, "\(Self.lines(result, "tls.pin_checks"))")
        #expect(result.verdicts[.mitm].reasons.contains { $0.code == "pin_mismatch" } == true)
    }

    @Test(.enabled(if: available, "openssl or bash is missing"))
    func theGenuineChainMatchesAPinOnTheLeafOrTheCA() throws {
        let pki = try Self.pki()
        let server = try TLSTestServer(pki, leaf: "genuine-leaf", extra: ["genuine-ca"])
        for pin in ["genuine-ca", "genuine-leaf"] {
            let (result, _) = try Self.check("127.0.0.1:\(server.port)", pins: [Self.anyPin, try pki.pin(pin)])
            #expect(Self.lines(result, "tls.pin_checks") == ["127.0.0.1:\(server.port): pin matches"], "pin on \(pin)")
            #expect(result.verdicts[.mitm].reasons.contains { $0.code.hasPrefix("pin_") } == false)
        }
        // A name is resolved (through /etc/hosts) and its addresses tried in turn.
        let (named, _) = try Self.check("localhost:\(server.port)", pins: [try pki.pin("genuine-ca")])
        #expect(Self.lines(named, "tls.pin_checks") == ["localhost:\(server.port): pin matches"])
    }

    @Test(.enabled(if: available, "openssl or bash is missing"))
    func aGenuineCertificateForAnotherHostIsNotConfirmed() throws {
        let pki = try Self.pki()
        let server = try TLSTestServer(pki, leaf: "elsewhere-leaf", extra: ["genuine-ca"])
        let (result, _) = try Self.check("127.0.0.1:\(server.port)", pins: [try pki.pin("genuine-ca")])
        #expect(!Self.lines(result, "tls.pin_checks").contains { $0.contains("pin matches") })
        let unconfirmed = Self.lines(result, "tls.pin_unconfirmed")
        #expect(unconfirmed.count == 1 && unconfirmed[0].contains("not for 127.0.0.1"), "\(unconfirmed)")
        let mitm = result.verdicts[.mitm]
        #expect(mitm.value && mitm.reasons.contains { $0.code == "pin_unconfirmed" })
    }

    // MARK: servers that do not complete a handshake

    @Test func aServerSpeakingNoTLSIsReportedAsUnconfirmed() throws {
        let listener = try LoopbackListener(.plainText)
        let (result, _) = try Self.check("127.0.0.1:\(listener.port)", pins: [Self.anyPin])
        let unconfirmed = Self.lines(result, "tls.pin_unconfirmed")
        #expect(unconfirmed.count == 1 && unconfirmed[0].contains("handshake failed"), "\(unconfirmed)")
        #expect(try result.probe("tls-pin-check").status == .ok)
        let mitm = result.verdicts.mitm
        #expect(mitm.value && mitm.reasons.contains { $0.code == "pin_unconfirmed" })
        #expect((result.suspectScore ?? 0) > 0)
    }

    @Test func aListenerThatNeverAnswersEndsTheCheckByItsDeadline() throws {
        let listener = try LoopbackListener(.silent)
        let (result, _) = try Self.check("127.0.0.1:\(listener.port)", pins: [Self.anyPin],
                                         arguments: ["--budget-ms", "5000", "--probe-timeout-ms", "1500"])
        // Finished, not abandoned: the check itself gave up before the probe's 1.5 s were up.
        let probe = try result.probe("tls-pin-check")
        #expect(probe.status == .ok, "\(probe.status): \(probe.detail ?? "")")
        let unconfirmed = Self.lines(result, "tls.pin_unconfirmed")
        #expect(unconfirmed.count == 1 && unconfirmed[0].contains("timed out"), "\(unconfirmed)")
        #expect(result.verdicts[.mitm].reasons.contains { $0.code == "pin_unconfirmed" } == true)
    }

    // MARK: the CONNECT request

    static let expectedRequest = "CONNECT 127.0.0.1:443 HTTP/1.1\r\nHost: 127.0.0.1:443\r\n\r\n"

    @Test func theCONNECTRequestCarriesExactlyTheRequest() throws {
        let proxy = try LoopbackListener(.refusingProxy)
        let (result, _) = try Self.check("127.0.0.1:443", pins: [Self.anyPin],
                                         environment: ["HTTPS_PROXY": "http://127.0.0.1:\(proxy.port)"])
        #expect(String(decoding: proxy.captured(), as: UTF8.self) == Self.expectedRequest)
        #expect(Self.lines(result, "tls.pin_unconfirmed").contains { $0.contains("refused CONNECT") })
    }

    @Test func aBracketedIPv6TargetKeepsItsBracketsInTheCONNECTRequest() throws {
        let proxy = try LoopbackListener(.refusingProxy)
        _ = try Self.check("[::1]:8443", pins: [Self.anyPin], environment: ["HTTPS_PROXY": "http://127.0.0.1:\(proxy.port)"])
        #expect(String(decoding: proxy.captured(), as: UTF8.self) == "CONNECT [::1]:8443 HTTP/1.1\r\nHost: [::1]:8443\r\n\r\n")
    }

    @Test func aHostTooLongForTheRequestIsNeverSent() throws {
        let proxy = try LoopbackListener(.refusingProxy)
        var environment = ProcessInfo.processInfo.environment
        for name in TLSScenarioTests.proxyVariables { environment[name] = nil }
        environment["HTTPS_PROXY"] = "http://127.0.0.1:\(proxy.port)"
        let output = try runProcess(TestPaths.cli, ["--no-submit", "--json", "--check-tls", String(repeating: "a", count: 3000) + ":443",
                                                    "--pin", Self.anyPin], environment: environment, timeout: 60)
        #expect(output.status == 64, "\(output.standardError.prefix(300))")
        #expect(output.standardError.contains("--check-tls"))
        #expect(proxy.captured(waitingUpTo: 0.5).isEmpty)
        #expect(proxy.connectionCount == 0)
    }

    @Test(arguments: ["evil.test\r\nX-Injected: 1:443", "evil.test\n:443", "evil test:443", String(repeating: "a", count: 254) + ":443",
                      "[::1:443", "::1:443", "[fe80::1%eth0]:443", "user@host:443", "host:0", "host:65536", "host:", ":443", "1.2.3.256:443"])
    func theCLIRejectsAHostOutsideRFC3986(_ target: String) throws {
        let output = try runCLI(["--no-submit", "--json", "--check-tls", target, "--pin", Self.anyPin])
        #expect(output.status == 64, "\(target.debugDescription): \(output.standardError.prefix(300))")
        #expect(output.standardError.contains("--check-tls"))
        #expect(!output.standardError.contains("\r") && !output.standardError.contains("X-Injected: 1\n"))
        #expect(output.standardOutput.isEmpty)
    }

    @Test(arguments: ["AAAA", "sha256/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "sha256/not base64 at all!!!!!!!!!!!!!!!!!!!!!!!"])
    func theCLIRejectsAPinThatIsNotASHA256(_ pin: String) throws {
        let output = try runCLI(["--no-submit", "--json", "--check-tls", "127.0.0.1:443", "--pin", pin])
        #expect(output.status == 64, "\(pin): \(output.standardError.prefix(300))")
        #expect(output.standardError.contains("--pin"))
    }

    @Test func theCLIAcceptsNamesAndLiterals() throws {
        for target in ["example.org:443", "127.0.0.1:8443", "[::1]:443", "xn--bcher-kva.example:443", "a_b-c.example~:443"] {
            let arguments = try ParsedArguments(["--check-tls", target, "--pin", Self.anyPin],
                                                flags: IdentifyCommand.flags, options: IdentifyCommand.options)
            #expect(try IdentifyCommand(arguments, environment: [:]).pinChecks.count == 1, "\(target)")
        }
    }

    // MARK: the library

    @Test func theLibraryReportsAnInvalidCheckWithoutSendingIt() throws {
        var options = FingerlyOptions()
        options.tlsPinChecks = [
            TLSPinCheck(host: "evil.test\r\nX-Injected: 1", port: 443, pins: [Self.anyPin]),
            TLSPinCheck(host: "127.0.0.1", port: 0, pins: [Self.anyPin]),
            TLSPinCheck(host: "127.0.0.1", port: 443, pins: ["not a pin"]),
        ]
        let fingerly = try Fingerly.loadBlocking(apiKey: TestKeys.standard, consent: .granted, options: options)
        let report = fingerly.collectBlocking(tag: nil, tiers: [.deferred], only: ["tls-pin-check"])
        let unconfirmed: [String]
        if case .strings(let lines)? = report.signals["tls.pin_unconfirmed"] { unconfirmed = lines } else { unconfirmed = [] }
        #expect(unconfirmed.count == 3, "\(unconfirmed)")
        #expect(unconfirmed.allSatisfy { $0.contains("invalid check") && !$0.contains("\r") && !$0.contains("\n") }, "\(unconfirmed)")
        #expect(TLSPinCheck(host: "evil.test\r\nX", port: 443, pins: [Self.anyPin]).problem != nil)
        #expect(TLSPinCheck(host: "[::1]", port: 443, pins: [Self.anyPin]).problem == nil)
    }

    @Test func aRequestThatDoesNotFitIsRefusedBeforeAnythingIsSent() throws {
        // Below the library's validation: the C side refuses on its own.
        let proxy = try LoopbackListener(.refusingProxy)
        let check = TLSPinCheck(host: String(repeating: "a", count: 3000), port: 443, pins: [Self.anyPin])
        let outcome = TLSPinCheckProbe.run(check, proxy: (host: "127.0.0.1", port: proxy.port), deadline: monotonicMilliseconds() + 3000)
        #expect(outcome.kind == .unconfirmed && outcome.line.contains("does not fit"), "\(outcome)")
        #expect(proxy.captured(waitingUpTo: 0.5).isEmpty)
        #expect(proxy.connectionCount == 0)
    }

    @Test func aCheckGivenUpAtItsDeadlineClosesItsSocket() throws {
        // What a thread abandoned by the scheduler does when it comes back: give up by the deadline and close.
        let listener = try LoopbackListener(.silent)
        let check = TLSPinCheck(host: "127.0.0.1", port: listener.port, pins: [Self.anyPin])
        let outcome = TLSPinCheckProbe.run(check, proxy: nil, deadline: monotonicMilliseconds() + 300)
        #expect(outcome.kind == .unconfirmed && outcome.reason.contains("timed out"), "\(outcome)")
        // This process lives on: the listener sees the connection end only because the check closed its socket.
        #expect(listener.connectionEnded(within: 10))
        #expect(listener.connectionCount == 1)
    }
}
