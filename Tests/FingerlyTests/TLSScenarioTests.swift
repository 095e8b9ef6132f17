import Foundation
import Testing
@testable import FingerlyModel

/// The proxy and mitm verdicts on real trust stores. Every change to the store happens inside a
/// private mount namespace over copies of /etc/ssl, /usr/local/share/ca-certificates and
/// /etc/ca-certificates.conf, so the build machine's own store is never touched.
@Suite(.serialized) struct TLSScenarioTests {
    static let proxyVariables = ["HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy",
                                 "NO_PROXY", "no_proxy", "SSL_CERT_FILE", "SSL_CERT_DIR", "SSLKEYLOGFILE", "NODE_TLS_REJECT_UNAUTHORIZED"]
    static var available: Bool {
        ["unshare", "openssl", "update-ca-certificates"].allSatisfy { tool in
            ["/usr/bin/", "/usr/sbin/", "/bin/", "/sbin/"].contains { FileManager.default.isExecutableFile(atPath: $0 + tool) }
        }
    }

    /// Runs the CLI in a namespace after `setup` (shell) has changed the copied store.
    static func runInPrivateStore(_ setup: String, environment: [String: String]? = nil) throws -> ProcessOutput {
        let scratch = try TestPaths.temporaryDirectory("truststore")
        let script = """
            set -e
            T="$1"; CLI="$2"
            mkdir -p /usr/local/share/ca-certificates
            cp -a /etc/ssl "$T/ssl"
            cp -a /usr/local/share/ca-certificates "$T/local"
            cp /etc/ca-certificates.conf "$T/ca-certificates.conf"
            mount --bind "$T/ssl" /etc/ssl
            mount --bind "$T/local" /usr/local/share/ca-certificates
            mount --bind "$T/ca-certificates.conf" /etc/ca-certificates.conf
            \(setup)
            exec "$CLI" --no-submit --json --tiers all --free-text keep
            """
        return try runProcess("/usr/bin/unshare", ["-m", "/bin/sh", "-c", script, "sh", scratch, TestPaths.cli],
                              environment: environment, removing: environment == nil ? proxyVariables : [])
    }

    /// The mitm verdict after `ca` is installed the Debian way: copied into the local directory,
    /// then update-ca-certificates, inside the private store.
    static func mitmAfterInstalling(_ ca: String, as name: String) throws -> Verdict {
        try verdicts(in: try runInPrivateStore("""
            cp "\(ca)" /usr/local/share/ca-certificates/\(name).crt
            update-ca-certificates >/dev/null 2>&1
            """)).mitm
    }

    /// A self-signed CA made with openssl; returns the PEM file's path.
    static func makeCA(_ subject: String, name: String, extensions: [String] = []) throws -> String {
        let directory = try TestPaths.temporaryDirectory("ca")
        let made = try runProcess("/usr/bin/openssl", ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30", "-subj", subject,
                                                       "-keyout", directory + "/\(name).key", "-out", directory + "/\(name).crt"]
                                                      + extensions.flatMap { ["-addext", $0] })
        try #require(made.status == 0, "\(made.standardError)")
        return directory + "/\(name).crt"
    }

    @Test(.enabled(if: available, "unshare, openssl or update-ca-certificates is missing"),
          .enabled(if: geteuid() == 0, "needs root: the private store is a mount namespace with bind mounts over /etc/ssl"))
    func aStoreOfPackagedRootsOnlyIsClean() throws {
        let output = try Self.runInPrivateStore("""
            rm -rf /usr/local/share/ca-certificates/*
            grep -E '^(mozilla/|#|!)' /etc/ca-certificates.conf > "$T/clean.conf" || true
            cat "$T/clean.conf" > /etc/ca-certificates.conf
            # --fresh replaces links only; certificates copied in as files go too.
            find /etc/ssl/certs -maxdepth 1 -type f -name '*.pem' -delete
            update-ca-certificates --fresh >/dev/null 2>&1
            """)
        let found = try verdicts(in: output)
        #expect(!found.mitm.value, "\(found.mitm.messages)")
        #expect(!found.proxy.value, "\(found.proxy.messages)")
    }

    @Test func theLiveStoreReportsEveryLocallyAddedRoot() throws {
        let directory = "/usr/local/share/ca-certificates"
        let files = ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).filter { $0.hasSuffix(".crt") }
        var commonNames: [String] = []
        for file in files {
            let subject = try runProcess("/usr/bin/openssl", ["x509", "-noout", "-subject", "-nameopt", "multiline", "-in", directory + "/" + file])
            if let line = subject.standardOutput.split(separator: "\n").first(where: { $0.contains("commonName") }),
               let equals = line.firstIndex(of: "=") {
                commonNames.append(line[line.index(after: equals)...].trimmingCharacters(in: .whitespaces))
            }
        }
        let found = try verdicts(in: try runCLI(["--no-submit", "--json", "--free-text", "keep"], removing: Self.proxyVariables))
        let mitm = found.mitm
        if commonNames.isEmpty {
            #expect(!mitm.codes.contains("locally_added_root") || !mitm.messages.contains { $0.contains(directory) })
        } else {
            // On this project's build machine: CN=Custom Artifactory CA and CN=sandboxing-egress-ca.
            #expect(mitm.value && mitm.codes.contains("locally_added_root"))
            let reason = try #require(mitm.messages.first { $0.hasPrefix("Locally added root CAs") })
            for name in commonNames { #expect(reason.contains("CN=\(name)"), "\(name) is not named: \(reason)") }
        }
    }

    @Test func anHTTPSProxyVariableIsAProxyWithoutItsCredentials() throws {
        var environment = ProcessInfo.processInfo.environment
        for name in Self.proxyVariables { environment[name] = nil }
        environment["HTTPS_PROXY"] = "http://alice:s3cret@127.0.0.1:8080"
        let run = try runCLI(["--no-submit", "--json"], environment: environment)
        let proxy = try verdicts(in: run).proxy
        #expect(proxy.value && proxy.codes.contains("proxy_environment"))
        #expect(proxy.messages.contains { $0.contains("HTTPS_PROXY") && $0.contains("http://127.0.0.1:8080") })
        #expect(!run.standardOutput.contains("s3cret") && !run.standardOutput.contains("alice:"))
    }

    @Test(.enabled(if: available, "unshare, openssl or update-ca-certificates is missing"),
          .enabled(if: geteuid() == 0, "needs root: the private store is a mount namespace with bind mounts over /etc/ssl"))
    func aMitmproxyCAInstalledWithUpdateCACertificatesIsAnInterceptionTool() throws {
        let ca = try Self.makeCA("/CN=mitmproxy/O=mitmproxy", name: "mitmproxy")
        let mitm = try Self.mitmAfterInstalling(ca, as: "mitmproxy")
        #expect(mitm.value && mitm.confidence == .high && mitm.kind == "mitmproxy")
        #expect(mitm.codes.contains("interception_tool_ca"))
        #expect(mitm.messages.contains { $0.contains("mitmproxy (interception tool)") })
    }

    @Test(.enabled(if: available, "unshare, openssl or update-ca-certificates is missing"),
          .enabled(if: geteuid() == 0, "needs root: the private store is a mount namespace with bind mounts over /etc/ssl"))
    func aZscalerLikeCAIsCorporateInspection() throws {
        let ca = try Self.makeCA("/C=US/O=Zscaler Inc./OU=Zscaler Inc./CN=Zscaler Root CA", name: "zscaler")
        let mitm = try Self.mitmAfterInstalling(ca, as: "zscaler")
        #expect(mitm.value && mitm.kind == "Zscaler" && mitm.codes.contains("corporate_inspection_ca"))
        #expect(mitm.messages.contains { $0.contains("corporate TLS inspection") })
    }

    @Test(.enabled(if: available, "unshare, openssl or update-ca-certificates is missing"),
          .enabled(if: geteuid() == 0, "needs root: the private store is a mount namespace with bind mounts over /etc/ssl"))
    func aCAAppendedOnlyToTheBundleIsLocallyAdded() throws {
        let ca = try Self.makeCA("/CN=Appended Root/O=Nobody Ships This", name: "appended")
        let mitm = try verdicts(in: try Self.runInPrivateStore("""
            cat "\(ca)" >> /etc/ssl/certs/ca-certificates.crt
            """)).mitm
        #expect(mitm.value && mitm.codes.contains("locally_added_root"))
        #expect(mitm.messages.contains { $0.contains("CN=Appended Root") && $0.contains("(the bundle only)") })
    }

    @Test(.enabled(if: available && FileManager.default.fileExists(atPath: "/usr/share/ca-certificates/mozilla/ISRG_Root_X1.crt"),
                   "the tools or the packaged ISRG Root X1 are missing"),
          .enabled(if: geteuid() == 0, "needs root: the private store is a mount namespace with bind mounts over /etc/ssl"))
    func aCACopyingAPackagedRootsNameWithAFreshKeyIsHighConfidence() throws {
        let ca = try Self.makeCA("/C=US/O=Internet Security Research Group/CN=ISRG Root X1", name: "isrg-copy")
        let mitm = try Self.mitmAfterInstalling(ca, as: "isrg-copy")
        #expect(mitm.value && mitm.confidence == .high && mitm.codes.contains("impersonating_root"))
        #expect(mitm.messages.contains { $0.contains("ISRG Root X1") && $0.contains("different key") })
    }

    @Test(.enabled(if: available && FileManager.default.isExecutableFile(atPath: "/bin/bash"), "openssl or bash is missing"))
    func aLivePinCheckMatchesAndMismatches() throws {
        // A pin matches only on a certificate for the host checked: here the address itself.
        let ca = try Self.makeCA("/CN=pin-check.test/O=Fingerly Test", name: "server", extensions: ["subjectAltName=IP:127.0.0.1"])
        let key = ca.replacingOccurrences(of: ".crt", with: ".key")
        let port = String(20_000 + Int(getpid() % 20_000))
        // One script runs the server, waits for it to listen, runs both checks and stops it.
        let script = """
            set -u
            CA="$1"; KEY="$2"; PORT="$3"; CLI="$4"
            PIN=$(openssl x509 -in "$CA" -pubkey -noout | openssl pkey -pubin -outform der | openssl dgst -sha256 -binary | openssl base64 -A)
            openssl s_server -quiet -accept "127.0.0.1:$PORT" -cert "$CA" -key "$KEY" -www >/dev/null 2>&1 </dev/null &
            SERVER=$!
            for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break; sleep 0.05; done
            "$CLI" --no-submit --json --check-tls "127.0.0.1:$PORT" --pin "sha256/$PIN"
            echo "----"
            "$CLI" --no-submit --json --check-tls "127.0.0.1:$PORT" --pin AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=
            kill "$SERVER"
            """
        let output = try runProcess("/bin/bash", ["-c", script, "bash", ca, key, port, TestPaths.cli], removing: Self.proxyVariables, timeout: 120)
        let halves = output.standardOutput.components(separatedBy: "----\n")
        try #require(halves.count == 2, "\(output.standardOutput.prefix(300)) \(output.standardError.prefix(300))")
        let match = try verdicts(in: ProcessOutput(status: 0, standardOutput: halves[0], standardError: "", wallMs: 0))
        #expect(!match.mitm.codes.contains("pin_mismatch"))
        #expect(halves[0].contains("pin matches"))
        let mismatch = try verdicts(in: ProcessOutput(status: 0, standardOutput: halves[1], standardError: "", wallMs: 0)).mitm
        #expect(mismatch.value && mismatch.confidence == .high && mismatch.codes.contains("pin_mismatch"))
        #expect(mismatch.messages.contains { $0.contains("issued by 'O=Fingerly Test,CN=pin-check.test'") }, "\(mismatch.messages)")
    }
}
