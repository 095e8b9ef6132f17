import Foundation
import Testing
@testable import FingerlyModel

/// docs/api.md and docs/openapi.yaml are the contract a server is built against: these tests keep
/// the two documents agreeing with each other, with the client's retry rule and with the library's
/// own types. No YAML parser ships with the toolchain, so the OpenAPI file is read by a strict line
/// scan of the layout it is written in; a layout change makes the scan fail loudly, not pass silently.
@Suite struct WireContractTests {
    static let apiText = (try? String(contentsOfFile: TestPaths.packageRoot + "/docs/api.md", encoding: .utf8)) ?? ""
    static let openAPIText = (try? String(contentsOfFile: TestPaths.packageRoot + "/docs/openapi.yaml", encoding: .utf8)) ?? ""

    /// The codes of the wire contract, with their statuses (401 carries four): the lead's decisions,
    /// the server's signature and method answers, and issue 12's 400 for an invalid report.
    static let decidedCodes: Set<StatusCode> = [
        StatusCode(400, "bad_request"), StatusCode(400, "duplicate_member"), StatusCode(400, "identity_mismatch"),
        StatusCode(401, "invalid_key"), StatusCode(401, "invalid_signature"), StatusCode(401, "stale_signature"),
        StatusCode(401, "missing_signature"), StatusCode(401, "invalid_key_rotation"), StatusCode(402, "organization_not_accepting"),
        StatusCode(403, "forbidden"), StatusCode(404, "not_found"), StatusCode(405, "method_not_allowed"),
        StatusCode(409, "request_in_progress"), StatusCode(411, "length_required"),
        StatusCode(413, "payload_too_large"), StatusCode(413, "report_too_large"),
        StatusCode(415, "unsupported_media_type"),
        StatusCode(422, "idempotency_key_reused"), StatusCode(429, "rate_limited"), StatusCode(429, "too_many_failures"),
        StatusCode(500, "internal"), StatusCode(503, "unavailable"), StatusCode(507, "storage_quota_exceeded"),
        StatusCode(507, "device_quota_exceeded"),
    ]

    struct StatusCode: Hashable, CustomStringConvertible {
        let status: Int
        let code: String
        init(_ status: Int, _ code: String) { self.status = status; self.code = code }
        var description: String { "\(status) \(code)" }
    }

    struct OperationError: Hashable, CustomStringConvertible {
        let operation: String
        let status: Int
        let code: String
        var description: String { "\(operation) \(status) \(code)" }
    }

    struct TableRow {
        let status: Int
        let code: String
        let operations: [String]
        let retried: Bool
    }

    /// Rows of api.md's error table. Every line that starts like a row (`| 4xx` or `| 5xx`) must be
    /// one, so a malformed row fails instead of being skipped.
    static func errorTable() throws -> [TableRow] {
        let row = /^\| ([45][0-9]{2}) \| `([a-z_]+)` \| (`[A-Za-z]+`(?:, `[A-Za-z]+`)*) \| [^|]+ \| (retried|never retried) \|$/
        var rows: [TableRow] = []
        for line in apiText.split(separator: "\n", omittingEmptySubsequences: false) where line.wholeMatch(of: /^\| [45][0-9]{2} .*/) != nil {
            let match = try #require(line.wholeMatch(of: row), "not a row of the error table: \(line)")
            rows.append(TableRow(status: Int(match.1)!, code: String(match.2),
                                 operations: match.3.split(separator: ", ").map { String($0.dropFirst().dropLast()) },
                                 retried: match.4 == "retried"))
        }
        return rows
    }

    /// One non-200 response of the OpenAPI file: its operation, status, the codes of its examples
    /// and whether it declares Retry-After.
    struct OpenAPIResponse: Hashable {
        let operation: String
        let status: Int
        var codes: Set<String> = []
        var retryAfter = false
    }

    /// The responses under `paths:`, read from the file's layout: `operationId:` at 6 spaces, status
    /// keys at 8, example codes as `code: <name>` lines below them, `Retry-After:` under `headers:`.
    static func openAPIResponses() throws -> [OpenAPIResponse] {
        var responses: [OpenAPIResponse] = []
        var operation: String?
        var inPaths = false
        for line in openAPIText.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.first.map({ $0 != " " }) ?? false { inPaths = line == "paths:"; continue }
            guard inPaths else { continue }
            if let match = line.wholeMatch(of: /^      operationId: ([A-Za-z]+)$/) {
                operation = String(match.1)
            } else if let match = line.wholeMatch(of: /^        '([0-9]{3})':$/) {
                let name = try #require(operation, "a response before any operationId: \(line)")
                responses.append(OpenAPIResponse(operation: name, status: Int(match.1)!))
            } else if let match = line.wholeMatch(of: /^ +code: ([a-z_]+)$/) {
                try #require(!responses.isEmpty, "an error code outside any response: \(line)")
                responses[responses.count - 1].codes.insert(String(match.1))
            } else if line.wholeMatch(of: /^ +Retry-After:$/) != nil {
                try #require(!responses.isEmpty, "Retry-After outside any response")
                responses[responses.count - 1].retryAfter = true
            }
        }
        return responses
    }

    /// The fenced blocks of api.md, each with its info string.
    static func fencedBlocks() -> [(language: String, text: String)] {
        var blocks: [(String, String)] = []
        var open: (language: String, lines: [Substring])?
        for line in apiText.split(separator: "\n", omittingEmptySubsequences: false) {
            let trimmed = line.drop { $0 == " " }
            if trimmed.hasPrefix("```") {
                if let current = open {
                    blocks.append((current.language, current.lines.joined(separator: "\n")))
                    open = nil
                } else {
                    open = (String(trimmed.dropFirst(3)), [])
                }
            } else if open != nil {
                open!.lines.append(line)
            }
        }
        return blocks
    }

    static func jsonBlocks(startingWith prefix: String) -> [String] {
        fencedBlocks().filter { $0.language == "json" }.map(\.text).filter {
            $0.filter { !$0.isWhitespace }.hasPrefix(prefix)
        }
    }

    @Test func openAPIDeclaresVersionAndBothOperations() throws {
        #expect(Self.openAPIText.hasPrefix("openapi: 3.1.0\n"))
        let lines = Set(Self.openAPIText.split(separator: "\n").map(String.init))
        #expect(lines.contains("  /v1/identify:"))
        #expect(lines.contains("  /v1/events/{requestId}:"))
        #expect(lines.contains("      operationId: identify"))
        #expect(lines.contains("      operationId: getEvent"))
        #expect(Self.apiText.contains("## POST /v1/identify"))
        #expect(Self.apiText.contains("## GET /v1/events/{requestId}"))
    }

    @Test func everyDecidedCodeIsInBothDocuments() throws {
        let table = Set(try Self.errorTable().map { StatusCode($0.status, $0.code) })
        let openAPI = Set(try Self.openAPIResponses().flatMap { response in response.codes.map { StatusCode(response.status, $0) } })
        #expect(table == Self.decidedCodes, "api.md's table differs from the decided codes")
        #expect(openAPI == Self.decidedCodes, "openapi.yaml's responses differ from the decided codes")
        for pair in Self.decidedCodes {
            #expect(Self.openAPIText.contains(pair.code) && Self.apiText.contains("`\(pair.code)`"), "\(pair)")
        }
    }

    @Test func errorTableMatchesOpenAPIResponsesPerOperation() throws {
        let table = try Self.errorTable()
        #expect(!table.isEmpty)
        let documented = Set(table.flatMap { row in row.operations.map { OperationError(operation: $0, status: row.status, code: row.code) } })
        let responses = try Self.openAPIResponses()
        let declared = Set(responses.flatMap { response in
            response.codes.map { OperationError(operation: response.operation, status: response.status, code: $0) }
        })
        #expect(documented == declared, "only in api.md: \(documented.subtracting(declared)); only in openapi.yaml: \(declared.subtracting(documented))")
        // An error status without a code in its example would leave a server free to answer anything.
        for response in responses where response.status != 200 {
            #expect(!response.codes.isEmpty, "\(response.operation) \(response.status) names no error code")
        }
        #expect(Set(responses.map(\.operation)) == ["identify", "getEvent"])
        #expect(responses.filter { $0.status == 200 }.count == 2)
    }

    @Test func retryColumnFollowsTheClientRule() throws {
        for row in try Self.errorTable() {
            let retryable = [408, 409, 429].contains(row.status) || ((500...599).contains(row.status) && ![501, 505].contains(row.status))
            #expect(row.retried == retryable, "\(row.status) \(row.code)")
        }
    }

    @Test func retryAfterIsDeclaredExactlyWhereTheContractAllowsIt() throws {
        for response in try Self.openAPIResponses() {
            #expect(response.retryAfter == [408, 429, 503, 507].contains(response.status), "\(response.operation) \(response.status)")
        }
    }

    /// The request body as the client builds it; `report` is the library's own type, so a report field
    /// renamed, retyped or made required breaks this test until the document follows.
    struct ExampleIdentifyRequest: Codable, Equatable {
        struct Client: Codable, Equatable {
            let proxy: Bool
            let sdk: String
            let version: String
        }
        let client: Client
        let report: SignalReport
    }

    struct ExampleIdentifyResponse: Decodable {
        let requestId: String
        let visitorId: String
        let visitorIsNew: Bool
        let visitorConfidence: Int
        let identifiable: Bool
        let duplicate: Bool
        let suspectScore: Int?
        let suspectLevel: SuspectLevel?
        let triggers: [IdentifyTrigger]
        let verdicts: Verdicts
    }

    struct ExampleError: Decodable {
        struct Body: Decodable { let code: String; let message: String }
        let error: Body
    }

    /// The one-line body of the worked example.
    static func compactBody() throws -> String {
        let blocks = fencedBlocks().filter { $0.language == "text" && $0.text.hasPrefix("{\"client\":") }
        try #require(blocks.count == 1, "expected one compact body in api.md, found \(blocks.count)")
        return blocks[0].text
    }

    @Test func exampleBodyDecodesIntoTheLibrarysReport() throws {
        let pretty = try #require(Self.jsonBlocks(startingWith: "{\"client\":").first, "no example body in api.md")
        let request = try JSONDecoder.fingerly.decode(ExampleIdentifyRequest.self, from: Data(pretty.utf8))
        #expect(request.client.sdk == "fingerly-linux")
        #expect(request.report.schemaVersion == SignalReport.currentSchemaVersion)
        #expect(request.report.probes.contains { !$0.signals.isEmpty })

        // The worked example's bytes are exactly what the client's encoder makes of the same body, and
        // the readable and compact forms hold the same members (decoding alone would skip extra ones).
        let compact = try Self.compactBody()
        #expect(String(decoding: try JSONEncoder.fingerly.encode(request), as: UTF8.self) == compact)
        let prettyObject = try JSONSerialization.jsonObject(with: Data(pretty.utf8)) as? NSDictionary
        let compactObject = try JSONSerialization.jsonObject(with: Data(compact.utf8)) as? NSDictionary
        #expect(prettyObject != nil && prettyObject == compactObject)
    }

    @Test func exampleResponseAndErrorDecode() throws {
        let response = try #require(Self.jsonBlocks(startingWith: "{\"requestId\":").first, "no example response in api.md")
        let answer = try JSONDecoder.fingerly.decode(ExampleIdentifyResponse.self, from: Data(response.utf8))
        #expect((0...100).contains(answer.visitorConfidence))
        #expect((answer.suspectScore == nil) == (answer.suspectLevel == nil))
        for trigger in answer.triggers {
            #expect(answer.verdicts[try #require(VerdictName(rawValue: trigger.group))].value, "\(trigger.group)")
        }

        let errors = Self.jsonBlocks(startingWith: "{\"error\":")
        try #require(!errors.isEmpty, "no example error in api.md")
        let tableCodes = Set(try Self.errorTable().map(\.code))
        for text in errors {
            let error = try JSONDecoder.fingerly.decode(ExampleError.self, from: Data(text.utf8))
            #expect(tableCodes.contains(error.error.code), "\(error.error.code)")
        }
    }

    /// The worked signature example, checked with openssl rather than our own code: the digest, the
    /// key id, the signature base rebuilt from the shown headers, and the signature itself.
    @Test func workedSignatureExampleVerifies() throws {
        let request = try #require(Self.fencedBlocks().first { $0.language == "http" && $0.text.hasPrefix("POST ") }?.text,
                                   "no example POST in api.md")
        let lines = request.split(separator: "\n").map(String.init)
        let requestLine = try #require(lines.first?.wholeMatch(of: /POST (\/[^ ]*) HTTP\/1\.1/), "request line: \(lines.first ?? "")")
        var headers: [String: String] = [:]
        for line in lines.dropFirst() {
            let parts = try #require(line.firstRange(of: ": "), "header line: \(line)")
            #expect(headers.updateValue(String(line[parts.upperBound...]), forKey: String(line[..<parts.lowerBound])) == nil, "\(line)")
        }
        func header(_ name: String) throws -> String { try #require(headers[name], "no \(name) in the example") }

        let body = try Self.compactBody()
        let directory = try TestPaths.temporaryDirectory("wire-contract")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let bodyPath = directory + "/body.json"
        try Data(body.utf8).write(to: URL(fileURLWithPath: bodyPath))
        #expect(try header("Content-Length") == String(body.utf8.count))

        let digest = try Self.sha256(ofFile: bodyPath)
        #expect(try header("Content-Digest") == "sha-256=:\(Data(digest).base64EncodedString()):")

        let deviceKeyField = try header("Fingerly-Device-Key")
        try #require(deviceKeyField.hasPrefix(":") && deviceKeyField.hasSuffix(":"))
        let publicKey = try #require(Data(base64Encoded: String(deviceKeyField.dropFirst().dropLast())))
        #expect(publicKey.count == 32)
        let publicKeyPath = directory + "/public.der"
        // SubjectPublicKeyInfo for Ed25519 (RFC 8410): a fixed 12-byte prefix, then the raw key.
        try (Self.bytes(hex: "302a300506032b6570032100") + publicKey).write(to: URL(fileURLWithPath: publicKeyPath))
        let rawKeyPath = directory + "/public.raw"
        try publicKey.write(to: URL(fileURLWithPath: rawKeyPath))
        let keyID = try Self.sha256(ofFile: rawKeyPath).map { String(format: "%02x", $0) }.joined()

        let signatureInput = try header("Signature-Input")
        let parameters = try #require(signatureInput.wholeMatch(of: /fingerly=(.*)/)?.1, "Signature-Input: \(signatureInput)")
        #expect(parameters.hasPrefix("(\"@method\" \"@path\" \"content-digest\" \"idempotency-key\");created="))
        #expect(parameters.hasSuffix(";keyid=\"\(keyID)\";alg=\"ed25519\""))

        let base = [
            "\"@method\": POST",
            "\"@path\": \(requestLine.1)",
            "\"content-digest\": \(try header("Content-Digest"))",
            "\"idempotency-key\": \(try header("Idempotency-Key"))",
            "\"@signature-params\": \(parameters)",
        ].joined(separator: "\n")
        let shownBase = try #require(Self.fencedBlocks().first { $0.language == "text" && $0.text.hasPrefix("\"@method\": ") }?.text,
                                     "no signature base in api.md")
        #expect(shownBase == base)

        let signatureField = try header("Signature")
        let signatureText = try #require(signatureField.wholeMatch(of: /fingerly=:([A-Za-z0-9+\/=]+):/)?.1, "Signature: \(signatureField)")
        let signature = try #require(Data(base64Encoded: String(signatureText)))
        #expect(signature.count == 64)
        let signaturePath = directory + "/signature.bin", basePath = directory + "/base.txt"
        try signature.write(to: URL(fileURLWithPath: signaturePath))

        func verify(_ signedBase: String) throws -> ProcessOutput {
            try Data(signedBase.utf8).write(to: URL(fileURLWithPath: basePath))
            return try runProcess("/usr/bin/openssl", ["pkeyutl", "-verify", "-pubin", "-inkey", publicKeyPath, "-keyform", "DER",
                                                       "-rawin", "-in", basePath, "-sigfile", signaturePath])
        }
        let good = try verify(base)
        #expect(good.status == 0, "\(good.standardOutput) \(good.standardError)")
        // The same check on a base one byte off: the verification above is not vacuous.
        let tampered = try verify(base.replacingOccurrences(of: "/v1/identify", with: "/v1/identifx"))
        #expect(tampered.status != 0)
    }

    static func sha256(ofFile path: String) throws -> [UInt8] {
        let run = try runProcess("/usr/bin/openssl", ["dgst", "-sha256", "-r", path])
        try #require(run.status == 0, "\(run.standardError)")
        let hex = try #require(run.standardOutput.split(separator: " ").first.map(String.init))
        try #require(hex.count == 64, "openssl dgst: \(run.standardOutput)")
        return Array(bytes(hex: hex))
    }

    static func bytes(hex: String) -> Data {
        var data = Data()
        var index = hex.startIndex
        while index < hex.endIndex {
            let next = hex.index(index, offsetBy: 2)
            data.append(UInt8(hex[index..<next], radix: 16)!)
            index = next
        }
        return data
    }
}
