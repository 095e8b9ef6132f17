import Foundation
import Testing
@testable import FingerlyHost
@testable import FingerlyProbes

/// The measured host writes its trust files; a TLS client trusts whatever libcrypto reads from them. The Swift
/// reader may decline any text (libcrypto then reads it), but whatever it accepts it must read exactly as
/// libcrypto does, or a root could be hidden from the scan by writing its file an unusual way.
@Suite(.enabled(if: ShimOverflowTests.opensslAvailable, "openssl is missing"))
struct CanonicalPEMTests {
    static func threeRoots() throws -> String {
        let made = try ShimOverflowTests.certificate(subject: "/CN=Canonical Root/O=Fingerly Test")
        return try ShimOverflowTests.variants(of: made, count: 3)
    }

    static func swiftFingerprints(_ text: [UInt8]) -> [String]? {
        CanonicalPEM.certificateBlocks(text).map { blocks in
            (0..<blocks.count).map { Certificates.fingerprint(of: blocks.block($0)) }
        }
    }

    static func libcryptoFingerprints(_ text: [UInt8]) throws -> [String] {
        try Certificates.libcryptoFingerprints(ofPEM: text).fingerprints
    }

    @Test func textAsOpensslWritesItIsReadAsLibcryptoReadsIt() throws {
        let text = Array(try Self.threeRoots().utf8)
        let read = try #require(Self.swiftFingerprints(text))
        #expect(read.count == 3)
        #expect(read == (try Self.libcryptoFingerprints(text)))
        #expect(Set(read).count == 3)
    }

    @Test func thisHostsBundleIsReadAsLibcryptoReadsIt() throws {
        let path = "/etc/ssl/certs/ca-certificates.crt"
        guard let data = FileManager.default.contents(atPath: path) else { return }
        let text = Array(data)
        let expected = try Self.libcryptoFingerprints(text)
        // Debian's bundle is canonical: a decline here would load libcrypto on every run of every host.
        #expect(Self.swiftFingerprints(text) == expected)
        #expect(!expected.isEmpty)
    }

    /// Each of these is text libcrypto reads in its own way (or not at all): the reader declines it.
    @Test func anythingButCanonicalTextIsDeclined() throws {
        let good = try Self.threeRoots()
        let lines = good.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        let firstData = 1  // the line after the first BEGIN
        func edited(_ change: (inout [String]) -> Void) -> String {
            var copy = lines
            change(&copy)
            return copy.joined(separator: "\n")
        }
        let declined: [String: String] = [
            "CR line ends": good.replacingOccurrences(of: "\n", with: "\r\n"),
            "no final newline": String(good.dropLast()),
            "a header": edited { $0.insert("Proc-Type: 4,ENCRYPTED", at: firstData) },
            "a short line before the last": edited { $0[firstData] = String($0[firstData].dropLast(4)) },
            "a longer line": edited { $0[firstData] += "AAAA" },
            "another label": good.replacingOccurrences(of: "BEGIN CERTIFICATE-----\n", with: "BEGIN PUBLIC KEY-----\n"),
            "END under another label": edited { $0[$0.firstIndex { $0.hasPrefix("-----END") }!] = "-----END X509 CERTIFICATE-----" },
            "a BEGIN line with a trailing space": edited { $0[0] += " " },
            "dashes in the text between blocks": edited { $0.insert("see -----BEGIN CERTIFICATE----- below", at: 0) },
            "a block that never ends": good + "-----BEGIN CERTIFICATE-----\nMIIB\n",
            "an empty block": good + "-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n",
            "a space inside the base64": edited { $0[firstData] = " " + $0[firstData].dropFirst() },
            "padding inside a line": edited { $0[firstData] = "=" + $0[firstData].dropFirst() },
            "a NUL byte": edited { $0[firstData] = "\0" + $0[firstData].dropFirst() },
            "unused bits set before padding": "-----BEGIN CERTIFICATE-----\nQR==\n-----END CERTIFICATE-----\n",
            "a group cut short": "-----BEGIN CERTIFICATE-----\nQUJ\n-----END CERTIFICATE-----\n",
        ]
        for (name, text) in declined {
            #expect(CanonicalPEM.certificateBlocks(Array(text.utf8)) == nil, "\(name) was read")
        }
        // Text around the blocks that holds no run of five dashes is skipped, as libcrypto skips it.
        let commented = "# Fingerly test roots\n\n" + good + "trailing words\n"
        #expect(Self.swiftFingerprints(Array(commented.utf8)) == (try Self.libcryptoFingerprints(Array(commented.utf8))))
        #expect(CanonicalPEM.certificateBlocks([])?.count == 0)
    }

    /// libcrypto loads a certificate from all three labels; the scan must see a root under each.
    @Test func everyLabelLibcryptoTrustsIsACertificateToBothReaders() throws {
        let good = try Self.threeRoots()
        var blocks = good.components(separatedBy: "-----END CERTIFICATE-----\n").filter { !$0.isEmpty }
        blocks = blocks.map { $0 + "-----END CERTIFICATE-----\n" }
        let relabelled = blocks[0] + blocks[1].replacingOccurrences(of: " CERTIFICATE-----", with: " X509 CERTIFICATE-----")
            + blocks[2].replacingOccurrences(of: " CERTIFICATE-----", with: " TRUSTED CERTIFICATE-----")
        let text = Array(relabelled.utf8)
        #expect(try Self.libcryptoFingerprints(text).count == 3)
        #expect(Self.swiftFingerprints(text) == (try Self.libcryptoFingerprints(text)))
    }

    /// Hostile edits, thousands of them: any text the reader still accepts must give libcrypto's answer.
    @Test func whateverTheReaderAcceptsLibcryptoReadsTheSame() throws {
        let good = Array(try Self.threeRoots().utf8)
        let alphabet = Array("AZaz09+/=-\n\r \0:".utf8)
        var generator = SeededGenerator(seed: 0x5eed_c0de)
        var accepted = 0
        for round in 0..<3_000 {
            var text = good
            for _ in 0..<(1 + round % 3) {
                let position = Int.random(in: 0..<text.count, using: &generator)
                let byte = alphabet.randomElement(using: &generator)!
                switch Int.random(in: 0..<3, using: &generator) {
                case 0: text[position] = byte
                case 1: text.insert(byte, at: position)
                default: text.remove(at: position)
                }
            }
            guard let read = Self.swiftFingerprints(text) else { continue }
            accepted += 1
            let expected = try Self.libcryptoFingerprints(text)
            #expect(read == expected, "round \(round): the readers disagree on \(String(decoding: text, as: UTF8.self))")
        }
        // Edits that keep text canonical (a letter for a letter) must exist, or nothing was compared.
        #expect(accepted > 100)
    }

    /// A trust store whose roots are all packaged is described without libcrypto; one with a local root is
    /// described by it, the same way as before.
    @Test func theScanReadsPackagedRootsWithoutLibcryptoAndDescribesALocalOne() throws {
        let packaged = try Self.threeRoots()
        let local = try ShimOverflowTests.certificate(subject: "/CN=Canonical Local Root")
        let packagedFingerprints = Set(try #require(Self.swiftFingerprints(Array(packaged.utf8))))
        let allPackaged = try Certificates.scanTrusted(pem: Array(packaged.utf8), packagedFingerprints: packagedFingerprints)
        #expect(allPackaged.packagedCount == 3)
        #expect(allPackaged.local.isEmpty)
        #expect(allPackaged.fingerprints?.count == 3)
        let mixed = Array((packaged + local).utf8)
        let scan = try Certificates.scanTrusted(pem: mixed, packagedFingerprints: packagedFingerprints)
        // The same text through libcrypto's own reader, by way of a CRLF that the Swift reader declines.
        let crlf = Array((packaged + local).replacingOccurrences(of: "\n", with: "\r\n").utf8)
        let throughLibcrypto = try Certificates.scanTrusted(pem: crlf, packagedFingerprints: packagedFingerprints)
        #expect(scan.packagedCount == 3)
        #expect(scan.local.map(\.certificate.subject) == ["CN=Canonical Local Root"])
        #expect(scan.local == throughLibcrypto.local)
        #expect(scan.packagedCount == throughLibcrypto.packagedCount)
    }
}
