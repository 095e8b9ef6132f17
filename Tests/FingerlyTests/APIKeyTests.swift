import Foundation
import Testing
@testable import Fingerly
@testable import FingerlyModel
@testable import FingerlyProbes

/// Keys are `fly_pk_<region>_<environment>_<org>_<random>`; identifiers are keyed by the
/// organization alone.
@Suite struct APIKeyTests {
    @Test(arguments: [
        ("k", "expected fly_pk_"),
        ("eu_live_abc", "expected fly_pk_"),
        ("fly_sk_us_production_acme_0123456789abcdefABCD", "secret key"),
        ("fly_pk_mars_production_acme_0123456789abcdefABCD", "unknown region"),
        ("fly_pk_us_Production_acme_0123456789abcdefABCD", "environment"),
        ("fly_pk_us_production__0123456789abcdefABCD", "organization"),
        ("fly_pk_us_production_acme_short", "16-128"),
        ("fly_pk_us_production_acme_0123456789abcdef+/==", "16-128"),
        ("fly_pk_us_production_acme_0123456789abcdefABCD_extra", "expected fly_pk_"),
    ])
    func malformedKeysFailAtLoadNamingTheField(_ key: String, _ expected: String) {
        do {
            _ = try Fingerly.loadBlocking(apiKey: key)
            Issue.record("\(key) was accepted")
        } catch {
            guard case .invalidConfiguration(let field, let reason) = error else { Issue.record("\(error)"); return }
            #expect(field == "apiKey")
            #expect(reason.contains(expected), "\(reason)")
            // A key pasted by mistake may be a secret: the error never repeats it.
            if key.count > 8 { #expect(!reason.contains(key)) }
        }
    }

    @Test(arguments: ["ftp://fingerly.example", "fingerly.example", "https://", "https://user:pw@fingerly.example",
                      "https://fingerly.example/?a=1", "https://fingerly.example/#x", "https://finger ly.example"])
    func anEndpointThatIsNotAnHTTPURLFailsAtLoad(_ endpoint: String) {
        #expect(throws: FingerlyError.self) { try Fingerly.loadBlocking(apiKey: TestKeys.standard, endpoint: endpoint) }
        do {
            _ = try Fingerly.loadBlocking(apiKey: TestKeys.standard, endpoint: endpoint)
        } catch {
            guard case .invalidConfiguration(let field, let reason) = error else { Issue.record("\(error)"); return }
            #expect(field == "endpoint")
            #expect(!reason.contains("pw@"), "a password in the endpoint is never repeated: \(reason)")
        }
    }

    @Test func identifiersSurviveKeyRotationAndEnvironmentsButNotOrganizations() async throws {
        func identity(_ key: String) async throws -> HostIdentity {
            let fingerly = try Fingerly.loadBlocking(apiKey: key, options: FingerlyOptions(root: TestPaths.fixture("laptop-baremetal")))
            return try await fingerly.identify(tiers: [.fast], submit: false).report.identity
        }
        let original = try await identity(TestKeys.key(org: "acme42", random: "9f3kQx7Lm2Pz8RtYw"))
        let rotated = try await identity(TestKeys.key(org: "acme42", random: "ZZZZzzzz00001111"))
        let staging = try await identity(TestKeys.key(org: "acme42", environment: "staging", region: "eu"))
        let other = try await identity(TestKeys.key(org: "globex", random: "9f3kQx7Lm2Pz8RtYw"))
        let hardwareId = try #require(original.hardwareId)
        let instanceId = try #require(original.instanceId)
        #expect(rotated.hardwareId == hardwareId && rotated.instanceId == instanceId)
        #expect(staging.hardwareId == hardwareId && staging.instanceId == instanceId)
        #expect(rotated.hardwareComponents == original.hardwareComponents)
        #expect(other.hardwareId != hardwareId && other.instanceId != instanceId)
        #expect(Set(other.hardwareComponents).isDisjoint(with: original.hardwareComponents))
    }

    @Test func theReportSaysIdentifiersAreKeyedByTheOrganization() async throws {
        let fingerly = try Fingerly.loadBlocking(apiKey: TestKeys.standard, options: FingerlyOptions(root: TestPaths.fixture("kvm-qemu")))
        #expect(try await fingerly.identify(tiers: [.fast], submit: false).report.identifierKeying == .organization)
    }
}
