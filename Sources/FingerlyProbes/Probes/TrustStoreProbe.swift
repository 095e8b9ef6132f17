import FoundationEssentials
import FingerlyHost
import FingerlyModel

/// One certificate as libcrypto describes it.
package typealias CertificateSummary = CertificateDescription

/// Where trusted roots come from, on Debian's layout (ca-certificates).
package struct TrustStore {
    static let bundle = "/etc/ssl/certs/ca-certificates.crt"
    /// Debian's bundle is about 220 KiB.
    static let fileLimit = 2 * 1024 * 1024
    static let scanCutDetail = "more locally added certificates than one scan describes: some were not examined"
    static let fingerprintCutDetail = "more certificates than one scan fingerprints: some were not examined"
    static let comparisonCutDetail = "more text beside the bundle than one comparison with its packaged roots reads: some was not compared"
    static let nameCutDetail = "a certificate's subject or issuer is longer than \(Certificates.nameLimit) bytes: shown cut"
    /// The most locally added certificates one file is described with.
    static let localRootLimit = 1024
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

    /// Whether a link's text is `/usr/share/ca-certificates/mozilla/NAME` for a NAME this run's packaged listing
    /// read (`read`): a file it did not read, in a subdirectory, past a climb with "..", or cut from a listing too
    /// long, is judged by nobody unless the link is read. As bytes: String comparison takes canonically equivalent
    /// text as equal, and Character comparison a name with a combining mark after ".crt" as not ending in it.
    static func isPackagedFile(_ target: String, read: Set<[UInt8]>) -> Bool {
        let prefix = Array((packaged + "/").utf8), bytes = Array(target.utf8)
        return bytes.starts(with: prefix) && read.contains(Array(bytes.dropFirst(prefix.count)))
    }

    /// `name` ends with `suffix` byte for byte, as a shell pattern `*.crt` matches: String's `hasSuffix` compares
    /// Characters, and "a.crt" followed by a combining mark (or U+0600, which joins what follows) does not end with
    /// ".crt" to it.
    static func hasSuffix(_ name: String, _ suffix: StaticString) -> Bool {
        let tail = UnsafeBufferPointer(start: suffix.utf8Start, count: suffix.utf8CodeUnitCount)
        return name.utf8.count >= tail.count && name.utf8.suffix(tail.count).elementsEqual(tail)
    }

    /// OpenSSL's name for a certificate in a hashed directory: eight lower-case hex digits of its subject's hash, a
    /// dot, a decimal sequence number ("HHHHHHHH.rN" names a revocation list, no certificate).
    static func isHashName(_ name: String) -> Bool {
        let bytes = Array(name.utf8)
        guard bytes.count >= 10, bytes[8] == UInt8(ascii: "."), bytes.count <= 14 else { return false }
        let isHex = bytes[..<8].allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
        return isHex && bytes[9...].allSatisfy { (48...57).contains($0) }
    }

    /// Throws only when a file needs libcrypto to be read and it cannot be used.
    static func read(_ context: ProbeContext, localRootLimit: Int = localRootLimit) throws(ProbeFailure) -> TrustStore? {
        let host = context.host
        func bytes(_ path: String) -> [UInt8]? {
            // Whole or not at all: OpenSSL reads every certificate of the file, so padding in front
            // of an added root must not push it past what is read.
            context.attemptIfPresent { () throws(HostReadError) in try host.readWhole(path, limit: Self.fileLimit) }
        }
        func fingerprints(_ path: String, of contents: [UInt8]) throws(ProbeFailure) -> CertificateFingerprints? {
            do {
                // Fingerprints only: decoding base64 and hashing costs a fraction of a full X.509 parse.
                let found = try Certificates.fingerprints(ofPEM: contents)
                if found.isCut { context.recordMalformed(path, Self.fingerprintCutDetail) }
                return found
            } catch {
                try Self.record(error, path, in: context)
                return nil
            }
        }
        func fingerprints(_ path: String) throws(ProbeFailure) -> [String] {
            guard let contents = bytes(path) else { return [] }
            return try fingerprints(path, of: contents)?.fingerprints ?? []
        }
        let cache = context.trustStoreCacheStorage.map { storage in
            TrustStoreCache(contents: storage.load(), now: storage.currentSeconds())
        }
        /// The packaged roots' files only: what the cache keeps must be public. Nil: not read.
        func packagedFingerprints(_ path: String) throws(ProbeFailure) -> [String]? {
            guard let cache else {
                guard let contents = bytes(path) else { return nil }
                return try fingerprints(path, of: contents)?.fingerprints
            }
            let outcome = context.attemptIfPresent { () throws(HostReadError) in
                try host.readWhole(path, limit: Self.fileLimit) { cache.fingerprints(of: $0) }
            }
            switch outcome {
            case nil: return nil
            case .known(let known)?: return known
            case .read(let contents, let identity)?:
                guard let found = try fingerprints(path, of: contents) else { return nil }
                if !found.isCut {
                    cache.remember(identity, fingerprints: found.fingerprints, scannedAllPackaged: false)
                }
                return found.fingerprints
            }
        }

        var packaged: Set<String> = []
        // The packaged files read and fingerprinted this run, by name: the only ones a link may lead to unread.
        var packagedRead: Set<[UInt8]> = []
        let isCertificateName: (String) -> Bool = { Self.hasSuffix($0, ".crt") }
        // With a cache, each file is first recognised by its status within the listed directory: most are known.
        // The whole directory or none of it: a listing cut short would leave links to the rest unjudged.
        let packagedFiles = context.attemptIfPresent { () throws(HostReadError) -> [(name: String, known: [String]?)] in
            guard let cache else {
                return try host.listWholeDirectory(Self.packaged, keeping: isCertificateName).map { ($0, nil) }
            }
            return try host.listKnown(Self.packaged, keeping: isCertificateName, limit: Self.fileLimit) {
                cache.fingerprints(of: $0)
            }
        }
        for (name, known) in packagedFiles ?? [] {
            let read: [String]? = if let known { known } else { try packagedFingerprints(Self.packaged + "/" + name) }
            guard let found = read else { continue }
            packaged.formUnion(found)
            packagedRead.insert(Array(name.utf8))
        }
        var local: Set<String> = []
        func addLocal(_ directory: String, depth: Int) throws(ProbeFailure) {
            let names = context.attemptIfPresent { () throws(HostReadError) in try host.listWholeDirectory(directory, keeping: nil) }
            for name in names ?? [] {
                let path = directory + "/" + name
                if isCertificateName(name) { local.formUnion(try fingerprints(path)) }
                // Listing a file that is no directory is ENOTDIR, which attemptIfPresent takes as absent.
                else if depth < 3 { try addLocal(path, depth: depth + 1) }
            }
        }
        try addLocal(Self.localDirectory, depth: 0)
        var configured: Set<String> = []
        if let text = context.attemptIfPresent({ () throws(HostReadError) in try host.readText(Self.configuration) }) {
            // Split as bytes, and the packaged roots' lines (nearly all) passed over before anything is made of them:
            // splitting the text by characters cost more than the rest of the file's handling.
            for raw in text.utf8.split(separator: UInt8(ascii: "\n")) where !raw.starts(with: "mozilla/".utf8) {
                let line = Substring(raw).trimmingWhitespace()
                guard !line.isEmpty && !line.hasPrefix("#") && !line.hasPrefix("!") && !line.hasPrefix("mozilla/") else { continue }
                configured.formUnion(try fingerprints("/usr/share/ca-certificates/" + line))
            }
        }

        // What is trusted: the bundle, and every *.pem beside it that is not a link to a shipped file.
        // Listed first, read one at a time below: only one file's bytes are held at once, and the bundle's.
        var sources = [Self.bundle]
        // The *.pem files, and the hash-named entries (HHHHHHHH.N) through which OpenSSL's directory lookup
        // (CApath) trusts a certificate whether or not the bundle holds it. With a cache, the links to packaged files
        // a directory of this identity held are not read again.
        let trusted: (String) -> Bool = { Self.hasSuffix($0, ".pem") || Self.isHashName($0) }
        var listing: LinkListing?
        let links: [(name: String, target: Result<String?, HostReadError>)]?
        if let cache {
            listing = context.attemptIfPresent { () throws(HostReadError) in
                try host.listLinks(Self.certificateDirectory, keeping: trusted) { cache.packagedLinks(of: $0) }
            }
            links = listing?.links
        } else {
            links = context.attemptIfPresent { () throws(HostReadError) in
                try host.listLinks(Self.certificateDirectory, keeping: trusted)
            }
        }
        // The links the cache knew are judged again with the rest: the packaged file each names may be gone.
        let known = (listing?.judged ?? [:]).map { (name: $0.key, target: Result<String?, HostReadError>.success($0.value)) }
        var packagedLinks: [(name: String, target: String)] = []
        var packagedLinkNames: Set<[UInt8]> = []
        var readLocally: Set<[UInt8]> = []
        // The *.pem first: a hash name's link to one of them is judged by what that one is.
        let all = (links ?? []) + known
        let ordered = all.filter { !Self.isHashName($0.name) } + all.filter { Self.isHashName($0.name) }
        for (name, target) in ordered {
            switch target {
            case .success(let target?) where Self.isPackagedFile(target, read: packagedRead)
                || packagedLinkNames.contains(Array(target.utf8)):
                packagedLinks.append((name, target))
                packagedLinkNames.insert(Array(name.utf8))
                continue
            // A hash name's link to a *.pem beside it that is read under its own name. Not kept in the cache: a
            // hash name is its certificate's subject hash, something of a local root.
            case .success(let target?) where Self.isHashName(name) && readLocally.contains(Array(target.utf8)): continue
            case .success: break
            // A link that could not be read is read as a file: it may hold anything.
            case .failure(let error): context.record(error)
            }
            if !Self.isHashName(name) { readLocally.insert(Array(name.utf8)) }
            sources.append(Self.certificateDirectory + "/" + name)
        }
        if let cache, let listing { cache.rememberLinks(listing.identity, links: packagedLinks) }

        var seen: Set<String> = []
        var roots: [LocalRoot] = []
        var packagedCount = 0
        var readAny = false
        // The bundle's bytes, when read this run; known: the cache answered for it, unread.
        var bundleText: [UInt8]?
        var bundleKnown = false
        // The files beside the bundle holding a local root not in it, to be compared with its packaged roots.
        var besideTheBundle: [UInt8] = []
        for path in sources {
            let contents: [UInt8]
            var identity: FileIdentity?
            if let cache {
                let outcome = context.attemptIfPresent { () throws(HostReadError) in
                    try host.readWhole(path, limit: Self.fileLimit) { cache.packagedCount(of: $0, packaged: packaged) }
                }
                switch outcome {
                case nil: continue
                case .known(let count)?:
                    // The scan's answer for a file of packaged roots only, all of them still packaged.
                    readAny = true
                    packagedCount = max(packagedCount, count)
                    if path == Self.bundle { bundleKnown = true }
                    continue
                case .read(let read, let readIdentity)?: (contents, identity) = (read, readIdentity)
                }
            } else {
                guard let read = bytes(path) else { continue }
                contents = read
            }
            readAny = true
            let source = (path: path, bytes: contents)
            if path == Self.bundle { bundleText = contents }
            let scan: TrustedCertificateScan
            do {
                scan = try Certificates.scanTrusted(pem: source.bytes, packagedFingerprints: packaged, limit: localRootLimit)
            } catch {
                try Self.record(error, path, in: context)
                continue
            }
            // One seen already was compared where it was seen: Debian links each local root beside the bundle and
            // puts it in the bundle too.
            if path != Self.bundle,
               scan.local.contains(where: { !$0.impersonatesPackaged && !seen.contains($0.certificate.fingerprint) }) {
                if besideTheBundle.count + contents.count < Self.fileLimit {
                    besideTheBundle += contents + (contents.last == UInt8(ascii: "\n") ? [] : [UInt8(ascii: "\n")])
                } else {
                    context.recordMalformed(path, Self.comparisonCutDetail)
                }
            }
            // Kept only when every certificate was a packaged root: one the scan could not parse
            // is in neither of its counts but is fingerprinted, so the counts would disagree. try?
            // justified: a failure here only means nothing is kept.
            if let cache, let identity, scan.local.isEmpty, scan.localFound == 0,
               let found = scan.fingerprints ?? (try? Certificates.fingerprints(ofPEM: contents))?.fingerprints,
               found.count <= Certificates.defaultLimit, found.count == scan.packagedCount {
                cache.remember(identity, fingerprints: found, scannedAllPackaged: true)
            }
            if scan.isCut { context.recordMalformed(path, Self.scanCutDetail) }
            if scan.local.contains(where: \.certificate.hasTruncatedName) { context.recordMalformed(path, Self.nameCutDetail) }
            packagedCount = max(packagedCount, scan.packagedCount)
            for found in scan.local where seen.insert(found.certificate.fingerprint).inserted {
                let certificate = found.certificate
                let how = local.contains(certificate.fingerprint) ? Self.localDirectory
                    : configured.contains(certificate.fingerprint) ? "\(Self.configuration) outside mozilla/"
                    : source.path == Self.bundle ? "the bundle only" : source.path
                roots.append(LocalRoot(certificate: certificate, source: how, impersonates: found.impersonatesPackaged))
            }
        }
        if !besideTheBundle.isEmpty, let bundle = bundleText ?? (bundleKnown ? bytes(Self.bundle) : nil) {
            do {
                let impersonating = try Self.impersonating(besideTheBundle, comparedWith: bundle, packaged: packaged)
                if impersonating.isCut { context.recordMalformed(Self.certificateDirectory, Self.comparisonCutDetail) }
                roots = roots.map { root in
                    guard !root.impersonates, impersonating.fingerprints.contains(root.certificate.fingerprint) else { return root }
                    return LocalRoot(certificate: root.certificate, source: root.source, impersonates: true)
                }
            } catch {
                try Self.record(error, Self.certificateDirectory, in: context)
            }
        }
        if let cache, let storage = context.trustStoreCacheStorage, cache.needsSaving {
            storage.save(cache.serialized())
        }
        guard readAny else { return nil }
        return TrustStore(trustedCount: packagedCount + roots.count, packagedCount: packagedCount, localRoots: roots)
    }

    /// The local roots beside the bundle, in files of their own, that copy the name of a packaged root the bundle
    /// holds: a copy is no less an impersonation for sitting elsewhere. One read of those files and the bundle
    /// together (rare: update-ca-certificates puts local roots in the bundle), theirs first and only theirs
    /// described: the bundle's own local roots were compared when it was read.
    private static func impersonating(_ beside: [UInt8], comparedWith bundle: [UInt8], packaged: Set<String>)
        throws(CertificateReadError) -> (fingerprints: Set<String>, isCut: Bool) {
        // Described: as many as the files beside hold, which come first; the bundle's own are only counted.
        let besideCount = try Certificates.fingerprints(ofPEM: beside).found
        let together = try Certificates.scanTrusted(pem: beside + bundle, packagedFingerprints: packaged,
                                                    limit: min(localRootLimit, besideCount))
        return (Set(together.local.filter(\.impersonatesPackaged).map(\.certificate.fingerprint)), besideCount > localRootLimit)
    }

    /// A file that could not be read is recorded; without libcrypto, where it was needed, there is no store.
    private static func record(_ error: CertificateReadError, _ path: String, in context: ProbeContext) throws(ProbeFailure) {
        switch error {
        case .system(let error): context.record(HostReadError(path: path, systemError: error))
        case .libcryptoUnavailable(let problem): throw ProbeFailure(.error, problem)
        }
    }
}

/// Which roots this host trusts and where each came from: shipped by the distribution, or added
/// locally (any of which can terminate TLS for any site); known interception products; a local
/// root that copies a packaged root's name with another key; and the other stores (RHEL anchors,
/// the user's NSS database, Firefox enterprise policies).
package struct TrustStoreProbe: Probe {
    package let id = "trust-store"

    package func collect(into context: ProbeContext) throws(ProbeFailure) {
        // libcrypto is opened only for what canonical PEM of packaged roots does not cover: describing a
        // local root, or reading text written some other way.
        let host = context.host
        // A directory with more entries than one listing holds is not judged by a part of it: it is reported as a
        // file too large is.
        context.watchedDetails = [HostFileSystem.oversizedDetail(TrustStore.fileLimit),
                                  HostFileSystem.directoryCutDetail(HostFileSystem.directoryEntryLimit),
                                  TrustStore.scanCutDetail, TrustStore.fingerprintCutDetail]
        if let store = try TrustStore.read(context) {
            context.emit("tls.trust_store_certificates", store.trustedCount)
            context.emit("tls.packaged_roots", store.packagedCount)
            var impersonating: [String] = []
            var interception: [String] = []
            var products: [String] = []
            // Lowered once, and searched as bytes: the Character search of every pattern in every root's names cost
            // more than the rest of the probe's judging.
            let patterns = context.tables.patterns("interceptionCAs").map { (lowered: $0.pattern.lowercased(), row: $0) }
            for root in store.localRoots {
                let certificate = root.certificate
                if root.impersonates {
                    impersonating.append("\(certificate.subject) (a packaged root's name with a different key)")
                }
                let names = (certificate.subject + " " + certificate.issuer).lowercased()
                if let row = patterns.first(where: { names.containsUTF8($0.lowered) })?.row {
                    interception.append("\(row.product) (\(row.category)): \(context.personal(certificate.subject))")
                    if !products.contains(row.product) { products.append(row.product) }
                }
            }
            // Before the list of every local root: a probe's output is bounded, and a long list must not crowd out
            // the few lines that name an impersonation or an interception product.
            context.emit("tls.impersonating_roots", impersonating)
            context.emit("tls.interception_cas", interception)
            if let product = products.first { context.emit("tls.interception_product", product) }
            context.emit("tls.local_roots", store.localRoots.map { "\(context.personal($0.certificate.subject)) (\($0.source))" })
        }

        context.emit("tls.oversized_trust_files", context.watchedPaths)

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
