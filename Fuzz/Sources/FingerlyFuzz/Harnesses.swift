import FoundationEssentials
@testable import Fingerly
@testable import FingerlyHost
@testable import FingerlyModel
@testable import FingerlyEngine
@testable import FingerlyPolicy
@testable import FingerlyCatalogue
@testable import FingerlyProbes
@testable import FingerlyStore
@testable import FingerlyTransport

/// Each harness feeds one input to the real parsing code: the pure parser where one exists, and the
/// whole probe over a scratch tree, since several probes parse inline while they read.
enum Harnesses {
    static let all: [String: @Sendable ([UInt8]) -> Void] = [
        "json": json,
        "policy": policy,
        "reason": reason,
        "proc-status": procStatus,
        "proc-maps": procMaps,
        "cpuinfo": cpuinfo,
        "meminfo": meminfo,
        "mountinfo": mountinfo,
        "cgroup": cgroup,
        "os-release": osRelease,
        "udev-database": udevDatabase,
        "pem": pem,
        "acpi-tables": acpiTables,
        "signature-fields": signatureFields,
        "outbox-item": outboxItem,
        "retry-after": retryAfter,
        "error-code": errorCode,
        "proxy-env": proxyEnvironment,
        "submission-reader": submissionReader,
        "stored-blob": storedBlob,
        "character-search": characterSearch,
    ]

    private static let root = ScratchRoot()
    private static let loader = PolicyLoader(catalogue: .embedded, tables: .embedded)

    static func json(_ bytes: [UInt8]) {
        do {
            let value = try JSONParser.parse(bytes)
            _ = value.signalValue
            _ = value.isScalar
        } catch {
            // The error quotes member names of any length and content back in its path.
            _ = error.description
        }
    }

    /// Differential: what the server's fast reader accepts, JSONDecoder must accept with the
    /// same value; anything else must leave the reader declining, never crashing. A mismatch
    /// traps, so libFuzzer keeps the input.
    static func submissionReader(_ bytes: [UInt8]) {
        guard let read = SubmissionReader.read(bytes) else { return }
        guard let reference = try? JSONDecoder.fingerly.decode(SubmissionBody.self, from: Data(bytes)) else {
            fatalError("SubmissionReader accepted a body JSONDecoder refuses")
        }
        guard read.body.client == reference.client, read.body.report == reference.report else {
            fatalError("SubmissionReader and JSONDecoder read different values")
        }
        // A report range is given only where the bytes are the report's canonical encoding.
        if let range = read.reportRange {
            guard range.lowerBound >= 0, range.upperBound <= bytes.count,
                  let encoded = try? JSONEncoder.fingerly.encode(reference.report),
                  Array(bytes[range]) == Array(encoded) else {
                fatalError("SubmissionReader's report range is not the report's canonical encoding")
            }
        }
    }

    // libFuzzer runs one input at a time, on one thread: the codec's scratch state is never shared.
    nonisolated(unsafe) private static let blobCodec = StoredBlobCodec()

    /// A stored row read back from a damaged or forged file must decode within its bounds or be
    /// refused; and whatever the store writes must read back as it was given.
    static func storedBlob(_ bytes: [UInt8]) {
        if let decoded = try? StoredBlobCodec.decode(bytes, encoding: StoredBlobCodec.Encoding.lz4.rawValue),
           decoded.count > StoredBlobCodec.largestDecoded {
            fatalError("a stored blob decoded past the limit")
        }
        let stored = blobCodec.encode(bytes)
        guard (try? StoredBlobCodec.decode(stored.bytes, encoding: stored.encoding.rawValue)) == bytes else {
            fatalError("a stored blob did not read back as written")
        }
    }

    /// Differential: the policy's substring test against Character-by-Character search. The
    /// input is the text, a NUL, then the needle.
    static func characterSearch(_ bytes: [UInt8]) {
        let parts = bytes.split(separator: 0, maxSplits: 1, omittingEmptySubsequences: false)
        let text = String(decoding: parts[0], as: UTF8.self)
        let needle = parts.count > 1 ? String(decoding: parts[1], as: UTF8.self) : ""
        let characters = Array(text), wanted = Array(needle)
        let expected = wanted.count <= characters.count
            && (0...(characters.count - wanted.count)).contains { characters[$0..<($0 + wanted.count)].elementsEqual(wanted) }
        guard CharacterSearch.contains(text, needle) == expected else {
            fatalError("CharacterSearch and Character search disagree")
        }
    }

    static func policy(_ bytes: [UInt8]) {
        do {
            _ = try loader.load(Data(bytes), source: "fuzz.json")
        } catch {
            // The message is printed to terminals: building it must not fail either.
            _ = error.description
        }
    }

    /// NUL-separated: the template, the rule's own value, then one value per placeholder in order.
    /// A value starting with '#' is a number, '?' a boolean, '[' a list split at 0x1F; else a string.
    static func reason(_ bytes: [UInt8]) {
        let parts = bytes.split(separator: 0, omittingEmptySubsequences: false).map { Array($0) }
        let template = ReasonTemplate(String(decoding: parts[0], as: UTF8.self))
        let names = template.placeholders
        var signals: [String: SignalValue] = [:]
        for (index, name) in names.enumerated() where index + 2 < parts.count {
            signals[name] = signalValue(parts[index + 2])
        }
        _ = template.render(value: parts.count > 1 ? signalValue(parts[1]) : nil) { signals[$0] }
    }

    private static func signalValue(_ bytes: [UInt8]) -> SignalValue {
        let rest = String(decoding: bytes.dropFirst(), as: UTF8.self)
        switch bytes.first {
        case UInt8(ascii: "#"): return .int(Int(rest) ?? rest.utf8.count)
        case UInt8(ascii: "?"): return .bool(rest.isEmpty)
        case UInt8(ascii: "["): return .strings(bytes.dropFirst().split(separator: 0x1F).map { String(decoding: $0, as: UTF8.self) })
        default: return .string(String(decoding: bytes, as: UTF8.self))
        }
    }

    static func procStatus(_ bytes: [UInt8]) {
        let text = String(decoding: bytes, as: UTF8.self)
        _ = ProcessContextProbe.parseStatus(text)
        _ = ProcessContextProbe.field("TracerPid", in: text)
        _ = ProcessContextProbe.field("NSpid", in: text)
        root.write("/proc/self/status", bytes)
        root.run(ProcessContextProbe())
    }

    static func procMaps(_ bytes: [UInt8]) {
        _ = ProcessMapsProbe.mappedFiles(ProcessMapsProbe.regions(String(decoding: bytes, as: UTF8.self)))
        root.write("/proc/self/maps", bytes)
        root.run(ProcessMapsProbe())
    }

    static func cpuinfo(_ bytes: [UInt8]) {
        _ = CPUProbe.parse(String(decoding: bytes, as: UTF8.self))
        root.write("/proc/cpuinfo", bytes)
        root.run(CPUProbe())
    }

    static func meminfo(_ bytes: [UInt8]) {
        root.write("/proc/meminfo", bytes)
        root.run(MemoryProbe())
    }

    static func mountinfo(_ bytes: [UInt8]) {
        _ = FilesystemIdentityProbe.rootMount(in: String(decoding: bytes, as: UTF8.self))
        root.write("/proc/self/mountinfo", bytes)
        root.run(FilesystemIdentityProbe())
    }

    /// The container-runtime probe reads its own and pid 1's cgroup file.
    static func cgroup(_ bytes: [UInt8]) {
        root.write("/proc/self/cgroup", bytes)
        root.write("/proc/1/cgroup", bytes)
        root.run(ContainerRuntimeProbe())
    }

    static func osRelease(_ bytes: [UInt8]) {
        _ = OSProbe.parseOSRelease(String(decoding: bytes, as: UTF8.self))
        root.write("/etc/os-release", bytes)
        root.run(OSProbe())
    }

    static func udevDatabase(_ bytes: [UInt8]) {
        root.write("/run/udev/data/b8:1", bytes)
        _ = try? UdevDatabase.properties(of: "b8:1", on: root.host)
    }

    /// Up to the first NUL: a certificate file shipped by the distribution; the rest: the trusted bundle.
    /// Whatever the Swift reader of canonical PEM accepts, libcrypto must read alike: a block it did not see would
    /// be a root trusted unexamined. Every local root libcrypto describes, the scan describes alike (it may describe
    /// more: one libcrypto cannot decode, never fewer). Then the whole store, shipped file and bundle, through the probe.
    static func pem(_ bytes: [UInt8]) {
        let split = bytes.firstIndex(of: 0)
        let shipped = split.map { Array(bytes[..<$0]) } ?? []
        let bundle = split.map { Array(bytes[($0 + 1)...]) } ?? bytes
        for text in [shipped, bundle] where CanonicalPEM.certificateBlocks(text) != nil {
            precondition((try? Certificates.fingerprints(ofPEM: text)) == (try? Certificates.libcryptoFingerprints(ofPEM: text)),
                         "canonical PEM read otherwise than libcrypto reads it")
            let packaged = Set((try? Certificates.fingerprints(ofPEM: shipped))?.fingerprints ?? [])
            if let scanned = try? Certificates.scanTrusted(pem: text, packagedFingerprints: packaged, limit: 8),
               let libcrypto = try? Certificates.libcryptoScanTrusted(pem: text, packagedFingerprints: packaged, limit: 8) {
                var remaining = scanned.local[...]
                for local in libcrypto.local {
                    guard let found = remaining.firstIndex(of: local) else {
                        preconditionFailure("a local root described otherwise than libcrypto describes it, or not at all")
                    }
                    remaining = remaining[(found + 1)...]
                }
                precondition(scanned.packagedCount == libcrypto.packagedCount && scanned.localFound >= libcrypto.localFound,
                             "certificates counted otherwise than libcrypto counts them")
            }
        }
        root.write(TrustStore.packaged + "/fuzz.crt", shipped)
        root.write(TrustStore.bundle, bundle)
        // try? justified: a store libcrypto could not read is an outcome like any other here.
        _ = try? TrustStore.read(root.context())
    }

    /// Four table files, 36 bytes (one header) each; the probe reads only the header.
    static func acpiTables(_ bytes: [UInt8]) {
        for (index, name) in ["APIC", "DSDT", "FACP", "SSDT1"].enumerated() {
            let start = min(index * 36, bytes.count)
            root.write("/sys/firmware/acpi/tables/" + name, Array(bytes[start..<min(start + 36, bytes.count)]))
        }
        root.run(HypervisorMarkersProbe())
    }

    /// An outbox file as found on disk: whatever the decoder accepts must encode back to the same
    /// bytes (else two readings of one file could send different requests). The other files the
    /// outbox and the consent record read go through their parsers too.
    static func outboxItem(_ bytes: [UInt8]) {
        if let request = try? OutboxItemFormat.decode(bytes) {
            precondition((try? OutboxItemFormat.encode(request)) == bytes, "an accepted item does not re-encode to its bytes")
        }
        _ = OutboxDropCounts.parse(bytes)
        _ = ConsentRecord.parse(bytes)
    }

    /// A server's Retry-After value, read against clocks at the edges as well as a real one.
    static func retryAfter(_ bytes: [UInt8]) {
        let value = String(decoding: bytes, as: UTF8.self)
        for now: Int64 in [1_750_000_000, 0, Int64.min, Int64.max] {
            _ = RetryAfter.delayMilliseconds(value, now: now)
        }
    }

    /// A server's error body: the scan for `{"error":{"code":…}}`.
    static func errorCode(_ bytes: [UInt8]) {
        _ = ServerErrorCode.parse(bytes)
    }

    /// NUL-separated: the target URL, then the values of https_proxy, http_proxy, ALL_PROXY and NO_PROXY.
    static func proxyEnvironment(_ bytes: [UInt8]) {
        let parts = bytes.split(separator: 0, omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) }
        guard let target = RequestTarget(url: parts[0]) else { return }
        var environment: [String: String] = [:]
        for (name, value) in zip(["https_proxy", "http_proxy", "ALL_PROXY", "NO_PROXY"], parts.dropFirst()) {
            environment[name] = value
        }
        if case .proxy(let endpoint) = ProxyResolution.decide(for: target, environment: environment) {
            _ = endpoint.description
        }
    }
}
