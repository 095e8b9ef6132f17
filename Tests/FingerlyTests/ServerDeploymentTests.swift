import Foundation
import Testing
@testable import Fingerly
@testable import FingerlyModel

/// How an operator runs the server: over TLS with a certificate of their CA, and under the
/// repository's systemd unit.
@Suite(.serialized)
struct ServerDeploymentTests {
    /// The real client submits over TLS (libmicrohttpd's GnuTLS) with a CA made by openssl,
    /// and a client that does not trust that CA refuses the server.
    @Test func theClientSubmitsOverTLSToACertificateOfTheOperatorsCA() throws {
        let pki = try TestPKI.shared.get()
        let directory = try TestPaths.temporaryDirectory("server-tls")
        let database = directory + "/db.sqlite"
        let (publicKey, _) = try addedKeys(try runServerCLI(["keys", "add", "--org", "acme", "--db", database]))
        let server = try ServerProcess(database: database, arguments: ["--tls-cert", pki.path("genuine-leaf.crt"),
                                                                       "--tls-key", pki.path("genuine-leaf.key")])
        #expect(server.standardError.value.contains("listening on https://127.0.0.1:\(server.port)"))
        let endpoint = "https://127.0.0.1:\(server.port)"

        let trusted = try runCLI(SubmissionCLITests.identifyArguments(endpoint, attempts: 1) + ["--ca-file", pki.path("genuine-ca.crt"), "--json"],
                                 environment: SubmissionCLITests.environment(state: try SubmissionCLITests.freshState("server-tls"),
                                                                             apiKey: publicKey))
        #expect(trusted.status == 0, "\(trusted.standardError)")
        let result = try trusted.identifyResult()
        #expect(result.state == .enriched)
        #expect(result.visitorIsNew == true)

        // The interceptor's CA does not vouch for this server: no submission, and the report stays queued.
        let untrusted = try runCLI(SubmissionCLITests.identifyArguments(endpoint, attempts: 1) + ["--ca-file", pki.path("interceptor-ca.crt"), "--json"],
                                   environment: SubmissionCLITests.environment(state: try SubmissionCLITests.freshState("server-tls-untrusted"),
                                                                               apiKey: publicKey))
        #expect(untrusted.status != 0)
        #expect(untrusted.standardError.lowercased().contains("certificate"))
        // Plain HTTP to the TLS port is not answered as if it were a request.
        #expect((try? server.client.request("GET", "/healthz"))?.status != 200)
        #expect(server.terminate() == 0)
    }

    /// The unit in deploy/ parses, and systemd's own reckoning of its exposure stays low: the
    /// hardening (DynamicUser, ProtectSystem=strict, StateDirectory, …) is checked, not assumed.
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/systemd-analyze"),
                   "systemd-analyze comes with the systemd package"))
    func theSystemdUnitVerifiesAndIsHardened() throws {
        let unitText = try String(contentsOfFile: TestPaths.packageRoot + "/deploy/fingerly-server.service", encoding: .utf8)
        #expect(unitText.contains("ExecStart=/usr/local/bin/fingerly-server "))
        // verify checks that ExecStart exists: point it at the built binary, change nothing else.
        let directory = try TestPaths.temporaryDirectory("unit")
        let unit = directory + "/fingerly-server.service"
        try unitText.replacingOccurrences(of: "/usr/local/bin/fingerly-server", with: ServerProcess.executable)
            .write(toFile: unit, atomically: true, encoding: .utf8)
        let verified = try runProcess("/usr/bin/systemd-analyze", ["verify", unit])
        #expect(verified.status == 0, "\(verified.standardError)")
        #expect(verified.standardError.isEmpty, "\(verified.standardError)")
        // Exposure is 0.0–10.0; --threshold is in tenths and fails the command above it.
        let security = try runProcess("/usr/bin/systemd-analyze", ["security", "--offline=true", "--threshold=20", unit])
        #expect(security.status == 0, "\(security.standardOutput.suffix(400))")
        #expect(security.standardOutput.contains("Overall exposure level"))
    }
}
