import Foundation
import Testing
@testable import FingerlyHost
@testable import FingerlyModel
@testable import FingerlyProbes

/// A local root carrying a packaged root's subject with another key: OpenSSL builds a chain to whichever
/// root's name matches the issuer's, comparing names as X509_NAME_cmp does (letter case, runs of spaces and
/// the ASN.1 string type do not count), so a copy written any of those ways verifies the same leaves.
@Suite(.enabled(if: ShimOverflowTests.opensslAvailable, "openssl is missing"))
struct ImpersonatingRootTests {
    static let packagedSubject = "/C=US/O=Review Trust/CN=Review Global Root"

    /// A self-signed root; `key` reuses a key file, `stringMask` sets how the name's strings are encoded.
    static func root(_ subject: String, key: String? = nil, stringMask: String? = nil) throws -> (pem: String, key: String) {
        let directory = try TestPaths.temporaryDirectory("impersonating-root")
        let keyPath = key ?? directory + "/root.key"
        var arguments = ["req", "-x509", "-nodes", "-days", "30", "-subj", subject, "-out", directory + "/root.crt"]
        arguments += key == nil ? ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-keyout", keyPath] : ["-key", keyPath]
        if let stringMask {
            let configuration = directory + "/req.cnf"
            try "[req]\ndistinguished_name = dn\nstring_mask = \(stringMask)\n[dn]\n".write(toFile: configuration, atomically: true,
                                                                                          encoding: .utf8)
            arguments += ["-config", configuration]
        }
        let made = try runProcess("/usr/bin/openssl", arguments)
        try #require(made.status == 0, "\(made.standardError)")
        return (try String(contentsOfFile: directory + "/root.crt", encoding: .utf8), keyPath)
    }

    static func holds(_ bytes: [UInt8], _ run: [UInt8]) -> Bool {
        bytes.indices.contains { bytes[$0...].starts(with: run) }
    }

    static func der(_ pem: String) throws -> [UInt8] {
        let blocks = try #require(CanonicalPEM.certificateBlocks(Array(pem.utf8)))
        return Array(blocks.block(0))
    }

    /// The trust-store probe's impersonating roots on a tree whose packaged root is `packaged` and whose trusted
    /// files are `trusted`.
    static func impersonating(packaged: String, trusted: [String: String]) throws -> [String] {
        var files = ["/usr/share/ca-certificates/mozilla/Review_Global_Root.crt": packaged]
        for (path, text) in trusted { files[path] = text }
        let context = ShimOverflowTests.context(root: try ShimOverflowTests.tree(files))
        try TrustStoreProbe().collect(into: context)
        #expect(context.issues.isEmpty, "\(context.issues)")
        guard case .strings(let roots)? = context.signals["tls.impersonating_roots"] else {
            Issue.record("no tls.impersonating_roots in \(context.signals)")
            return []
        }
        return roots
    }

    @Test(arguments: [
        (packagedSubject, nil),
        ("/C=US/O=REVIEW TRUST/CN=review global root", nil),
        ("/C=US/O=Review  Trust/CN=Review   Global Root", nil),
        // MASK:0x800 is B_ASN1_BMPSTRING: the name's text in UTF-16, no byte of it as the packaged root has it.
        (packagedSubject, "MASK:0x800"),
    ] as [(String, String?)])
    func aCopyOfAPackagedRootsNameIsFoundHoweverItIsWritten(subject: String, stringMask: String?) throws {
        let packaged = try Self.root(Self.packagedSubject)
        let copy = try Self.root(subject, stringMask: stringMask)
        if stringMask != nil {
            let common: [UInt8] = Array("Review Global Root".utf8)
            let wide: [UInt8] = common.flatMap { [0, $0] }
            let bytes = try Self.der(copy.pem)
            #expect(!Self.holds(bytes, common), "the copy's name is not a BMPString")
            #expect(Self.holds(bytes, wide))
        }
        let found = try Self.impersonating(packaged: packaged.pem,
                                           trusted: ["/etc/ssl/certs/ca-certificates.crt": packaged.pem + copy.pem])
        #expect(found.count == 1, "\(found)")
        #expect(found.first?.hasSuffix("(a packaged root's name with a different key)") == true)
    }

    @Test func anotherNameOrTheSameKeyIsNoImpersonation() throws {
        let packaged = try Self.root(Self.packagedSubject)
        let otherName = try Self.root(Self.packagedSubject + " 2")
        // Reissued with the packaged root's own key: whoever holds that key needs no copy.
        let sameKey = try Self.root(Self.packagedSubject, key: packaged.key)
        #expect(try Self.der(sameKey.pem) != Self.der(packaged.pem))
        let found = try Self.impersonating(packaged: packaged.pem, trusted: [
            "/etc/ssl/certs/ca-certificates.crt": packaged.pem + otherName.pem + sameKey.pem,
        ])
        #expect(found.isEmpty, "\(found)")
    }

    @Test func aCopyInAFileBesideTheBundleIsFoundToo() throws {
        let packaged = try Self.root(Self.packagedSubject)
        let copy = try Self.root("/C=US/O=Review Trust/CN=REVIEW GLOBAL ROOT")
        let found = try Self.impersonating(packaged: packaged.pem, trusted: [
            "/etc/ssl/certs/ca-certificates.crt": packaged.pem,
            "/etc/ssl/certs/extra.pem": copy.pem,
        ])
        #expect(found.count == 1, "\(found)")
    }
}
