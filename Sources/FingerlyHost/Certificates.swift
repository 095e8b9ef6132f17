import CFingerlyTLS

/// Why libcrypto cannot be used, or nil once it is loaded. It is opened on the first call into it (the trust
/// store's scan, a device key, a pin check), never at start; asking opens it.
package func libcryptoProblem() -> String? {
    fingerly_crypto_problem().map { String(cString: $0) }
}

/// One certificate as libcrypto describes it.
package struct CertificateDescription: Sendable, Hashable {
    /// SHA-256 of the DER bytes, lowercase hex.
    package let fingerprint: String
    /// SHA-256 of the SubjectPublicKeyInfo, base64: the value HPKP-style pins use.
    package let pin: String
    /// RFC 2253 names.
    package let subject: String
    package let issuer: String
    /// The subject or issuer was longer than its field and is shown cut.
    package let subjectTruncated: Bool
    package let issuerTruncated: Bool

    package var hasTruncatedName: Bool { subjectTruncated || issuerTruncated }

    package init(fingerprint: String, pin: String, subject: String, issuer: String, subjectTruncated: Bool,
                 issuerTruncated: Bool) {
        self.fingerprint = fingerprint
        self.pin = pin
        self.subject = subject
        self.issuer = issuer
        self.subjectTruncated = subjectTruncated
        self.issuerTruncated = issuerTruncated
    }

    init(_ raw: fingerly_certificate) {
        var raw = raw
        fingerprint = text { fingerly_fingerprint_text(&raw.fingerprint, $0) }
        pin = text { fingerly_certificate_pin(&raw, $0) }
        subject = text { fingerly_certificate_subject(&raw, $0) }
        issuer = text { fingerly_certificate_issuer(&raw, $0) }
        subjectTruncated = raw.subject_truncated
        issuerTruncated = raw.issuer_truncated
    }
}

/// The fingerprints of the certificates in one PEM text.
package struct CertificateFingerprints: Sendable, Hashable {
    package let fingerprints: [String]
    /// Certificates there were, fingerprinted or not.
    package let found: Int
    package var isCut: Bool { fingerprints.count < found }
}

/// A trusted certificate that is not among the packaged ones.
package struct LocalCertificate: Sendable, Hashable {
    package let certificate: CertificateDescription
    /// It carries a packaged certificate's subject with another key.
    package let impersonatesPackaged: Bool

    package init(certificate: CertificateDescription, impersonatesPackaged: Bool) {
        self.certificate = certificate
        self.impersonatesPackaged = impersonatesPackaged
    }
}

/// One PEM text of trusted certificates, against the packaged fingerprints.
package struct TrustedCertificateScan: Sendable, Hashable {
    package let packagedCount: Int
    package let local: [LocalCertificate]
    /// Local certificates there were, described or not.
    package let localFound: Int
    package var isCut: Bool { local.count < localFound }
    /// Every certificate's fingerprint, when the text was read without libcrypto.
    package let fingerprints: [String]?

    package init(packagedCount: Int, local: [LocalCertificate], localFound: Int, fingerprints: [String]? = nil) {
        self.packagedCount = packagedCount
        self.local = local
        self.localFound = localFound
        self.fingerprints = fingerprints
    }

    init(_ scan: fingerly_trust_scan, local: [fingerly_local_certificate], fingerprints: [String]?) {
        self.init(packagedCount: scan.packaged_count,
                  local: local.map { LocalCertificate(certificate: CertificateDescription($0.certificate),
                                                      impersonatesPackaged: $0.impersonates_packaged) },
                  localFound: scan.local.found, fingerprints: fingerprints)
    }
}

/// Why certificates could not be read.
package enum CertificateReadError: Error, Equatable {
    case system(SystemError)
    /// The text needed libcrypto (it is not canonical, or holds a certificate to describe) and it cannot be used.
    case libcryptoUnavailable(String)
}

package enum Certificates {
    /// The largest number of certificates one PEM text is described with.
    package static let defaultLimit = 4096
    /// The longest subject or issuer described whole, in bytes.
    package static let nameLimit = Int(FINGERLY_NAME_SIZE) - 1

    /// SHA-256 of every certificate block in PEM text, without parsing the certificates: at most
    /// `limit`, the rest counted (`isCut`). Canonical text is decoded here; anything else by libcrypto.
    package static func fingerprints(ofPEM pem: [UInt8], limit: Int = defaultLimit)
        throws(CertificateReadError) -> CertificateFingerprints {
        let limit = max(limit, 0)
        if let blocks = CanonicalPEM.certificateBlocks(pem) {
            let shown = (0..<min(limit, blocks.count)).map { fingerprint(of: blocks.block($0)) }
            return CertificateFingerprints(fingerprints: shown, found: blocks.count)
        }
        return try libcryptoFingerprints(ofPEM: pem, limit: limit)
    }

    /// `fingerprints(ofPEM:limit:)` as libcrypto reads the text, whatever its form.
    package static func libcryptoFingerprints(ofPEM pem: [UInt8], limit: Int = defaultLimit)
        throws(CertificateReadError) -> CertificateFingerprints {
        if let problem = libcryptoProblem() { throw .libcryptoUnavailable(problem) }
        let capacity = min(max(limit, 0), pemBlockBound(pem))
        var extent = fingerly_list_extent()
        var result: Int32 = 0
        let hashes = [fingerly_fingerprint](unsafeUninitializedCapacity: capacity) { buffer, initialized in
            result = pem.withUnsafeBufferPointer { data in
                data.withMemoryRebound(to: CChar.self) {
                    fingerly_certificate_fingerprints($0.baseAddress, $0.count, buffer.baseAddress, capacity, &extent)
                }
            }
            initialized = result == 0 ? extent.count : 0
        }
        guard result == 0 else { throw .system(SystemError(-result)) }
        return CertificateFingerprints(fingerprints: hashes.map { hash in
            var hash = hash
            return text { fingerly_fingerprint_text(&hash, $0) }
        }, found: extent.found)
    }

    /// Describes every certificate of `pem` whose fingerprint is not packaged (at most `limit`,
    /// the rest counted and not parsed: `isCut`), and counts the packaged ones. Canonical text whose
    /// every certificate is packaged is read without libcrypto.
    package static func scanTrusted(pem: [UInt8], packagedFingerprints: Set<String>,
                                    limit: Int = defaultLimit) throws(CertificateReadError) -> TrustedCertificateScan {
        let limit = max(limit, 0)
        if let blocks = CanonicalPEM.certificateBlocks(pem) {
            let fingerprints = (0..<blocks.count).map { fingerprint(of: blocks.block($0)) }
            let packaged = fingerprints.map(packagedFingerprints.contains)
            guard packaged.contains(false) else {
                return TrustedCertificateScan(packagedCount: blocks.count, local: [], localFound: 0,
                                              fingerprints: fingerprints)
            }
            if let plain = plainScan(blocks, fingerprints: fingerprints, packaged: packaged, limit: limit) { return plain }
            if let problem = libcryptoProblem() { throw .libcryptoUnavailable(problem) }
            let capacity = min(limit, blocks.count)
            var scan = fingerly_trust_scan()
            var result: Int32 = 0
            let local = [fingerly_local_certificate](unsafeUninitializedCapacity: capacity) { buffer, initialized in
                result = blocks.bytes.withUnsafeBufferPointer { bytes in
                    let described = zip(blocks.ranges, packaged).map { range, isPackaged in
                        fingerly_certificate_block(der: bytes.baseAddress! + range.lowerBound, length: range.count,
                                                   packaged: isPackaged)
                    }
                    return fingerly_describe_trusted_blocks(described, described.count, buffer.baseAddress, capacity,
                                                            &scan)
                }
                initialized = result == 0 ? scan.local.count : 0
            }
            guard result == 0 else { throw .system(SystemError(-result)) }
            return TrustedCertificateScan(scan, local: local, fingerprints: nil)
        }
        return try libcryptoScanTrusted(pem: pem, packagedFingerprints: packagedFingerprints, limit: limit)
    }

    /// `scanTrusted(pem:packagedFingerprints:limit:)` as libcrypto reads and describes the text, whatever its form.
    package static func libcryptoScanTrusted(pem: [UInt8], packagedFingerprints: Set<String>,
                                             limit: Int = defaultLimit) throws(CertificateReadError) -> TrustedCertificateScan {
        let limit = max(limit, 0)
        if let problem = libcryptoProblem() { throw .libcryptoUnavailable(problem) }
        let capacity = min(limit, pemBlockBound(pem))
        // Sorted fixed-size entries for the C side's binary search; anything that is not a
        // fingerprint (64 lower-case hex digits, as the C side writes them) can match nothing.
        let packaged: [fingerly_fingerprint] = packagedFingerprints.filter(Self.isFingerprint).sorted().map { hex in
            var entry = fingerly_fingerprint()
            let bytes = Array(hex.utf8)
            bytes.withUnsafeBufferPointer { buffer in
                buffer.withMemoryRebound(to: CChar.self) { fingerly_fingerprint_set(&entry, $0.baseAddress, $0.count) }
            }
            return entry
        }
        var scan = fingerly_trust_scan()
        var result: Int32 = 0
        let local = [fingerly_local_certificate](unsafeUninitializedCapacity: capacity) { buffer, initialized in
            result = pem.withUnsafeBufferPointer { data in
                data.withMemoryRebound(to: CChar.self) {
                    fingerly_scan_trusted_certificates($0.baseAddress, $0.count, packaged, packaged.count,
                                                       buffer.baseAddress, capacity, &scan)
                }
            }
            initialized = result == 0 ? scan.local.count : 0
        }
        guard result == 0 else { throw .system(SystemError(-result)) }
        return TrustedCertificateScan(scan, local: local, fingerprints: nil)
    }

    /// The scan libcrypto's would give, without it: when every local certificate to describe is a
    /// `PlainCertificate` and no packaged one in the text may share its subject (their first common names differ).
    /// Nil sends the whole text to libcrypto.
    static func plainScan(_ blocks: CanonicalPEM.Blocks, fingerprints: [String], packaged: [Bool],
                          limit: Int) -> TrustedCertificateScan? {
        let localIndices = packaged.indices.filter { !packaged[$0] }
        let described = localIndices.prefix(limit)
        var local: [LocalCertificate] = []
        var localNames: Set<FirstCommonName> = []
        for index in described {
            guard let certificate = PlainCertificate(der: blocks.block(index)) else { return nil }
            let name = FirstCommonName(of: blocks.block(index))
            guard name != .unknown else { return nil }
            local.append(LocalCertificate(certificate: certificate.description(fingerprint: fingerprints[index]),
                                          impersonatesPackaged: false))
            localNames.insert(name)
        }
        if !localNames.isEmpty {
            for index in packaged.indices where packaged[index] {
                let name = FirstCommonName(of: blocks.block(index))
                if name == .unknown || localNames.contains(name) { return nil }
            }
        }
        return TrustedCertificateScan(packagedCount: packaged.count - localIndices.count, local: local,
                                      localFound: localIndices.count, fingerprints: nil)
    }

    /// SHA-256 of a certificate's DER, as the C side writes it.
    static func fingerprint(of der: ArraySlice<UInt8>) -> String {
        lowercaseHex(SHA256.hash(der))
    }

    /// A SHA-256 fingerprint as the C side writes it: 64 lower-case hex digits.
    static func isFingerprint(_ text: String) -> Bool {
        text.utf8.count == 64 && text.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
    }

    /// How many PEM blocks `pem` can hold at most: each starts with "-----BEGIN ". Sizes the
    /// arrays to the text instead of to the worst case.
    static func pemBlockBound(_ pem: [UInt8]) -> Int {
        let marker = Array("-----BEGIN ".utf8)
        return pem.withUnsafeBufferPointer { bytes in
            guard bytes.count >= marker.count else { return 0 }
            var count = 0
            var index = 0
            let last = bytes.count - marker.count
            while index <= last {
                // The fifth dash and the B first: most positions fail there.
                if bytes[index + 5] == UInt8(ascii: "B"), bytes[index] == UInt8(ascii: "-"),
                   marker.indices.allSatisfy({ bytes[index + $0] == marker[$0] }) {
                    count += 1
                    index += marker.count
                } else {
                    index += 1
                }
            }
            return count
        }
    }
}
