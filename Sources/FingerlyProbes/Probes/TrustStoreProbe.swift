import CFingerlyShims
import FoundationEssentials
import FingerlyHost
import FingerlyModel

/// One certificate as libcrypto describes it.
package struct CertificateSummary: Hashable {
    let fingerprint: String
    /// SHA-256 of the SubjectPublicKeyInfo, base64: the value HPKP-style pins use.
    let pin: String
    let subject: String
    let issuer: String

    /// Fingerprints only: decoding base64 and hashing costs a fraction of a full X.509 parse.
    static func fingerprints(_ bytes: [UInt8]) -> [String] {
        var buffer = [CChar](repeating: 0, count: 16 * 1024)
        let length = bytes.withUnsafeBufferPointer { data in
            data.withMemoryRebound(to: CChar.self) { fingerly_certificate_fingerprints($0.baseAddress, $0.count, &buffer, buffer.count) }
        }
        return String(decoding: buffer[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self).split(separator: "\n").map(String.init)
    }

    static func lines(_ text: String) -> [CertificateSummary] {
        text.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)
            return fields.count == 4 ? CertificateSummary(fingerprint: fields[0], pin: fields[1], subject: fields[2], issuer: fields[3]) : nil
        }
    }
}

/// Where trusted roots come from, on Debian's layout (ca-certificates).
package struct TrustStore {
    static let bundle = "/etc/ssl/certs/ca-certificates.crt"
    /// Debian's bundle is about 220 KiB.
    static let fileLimit = 2 * 1024 * 1024
    static let scanCutDetail = "more locally added certificates than one scan describes: some were not examined"
    static let certificateDirectory = "/etc/ssl/certs"
    static let packaged = "/usr/share/ca-certificates/mozilla"
    static let localDirectory = "/usr/local/share/ca-certificates"
    static let configuration = "/etc/ca-certificates.conf"

    struct LocalRoot: Hashable {
        let certificate: CertificateSummary
        /// How it got in: the local directory, a configuration line, or the bundle only.
        let source: String
        /// It carries a shipped root's subject with another key.
        let impersonates: Bool
    }

    let trustedCount: Int
    let packagedCount: Int
    let localRoots: [LocalRoot]

    static func read(_ context: ProbeContext) -> TrustStore? {
        let host = context.host
        func bytes(_ path: String) -> [UInt8]? {
            // Whole or not at all: OpenSSL reads every certificate of the file, so padding in front
            // of an added root must not push it past what is read.
            context.attemptIfPresent { () throws(HostReadError) in try host.readWhole(path, limit: Self.fileLimit) }
        }
        func fingerprints(_ path: String) -> [String] { bytes(path).map(CertificateSummary.fingerprints) ?? [] }

        var packaged: Set<String> = []
        for name in context.attemptIfPresent({ () throws(HostReadError) in try host.listDirectory(Self.packaged) }) ?? [] where name.hasSuffix(".crt") {
            packaged.formUnion(fingerprints(Self.packaged + "/" + name))
        }
        var local: Set<String> = []
        func addLocal(_ directory: String, depth: Int) {
            for name in context.attemptIfPresent({ () throws(HostReadError) in try host.listDirectory(directory) }) ?? [] {
                let path = directory + "/" + name
                if name.hasSuffix(".crt") { local.formUnion(fingerprints(path)) }
                // Listing a file that is no directory is ENOTDIR, which attemptIfPresent takes as absent.
                else if depth < 3 { addLocal(path, depth: depth + 1) }
            }
        }
        addLocal(Self.localDirectory, depth: 0)
        var configured: Set<String> = []
        if let text = context.attemptIfPresent({ () throws(HostReadError) in try host.readText(Self.configuration) }) {
            for line in text.split(separator: "\n").map({ $0.trimmingWhitespace() })
            where !line.isEmpty && !line.hasPrefix("#") && !line.hasPrefix("!") && !line.hasPrefix("mozilla/") {
                configured.formUnion(fingerprints("/usr/share/ca-certificates/" + line))
            }
        }

        // What is trusted: the bundle, and every *.pem beside it that is not a link to a shipped file.
        // Listed first, read one at a time below: only one file's bytes are held at once.
        var sources = [Self.bundle]
        for name in context.attemptIfPresent({ () throws(HostReadError) in try host.listDirectory(Self.certificateDirectory) }) ?? [] where name.hasSuffix(".pem") {
            let path = Self.certificateDirectory + "/" + name
            if let target = context.attempt({ () throws(HostReadError) in try host.linkTarget(path) }) ?? nil, target.hasPrefix(Self.packaged + "/") { continue }
            sources.append(path)
        }

        let shipped = packaged.sorted().joined(separator: "\n")
        var seen: Set<String> = []
        var roots: [LocalRoot] = []
        var packagedCount = 0
        var readAny = false
        for path in sources {
            guard let contents = bytes(path) else { continue }
            readAny = true
            let source = (path: path, bytes: contents)
            // A local root's line is at most about 2.2 KiB and its certificate at least a few hundred
            // bytes: twice the file holds every line. Near full still means lines were dropped.
            var buffer = [CChar](repeating: 0, count: max(256 * 1024, contents.count * 2))
            let length = source.bytes.withUnsafeBufferPointer { data in
                data.withMemoryRebound(to: CChar.self) {
                    fingerly_scan_trusted_certificates($0.baseAddress, $0.count, shipped, &buffer, buffer.count)
                }
            }
            let text = String(decoding: buffer[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
            if length + 4096 >= buffer.count {
                context.recordMalformed(path, Self.scanCutDetail)
            }
            var impersonating: Set<String> = []
            var found: [CertificateSummary] = []
            for line in text.split(separator: "\n") {
                if line.hasPrefix("P\t") { packagedCount = max(packagedCount, Int(line.dropFirst(2)) ?? 0) }
                else if line.hasPrefix("I\t") { impersonating.insert(String(line.dropFirst(2))) }
                else if line.hasPrefix("L\t") { found += CertificateSummary.lines(String(line.dropFirst(2))) }
            }
            for certificate in found where seen.insert(certificate.fingerprint).inserted {
                let how = local.contains(certificate.fingerprint) ? Self.localDirectory
                    : configured.contains(certificate.fingerprint) ? "\(Self.configuration) outside mozilla/"
                    : source.path == Self.bundle ? "the bundle only" : source.path
                roots.append(LocalRoot(certificate: certificate, source: how, impersonates: impersonating.contains(certificate.fingerprint)))
            }
        }
        guard readAny else { return nil }
        return TrustStore(trustedCount: packagedCount + roots.count, packagedCount: packagedCount, localRoots: roots)
    }
}

/// Which roots this host trusts and where each came from: shipped by the distribution, or added
/// locally (any of which can terminate TLS for any site); known interception products; a local
/// root that copies a packaged root's name with another key; and the other stores (RHEL anchors,
/// the user's NSS database, Firefox enterprise policies).
package struct TrustStoreProbe: Probe {
    package let id = "trust-store"

    package func collect(into context: ProbeContext) throws(ProbeFailure) {
        let host = context.host
        if let store = TrustStore.read(context) {
            context.emit("tls.trust_store_certificates", store.trustedCount)
            context.emit("tls.packaged_roots", store.packagedCount)
            context.emit("tls.local_roots", store.localRoots.map { "\(context.personal($0.certificate.subject)) (\($0.source))" })
            var impersonating: [String] = []
            var interception: [String] = []
            var products: [String] = []
            for root in store.localRoots {
                let certificate = root.certificate
                if root.impersonates {
                    impersonating.append("\(certificate.subject) (a packaged root's name with a different key)")
                }
                let names = (certificate.subject + " " + certificate.issuer).lowercased()
                if let row = context.tables.patterns("interceptionCAs").first(where: { names.contains($0.pattern.lowercased()) }) {
                    interception.append("\(row.product) (\(row.category)): \(context.personal(certificate.subject))")
                    if !products.contains(row.product) { products.append(row.product) }
                }
            }
            context.emit("tls.impersonating_roots", impersonating)
            context.emit("tls.interception_cas", interception)
            if let product = products.first { context.emit("tls.interception_product", product) }
        }

        let oversized = context.issues.filter { [HostFileSystem.oversizedDetail(TrustStore.fileLimit), TrustStore.scanCutDetail].contains($0.detail) }.map(\.path)
        context.emit("tls.oversized_trust_files", oversized)

        if let anchors = context.attemptIfPresent({ () throws(HostReadError) in try host.listDirectory("/etc/pki/ca-trust/source/anchors") }) {
            context.emit("tls.rhel_anchors", anchors.count)
        }
        let home = context.attemptIfPresent { () throws(HostReadError) in try ProcessEnvironment.read(from: host) }?["HOME"]
        if let home, home.hasPrefix("/") {
            context.emit("tls.nss_user_database", host.exists(home + "/.pki/nssdb/cert9.db") || host.exists(home + "/.pki/nssdb/cert8.db"))
        }
        var installs = 0
        for path in ["/etc/firefox/policies/policies.json", "/usr/lib/firefox/distribution/policies.json",
                     "/usr/lib/firefox-esr/distribution/policies.json"] {
            guard let bytes = context.attemptIfPresent({ () throws(HostReadError) in try host.read(path, limit: 1024 * 1024) }) else { continue }
            let document: JSONValue
            do { document = try JSONParser.parse(bytes) } catch {
                context.recordMalformed(path, "not valid JSON: \(error.message) at \(error.path)")
                continue
            }
            guard case .object(let top) = document, case .object(let policies)? = top["policies"],
                  case .object(let certificates)? = policies["Certificates"] else { continue }
            if case .array(let list)? = certificates["Install"] { installs += list.count }
        }
        context.emit("tls.firefox_policy_certificates", installs)
    }
}
