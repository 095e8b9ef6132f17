import Foundation
import Testing
@testable import FingerlyHost

/// A local root is described in Swift when it is written the plain way, so that a run need not open libcrypto.
/// Whatever the Swift reader describes it must describe exactly as libcrypto does; anything it declines goes to
/// libcrypto, and the scan's answer is the same either way.
@Suite(.enabled(if: ShimOverflowTests.opensslAvailable, "openssl is missing"))
struct PlainCertificateTests {
    static func made(subject: String, key: [String] = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"],
                     extra: [String] = []) throws -> String {
        let directory = try TestPaths.temporaryDirectory("plain-certificate")
        let run = try runProcess("/usr/bin/openssl", ["req", "-x509"] + key + ["-nodes", "-days", "30", "-utf8",
                                                      "-subj", subject, "-keyout", directory + "/ca.key",
                                                      "-out", directory + "/ca.crt"] + extra)
        try #require(run.status == 0, "\(subject): \(run.standardError)")
        return try String(contentsOfFile: directory + "/ca.crt", encoding: .utf8)
    }

    static func der(_ pem: String) throws -> ArraySlice<UInt8> {
        try #require(CanonicalPEM.certificateBlocks(Array(pem.utf8))).block(0)
    }

    static func pem(_ der: some Collection<UInt8>) -> String {
        "-----BEGIN CERTIFICATE-----\n" + Data(der).base64EncodedString(options: [.lineLength64Characters, .endLineWithLineFeed])
            + "\n-----END CERTIFICATE-----\n"
    }

    static func libcryptoDescription(_ pem: String) throws -> CertificateDescription {
        try #require(Certificates.libcryptoScanTrusted(pem: Array(pem.utf8), packagedFingerprints: []).local.first)
            .certificate
    }

    static func plainDescription(_ der: ArraySlice<UInt8>) -> CertificateDescription? {
        PlainCertificate(der: der)?.description(fingerprint: Certificates.fingerprint(of: der))
    }

    /// The scan with the Swift reader allowed, and libcrypto's, agree.
    static func expectSameScan(_ text: String, packaged: Set<String>, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let bytes = Array(text.utf8)
        let scanned = try Certificates.scanTrusted(pem: bytes, packagedFingerprints: packaged)
        let libcrypto = try Certificates.libcryptoScanTrusted(pem: bytes, packagedFingerprints: packaged)
        #expect(scanned == libcrypto, sourceLocation: sourceLocation)
    }

    @Test func everyAttributeAndEveryEscapeIsWrittenAsLibcryptoWritesIt() throws {
        let subjects = [
            "/CN=Plain Root", "/C=US/ST=Oregon/L=Portland/O=Example Org/OU=Unit/CN=Example Root",
            #"/CN=a\,b\+c"d\\e<f>g;h=i/O= leading/OU=trailing /L=#hash/ST=# both "#,
            "/emailAddress=ca@example.com/serialNumber=12345/street=1 Main St/title=Root/postalCode=97201",
            "/GN=Given/SN=Surname/DC=example/DC=com/UID=root/organizationIdentifier=VATDE-123456789/CN= ",
            "/O=Only An Organisation", "/CN=#/O=##/OU= /L=# /ST= #",
        ]
        let keys: [[String]] = [["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"], ["-newkey", "ed25519"],
                                ["-newkey", "rsa:1024"]]
        for (index, subject) in subjects.enumerated() {
            let pem = try Self.made(subject: subject, key: keys[index % keys.count])
            let described = try #require(Self.plainDescription(try Self.der(pem)), "\(subject) was declined")
            #expect(described == (try Self.libcryptoDescription(pem)), "\(subject)")
        }
    }

    /// Debian's bundle: roots from many vendors, each written its own way.
    @Test func thisHostsBundleIsDescribedAsLibcryptoDescribesIt() throws {
        guard let data = FileManager.default.contents(atPath: "/etc/ssl/certs/ca-certificates.crt"),
              let blocks = CanonicalPEM.certificateBlocks(Array(data)) else { return }
        var plain = 0
        for index in 0..<blocks.count {
            guard let described = Self.plainDescription(blocks.block(index)) else { continue }
            plain += 1
            #expect(described == (try Self.libcryptoDescription(Self.pem(blocks.block(index)))), "block \(index)")
        }
        #expect(plain * 2 >= blocks.count, "only \(plain) of \(blocks.count) roots were plain")
    }

    @Test func aNameLongerThanItsFieldIsCutAsLibcryptoCutsIt() throws {
        let units = (0..<24).map { "/OU=" + String(repeating: Character(String(UnicodeScalar(UInt8(97 + $0)))), count: 60) }
        let pem = try Self.made(subject: units.joined() + "/CN=Long Name Root")
        let described = try #require(Self.plainDescription(try Self.der(pem)))
        #expect(described.subjectTruncated && described.subject.utf8.count == Certificates.nameLimit)
        #expect(described == (try Self.libcryptoDescription(pem)))
    }

    /// What the Swift reader does not write as libcrypto does, or cannot be sure libcrypto reads: declined, and
    /// the scan is libcrypto's.
    @Test func whatThisReaderDoesNotWriteGoesToLibcrypto() throws {
        var declined: [String: String] = [
            "a name outside ASCII": try Self.made(subject: "/CN=Zertifizierungsstelle Müller"),
            "an attribute not in the table": try Self.made(subject: "/description=private/CN=Odd Attribute"),
            "a multi-valued RDN": try Self.made(subject: "/CN=Multi+O=Valued", extra: ["-multivalue-rdn"]),
            "a control character": try Self.made(subject: "/CN=Tab\there"),
        ]
        let plain = Array(try Self.der(try Self.made(subject: "/CN=Edited Root")))
        // A long length form where the short one does: libcrypto takes it, DER does not.
        try #require(plain.starts(with: [0x30, 0x82]))
        declined["a length in a longer form than needed"] = Self.pem([0x30, 0x83, 0x00] + plain.dropFirst(2))
        declined["a byte after the certificate"] = Self.pem(plain + [0x00])
        for (name, pem) in declined {
            let der = try Self.der(pem)
            #expect(PlainCertificate(der: der) == nil, "\(name) was described: \(String(describing: PlainCertificate(der: der)))")
            try Self.expectSameScan(pem, packaged: [])
        }
    }

    /// A local root named like no packaged root is described in Swift; one whose first common name a packaged root
    /// shares goes to libcrypto, which compares the names and keys.
    @Test func theImpersonationCheckIsLibcryptosWhereverANameMayBeShared() throws {
        let shipped = try Self.made(subject: "/CN=Shared Name/O=Vendor")
        let ownName = try Self.made(subject: "/CN=Household Root/O=Home")
        let sameName = try Self.made(subject: "/CN=shared  NAME/O=VENDOR")
        let packaged = Set(try Certificates.fingerprints(ofPEM: Array(shipped.utf8)).fingerprints)
        try Self.expectSameScan(shipped + ownName, packaged: packaged)
        try Self.expectSameScan(shipped + sameName, packaged: packaged)
        let impostor = try Certificates.scanTrusted(pem: Array((shipped + sameName).utf8), packagedFingerprints: packaged)
        #expect(impostor.local.map(\.impersonatesPackaged) == [true])
        let own = try Certificates.scanTrusted(pem: Array((shipped + ownName).utf8), packagedFingerprints: packaged)
        #expect(own.local.map(\.impersonatesPackaged) == [false] && own.packagedCount == 1)
        let blocks = try #require(CanonicalPEM.certificateBlocks(Array((shipped + sameName).utf8)))
        let fingerprints = (0..<blocks.count).map { Certificates.fingerprint(of: blocks.block($0)) }
        #expect(Certificates.plainScan(blocks, fingerprints: fingerprints, packaged: [true, false], limit: 10) == nil)
    }

    @Test func localRootsPastTheLimitAreCountedAsLibcryptoCountsThem() throws {
        let shipped = try Self.made(subject: "/CN=Shipped")
        let locals = try (0..<3).map { try Self.made(subject: "/CN=Local \($0)") }.joined()
        let packaged = Set(try Certificates.fingerprints(ofPEM: Array(shipped.utf8)).fingerprints)
        for limit in [0, 1, 3] {
            let text = Array((shipped + locals).utf8)
            let scanned = try Certificates.scanTrusted(pem: text, packagedFingerprints: packaged, limit: limit)
            #expect(scanned == (try Certificates.libcryptoScanTrusted(pem: text, packagedFingerprints: packaged, limit: limit)))
            #expect(scanned.local.count == limit && scanned.localFound == 3)
        }
    }
}
