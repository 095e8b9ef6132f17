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

    /// One DER element at `start`: its tag, where its contents lie, and where it ends (lengths as read, any form).
    static func element(_ bytes: [UInt8], at start: Int) -> (tag: UInt8, contents: Range<Int>, end: Int) {
        var at = start + 2, length = Int(bytes[start + 1])
        if length & 0x80 != 0 {
            let digits = length & 0x7f
            length = bytes[at..<at + digits].reduce(0) { $0 << 8 | Int($1) }
            at += digits
        }
        return (bytes[start], at..<at + length, at + length)
    }

    static func encoded(_ tag: UInt8, _ contents: [UInt8]) -> [UInt8] {
        if contents.count < 128 { return [tag, UInt8(contents.count)] + contents }
        let digits = withUnsafeBytes(of: UInt32(contents.count).bigEndian) { Array($0) }.drop { $0 == 0 }
        return [tag, 0x80 | UInt8(digits.count)] + digits + contents
    }

    static func children(_ bytes: [UInt8], _ range: Range<Int>) -> [[UInt8]] {
        var found: [[UInt8]] = [], at = range.lowerBound
        while at < range.upperBound {
            let next = element(bytes, at: at).end
            found.append(Array(bytes[at..<next]))
            at = next
        }
        return found
    }

    /// `pem` with its subject's common-name OID written with a longer length form than DER's (06 81 03), which
    /// libcrypto reads and re-encodes minimally when it compares names. Nothing here checks the signature.
    static func withLongFormCommonNameOID(_ pem: String) throws -> String {
        let der = try Self.der(pem)
        let certificate = element(der, at: 0)
        var parts = children(der, certificate.contents)
        let tbs = element(parts[0], at: 0)
        var fields = children(parts[0], tbs.contents)
        let subject = try #require(fields.count > 5 ? fields[5] : nil)
        let names = children(subject, element(subject, at: 0).contents).map { set in
            encoded(0x31, children(set, element(set, at: 0).contents).map { entry -> [UInt8] in
                var contents = Array(entry[element(entry, at: 0).contents])
                if contents.starts(with: [0x06, 0x03, 0x55, 0x04, 0x03]) { contents.replaceSubrange(0..<2, with: [0x06, 0x81, 0x03]) }
                return encoded(0x30, contents)
            }.joined().map { $0 })
        }
        fields[5] = encoded(0x30, Array(names.joined()))
        parts[0] = encoded(0x30, Array(fields.joined()))
        let rewritten = encoded(0x30, Array(parts.joined()))
        #expect(Self.holds(rewritten, [0x06, 0x81, 0x03, 0x55, 0x04, 0x03]))
        let text = Data(rewritten).base64EncodedString(options: [.lineLength64Characters, .endLineWithLineFeed])
        return "-----BEGIN CERTIFICATE-----\n" + text + "\n-----END CERTIFICATE-----\n"
    }

    @Test func aCopyWhoseCommonNameOIDIsWrittenLongIsFoundToo() throws {
        let packaged = try Self.root(Self.packagedSubject)
        let copy = try Self.withLongFormCommonNameOID(try Self.root(Self.packagedSubject).pem)
        let found = try Self.impersonating(packaged: packaged.pem,
                                           trusted: ["/etc/ssl/certs/ca-certificates.crt": packaged.pem + copy])
        #expect(found.count == 1, "\(found)")
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
