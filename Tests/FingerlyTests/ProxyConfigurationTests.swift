import Foundation
import Testing
@testable import Fingerly
@testable import FingerlyHost
@testable import FingerlyModel
@testable import FingerlyPolicy
@testable import FingerlyProbes

/// Proxy settings and the other trust stores, on root trees made in the test.
@Suite struct ProxyConfigurationTests {
    @Test func proxySettingsOutsideTheEnvironmentAreFound() async throws {
        let root = try TestPaths.temporaryDirectory("proxyconf")
        try DeviceFixtures.write("PATH=/usr/bin\nhttps_proxy=\"http://bob:pw@proxy.corp:3128\"\n", to: root + "/etc/environment")
        try DeviceFixtures.write("Acquire::http::Proxy \"http://apt-cache:3142/\";\nAcquire::https::Proxy \"DIRECT\";\n", to: root + "/etc/apt/apt.conf.d/01proxy")
        try DeviceFixtures.write("HOME=/home/bob\0PATH=/usr/bin\0", to: root + "/proc/self/environ")
        try DeviceFixtures.write("[Proxy Settings]\nProxyType=1\nhttpsProxy=http://kde-proxy 8080\n", to: root + "/home/bob/.config/kioslaverc")
        try DeviceFixtures.write("GVariant\0/org/gnome/system/proxy/mode\0'manual'\0", to: root + "/home/bob/.config/dconf/user")
        try FileManager.default.createDirectory(atPath: root + "/sys/class/net/wg0", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: root + "/sys/class/net/eth0", withIntermediateDirectories: true)
        let result = try await identify(root: root)
        #expect(result.signals["proxy.etc_environment"] == .strings(["https_proxy=http://proxy.corp:3128"]))
        #expect(result.signals["proxy.apt"] == .strings(["Acquire::http::Proxy http://apt-cache:3142/"]))
        #expect(result.signals["proxy.desktop"] == .strings(["KDE: manual proxy http://kde-proxy:8080", "GNOME: proxy settings in dconf (mode manual)"]))
        #expect(result.signals["proxy.tunnel_interfaces"] == .strings(["wg0"]))
        let proxy = result.verdicts[.proxy]
        #expect(proxy.value && proxy.confidence == .high)
        #expect(proxy.reasons.map(\.code) == ["etc_environment_proxy", "desktop_proxy", "apt_proxy", "tunnel_interface"])
        #expect(!proxy.reasons.contains { $0.message.contains("pw@") })
    }

    /// Lines are split on the newline byte: split on the Character "\n", a file written with CRLF
    /// endings was one line ("\r\n" is a single Character), and the proxy in it went unseen.
    @Test func proxySettingsInFilesWithCRLFEndingsAreFound() async throws {
        let root = try TestPaths.temporaryDirectory("proxycrlf")
        try DeviceFixtures.write("PATH=/usr/bin\r\nhttps_proxy=http://proxy.corp:3128\r\n", to: root + "/etc/environment")
        try DeviceFixtures.write("APT::Install-Recommends \"0\";\r\nAcquire::http::Proxy \"http://apt-cache:3142/\";\r\n",
                                 to: root + "/etc/apt/apt.conf.d/01proxy")
        let result = try await identify(root: root)
        #expect(result.signals["proxy.etc_environment"] == .strings(["https_proxy=http://proxy.corp:3128"]))
        #expect(result.signals["proxy.apt"] == .strings(["Acquire::http::Proxy http://apt-cache:3142/"]))
    }

    @Test func otherTrustStoresAreCounted() async throws {
        let root = try TestPaths.temporaryDirectory("otherstores")
        try DeviceFixtures.write("HOME=/home/bob\0SSLKEYLOGFILE=/tmp/keys.log\0SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt\0", to: root + "/proc/self/environ")
        try DeviceFixtures.write("-----BEGIN CERTIFICATE-----\n", to: root + "/etc/pki/ca-trust/source/anchors/corp.pem")
        try DeviceFixtures.write("", to: root + "/home/bob/.pki/nssdb/cert9.db")
        try DeviceFixtures.write(#"{"policies": {"Certificates": {"Install": ["corp.der", "/etc/corp2.pem"]}}}"#, to: root + "/usr/lib/firefox/distribution/policies.json")
        let result = try await identify(root: root)
        #expect(result.signals["tls.rhel_anchors"] == .int(1))
        #expect(result.signals["tls.nss_user_database"] == .bool(true))
        #expect(result.signals["tls.firefox_policy_certificates"] == .int(2))
        #expect(result.signals["tls.env.sslkeylogfile"] == .string("/tmp/keys.log"))
        // SSL_CERT_FILE naming the system bundle itself is not an override.
        #expect(result.signals["tls.env_trust_overrides"] == .strings([]))
        let mitm = result.verdicts[.mitm]
        #expect(mitm.reasons.map(\.code) == ["keylog_file", "firefox_policy_certificates", "rhel_anchors"])
        #expect(mitm.confidence == .high)
    }

    @Test func thePinCheckHonoursTheProxyAndNoProxy() {
        let environment = ProcessEnvironment(variables: ["HTTPS_PROXY": "http://u:p@proxy.corp:3128", "NO_PROXY": "localhost,.internal"])
        #expect(TLSPinCheckProbe.proxy(for: "example.org", environment: environment)! == ("proxy.corp", 3128))
        #expect(TLSPinCheckProbe.proxy(for: "db.internal", environment: environment) == nil)
        #expect(TLSPinCheckProbe.proxy(for: "localhost", environment: environment) == nil)
        #expect(TLSPinCheckProbe.proxy(for: "example.org", environment: ProcessEnvironment(variables: [:])) == nil)
    }
}
