import Foundation
import Testing
@testable import FingerlyServer
@testable import FingerlyTransport

/// docs/openapi.yaml checked by third-party tools against the real server: openapi-spec-validator
/// validates the document, schemathesis runs every check against a live `fingerly-server`, and the
/// document's own examples are sent as they are and answered 200. The tools come from
/// scripts/contract-tools (pinned, run by scripts/test); without them these tests fail, never skip.
@Suite(.serialized)
struct OpenAPIContractTests {
    static let spec = TestPaths.packageRoot + "/docs/openapi.yaml"
    static let fixtures = TestPaths.packageRoot + "/Tests/Fixtures/contract"
    static let tools = TestPaths.packageRoot + "/.build/contract-tools/bin/"
    /// The organization of the document's worked example: its identifiers derive under this name.
    static let organization = "acme42"
    /// api.md's worked example signs at this second.
    static let exampleCreated: Int64 = 1_767_225_600

    static func tool(_ name: String) throws -> String {
        let path = tools + name
        try #require(FileManager.default.isExecutableFile(atPath: path),
                     "\(path) is missing: run scripts/contract-tools (scripts/test does) to install the contract tools")
        return path
    }

    @Test func openAPISpecValidatorAcceptsTheDocument() throws {
        let run = try runProcess(try Self.tool("openapi-spec-validator"), [Self.spec])
        #expect(run.status == 0, "\(run.standardOutput)\(run.standardError)")
        #expect(run.standardOutput.contains("OK"))
    }

    /// Every check of schemathesis, at least 100 generated requests per operation plus the
    /// document's examples, its coverage cases and its link from identify to getEvent, against a
    /// server that requires signatures: the hooks sign as the client does (hooks.py says what else
    /// they supply that JSON Schema cannot state).
    @Test func schemathesisFindsNothingAgainstALiveServer() throws {
        let schemathesis = try Self.tool("schemathesis")
        let directory = try TestPaths.temporaryDirectory("openapi-contract")
        let database = directory + "/db.sqlite"
        let (publicKey, secretKey) = try addedKeys(try runServerCLI(["keys", "add", "--org", Self.organization,
                                                                     "--db", database]))
        // Limits above the run's pace: a 429 is no finding about the schema.
        let server = try ServerProcess(database: database,
                                       arguments: ["--rate-limit", "1000000", "--failure-limit", "1000000"])
        var environment = ProcessInfo.processInfo.environment
        environment["FINGERLY_CONTRACT_SPEC"] = Self.spec
        environment["FINGERLY_CONTRACT_ORGANIZATION"] = Self.organization
        environment["FINGERLY_CONTRACT_PUBLIC_KEY"] = publicKey
        environment["FINGERLY_CONTRACT_SECRET_KEY"] = secretKey
        environment["PYTHONPATH"] = Self.fixtures
        environment["SCHEMATHESIS_HOOKS"] = "hooks"
        environment["NO_COLOR"] = "1"
        // Run in the test's directory: schemathesis keeps a cache of past findings where it runs.
        let run = try runProcess("/usr/bin/env", ["-C", directory, schemathesis,
            "--config-file", Self.fixtures + "/schemathesis.toml", "run", Self.spec,
            "--url", "http://127.0.0.1:\(server.port)", "--checks", "all", "--max-examples", "100",
            "--workers", "1", "--seed", "23", "--report", "junit", "--report-dir", directory,
        ], environment: environment, timeout: 600)
        #expect(run.status == 0, "schemathesis: \(run.standardOutput.suffix(8000))\(run.standardError.suffix(2000))")
        // The run reached both operations and generated at least 100 cases for each.
        #expect(run.standardOutput.contains("Tested: 2"), "\(run.standardOutput.suffix(2000))")
        let generated = try #require(run.standardOutput.firstMatch(of: /([0-9]+) generated/)?.1,
                                     "\(run.standardOutput.suffix(2000))")
        #expect(Int(generated)! >= 200)
        #expect(server.terminate() == 0, "\(server.standardError.value)")
    }

    /// The document as JSON, read by PyYAML from the contract tools.
    static func document() throws -> [String: Any] {
        let python = try tool("python")
        let script = "import json, sys, yaml; json.dump(yaml.safe_load(open(sys.argv[1])), sys.stdout)"
        let run = try runProcess(python, ["-c", script, spec])
        try #require(run.status == 0, "\(run.standardError)")
        return try #require(try JSONSerialization.jsonObject(with: Data(run.standardOutput.utf8)) as? [String: Any])
    }

    /// The request body and header examples of identify, sent as they are (the body as the client
    /// serializes it, which the Content-Digest example covers) to a server whose clock reads the
    /// example's `created`, which requires signatures: 200. The signature example is the real
    /// signer's, from the published test key the document names.
    @Test func theDocumentsExamplesSucceedAgainstALiveServer() throws {
        let document = try Self.document()
        let components = try #require(document["components"] as? [String: Any])
        let parameters = try #require(components["parameters"] as? [String: [String: Any]])
        var headers: [(String, String)] = []
        for (_, parameter) in parameters.sorted(by: { $0.key < $1.key }) where parameter["in"] as? String == "header" {
            guard let example = parameter["example"] else { continue }
            headers.append((try #require(parameter["name"] as? String), try #require(example as? String)))
        }
        let names = Set(headers.map(\.0))
        let signed = ["Idempotency-Key", "Content-Digest", "Fingerly-Device-Key", "Signature-Input", "Signature"]
        #expect(names.isSuperset(of: signed), "\(names)")

        let paths = try #require(document["paths"] as? [String: Any])
        let identify = try #require((paths["/v1/identify"] as? [String: Any])?["post"] as? [String: Any])
        let requestBody = try #require(identify["requestBody"] as? [String: Any])
        let content = try #require((requestBody["content"] as? [String: Any])?["application/json"] as? [String: Any])
        let examples = try #require(content["examples"] as? [String: [String: Any]])
        try #require(!examples.isEmpty, "identify has no request body example")
        let body = Array(try WireContractTests.compactBody().utf8)
        for (name, example) in examples {
            let value = try #require(example["value"], "\(name) has no value")
            let given = try JSONSerialization.data(withJSONObject: value, options: [.sortedKeys])
            let worked = try JSONSerialization.jsonObject(with: Data(body))
            let canonical = try JSONSerialization.data(withJSONObject: worked, options: [.sortedKeys])
            #expect(given == canonical, "example \(name) is not api.md's worked body")
        }

        // RFC 8032 §7.1 TEST 1, as the example's description says.
        let seed = Array(WireContractTests.bytes(
            hex: "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"))
        let device = try seed.withUnsafeBytes { try DeviceKey(seed: $0) }
        let idempotencyKey = try #require(headers.first { $0.0 == "Idempotency-Key" }?.1)
        let fields = try MessageSignature.sign(method: "POST", path: "/v1/identify", body: body,
                                               idempotencyKey: idempotencyKey, created: Self.exampleCreated,
                                               with: device)
        for (name, value) in fields.headers {
            #expect(headers.first { $0.0.lowercased() == name.lowercased() }?.1 == value,
                    "the \(name) example is not the signer's")
        }

        let harness = try ServerHarness(clock: { Self.exampleCreated }) { $0.allowUnsigned = false }
        let (publicKey, _) = try harness.keys(organization: Self.organization)
        let answer = try harness.client.request("POST", "/v1/identify",
                                                headers: [("Authorization", "Bearer \(publicKey)"),
                                                          ("Content-Type", "application/json")] + headers,
                                                body: body)
        #expect(answer.status == 200, "\(answer.text)")
        #expect(answer.text.contains(#""duplicate":false"#))
    }

    /// Bodies at the edges of what the schema states, each answered by a live server and judged by
    /// jsonschema against the document's IdentifyRequest (date-time format checked): the server
    /// answers 200 exactly when the schema accepts, and names the member past the 64-bit range.
    @Test func theServerAcceptsExactlyWhatTheSchemaAccepts() throws {
        let body = try WireContractTests.compactBody()
        func with(_ original: String, _ replacement: String) throws -> String {
            try #require(body.contains(original), "\(original) is not in the worked body")
            return body.replacingOccurrences(of: original, with: replacement)
        }
        let date = #""collectedAt":"2026-01-01T00:00:00Z""#
        var variants = [body]
        for collectedAt in ["2026-01-01T00:00:00.25Z", "2026-01-01T05:30:00+05:30", "2026-01-01T00:00:00+18:00",
                            "2026-01-01T00:00:00-18:00", "2026-01-01T00:00:00+18:01", "2026-01-01T00:00:00-19:00",
                            "2026-01-01t00:00:00z", "2026-02-30T00:00:00Z", "2028-02-29T00:00:00Z",
                            "2026-01-01T24:00:00Z",
                            "2016-12-31T23:59:60Z", "2026-01-01T00:00:00+0100", "2026-01-01T00:00:00", "2026-01-01",
                            "0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999999Z"] {
            variants.append(try with(date, #""collectedAt":"\#(collectedAt)""#))
        }
        for version in ["1", "3", "2.0"] {
            variants.append(try with(#""schemaVersion":2"#, #""schemaVersion":\#(version)"#))
        }
        var messages: [Int: String] = [:]
        for budget in ["9223372036854775807", "-9223372036854775808", "9223372036854775808", "-9223372036854775809",
                       "1e2", "1e400"] {
            if budget.hasSuffix("9") || budget == "9223372036854775808" || budget == "1e400" {
                messages[variants.count] = "'report.budgetMs' is out of range"
            }
            variants.append(try with(#""budgetMs":1200"#, #""budgetMs":\#(budget)"#))
        }
        for signal in ["18446744073709551616", "-9223372036854775809", "1.5", "null", "2.0", "[]", "1e400", "{}"] {
            if signal.count > 18 {
                messages[variants.count] = "signals.dmi.chassis_type' is invalid: an integer out of range"
            }
            if signal == "1e400" || signal == "{}" {
                messages[variants.count] = "signals.dmi.chassis_type' is invalid: not a boolean, a 64-bit integer"
            }
            variants.append(try with(#""dmi.chassis_type":1"#, #""dmi.chassis_type":\#(signal)"#))
        }
        // A number no Double holds, where no signal reader names it: the member is named all the same.
        messages[variants.count] = "elapsedMs' is out of range"
        variants.append(try with(#""elapsedMs":2.46"#, #""elapsedMs":1e400"#))
        variants.append(try with(#""tag":"checkout""#, #""tag":null"#))
        variants.append(try with(#""freeText":"fingerprint""#, #""freeText":null,"prefetchedAgeMs":null"#))
        variants.append(try with(#""name":"dmi-model""#, #""name":"""#))
        variants.append(try with(#""name":"dmi-model""#, #""name":"\#(String(repeating: "n", count: 129))""#))
        variants.append(try with(#""hardwareIdVersion":1"#, #""hardwareIdVersion":2"#))
        variants.append(try with(#""hardwareId":"3c9d"#, #""hardwareId":"3C9D"#))

        let input = try TestPaths.temporaryDirectory("openapi-variants") + "/bodies.jsonl"
        try Data((variants.joined(separator: "\n") + "\n").utf8).write(to: URL(fileURLWithPath: input))
        let judged = try runShell("\"$1\" \"$2\" \"$3\" < \"$4\"", try Self.tool("python"),
                                  Self.fixtures + "/validate.py", Self.spec, input)
        try #require(judged.status == 0, "\(judged.standardError)")
        let verdicts = judged.standardOutput.split(separator: "\n").map(String.init)
        try #require(verdicts.count == variants.count, "\(judged.standardOutput)")
        #expect(verdicts[0] == "valid")
        #expect(verdicts.contains("invalid"))

        let harness = try ServerHarness()
        let (publicKey, _) = try harness.keys(organization: Self.organization)
        for (index, (variant, verdict)) in zip(variants, verdicts).enumerated() {
            let answer = try harness.client.request("POST", "/v1/identify", headers: harness.identifyHeaders(publicKey),
                                                    body: Array(variant.utf8))
            #expect((answer.status == 200) == (verdict == "valid"),
                    "schema says \(verdict), server \(answer.status) \(answer.text): \(variant)")
            if let message = messages[index] { #expect(answer.text.contains(message), "\(answer.text)") }
        }
    }
}

