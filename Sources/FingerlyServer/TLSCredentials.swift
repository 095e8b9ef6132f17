import CFingerlyHTTPD
import FingerlyHost

/// The certificate chain and key `serve` is given for HTTPS, read and tried before listening so
/// that a missing, unreadable or mismatched file is a configuration error (78) naming the file,
/// not a failure to listen (69) that a restart would repeat.
package struct TLSCredentials: Sendable {
    package let certificatePEM: [UInt8]
    package let keyPEM: [UInt8]

    package init(certificate: String, key: String) throws(ConfigurationError) {
        func read(_ path: String, _ what: String, _ setting: String) throws(ConfigurationError) -> [UInt8] {
            do { return try OperatorFile.readRegularFile(path, limit: 1_048_576) } catch {
                throw ConfigurationError("cannot read the TLS \(what) \(path) (\(setting)): \(error.message)")
            }
        }
        certificatePEM = try read(certificate, "certificate", "tls-cert")
        keyPEM = try read(key, "key", "tls-key")
        guard HTTPServer.supportsTLS else {
            throw ConfigurationError("this libmicrohttpd was built without TLS; run behind a TLS proxy instead")
        }
        var message = [CChar](repeating: 0, count: 512)
        let usable = (certificatePEM + [0]).withUnsafeBufferPointer { certificateText in
            (keyPEM + [0]).withUnsafeBufferPointer { keyText in
                certificateText.withMemoryRebound(to: CChar.self) { certificateText in
                    keyText.withMemoryRebound(to: CChar.self) { keyText in
                        fingerly_httpd_check_tls(certificateText.baseAddress, keyText.baseAddress,
                                                 &message, message.count)
                    }
                }
            }
        }
        guard usable == 1 else {
            let reason = Self.printable(message)
            throw ConfigurationError("the TLS certificate \(certificate) (tls-cert) and key \(key) (tls-key) are not "
                + "a usable PEM pair" + (reason.isEmpty ? "" : ": \(reason)"))
        }
    }

    /// libmicrohttpd's message on one line of visible text: it may quote GnuTLS, which may quote the file.
    private static func printable(_ message: [CChar]) -> String {
        let bytes = message.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }
        var text = String(decoding: bytes, as: UTF8.self).unicodeScalars.map { scalar in
            scalar.value < 0x20 || scalar.value == 0x7f ? " " : String(scalar)
        }.joined()
        while text.last == " " { text.removeLast() }
        return text
    }
}
