@testable import FingerlyTransport

extension Harnesses {
    /// The body and moment the seed's signature was made for, so a mutation of a valid seed
    /// reaches the digest, keyid, clock and signature checks, not only the parsers.
    private static let signedBody = Array(#"{"client":{"proxy":false,"sdk":"fingerly-linux","version":"1.0.0"},"report":{}}"#.utf8)
    private static let signedAt: Int64 = 1_767_225_600

    /// Header fields of a received request, one `name: value` per line, as a server hands them to
    /// the verifier.
    static func signatureFields(_ bytes: [UInt8]) {
        let fields = bytes.split(separator: UInt8(ascii: "\n")).map { line -> (name: String, value: String) in
            let colon = line.firstIndex(of: UInt8(ascii: ":")) ?? line.endIndex
            return (String(decoding: line[..<colon], as: UTF8.self), String(decoding: line[colon...].dropFirst(), as: UTF8.self))
        }
        do {
            _ = try MessageSignature.verify(method: "POST", path: "/fingerly/v1/identify", fields: fields, body: signedBody,
                                            now: signedAt, window: 300)
        } catch {
            // Servers log the reason: building it must not fail either.
            _ = error.description
        }
    }
}
