import Foundation
import Glibc
import Synchronization
import Testing
@testable import Fingerly
@testable import FingerlyTransport

/// A proxy that answers CONNECT with 407 is a configuration to fix, not a network to wait for:
/// the real `fingerly-identify` makes one attempt, queues nothing, exits 78 (EX_CONFIG) and names
/// the proxy (without its credentials), its variable and the status. The proxy is a real listener
/// of this process that counts the CONNECTs it receives.
@Suite(.serialized) struct ProxyAuthenticationTests {
    /// The proxy variable the transport reads for each scheme of endpoint.
    static let cases: [(scheme: String, variable: String)] = [("https", "HTTPS_PROXY"), ("http", "http_proxy")]

    /// A proxy URL carrying credentials, so the test sees they are never shown.
    static func proxyURL(_ proxy: ConnectProxy) -> String { "http://fingerly:hunter2@127.0.0.1:\(proxy.port)" }

    @Test(arguments: cases)
    func aProxyAskingForCredentialsGetsOneAttemptAndAConfigurationError(scheme: String, variable: String) throws {
        let proxy = try ConnectProxy(refusingWith: 407)
        let state = try SubmissionCLITests.freshState("proxy407-\(scheme)")
        // The origin is never reached: the proxy refuses the tunnel first.
        let endpoint = "\(scheme)://127.0.0.1:9"
        var environment = SubmissionCLITests.environment(state: state)
        environment[variable] = Self.proxyURL(proxy)
        let run = try runCLI(SubmissionCLITests.identifyArguments(endpoint, attempts: 3), environment: environment)
        #expect(run.status == 78, "\(run.status): \(run.standardError)")
        #expect(proxy.connectTargets == ["127.0.0.1:9"], "\(proxy.connectTargets)")
        #expect(run.standardError.contains("the proxy http://127.0.0.1:\(proxy.port) (from \(variable)) answered 407"),
                "\(run.standardError)")
        #expect(!run.standardError.contains("hunter2") && !run.standardError.contains("curl 56"),
                "\(run.standardError)")
        #expect(SubmissionCLITests.itemFiles(state).isEmpty)
    }

    @Test func aFlushThroughAProxyAskingForCredentialsKeepsTheReportAndStopsAtOneAttempt() throws {
        let state = try SubmissionCLITests.freshState("proxy407-flush")
        try SubmissionCLITests.queueOne(state: state)
        let proxy = try ConnectProxy(refusingWith: 407)
        var environment = SubmissionCLITests.environment(state: state)
        environment["http_proxy"] = Self.proxyURL(proxy)
        let flush = try runCLI(SubmissionCLITests.flushArguments("http://127.0.0.1:9"), environment: environment)
        #expect(flush.status == 78, "\(flush.status): \(flush.standardError)")
        #expect(proxy.connectTargets.count == 1, "\(proxy.connectTargets)")
        #expect(flush.standardError.contains("answered 407") && !flush.standardError.contains("hunter2"),
                "\(flush.standardError)")
        // The report is not to blame: it stays for a flush once the proxy is configured.
        #expect(SubmissionCLITests.itemFiles(state).count == 1)
    }

    /// The contrast: a proxy that cannot reach the origin now (502) is worth the retries, and the
    /// message still names the proxy and what it answered instead of curl's receive error.
    @Test func aProxyThatCannotReachTheOriginIsRetriedAndQueuedNamingTheProxy() throws {
        let proxy = try ConnectProxy(refusingWith: 502)
        let state = try SubmissionCLITests.freshState("proxy502")
        var environment = SubmissionCLITests.environment(state: state)
        environment["HTTPS_PROXY"] = Self.proxyURL(proxy)
        let run = try runCLI(SubmissionCLITests.identifyArguments("https://127.0.0.1:9", attempts: 3), environment: environment)
        #expect(run.status == 75, "\(run.status): \(run.standardError)")
        #expect(proxy.connectTargets.count == 3, "\(proxy.connectTargets)")
        #expect(run.standardError.contains("the proxy http://127.0.0.1:\(proxy.port) (from HTTPS_PROXY) answered HTTP 502"),
                "\(run.standardError)")
        #expect(SubmissionCLITests.itemFiles(state).count == 1)
    }

    /// A SOCKS5 proxy has no status to answer: it refuses the username and password of its
    /// variable in the handshake (RFC 1929), which is the same configuration to fix.
    @Test func aSOCKSProxyRefusingItsCredentialsGetsOneAttemptAndAConfigurationError() throws {
        let handshakes = Mutex(0)
        let proxy = try LoopbackServer { client, _ in
            handshakes.withLock { $0 += 1 }
            var greeting = [UInt8](repeating: 0, count: 257)
            guard recv(client, &greeting, greeting.count, 0) >= 3 else { return }
            SocketIO.sendAll(client, [5, 2])  // version 5, username and password
            var authentication = [UInt8](repeating: 0, count: 513)
            guard recv(client, &authentication, authentication.count, 0) > 0 else { return }
            SocketIO.sendAll(client, [1, 1])  // refused
        }
        let state = try SubmissionCLITests.freshState("proxy-socks")
        var environment = SubmissionCLITests.environment(state: state)
        environment["HTTPS_PROXY"] = "socks5h://fingerly:hunter2@127.0.0.1:\(proxy.port)"
        let run = try runCLI(SubmissionCLITests.identifyArguments("https://127.0.0.1:9", attempts: 3), environment: environment)
        #expect(run.status == 78, "\(run.status): \(run.standardError)")
        #expect(handshakes.withLock { $0 } == 1)
        #expect(run.standardError.contains("the proxy socks5h://127.0.0.1:\(proxy.port) (from HTTPS_PROXY) refused"),
                "\(run.standardError)")
        #expect(!run.standardError.contains("hunter2") && SubmissionCLITests.itemFiles(state).isEmpty,
                "\(run.standardError)")
    }

    /// The API never answers 407: a proxy no variable names intercepts the connection. One
    /// attempt, 78, nothing queued; a queued report meeting it on a flush stays queued.
    @Test func aProxyInterceptingTheAPIAskingForCredentialsIsAConfigurationError() throws {
        let challenge = FaultServer.Reply.status(407, [("Proxy-Authenticate", "Basic realm=\"corp\"")], body: "")
        let server = try FaultServer([challenge, challenge, challenge])
        let state = try SubmissionCLITests.freshState("proxy-intercepting")
        let environment = SubmissionCLITests.environment(state: state)
        let run = try runCLI(SubmissionCLITests.identifyArguments(server.url, attempts: 3), environment: environment)
        #expect(run.status == 78, "\(run.status): \(run.standardError)")
        #expect(server.requests.count == 1)
        #expect(run.standardError.contains("HTTP 407 Proxy Authentication Required from")
                && run.standardError.contains("HTTPS_PROXY"), "\(run.standardError)")
        #expect(SubmissionCLITests.itemFiles(state).isEmpty)
        _ = try SubmissionCLITests.queueOne(state: state)
        let flush = try runCLI(SubmissionCLITests.flushArguments(server.url), environment: environment)
        #expect(flush.status == 78, "\(flush.status): \(flush.standardError)")
        #expect(SubmissionCLITests.itemFiles(state).count == 1)
    }
}
