import Glibc
import Synchronization
import Testing
@testable import Fingerly
@testable import FingerlyHost
@testable import FingerlyModel
@testable import FingerlyProbes

/// The trust store's cache: an unchanged certificate file is known again from its identity and
/// not read; whatever the cache holds, the probe says what a run without it says.
@Suite struct TrustStoreCacheTests {
    static let opensslAvailable = ShimOverflowTests.opensslAvailable

    final class MemoryStorage: TrustStoreCacheStorage {
        let contents: Mutex<[UInt8]?>
        let saves = Atomic<Int>(0)
        /// The wall clock it tells: by default far enough ahead that every file of a tree made
        /// just now has settled.
        let clock: Int64?
        init(_ contents: [UInt8]? = nil, clock: Int64? = MemoryStorage.later) {
            self.contents = Mutex(contents)
            self.clock = clock
        }
        static let later = Int64(Int32.max) * 2
        func currentSeconds() -> Int64 {
            if let clock { return clock }
            var now = timespec()
            clock_gettime(CLOCK_REALTIME, &now)
            return Int64(now.tv_sec)
        }
        func load() -> [UInt8]? { contents.withLock { $0 } }
        func save(_ bytes: [UInt8]) {
            contents.withLock { $0 = bytes }
            saves.add(1, ordering: .relaxed)
        }
        var cache: [FileIdentity: TrustStoreCache.Entry]? { parsed?.files }
        var parsed: TrustStoreCache.Contents? { contents.withLock { $0 }.flatMap(TrustStoreCache.parse) }
    }

    struct Outcome: Equatable {
        let signals: [String: SignalValue]
        let issues: [SourceIssue]
        let notes: [String]
    }

    static func run(_ root: String, storage: MemoryStorage?) throws -> Outcome {
        let context = ShimOverflowTests.context(root: root)
        context.trustStoreCacheStorage = storage
        try TrustStoreProbe().collect(into: context)
        return Outcome(signals: context.signals, issues: context.issues, notes: context.notes)
    }

    /// Run with the cache and without: the two must agree, and the cached run is returned.
    static func runAgreeing(_ root: String, storage: MemoryStorage) throws -> Outcome {
        let cached = try run(root, storage: storage)
        let uncached = try run(root, storage: nil)
        #expect(cached == uncached)
        return cached
    }

    /// Two packaged roots of the same size (variants differ in their last bytes only) and a
    /// local one, all in the bundle; a fourth variant, in no file, to write over one.
    static func trustTree(bundleHoldsLocalRoot: Bool = true) throws -> (root: String, variants: [String]) {
        let made = try ShimOverflowTests.certificate(subject: "/CN=Cached Root")
        let pem = try ShimOverflowTests.variants(of: made, count: 4)
        let end = "-----END CERTIFICATE-----\n"
        let blocks = pem.split(separator: end).map { String($0) + end }
        let bundle = blocks[0] + blocks[1] + (bundleHoldsLocalRoot ? blocks[2] : "")
        let root = try ShimOverflowTests.tree([
            "/usr/share/ca-certificates/mozilla/a.crt": blocks[0],
            "/usr/share/ca-certificates/mozilla/b.crt": blocks[1],
            "/etc/ssl/certs/ca-certificates.crt": bundle,
        ])
        return (root, Array(blocks))
    }

    static func linkNames(_ storage: MemoryStorage, _ directory: FileIdentity) -> Set<String>? {
        storage.parsed?.directories[directory].map { Set($0.keys) }
    }

    static func localRootCount(_ outcome: Outcome) -> Int? {
        outcome.signals["tls.local_roots"].map { if case .strings(let roots) = $0 { roots.count } else { -1 } }
    }

    static func identity(_ path: String) throws -> FileIdentity {
        try HostFileSystem().status(path).identity
    }

    /// What a writer who may not set the change time can do: put the old modification time back.
    static func restoreModificationTime(_ path: String, from original: stat) {
        var times = [original.st_atim, original.st_mtim]
        #expect(utimensat(AT_FDCWD, path, &times, 0) == 0)
    }

    @Test(.enabled(if: opensslAvailable, "openssl is missing"))
    func aSecondRunKnowsEveryPackagedFileAndReportsTheSame() throws {
        let (root, _) = try Self.trustTree()
        let storage = MemoryStorage()
        let first = try Self.runAgreeing(root, storage: storage)
        #expect(first.signals["tls.packaged_roots"] == .int(2))
        #expect(first.signals["tls.local_roots"].map { if case .strings(let roots) = $0 { roots.count } else { 0 } }
                == 1)
        let cache = try #require(storage.cache)
        let packaged = try Self.identity(root + "/usr/share/ca-certificates/mozilla/a.crt")
        #expect(cache[packaged]?.fingerprints.count == 1 && cache[packaged]?.scannedAllPackaged == false)
        // The bundle holds a local root: not kept, so it is scanned every run.
        #expect(cache[try Self.identity(root + "/etc/ssl/certs/ca-certificates.crt")] == nil)
        #expect(cache.count == 2)

        let second = try Self.runAgreeing(root, storage: storage)
        #expect(second == first)
        #expect(storage.saves.load(ordering: .relaxed) == 1, "an unchanged cache is not written again")
    }

    /// Two writes within one tick of the kernel's clock can leave a file's change time as it
    /// was: a file changed in the last seconds is read every run until it has settled.
    @Test(.enabled(if: opensslAvailable, "openssl is missing"))
    func aFileChangedJustNowIsReadButNotKept() throws {
        let (root, _) = try Self.trustTree(bundleHoldsLocalRoot: false)
        let now = MemoryStorage(clock: nil)
        _ = try Self.runAgreeing(root, storage: now)
        #expect((now.cache ?? [:]).isEmpty)
        let changed = try Self.identity(root + "/usr/share/ca-certificates/mozilla/a.crt").changedSeconds
        let justSettled = MemoryStorage(clock: changed + TrustStoreCache.settlingSeconds + 5)
        _ = try Self.runAgreeing(root, storage: justSettled)
        #expect(justSettled.cache?.isEmpty == false)
    }

    @Test(.enabled(if: opensslAvailable, "openssl is missing"))
    func aBundleOfPackagedRootsOnlyIsKnownFromItsFingerprints() throws {
        let (root, _) = try Self.trustTree(bundleHoldsLocalRoot: false)
        let storage = MemoryStorage()
        let first = try Self.runAgreeing(root, storage: storage)
        #expect(first.signals["tls.packaged_roots"] == .int(2) && first.signals["tls.local_roots"] == .strings([]))
        let bundle = try Self.identity(root + "/etc/ssl/certs/ca-certificates.crt")
        #expect(try #require(storage.cache)[bundle]?.scannedAllPackaged == true)
        #expect(try Self.runAgreeing(root, storage: storage) == first)
    }

    /// The cache is believed for the identity it names: shown by an entry that lies. Rewriting
    /// the file, even at the same size and with its old modification time, ends the belief.
    @Test(.enabled(if: opensslAvailable, "openssl is missing"))
    func aRewrittenFileOfTheSameSizeAndModificationTimeIsReadAgain() throws {
        let (root, variants) = try Self.trustTree()
        let path = root + "/usr/share/ca-certificates/mozilla/a.crt"
        let storage = MemoryStorage()
        let first = try Self.runAgreeing(root, storage: storage)

        var entries = try #require(storage.cache)
        let identity = try Self.identity(path)
        let other = String(repeating: "0", count: 64)
        let lying = TrustStoreCache(contents: nil, now: MemoryStorage.later)
        for (key, entry) in entries where key != identity {
            lying.remember(key, fingerprints: entry.fingerprints, scannedAllPackaged: entry.scannedAllPackaged)
        }
        lying.remember(identity, fingerprints: [other], scannedAllPackaged: false)
        let believing = MemoryStorage(lying.serialized())
        #expect(try Self.run(root, storage: believing).signals["tls.packaged_roots"] == .int(1))

        var original = stat()
        #expect(stat(path, &original) == 0)
        // The change time has the grain of the kernel's tick: written until it shows (the cache
        // keeps no file changed in its last seconds, so it never sees two writes in one tick).
        var changed = identity
        for _ in 0..<1_000 where changed == identity {
            try DeviceFixtures.write(variants[3], to: path)
            Self.restoreModificationTime(path, from: original)
            changed = try Self.identity(path)
        }
        #expect(changed.size == identity.size && changed.modifiedSeconds == identity.modifiedSeconds
                && changed.modifiedNanoseconds == identity.modifiedNanoseconds && changed != identity)
        let afterWrite = try Self.runAgreeing(root, storage: believing)
        #expect(afterWrite != first)
        entries = try #require(believing.cache)
        #expect(entries[identity] == nil && entries[changed] != nil)
    }

    @Test(.enabled(if: opensslAvailable, "openssl is missing"))
    func aFileReplacedByAnotherInodeIsReadAgain() throws {
        let (root, variants) = try Self.trustTree()
        let path = root + "/usr/share/ca-certificates/mozilla/b.crt"
        let storage = MemoryStorage()
        let first = try Self.runAgreeing(root, storage: storage)
        let before = try Self.identity(path)
        try DeviceFixtures.write(variants[3], to: path + ".new")
        #expect(rename(path + ".new", path) == 0)
        #expect(try Self.identity(path).inode != before.inode)
        let second = try Self.runAgreeing(root, storage: storage)
        #expect(second != first)
        #expect(second.signals["tls.packaged_roots"] == .int(1))
    }

    @Test(.enabled(if: opensslAvailable, "openssl is missing"))
    func aCorruptCacheIsIgnoredAndRewritten() throws {
        let (root, _) = try Self.trustTree()
        let good = MemoryStorage()
        let expected = try Self.runAgreeing(root, storage: good)
        let valid = try #require(good.load())
        let text = String(decoding: valid, as: UTF8.self)
        let corrupt: [[UInt8]] = [
            [], Array("garbage".utf8), Array(valid.dropLast()), Array(valid.dropLast(6)),
            Array(text.replacing("cache 3", with: "cache 2").utf8),
            Array(text.replacing("F ", with: "F  ").utf8),
            Array(text.replacing("L ", with: "L  ").utf8),
            Array(text.replacing("end 3", with: "end 4").utf8),
            Array(text.uppercased().utf8), [UInt8](repeating: 0xFF, count: 4096),
            valid + valid, Array(repeating: UInt8(ascii: "\n"), count: TrustStoreCache.byteLimit + 1),
        ]
        for bytes in corrupt {
            #expect(TrustStoreCache.parse(bytes) == nil)
            let storage = MemoryStorage(bytes)
            #expect(try Self.run(root, storage: storage) == expected)
            #expect(storage.load() == valid, "rewritten whole")
        }
    }

    @Test func theParserTakesBackExactlyWhatIsWrittenAndNothingLoose() throws {
        let cache = TrustStoreCache(contents: nil, now: MemoryStorage.later)
        let identity = FileIdentity(device: 2049, inode: 77, size: 1234, modifiedSeconds: -5,
                                    modifiedNanoseconds: 999_999_999, changedSeconds: 1_800_000_000,
                                    changedNanoseconds: 0)
        let fingerprint = String(repeating: "ab", count: 32)
        cache.remember(identity, fingerprints: [fingerprint, fingerprint], scannedAllPackaged: true)
        let empty = FileIdentity(device: 1, inode: 1, size: 0, modifiedSeconds: 0, modifiedNanoseconds: 0,
                                 changedSeconds: 0, changedNanoseconds: 0)
        cache.remember(empty, fingerprints: [], scannedAllPackaged: false)
        let directory = FileIdentity(device: 1, inode: 2, size: 4096, modifiedSeconds: 7, modifiedNanoseconds: 8,
                                     changedSeconds: 9, changedNanoseconds: 10)
        let packaged = "/usr/share/ca-certificates/mozilla/"
        cache.rememberLinks(directory, links: [("ACCVRAIZ1.pem", packaged + "ACCVRAIZ1.crt"), ("a b.pem", packaged + "x.crt"),
                                               ("-", packaged + "y.crt"), ("x/y.pem", packaged + "z.crt"),
                                               ("ok.pem", packaged + "ok.crt"), ("space.pem", packaged + "a b.crt"),
                                               ("long.pem", String(repeating: "x", count: TrustStoreCache.linkTargetLimit + 1))])
        let none = FileIdentity(device: 1, inode: 3, size: 0, modifiedSeconds: 0, modifiedNanoseconds: 0,
                                changedSeconds: 0, changedNanoseconds: 0)
        cache.rememberLinks(none, links: [])
        // tmpfs lets anyone set a time of Int64.min seconds, which the parser does not take: such a file is not kept.
        let earliest = FileIdentity(device: 1, inode: 4, size: 0, modifiedSeconds: .min, modifiedNanoseconds: 0,
                                    changedSeconds: 0, changedNanoseconds: 0)
        cache.remember(earliest, fingerprints: [], scannedAllPackaged: false)
        cache.rememberLinks(earliest, links: [("a.pem", packaged + "a.crt")])
        #expect(cache.entries[earliest] == nil && cache.contents.directories[earliest] == nil)
        let parsed = try #require(TrustStoreCache.parse(cache.serialized()))
        #expect(parsed == cache.contents && parsed.files.count == 2)
        // Only links the line can hold: a name without space or "/", not the empty list's "-"; a target without space.
        #expect(parsed.directories[directory] == ["ACCVRAIZ1.pem": packaged + "ACCVRAIZ1.crt", "ok.pem": packaged + "ok.crt"])
        #expect(parsed.directories[none] == [:])
        let line = "S 2049 77 1234 -5 999999999 1800000000 0 \(fingerprint)"
        for loose in ["S 2049 077 1234 -5 999999999 1800000000 0 \(fingerprint)", "S 2049 77 1234 -0 0 0 0 -",
                      "S 2049 77 1234 -5 1000000000 1800000000 0 \(fingerprint)", "S 2049 77 +1 0 0 0 0 -",
                      "X 2049 77 1234 -5 0 0 0 -", "S 18446744073709551616 77 1 0 0 0 0 -", line + ",", line + " ",
                      line + "\n" + line, "S 2049 77 1234 -5 0 0 0 " + String(fingerprint.dropLast()) + "G",
                      "L 1 2 3 4 5 6 7 a.pem/", "L 1 2 3 4 5 6 7 a.pem", "L 1 2 3 4 5 6 7 /x", "L 1 2 3 4 5 6 7 ",
                      "L 1 2 3 4 5 6 7", "L 1 2 3 4 5 6 7 a.pem/x  b.pem/y", "L 1 2 3 4 5 6 7 a.pem/x a.pem/y",
                      "L 1 2 3 4 5 6 7 a\u{7f}.pem/x", "L 1 2 3 4 5 6 7 -/a.pem", "L 1 2 3 4 5 6 7 a.pem/x\u{7f}",
                      "L 1 2 3 4 5 6 7 a.pem/x "] {
            let file = "\(TrustStoreCache.header)\n\(loose)\nend 1\n"
            #expect(TrustStoreCache.parse(Array(file.utf8)) == nil, "\(loose)")
        }
        #expect(TrustStoreCache.parse(Array("\(TrustStoreCache.header)\n\(line)\nend 1\n".utf8))?.files.count == 1)
        let links = "L 1 2 3 4 5 6 7 a.pem//usr/share/ca-certificates/mozilla/a.crt 1234abcd.0/a.pem"
        #expect(TrustStoreCache.parse(Array("\(TrustStoreCache.header)\n\(links)\nend 1\n".utf8))?.directories.first?.value
                == ["a.pem": "/usr/share/ca-certificates/mozilla/a.crt", "1234abcd.0": "a.pem"])
    }

    /// Only packaged roots' fingerprints: no name, no path, nothing of a locally added root.
    @Test(.enabled(if: opensslAvailable, "openssl is missing"))
    func theCacheHoldsNothingOfALocalRoot() throws {
        let person = try ShimOverflowTests.certificate(subject: "/CN=Jane Roe Private CA/O=Roe Household")
        let packaged = try ShimOverflowTests.certificate(subject: "/CN=Shipped Root")
        let root = try ShimOverflowTests.tree([
            "/usr/share/ca-certificates/mozilla/shipped.crt": packaged,
            "/usr/local/share/ca-certificates/roe.crt": person,
            "/etc/ssl/certs/ca-certificates.crt": packaged + person, "/etc/ssl/certs/roe.pem": person,
        ])
        let storage = MemoryStorage()
        _ = try Self.runAgreeing(root, storage: storage)
        let text = String(decoding: try #require(storage.load()), as: UTF8.self)
        let local = try #require(try Certificates.fingerprints(ofPEM: Array(person.utf8)).fingerprints.first)
        let shipped = try #require(try Certificates.fingerprints(ofPEM: Array(packaged.utf8)).fingerprints.first)
        #expect(!text.contains(local) && !text.contains("Roe") && !text.contains("roe") && !text.contains("/etc")
                && text.contains(shipped))
        #expect(try #require(storage.cache).count == 1)
    }

    /// A link cannot be changed in place: a directory that kept its identity kept its links, and the links to
    /// packaged files it held are not read again. Any entry made or replaced changes the directory.
    @Test(.enabled(if: opensslAvailable, "openssl is missing"))
    func linksToPackagedFilesAreKnownFromTheirDirectoryUntilItChanges() throws {
        let (root, variants) = try Self.trustTree(bundleHoldsLocalRoot: false)
        let certificates = root + "/etc/ssl/certs"
        #expect(symlink("/usr/share/ca-certificates/mozilla/a.crt", certificates + "/a.pem") == 0)
        #expect(symlink("/usr/share/ca-certificates/mozilla/b.crt", certificates + "/b.pem") == 0)
        let storage = MemoryStorage()
        let first = try Self.runAgreeing(root, storage: storage)
        #expect(first.signals["tls.local_roots"] == .strings([]))
        let directory = try Self.identity(certificates)
        #expect(Self.linkNames(storage, directory) == ["a.pem", "b.pem"])
        #expect(try Self.runAgreeing(root, storage: storage) == first)

        // The same name, now a link to a local root's file: the directory changed, so the link is read again.
        try DeviceFixtures.write(variants[2], to: root + "/usr/local/share/ca-certificates/added.crt")
        #expect(unlink(certificates + "/a.pem") == 0)
        #expect(symlink("/usr/local/share/ca-certificates/added.crt", certificates + "/a.pem") == 0)
        #expect(try Self.identity(certificates) != directory)
        let changed = try Self.runAgreeing(root, storage: storage)
        #expect(changed.signals["tls.local_roots"].map { if case .strings(let roots) = $0 { roots.count } else { 0 } } == 1)
        #expect(Self.linkNames(storage, try Self.identity(certificates)) == ["b.pem"])
    }

    /// String equality takes canonically equivalent text as equal: "\u{212A}.pem" (the Kelvin sign) is "K.pem" to
    /// it, though another file. A known link's name must not hide its twin.
    @Test(.enabled(if: opensslAvailable, "openssl is missing"))
    func aNameEquivalentToAKnownLinksIsReadEveryRun() throws {
        let (root, variants) = try Self.trustTree(bundleHoldsLocalRoot: false)
        let certificates = root + "/etc/ssl/certs"
        #expect(symlink("/usr/share/ca-certificates/mozilla/a.crt", certificates + "/K.pem") == 0)
        try DeviceFixtures.write(variants[2], to: certificates + "/\u{212A}.pem")
        let storage = MemoryStorage()
        for _ in 0..<3 {
            let run = try Self.runAgreeing(root, storage: storage)
            #expect(run.signals["tls.local_roots"].map { if case .strings(let roots) = $0 { roots.count } else { 0 } } == 1)
        }
        #expect(Self.linkNames(storage, try Self.identity(certificates)) == ["K.pem"])
    }

    /// OpenSSL's directory lookup (CApath) trusts a certificate by its hash name whether or not the bundle holds it:
    /// a hash-named file is read, a hash link to a *.pem beside it judged by that one. Only links to packaged files
    /// are kept in the cache; a hash name is its certificate's subject hash.
    @Test(.enabled(if: opensslAvailable, "openssl is missing"))
    func hashNamedEntriesAreReadAsOpenSSLsDirectoryLookupReadsThem() throws {
        let (root, variants) = try Self.trustTree(bundleHoldsLocalRoot: false)
        let certificates = root + "/etc/ssl/certs"
        #expect(symlink("/usr/share/ca-certificates/mozilla/a.crt", certificates + "/a.pem") == 0)
        #expect(symlink("a.pem", certificates + "/1234abcd.0") == 0)
        try DeviceFixtures.write(variants[2], to: certificates + "/deadbeef.0")
        try DeviceFixtures.write(variants[3], to: certificates + "/local.pem")
        #expect(symlink("local.pem", certificates + "/cafebabe.1") == 0)
        try DeviceFixtures.write(variants[3], to: certificates + "/0000beef.r0")
        let storage = MemoryStorage()
        for _ in 0..<2 {
            let run = try Self.runAgreeing(root, storage: storage)
            #expect(run.signals["tls.local_roots"].map { if case .strings(let roots) = $0 { roots.count } else { 0 } } == 2)
        }
        #expect(Self.linkNames(storage, try Self.identity(certificates)) == ["1234abcd.0", "a.pem"])
        #expect(TrustStore.isHashName("deadbeef.0") && TrustStore.isHashName("0179095f.12"))
        for name in ["deadbeef.r0", "DEADBEEF.0", "deadbee.0", "deadbeef.", "deadbeef.0.pem", "deadbeefx0"] {
            #expect(!TrustStore.isHashName(name), "\(name)")
        }
    }

    /// Only a file of the packaged directory itself is packaged: a link into a subdirectory of it, which the packaged
    /// listing never reads, is read as any other file.
    @Test(.enabled(if: opensslAvailable, "openssl is missing"))
    func aLinkIntoASubdirectoryOfThePackagedOnesIsRead() throws {
        let (root, variants) = try Self.trustTree(bundleHoldsLocalRoot: false)
        try DeviceFixtures.write(variants[2], to: root + "/usr/share/ca-certificates/mozilla/extra/hidden.crt")
        #expect(symlink("/usr/share/ca-certificates/mozilla/extra/hidden.crt", root + "/etc/ssl/certs/hidden.pem") == 0)
        #expect(symlink("/usr/share/ca-certificates/mozilla/../mozilla/a.crt", root + "/etc/ssl/certs/climb.pem") == 0)
        let run = try Self.runAgreeing(root, storage: MemoryStorage())
        #expect(run.signals["tls.local_roots"].map { if case .strings(let roots) = $0 { roots.count } else { 0 } } == 1)
        let read: Set<[UInt8]> = [Array("a.crt".utf8)]
        #expect(TrustStore.isPackagedFile("/usr/share/ca-certificates/mozilla/a.crt", read: read))
        for target in ["/usr/share/ca-certificates/mozilla/extra/hidden.crt", "/usr/share/ca-certificates/mozilla/b.crt",
                       "/usr/share/ca-certificates/mozilla/.crt", "/usr/share/ca-certificates/mozillaa.crt",
                       "/usr/share/ca-certificates/mozilla/../../../etc/x.crt", "/usr/share/ca-certificates/mozilla//a.crt"] {
            #expect(!TrustStore.isPackagedFile(target, read: read), "\(target)")
        }
    }

    /// A name that is not UTF-8 cannot be opened again through a String: it is an issue of the probe, not a file
    /// passed over in silence.
    @Test(.enabled(if: opensslAvailable, "openssl is missing"))
    func aNameThatIsNotUTF8IsAnIssue() throws {
        let (root, variants) = try Self.trustTree(bundleHoldsLocalRoot: false)
        var path = Array((root + "/etc/ssl/certs/").utf8CString.dropLast())
        path += [CChar(bitPattern: 0xFF)] + Array(".pem".utf8CString)
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0o644)
        try #require(fd >= 0)
        _ = variants[2].utf8CString.dropLast().withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        close(fd)
        let run = try Self.run(root, storage: MemoryStorage())
        #expect(run.issues.contains { $0.detail.contains("not UTF-8") }, "\(run.issues)")
    }

    /// A path as bytes, for names that are not UTF-8.
    static func bytesPath(_ text: String, then raw: [UInt8] = [], _ rest: String = "") -> [CChar] {
        (Array(text.utf8) + raw + Array(rest.utf8)).map { CChar(bitPattern: $0) } + [0]
    }

    /// Decoding repairs a target that is not UTF-8 into one that is, and the repaired text may name a packaged file:
    /// such a link is read as a file, never judged by what its target looks like.
    @Test(.enabled(if: opensslAvailable, "openssl is missing"))
    func aLinkWhoseTargetIsNotUTF8IsReadAsAFile() throws {
        let (root, variants) = try Self.trustTree(bundleHoldsLocalRoot: false)
        let mozilla = root + "/usr/share/ca-certificates/mozilla/"
        try DeviceFixtures.write(variants[1], to: mozilla + "a\u{FFFD}.crt")
        let hidden = Self.bytesPath(mozilla + "a", then: [0xFF], ".crt")
        let fd = open(hidden, O_WRONLY | O_CREAT | O_EXCL, 0o644)
        try #require(fd >= 0)
        _ = variants[2].utf8CString.dropLast().withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        close(fd)
        let target = Self.bytesPath("/usr/share/ca-certificates/mozilla/a", then: [0xFF], ".crt")
        #expect(symlink(target, root + "/etc/ssl/certs/hidden.pem") == 0)
        for _ in 0..<2 {
            let run = try Self.runAgreeing(root, storage: MemoryStorage())
            #expect(Self.localRootCount(run) == 1)
            #expect(run.issues.contains { $0.detail.contains("target is not UTF-8") }, "\(run.issues)")
        }
    }

    /// `*.crt` as the shell matches it, byte for byte: a name ending in ".crt" after a character that joins what
    /// follows (U+0600) does not end in ".crt" Character by Character. The listing reads it, and the link to it is
    /// judged by what was read.
    @Test(.enabled(if: opensslAvailable, "openssl is missing"))
    func aPackagedNameIsMatchedAsTheShellMatchesIt() throws {
        let (root, variants) = try Self.trustTree(bundleHoldsLocalRoot: false)
        #expect(!"\u{0600}.crt".hasSuffix(".crt") && TrustStore.hasSuffix("\u{0600}.crt", ".crt"))
        try DeviceFixtures.write(variants[2], to: root + "/usr/share/ca-certificates/mozilla/\u{0600}.crt")
        try DeviceFixtures.write(variants[0] + variants[1] + variants[2], to: root + "/etc/ssl/certs/ca-certificates.crt")
        #expect(symlink("/usr/share/ca-certificates/mozilla/\u{0600}.crt", root + "/etc/ssl/certs/joined.pem") == 0)
        let storage = MemoryStorage()
        for _ in 0..<2 {
            let run = try Self.runAgreeing(root, storage: storage)
            #expect(run.signals["tls.packaged_roots"] == .int(3) && Self.localRootCount(run) == 0)
        }
    }

    /// More entries than one listing holds: the directory is named among the oversized trust files, whatever number
    /// of other issues came before it, and a part of it is never taken for the whole.
    @Test(.enabled(if: opensslAvailable, "openssl is missing"))
    func aDirectoryTooLongToListIsReportedBehindAnyNumberOfIssues() throws {
        let (root, _) = try Self.trustTree(bundleHoldsLocalRoot: false)
        // A directory named *.crt cannot be read as a file: an issue each.
        try DeviceFixtures.write("", to: root + "/usr/local/share/ca-certificates/README")
        for index in 0..<(ProbeContext.issueLimit + 4) {
            #expect(mkdir(root + "/usr/local/share/ca-certificates/unreadable\(index).crt", 0o755) == 0)
        }
        for index in 0...HostFileSystem.directoryEntryLimit {
            try DeviceFixtures.write("", to: root + "/etc/ssl/certs/filler\(index).pem")
        }
        let run = try Self.runAgreeing(root, storage: MemoryStorage())
        #expect(run.issues.count == ProbeContext.issueLimit + 1, "the report's issues are bounded")
        guard case .strings(let oversized)? = run.signals["tls.oversized_trust_files"] else {
            Issue.record("no tls.oversized_trust_files")
            return
        }
        #expect(oversized == ["/etc/ssl/certs"])
    }

    /// A kept link is judged again by what this run read of the packaged directory: when that directory cannot be
    /// read whole, the link is read as a file although its own directory kept its identity.
    @Test(.enabled(if: opensslAvailable, "openssl is missing"))
    func aKeptLinkIsJudgedAgainByWhatThisRunRead() throws {
        let (root, variants) = try Self.trustTree(bundleHoldsLocalRoot: false)
        try DeviceFixtures.write(variants[2], to: root + "/usr/share/ca-certificates/mozilla/c.crt")
        #expect(symlink("/usr/share/ca-certificates/mozilla/c.crt", root + "/etc/ssl/certs/c.pem") == 0)
        let storage = MemoryStorage()
        let first = try Self.runAgreeing(root, storage: storage)
        #expect(Self.localRootCount(first) == 0)
        let directory = try Self.identity(root + "/etc/ssl/certs")
        #expect(Self.linkNames(storage, directory) == ["c.pem"])

        for index in 0...HostFileSystem.directoryEntryLimit {
            try DeviceFixtures.write("", to: root + "/usr/share/ca-certificates/mozilla/filler\(index).crt")
        }
        #expect(try Self.identity(root + "/etc/ssl/certs") == directory)
        let after = try Self.runAgreeing(root, storage: storage)
        // Nothing is packaged now: the bundle's two roots and the link's are all local.
        #expect(Self.localRootCount(after) == 3)
        #expect(after.signals["tls.oversized_trust_files"] == .strings(["/usr/share/ca-certificates/mozilla"]))
    }

    /// The identities of a --root tree's files say nothing of another tree's: such a run keeps no cache, while a run
    /// over this host's own files does.
    @Test func aRunOverARootTreeKeepsNoCache() throws {
        for (root, kept) in [(try Self.trustTree().root, false), ("/", true)] {
            let state = try TestPaths.temporaryDirectory("trust-store-state")
            #expect(chmod(state, 0o700) == 0)
            let fingerly = try Fingerly.loadBlocking(apiKey: nil, consent: .granted,
                                                     options: FingerlyOptions(root: root, stateDirectory: state))
            let report = try fingerly.runBlocking(tag: nil, tiers: Set(Tier.allCases), only: ["trust-store"])
            #expect(report.probes.contains { $0.id == "trust-store" })
            let names = try HostFileSystem().listDirectory(state)
            #expect(names.contains(TrustStoreCacheFile.fileName) == kept, "root \(root): \(names)")
        }
    }

    // MARK: the file in the state directory

    @Test func theCacheFileIsPrivateAndReadBackWhole() throws {
        let directory = try TestPaths.temporaryDirectory("trust-store-cache")
        let file = TrustStoreCacheFile(directory: directory)
        #expect(file.load() == nil)
        file.save(Array("one\n".utf8))
        file.save(Array("two\n".utf8))
        #expect(file.load() == Array("two\n".utf8))
        var info = stat()
        #expect(lstat(directory + "/" + TrustStoreCacheFile.fileName, &info) == 0 && info.st_mode & 0o777 == 0o600)
        let names = try HostFileSystem().listDirectory(directory)
        #expect(names == [TrustStoreCacheFile.fileName], "no temporary file left: \(names)")
    }

    @Test func aCacheFileOthersCouldHaveWrittenIsIgnoredAndReplaced() throws {
        let directory = try TestPaths.temporaryDirectory("trust-store-cache-untrusted")
        let path = directory + "/" + TrustStoreCacheFile.fileName
        let file = TrustStoreCacheFile(directory: directory)
        file.save(Array("mine\n".utf8))
        #expect(chmod(path, 0o666) == 0)
        #expect(file.load() == nil)
        file.save(Array("again\n".utf8))
        #expect(file.load() == Array("again\n".utf8))

        #expect(unlink(path) == 0 && symlink(directory + "/elsewhere", path) == 0)
        try DeviceFixtures.write("linked\n", to: directory + "/elsewhere")
        #expect(file.load() == nil, "a link is not followed")
        file.save(Array("replaced\n".utf8))
        #expect(file.load() == Array("replaced\n".utf8))

        #expect(truncate(path, off_t(TrustStoreCache.byteLimit + 1)) == 0)
        #expect(file.load() == nil, "larger than the limit")
        if geteuid() == 0 {
            file.save(Array("root's\n".utf8))
            #expect(chown(path, 4242, 4242) == 0)
            #expect(file.load() == nil, "another user's")
        }
        #expect(chmod(directory, 0o777) == 0)
        file.save(Array("shared\n".utf8))
        #expect(file.load() == nil, "a directory others may write holds no cache")
    }
}
