@testable import FingerlyCatalogue
import Foundation
import Testing
@testable import FingerlyHost
@testable import FingerlyModel
@testable import FingerlyProbes

/// The C shims fill structs into arrays the caller sizes. What does not fit, a list longer than
/// its array or a name longer than its field, is reported as cut and recorded as an issue,
/// never dropped without a word.
@Suite struct ShimOverflowTests {
    static let opensslAvailable = FileManager.default.isExecutableFile(atPath: "/usr/bin/openssl")

    /// A self-signed EC certificate made with openssl, as PEM.
    static func certificate(subject: String) throws -> String {
        let directory = try TestPaths.temporaryDirectory("shim-certificate")
        let made = try runProcess("/usr/bin/openssl", ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                                                       "-nodes", "-days", "30", "-utf8", "-subj", subject,
                                                       "-keyout", directory + "/ca.key", "-out", directory + "/ca.crt"])
        try #require(made.status == 0, "\(made.standardError)")
        return try String(contentsOfFile: directory + "/ca.crt", encoding: .utf8)
    }

    /// `count` certificates that parse like `pem` but differ in their signature's last two bytes,
    /// so each has a fingerprint of its own. Nothing here checks signatures.
    static func variants(of pem: String, count: Int) throws -> String {
        let body = pem.split(separator: "\n").filter { !$0.hasPrefix("-----") }.joined()
        var der = try #require(Data(base64Encoded: body))
        var text = ""
        for index in 0..<count {
            der[der.count - 1] = UInt8(index & 0xFF)
            der[der.count - 2] = UInt8((index >> 8) & 0xFF)
            text += "-----BEGIN CERTIFICATE-----\n" + der.base64EncodedString(options: [.lineLength64Characters, .endLineWithLineFeed])
                + "\n-----END CERTIFICATE-----\n"
        }
        return text
    }

    /// A root tree holding only the given files.
    static func tree(_ files: [String: String]) throws -> String {
        let root = try TestPaths.temporaryDirectory("shim-tree")
        for (path, text) in files { try DeviceFixtures.write(text, to: root + path) }
        return root
    }

    static func context(root: String = "/") -> ProbeContext {
        ProbeContext(host: HostFileSystem(root: root), tables: .embedded, filter: .none, hasher: IdentifierHasher(organization: "acme"))
    }

    // MARK: certificate fingerprints

    /// A packaged file of 300 roots, all in the bundle too. The fingerprints came back as text in
    /// 16 KiB, which holds 252: the other 48 looked locally added.
    @Test(.enabled(if: opensslAvailable, "openssl is missing"))
    func everyPackagedRootOfALargeFileIsKnownAsPackaged() throws {
        let many = try Self.variants(of: try Self.certificate(subject: "/CN=Packaged Root/O=Fingerly Test"), count: 300)
        let root = try Self.tree(["/usr/share/ca-certificates/mozilla/many.crt": many, "/etc/ssl/certs/ca-certificates.crt": many])
        let context = Self.context(root: root)
        try TrustStoreProbe().collect(into: context)
        #expect(context.signals["tls.packaged_roots"] == .int(300))
        #expect(context.signals["tls.local_roots"] == .strings([]))
        #expect(context.issues.isEmpty, "\(context.issues)")
    }

    @Test(.enabled(if: opensslAvailable, "openssl is missing"))
    func fingerprintsBeyondTheLimitAreCountedAndReportedAsCut() throws {
        let pem = Array(try Self.variants(of: try Self.certificate(subject: "/CN=Counted"), count: 12).utf8)
        let all = try Certificates.fingerprints(ofPEM: pem)
        #expect(all.fingerprints.count == 12 && Set(all.fingerprints).count == 12 && !all.isCut)
        #expect(all.fingerprints.allSatisfy { $0.count == 64 && $0.allSatisfy(\.isHexDigit) })
        let cut = try Certificates.fingerprints(ofPEM: pem, limit: 5)
        #expect(cut.fingerprints == Array(all.fingerprints.prefix(5)))
        #expect(cut.found == 12 && cut.isCut)
    }

    // MARK: the trust-store scan

    @Test(.enabled(if: opensslAvailable, "openssl is missing"))
    func moreLocalRootsThanTheScanHoldsAreRecordedAsCut() throws {
        let bundle = try Self.variants(of: try Self.certificate(subject: "/CN=Local Root"), count: 3)
        let root = try Self.tree(["/etc/ssl/certs/ca-certificates.crt": bundle])

        let whole = Self.context(root: root)
        let store = try #require(try TrustStore.read(whole))
        #expect(store.localRoots.count == 3)
        #expect(!whole.issues.contains { $0.detail == TrustStore.scanCutDetail })

        let cut = Self.context(root: root)
        let shortened = try #require(try TrustStore.read(cut, localRootLimit: 2))
        #expect(shortened.localRoots.count == 2)
        #expect(cut.issues.contains { $0.path == TrustStore.bundle && $0.detail == TrustStore.scanCutDetail }, "\(cut.issues)")

        let scan = try Certificates.scanTrusted(pem: Array(bundle.utf8), packagedFingerprints: [], limit: 1)
        #expect(scan.local.count == 1 && scan.localFound == 3 && scan.isCut)
    }

    /// RFC 2253 prints the last RDN first: "OU=x," then twenty "OU=<60 × é>,", so byte 1023
    /// falls inside an "é". The subject field holds 1023 bytes.
    static let longSubject = (0..<20).map { _ in "/OU=" + String(repeating: "é", count: 60) }.joined() + "/OU=x"

    /// A subject longer than its field was cut without a word.
    @Test(.enabled(if: opensslAvailable, "openssl is missing"))
    func aLocalRootWithASubjectLongerThanItsFieldIsRecordedAsCut() throws {
        let root = try Self.tree(["/etc/ssl/certs/ca-certificates.crt": try Self.certificate(subject: Self.longSubject)])
        let context = Self.context(root: root)
        try TrustStoreProbe().collect(into: context)
        #expect(context.issues.contains { $0.path == "/etc/ssl/certs/ca-certificates.crt" && $0.detail.contains("subject or issuer") },
                "\(context.issues)")
    }

    @Test(.enabled(if: opensslAvailable, "openssl is missing"))
    func aCutSubjectIsFlaggedAndStaysWholeUTF8() throws {
        let pem = Array(try Self.certificate(subject: Self.longSubject).utf8)
        let scan = try Certificates.scanTrusted(pem: pem, packagedFingerprints: [])
        let certificate = try #require(scan.local.first?.certificate)
        #expect(certificate.subjectTruncated && certificate.issuerTruncated && certificate.hasTruncatedName)
        #expect(certificate.subject.utf8.count <= Certificates.nameLimit && certificate.subject.utf8.count >= Certificates.nameLimit - 3)
        #expect(!certificate.subject.contains("\u{FFFD}"))
        #expect(certificate.subject.hasPrefix("OU=x,OU=éé"))

        let short = try Certificates.scanTrusted(pem: Array(try Self.certificate(subject: "/CN=Short").utf8), packagedFingerprints: [])
        let whole = try #require(short.local.first?.certificate)
        #expect(whole.subject == "CN=Short" && whole.issuer == "CN=Short" && !whole.hasTruncatedName)
        #expect(whole.pin.count == 44 && whole.fingerprint.count == 64)
    }

    // MARK: the presented chain

    @Test(.enabled(if: TLSPinVerificationTests.available, "openssl or bash is missing"))
    func aChainLongerThanItsArrayIsReportedAsCut() throws {
        let pki = try TLSPinVerificationTests.pki()
        let server = try TLSTestServer(pki, leaf: "genuine-leaf", extra: ["genuine-ca"])
        let pin = String(try pki.pin("genuine-ca").dropFirst("sha256/".count))
        let whole = TLSClient.checkPin(host: "127.0.0.1", port: server.port, proxy: nil, pins: [pin], timeoutMs: 10_000)
        #expect(whole.status == .confirmed, "\(whole.detail)")
        #expect(whole.chain.map(\.subject) == ["CN=pin-check.test", "O=Fingerly Test,CN=Genuine Root"] && !whole.chainCut)

        let cut = TLSClient.checkPin(host: "127.0.0.1", port: server.port, proxy: nil, pins: [pin], timeoutMs: 10_000, chainLimit: 1)
        #expect(cut.status == .confirmed, "\(cut.detail)")
        #expect(cut.chain.map(\.subject) == ["CN=pin-check.test"])
        #expect(cut.chainPresented == 2 && cut.chainCut)
    }

    // MARK: loaded objects

    @Test func moreLoadedObjectsThanTheListingHoldsAreReportedAsCut() throws {
        let whole = ProcessIntegrity.loadedObjects()
        #expect(whole.objects.count > 3 && !whole.isCut)
        #expect(whole.objects.first?.path == "[main]")
        #expect(whole.objects.contains { $0.soname == "libc.so.6" })
        #expect(whole.objects.contains { $0.needed.contains("libc.so.6") })

        let cut = ProcessIntegrity.loadedObjects(objectLimit: 2)
        #expect(cut.objects.count == 2 && cut.objectsFound == whole.objectsFound && cut.isCut)
        let fewNeeded = ProcessIntegrity.loadedObjects(neededLimit: 1)
        #expect(fewNeeded.neededTaken == 1 && fewNeeded.neededFound > 1 && fewNeeded.isCut)

        let context = Self.context()
        try LoadedObjectsProbe(objectLimit: 2).collect(into: context)
        #expect(context.issues.contains { $0.detail == LoadedObjectsProbe.cutDetail }, "\(context.issues)")
        #expect(context.signals["loader.object_count"] == .int(2))

        let normal = Self.context()
        try LoadedObjectsProbe().collect(into: normal)
        #expect(!normal.issues.contains { $0.detail == LoadedObjectsProbe.cutDetail }, "\(normal.issues)")
    }
}
