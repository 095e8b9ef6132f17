import Foundation
import Testing
@testable import Fingerly
@testable import FingerlyHost
@testable import FingerlyModel

/// Defects found by the hostile review of issue 10 (layered targets, public API).
@Suite(.serialized) struct Review3AttackTests {
    /// The issue's reference key is `fly_pk_us_production_…`: the region is the third component,
    /// and `endpoint: ""` must use it. Taking the first component makes every such key `us`.
    @Test func theRegionComesFromTheReferenceKeyShape() {
        #expect(APIKey("fly_pk_eu_production_abc123_9f3kQx7Lm2Pz8RtYw")?.region == .eu)
        #expect(APIKey("fly_pk_ap_production_abc123_9f3kQx7Lm2Pz8RtYw")?.region == .ap)
        #expect(APIKey("fly_pk_us_production_abc123_9f3kQx7Lm2Pz8RtYw")?.region == .us)
    }

    /// FingerlyModel's plain `import FoundationEssentials` leaks Foundation's extension members
    /// into every module that imports FingerlyModel: `String(contentsOfFile:encoding:)` compiles in
    /// FingerlyPolicy with no import of its own (checked by hand on this tree). Only
    /// MemberImportVisibility makes the compiler refuse it, so "the policy engine cannot read a
    /// file" holds by the compiler and not by the source scan alone.
    @Test func thePolicyEngineCannotSeeFoundationMembersThroughTheModel() throws {
        let policy = try #require(try PackageManifest.dump().targets.first { $0.name == "FingerlyPolicy" })
        let features = policy.upcomingFeatures
        #expect(features.contains("MemberImportVisibility"), "FingerlyPolicy enables \(features)")
    }

    /// SwiftPM puts every module of the package in one directory, so a probe file that says
    /// `import FingerlyPolicy` builds (checked by hand: `swift build --target FingerlyProbes`
    /// succeeds). `--explicit-target-dependency-import-check error` refuses it; the test run must
    /// build with it for "a probe cannot import the policy engine" to be the compiler's word.
    @Test func theTestRunBuildsWithTheExplicitImportCheck() throws {
        let script = try String(contentsOfFile: TestPaths.packageRoot + "/scripts/test", encoding: .utf8)
        #expect(script.contains("--explicit-target-dependency-import-check error"))
    }

    /// A hostile host controls both the packaged certificates (their fingerprints become the
    /// "packaged" list) and the bundle. Each bundle block is looked up with strstr over the joined
    /// packaged list: N blocks × M fingerprints × 65 bytes. Inside one probe's 8 MiB allowance
    /// that is ~35k × ~100k, hundreds of GB of scanning on a thread the scheduler abandons at
    /// 400 ms but cannot stop. This case (a 1.2 MB bundle, 60k packaged fingerprints: 15 files of 4096, all inside the
    /// limits) takes about 7 s on this tree; hashing 20k tiny blocks against a set takes milliseconds.
    @Test func scanningTrustedCertificatesIsNotQuadraticInThePackagedList() throws {
        var pem: [UInt8] = []
        for index in 0..<20_000 {
            var bytes = withUnsafeBytes(of: UInt32(index).bigEndian) { Array($0) }
            bytes += [0x30, 0x82]
            pem += Array("-----BEGIN CERTIFICATE-----\n\(Data(bytes).base64EncodedString())\n-----END CERTIFICATE-----\n".utf8)
        }
        let packaged = (0..<60_000).map { index in String(repeating: "0", count: 56) + String(format: "%08x", index) }
        let started = monotonicMilliseconds()
        let scan = try Certificates.scanTrusted(pem: pem, packagedFingerprints: Set(packaged), limit: 16)
        let elapsed = monotonicMilliseconds() - started
        #expect(scan.packagedCount == 0)
        // Hashing 20,000 tiny blocks takes a few ms; the bound leaves a loaded 2-core machine
        // two orders of magnitude.
        #expect(elapsed < 1_500, "took \(Int(elapsed)) ms")
    }

    /// IdentifyResult documents visitorConfidence and suspectScore as 0–100 and the level as the
    /// score's level, but its public Decodable init takes anything: a cached or relayed result
    /// with impossible fields decodes as if the library had produced it.
    @Test func decodingAResultRejectsFieldsOutOfTheirDocumentedRange() async throws {
        let fingerly = try Fingerly.loadBlocking(options: FingerlyOptions(root: TestPaths.fixture("kvm-qemu"),
                                                                          stateDirectory: TestPaths.stateDirectory))
        let result = try await fingerly.identify(tiers: [.fast], submit: false)
        let json = String(decoding: try JSONEncoder.fingerly.encode(result), as: UTF8.self)
        let forged = json.replacingOccurrences(of: #""suspectScore":\s*\d+"#, with: "\"suspectScore\":250",
                                               options: .regularExpression)
        try #require(forged != json)
        #expect(throws: DecodingError.self) { try JSONDecoder.fingerly.decode(IdentifyResult.self, from: Data(forged.utf8)) }
    }
}
