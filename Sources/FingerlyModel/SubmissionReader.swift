import FoundationEssentials

extension SubmissionBody {
    /// A decoded body: the value; the byte range of the `report` member's value when those bytes
    /// are the report's canonical encoding, exactly as `JSONEncoder.fingerly` writes the decoded
    /// report (the client writes it so), else nil; and how many members no type reads (dropped:
    /// never judged, never stored).
    package typealias Decoded = (body: SubmissionBody, reportRange: Range<Int>?, unknownMembers: Int)

    /// Decodes a `POST /v1/identify` body: with `SubmissionReader` when the body is in the form
    /// this library writes, else with JSONDecoder, which decides what is valid and names the
    /// failing field. Either way the value is the one JSONDecoder gives. A member name given
    /// twice in any object throws `DuplicateMember`: JSONDecoder keeps the first, other
    /// readers the last, and the server must judge what they all read.
    package static func decode(_ body: [UInt8]) throws -> Decoded {
        // The fast reader declines any duplicate, so only its fall-back needs the scan.
        if let read = SubmissionReader.read(body) { return read }
        let scanned = try MemberScan.unknownMembers(in: body)
        let decoded: SubmissionBody
        do {
            decoded = try JSONDecoder.submission.decode(SubmissionBody.self, from: Data(body))
        } catch DecodingError.dataCorrupted(let context) where context.codingPath.isEmpty {
            // JSONDecoder names no field for an integer past Int's range, as for a body not JSON.
            if let outOfRange = OutOfRangeInteger.find(in: body) { throw outOfRange }
            throw DecodingError.dataCorrupted(context)
        }
        // JSONDecoder took a body the scan could not follow: which members it read, and how
        // often, is unknown, so it is not judged.
        guard let unknownMembers = scanned else {
            throw DecodingError.dataCorrupted(.init(codingPath: [], debugDescription: "not JSON this server can check"))
        }
        return (decoded, nil, unknownMembers)
    }
}

/// A reader of submission bodies in the form `JSONEncoder.fingerly` writes them: JSONDecoder
/// spent 0.6 ms of a server's 1.1 ms per request on its generic containers (`bench/server`,
/// perf). It accepts a strict subset of what JSONDecoder accepts and gives the same value, which
/// the fuzz harness `submission-reader` checks; for anything outside the subset it gives nil
/// and the caller falls back to JSONDecoder. Outside the subset: a byte-order mark, escapes or
/// non-ASCII in member names, a duplicate member (known or not), an integer with a
/// fraction, an exponent or more than 18 digits, a number after a value that is not one of
/// JSON's, a date other than `YYYY-MM-DDTHH:MM:SSZ` in 2000–2999, invalid UTF-8, a lone
/// surrogate, a control character in a string, and nesting deeper than `depthLimit`.
package struct SubmissionReader {
    struct Deviation: Error {}

    /// Deepest nesting followed when skipping members no type knows.
    static let depthLimit = 32
    /// Longest integer, in digits: 18 cannot overflow Int.
    static let integerDigitLimit = 18
    /// Longest number read as a Double, in bytes.
    static let realByteLimit = 40

    private let bytes: UnsafeBufferPointer<UInt8>
    private var index = 0
    private var depth = 0
    /// Names of the object being read that no type reads, made on the first: a duplicate of one
    /// is a deviation as well (known names are read `once`), and a body without any pays nothing.
    private var skippedNames: Set<String>?
    /// Members where a type is read that it does not know: dropped, never stored.
    private var unknownMembers = 0
    /// Whether every byte read since it was set is as `JSONEncoder.fingerly` writes the value:
    /// no whitespace, members in sorted order and none it would leave out (unknown, or null),
    /// no escape, numbers spelt as Swift's shortest form. The stored event then keeps the bytes,
    /// which are the canonical encoding, instead of writing it again.
    private var canonical = true
    /// Whether the last string read was ASCII.
    private var lastStringWasASCII = true

    private init(bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

    package static func read(_ body: [UInt8]) -> SubmissionBody.Decoded? {
        body.withUnsafeBufferPointer { buffer in
            var reader = SubmissionReader(bytes: buffer)
            do throws(Deviation) {
                var client: ClientInfo?
                var report: SignalReport?
                var reportRange: Range<Int>?
                try reader.object { (reader: inout SubmissionReader, name: String) throws(Deviation) in
                    switch name {
                    case "client": try reader.once(&client) { (reader: inout SubmissionReader) throws(Deviation) in try reader.clientInfo() }
                    case "report":
                        reader.skipWhitespace()
                        let start = reader.index
                        reader.canonical = true
                        try reader.once(&report) { (reader: inout SubmissionReader) throws(Deviation) in try reader.signalReport() }
                        reportRange = reader.canonical ? start..<reader.index : nil
                    default: try reader.skipUnknownMember(name)
                    }
                }
                reader.skipWhitespace()
                guard reader.index == buffer.count, let client, let report else { return nil }
                return (SubmissionBody(client: client, report: report), reportRange, reader.unknownMembers)
            } catch {
                return nil
            }
        }
    }

    // MARK: The report's types, member by member as their synthesized Decodable reads them.

    private mutating func clientInfo() throws(Deviation) -> ClientInfo {
        var proxy: Bool?, sdk: String?, version: String?
        try object { (reader: inout SubmissionReader, name: String) throws(Deviation) in
            switch name {
            case "proxy": try reader.once(&proxy) { (reader: inout SubmissionReader) throws(Deviation) in try reader.bool() }
            case "sdk": try reader.once(&sdk) { (reader: inout SubmissionReader) throws(Deviation) in try reader.string() }
            case "version": try reader.once(&version) { (reader: inout SubmissionReader) throws(Deviation) in try reader.string() }
            default: try reader.skipUnknownMember(name)
            }
        }
        guard let proxy, let sdk, let version else { throw Deviation() }
        return ClientInfo(proxy: proxy, sdk: sdk, version: version)
    }

    private mutating func signalReport() throws(Deviation) -> SignalReport {
        var schemaVersion: Int?, collectorVersion: String?, collectedAt: Date?, tag: String??, root: String?
        var tiers: [Tier]?, budgetMs: Int?, elapsedMs: Double?, probes: [ProbeEntry]?, identity: HostIdentity?
        var keying: IdentifierKeying??, freeText: FreeTextHandling??, prefetchedAgeMs: Double??
        try object { (reader: inout SubmissionReader, name: String) throws(Deviation) in
            switch name {
            case "schemaVersion": try reader.once(&schemaVersion) { (reader: inout SubmissionReader) throws(Deviation) in try reader.integer() }
            case "collectorVersion": try reader.once(&collectorVersion) { (reader: inout SubmissionReader) throws(Deviation) in try reader.string() }
            case "collectedAt": try reader.once(&collectedAt) { (reader: inout SubmissionReader) throws(Deviation) in try reader.date() }
            case "tag": try reader.once(&tag) { (reader: inout SubmissionReader) throws(Deviation) in try reader.optional { (reader: inout SubmissionReader) throws(Deviation) in try reader.string() } }
            case "root": try reader.once(&root) { (reader: inout SubmissionReader) throws(Deviation) in try reader.string() }
            case "tiers": try reader.once(&tiers) { (reader: inout SubmissionReader) throws(Deviation) in try reader.array { (reader: inout SubmissionReader) throws(Deviation) in try reader.raw(Tier.self) } }
            case "budgetMs": try reader.once(&budgetMs) { (reader: inout SubmissionReader) throws(Deviation) in try reader.integer() }
            case "elapsedMs": try reader.once(&elapsedMs) { (reader: inout SubmissionReader) throws(Deviation) in try reader.real() }
            case "probes": try reader.once(&probes) { (reader: inout SubmissionReader) throws(Deviation) in try reader.array { (reader: inout SubmissionReader) throws(Deviation) in try reader.probeEntry() } }
            case "identity": try reader.once(&identity) { (reader: inout SubmissionReader) throws(Deviation) in try reader.hostIdentity() }
            case "identifierKeying": try reader.once(&keying) { (reader: inout SubmissionReader) throws(Deviation) in try reader.optional { (reader: inout SubmissionReader) throws(Deviation) in try reader.raw(IdentifierKeying.self) } }
            case "freeText": try reader.once(&freeText) { (reader: inout SubmissionReader) throws(Deviation) in try reader.optional { (reader: inout SubmissionReader) throws(Deviation) in try reader.raw(FreeTextHandling.self) } }
            case "prefetchedAgeMs": try reader.once(&prefetchedAgeMs) { (reader: inout SubmissionReader) throws(Deviation) in try reader.optional { (reader: inout SubmissionReader) throws(Deviation) in try reader.real() } }
            default: try reader.skipUnknownMember(name)
            }
        }
        guard let schemaVersion, let collectorVersion, let collectedAt, let root, let tiers, let budgetMs, let elapsedMs,
              let probes, let identity else { throw Deviation() }
        return SignalReport(schemaVersion: schemaVersion, collectorVersion: collectorVersion, collectedAt: collectedAt,
                            tag: tag ?? nil, root: root, tiers: tiers, budgetMs: budgetMs, elapsedMs: elapsedMs, probes: probes,
                            identity: identity, identifierKeying: keying ?? nil, freeText: freeText ?? nil,
                            prefetchedAgeMs: prefetchedAgeMs ?? nil)
    }

    private mutating func probeEntry() throws(Deviation) -> ProbeEntry {
        var id: String?, tier: Tier?, status: ProbeStatus?, durationMs: Double?, detail: String??
        var issues: [SourceIssue]?, signals: [String: SignalValue]?, components: [IdentityComponent]?
        try object { (reader: inout SubmissionReader, name: String) throws(Deviation) in
            switch name {
            case "id": try reader.once(&id) { (reader: inout SubmissionReader) throws(Deviation) in try reader.string() }
            case "tier": try reader.once(&tier) { (reader: inout SubmissionReader) throws(Deviation) in try reader.raw(Tier.self) }
            case "status": try reader.once(&status) { (reader: inout SubmissionReader) throws(Deviation) in try reader.raw(ProbeStatus.self) }
            case "durationMs": try reader.once(&durationMs) { (reader: inout SubmissionReader) throws(Deviation) in try reader.real() }
            case "detail": try reader.once(&detail) { (reader: inout SubmissionReader) throws(Deviation) in try reader.optional { (reader: inout SubmissionReader) throws(Deviation) in try reader.string() } }
            case "issues": try reader.once(&issues) { (reader: inout SubmissionReader) throws(Deviation) in try reader.array { (reader: inout SubmissionReader) throws(Deviation) in try reader.sourceIssue() } }
            case "signals": try reader.once(&signals) { (reader: inout SubmissionReader) throws(Deviation) in try reader.signalMap() }
            case "identityComponents": try reader.once(&components) { (reader: inout SubmissionReader) throws(Deviation) in try reader.array { (reader: inout SubmissionReader) throws(Deviation) in try reader.identityComponent() } }
            default: try reader.skipUnknownMember(name)
            }
        }
        guard let id, let tier, let status, let durationMs, let issues, let signals, let components else { throw Deviation() }
        return ProbeEntry(id: id, tier: tier, status: status, durationMs: durationMs, detail: detail ?? nil, issues: issues,
                          signals: signals, identityComponents: components)
    }

    private mutating func sourceIssue() throws(Deviation) -> SourceIssue {
        var path: String?, status: ProbeStatus?, detail: String?
        try object { (reader: inout SubmissionReader, name: String) throws(Deviation) in
            switch name {
            case "path": try reader.once(&path) { (reader: inout SubmissionReader) throws(Deviation) in try reader.string() }
            case "status": try reader.once(&status) { (reader: inout SubmissionReader) throws(Deviation) in try reader.raw(ProbeStatus.self) }
            case "detail": try reader.once(&detail) { (reader: inout SubmissionReader) throws(Deviation) in try reader.string() }
            default: try reader.skipUnknownMember(name)
            }
        }
        guard let path, let status, let detail else { throw Deviation() }
        return SourceIssue(path: path, status: status, detail: detail)
    }

    private mutating func identityComponent() throws(Deviation) -> IdentityComponent {
        var scope: IdentityComponent.Scope?, name: String?, hash: String?, worldReadable: Bool?
        try object { (reader: inout SubmissionReader, member: String) throws(Deviation) in
            switch member {
            case "scope": try reader.once(&scope) { (reader: inout SubmissionReader) throws(Deviation) in try reader.raw(IdentityComponent.Scope.self) }
            case "name": try reader.once(&name) { (reader: inout SubmissionReader) throws(Deviation) in try reader.string() }
            case "hash": try reader.once(&hash) { (reader: inout SubmissionReader) throws(Deviation) in try reader.string() }
            case "worldReadable": try reader.once(&worldReadable) { (reader: inout SubmissionReader) throws(Deviation) in try reader.bool() }
            default: try reader.skipUnknownMember(member)
            }
        }
        guard let scope, let name, let hash, let worldReadable else { throw Deviation() }
        return IdentityComponent(scope: scope, name: name, hash: hash, worldReadable: worldReadable)
    }

    private mutating func hostIdentity() throws(Deviation) -> HostIdentity {
        var hardwareId: String??, hardwareIdVersion: Int?, instanceId: String??, instanceIdVersion: Int?
        var hardwareComponents: [String]?, instanceComponents: [String]?, rootOnlyEvidence: [String]?
        try object { (reader: inout SubmissionReader, name: String) throws(Deviation) in
            switch name {
            case "hardwareId": try reader.once(&hardwareId) { (reader: inout SubmissionReader) throws(Deviation) in try reader.optional { (reader: inout SubmissionReader) throws(Deviation) in try reader.string() } }
            case "hardwareIdVersion": try reader.once(&hardwareIdVersion) { (reader: inout SubmissionReader) throws(Deviation) in try reader.integer() }
            case "instanceId": try reader.once(&instanceId) { (reader: inout SubmissionReader) throws(Deviation) in try reader.optional { (reader: inout SubmissionReader) throws(Deviation) in try reader.string() } }
            case "instanceIdVersion": try reader.once(&instanceIdVersion) { (reader: inout SubmissionReader) throws(Deviation) in try reader.integer() }
            case "hardwareComponents": try reader.once(&hardwareComponents) { (reader: inout SubmissionReader) throws(Deviation) in try reader.strings() }
            case "instanceComponents": try reader.once(&instanceComponents) { (reader: inout SubmissionReader) throws(Deviation) in try reader.strings() }
            case "rootOnlyEvidence": try reader.once(&rootOnlyEvidence) { (reader: inout SubmissionReader) throws(Deviation) in try reader.strings() }
            default: try reader.skipUnknownMember(name)
            }
        }
        guard let hardwareIdVersion, let instanceIdVersion, let hardwareComponents, let instanceComponents,
              let rootOnlyEvidence else { throw Deviation() }
        return HostIdentity(hardwareId: hardwareId ?? nil, hardwareIdVersion: hardwareIdVersion, instanceId: instanceId ?? nil,
                            instanceIdVersion: instanceIdVersion, hardwareComponents: hardwareComponents,
                            instanceComponents: instanceComponents, rootOnlyEvidence: rootOnlyEvidence)
    }

    /// A signal map. A name equal to an earlier one under String's canonical equivalence is a
    /// deviation, as JSONDecoder would keep the first.
    private mutating func signalMap() throws(Deviation) -> [String: SignalValue] {
        var signals: [String: SignalValue] = [:]
        try expect(UInt8(ascii: "{"))
        try nest()
        defer { depth -= 1 }
        skipWhitespace()
        if try take(UInt8(ascii: "}")) { return signals }
        var previous: String?
        repeat {
            skipWhitespace()
            let name = try string()
            // ASCII names compare as JSONEncoder sorts them, by bytes; any other is left to it.
            if !lastStringWasASCII || previous.map({ !($0 < name) }) == true { canonical = false }
            previous = name
            skipWhitespace()
            try expect(UInt8(ascii: ":"))
            let value = try signalValue()
            guard signals.updateValue(value, forKey: name) == nil else { throw Deviation() }
            skipWhitespace()
        } while try take(UInt8(ascii: ","))
        try expect(UInt8(ascii: "}"))
        return signals
    }

    /// As `SignalValue.init(from:)` decides: a boolean, an integer, a string or a list of strings.
    private mutating func signalValue() throws(Deviation) -> SignalValue {
        skipWhitespace()
        guard index < bytes.count else { throw Deviation() }
        switch bytes[index] {
        case UInt8(ascii: "t"), UInt8(ascii: "f"): return .bool(try bool())
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "["): return .strings(try strings())
        default: return .int(try integer())
        }
    }

    // MARK: Containers

    /// An object of a struct: member names are plain ASCII, each known member at most once
    /// (`once`), members no type knows skipped.
    private mutating func object(_ member: (inout SubmissionReader, String) throws(Deviation) -> Void) throws(Deviation) {
        skipWhitespace()
        try expect(UInt8(ascii: "{"))
        try nest()
        let outerNames = skippedNames
        skippedNames = nil
        defer {
            depth -= 1
            skippedNames = outerNames
        }
        skipWhitespace()
        if try take(UInt8(ascii: "}")) { return }
        var previous: String?
        repeat {
            skipWhitespace()
            let name = try memberName()
            // Member names are plain ASCII here: String order is byte order.
            if let previous, !(previous < name) { canonical = false }
            previous = name
            skipWhitespace()
            try expect(UInt8(ascii: ":"))
            try member(&self, name)
            skipWhitespace()
        } while try take(UInt8(ascii: ","))
        try expect(UInt8(ascii: "}"))
    }

    private mutating func once<T>(_ slot: inout T?, _ read: (inout SubmissionReader) throws(Deviation) -> T) throws(Deviation) {
        guard slot == nil else { throw Deviation() }
        slot = try read(&self)
    }

    /// null is nil, as `decodeIfPresent` reads it.
    private mutating func optional<T>(_ read: (inout SubmissionReader) throws(Deviation) -> T) throws(Deviation) -> T? {
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "n") {
            try literal("null")
            canonical = false
            return nil
        }
        return try read(&self)
    }

    private mutating func array<T>(_ element: (inout SubmissionReader) throws(Deviation) -> T) throws(Deviation) -> [T] {
        skipWhitespace()
        try expect(UInt8(ascii: "["))
        try nest()
        defer { depth -= 1 }
        var items: [T] = []
        skipWhitespace()
        if try take(UInt8(ascii: "]")) { return items }
        repeat {
            items.append(try element(&self))
            skipWhitespace()
        } while try take(UInt8(ascii: ","))
        try expect(UInt8(ascii: "]"))
        return items
    }

    private mutating func strings() throws(Deviation) -> [String] {
        try array { (reader: inout SubmissionReader) throws(Deviation) in try reader.string() }
    }

    private mutating func nest() throws(Deviation) {
        depth += 1
        guard depth <= Self.depthLimit else { throw Deviation() }
    }

    /// A member of a typed object that its type does not read: counted, and skipped.
    private mutating func skipUnknownMember(_ name: String) throws(Deviation) {
        unknownMembers += 1
        canonical = false
        try skipMember(name)
    }

    /// A member no type reads, whose name must still be given once.
    private mutating func skipMember(_ name: String) throws(Deviation) {
        if skippedNames == nil { skippedNames = [] }
        guard skippedNames!.insert(name).inserted else { throw Deviation() }
        try skipValue()
    }

    /// A value no type reads, checked as strictly as one that is read.
    private mutating func skipValue() throws(Deviation) {
        skipWhitespace()
        guard index < bytes.count else { throw Deviation() }
        switch bytes[index] {
        case UInt8(ascii: "{"):
            try object { (reader: inout SubmissionReader, name: String) throws(Deviation) in try reader.skipMember(name) }
        case UInt8(ascii: "["):
            _ = try array { (reader: inout SubmissionReader) throws(Deviation) in try reader.skipValue() }
        case UInt8(ascii: "\""): _ = try string()
        case UInt8(ascii: "t"), UInt8(ascii: "f"): _ = try bool()
        case UInt8(ascii: "n"): try literal("null")
        default: _ = try real()
        }
    }

    // MARK: Scalars

    private mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D:
                index += 1
                canonical = false
            default: return
            }
        }
    }

    private mutating func expect(_ byte: UInt8) throws(Deviation) {
        guard index < bytes.count, bytes[index] == byte else { throw Deviation() }
        index += 1
    }

    private mutating func take(_ byte: UInt8) throws(Deviation) -> Bool {
        guard index < bytes.count else { throw Deviation() }
        guard bytes[index] == byte else { return false }
        index += 1
        return true
    }

    /// Whether the next byte would run on from a number or literal: "truex" and "12a" are one
    /// bad token.
    private var atTokenContinuation: Bool { index < bytes.count && JSONParser.continuesToken(bytes[index]) }

    private mutating func literal(_ word: StaticString) throws(Deviation) {
        let count = word.utf8CodeUnitCount
        guard bytes.count - index >= count else { throw Deviation() }
        for offset in 0..<count where bytes[index + offset] != word.utf8Start[offset] { throw Deviation() }
        index += count
        guard !atTokenContinuation else { throw Deviation() }
    }

    private mutating func bool() throws(Deviation) -> Bool {
        skipWhitespace()
        guard index < bytes.count else { throw Deviation() }
        if bytes[index] == UInt8(ascii: "t") { try literal("true"); return true }
        try literal("false")
        return false
    }

    /// `-?(0|[1-9][0-9]*)` of at most `integerDigitLimit` digits.
    private mutating func integer() throws(Deviation) -> Int {
        skipWhitespace()
        let negative = index < bytes.count && bytes[index] == UInt8(ascii: "-")
        if negative { index += 1 }
        let start = index
        var value = 0
        while index < bytes.count, bytes[index] >= UInt8(ascii: "0"), bytes[index] <= UInt8(ascii: "9") {
            // Checked before the digit is added: a nineteenth digit could overflow Int.
            guard index - start < Self.integerDigitLimit else { throw Deviation() }
            value = value * 10 + Int(bytes[index] - UInt8(ascii: "0"))
            index += 1
        }
        let digits = index - start
        guard digits > 0, !(digits > 1 && bytes[start] == UInt8(ascii: "0")), !atTokenContinuation else { throw Deviation() }
        if negative, value == 0 { canonical = false }
        return negative ? -value : value
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?`, no exponent, at most `realByteLimit` bytes, converted by
    /// the correctly rounded `Double(_:)` as JSONDecoder's reading is.
    private mutating func real() throws(Deviation) -> Double {
        skipWhitespace()
        let start = index
        if index < bytes.count, bytes[index] == UInt8(ascii: "-") { index += 1 }
        func digits(_ reader: inout SubmissionReader) -> Int {
            let first = reader.index
            while reader.index < reader.bytes.count, reader.bytes[reader.index] >= UInt8(ascii: "0"),
                  reader.bytes[reader.index] <= UInt8(ascii: "9") { reader.index += 1 }
            return reader.index - first
        }
        let integerStart = index
        let integerDigits = digits(&self)
        guard integerDigits > 0, !(integerDigits > 1 && bytes[integerStart] == UInt8(ascii: "0")) else { throw Deviation() }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            index += 1
            guard digits(&self) > 0 else { throw Deviation() }
        }
        guard !atTokenContinuation, index - start <= Self.realByteLimit,
              let value = Double(String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)),
              value.isFinite else { throw Deviation() }
        if canonical {
            let text = UnsafeBufferPointer(rebasing: bytes[start..<index])
            if let shortest = Self.isShortestForm(text) {
                if !shortest { canonical = false }
            } else {
                // JSONEncoder writes the shortest form, an integral value without its ".0".
                var shortest = value.description
                if shortest.hasSuffix(".0") { shortest.removeLast(2) }
                if !shortest.utf8.elementsEqual(text) { canonical = false }
            }
        }
        return value
    }

    /// Whether a plain decimal `-?(0|[1-9][0-9]*)(\.[0-9]+)?` is the shortest form JSONEncoder
    /// would write for its value, decided from the digits alone; nil when only the value's
    /// description can tell. A decimal of at most 15 significant digits comes back unchanged
    /// from a Double (DBL_DIG), so no other decimal as short has its value: it is the shortest
    /// form unless it carries a zero the encoder drops (a fraction ending in 0) or its size
    /// makes the encoder write an exponent (1e+16 and up, below 0.001 taken as unknown).
    static func isShortestForm(_ text: UnsafeBufferPointer<UInt8>) -> Bool? {
        var digits = text[...]
        if digits.first == UInt8(ascii: "-") { digits = digits.dropFirst() }
        let point = digits.firstIndex(of: UInt8(ascii: "."))
        let integer = digits[..<(point ?? digits.endIndex)]
        let fraction = point.map { digits[(digits.index(after: $0))...] } ?? digits[digits.endIndex...]
        if point != nil, fraction.last == UInt8(ascii: "0") { return false }
        let significant: Int
        if integer.count == 1, integer.first == UInt8(ascii: "0") {
            let leadingZeros = fraction.prefix { $0 == UInt8(ascii: "0") }.count
            guard leadingZeros <= 2 || fraction.isEmpty else { return nil }
            significant = fraction.count - leadingZeros
        } else {
            significant = integer.count + fraction.count
        }
        return significant <= 15 ? true : nil
    }

    private mutating func raw<T: RawRepresentable>(_ type: T.Type) throws(Deviation) -> T where T.RawValue == String {
        guard let value = T(rawValue: try string()) else { throw Deviation() }
        return value
    }

    /// A struct's member name: ASCII without escapes, so that byte equality is String equality
    /// (a non-ASCII name may be canonically equivalent to an ASCII one: KELVIN SIGN and "K").
    private mutating func memberName() throws(Deviation) -> String {
        try expect(UInt8(ascii: "\""))
        let start = index
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                defer { index += 1 }
                return String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
            }
            guard byte >= 0x20, byte < 0x80, byte != UInt8(ascii: "\\") else { throw Deviation() }
            index += 1
        }
        throw Deviation()
    }

    /// A string value: valid UTF-8, no control characters, the escapes of RFC 8259 with
    /// surrogates in pairs.
    private mutating func string() throws(Deviation) -> String {
        skipWhitespace()
        try expect(UInt8(ascii: "\""))
        var run = index
        var escaped: [UInt8] = []
        var hasEscapes = false
        // Escapes only ever add ASCII or valid UTF-8 of their own making.
        var ascii = true
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                let tail = UnsafeBufferPointer(rebasing: bytes[run..<index])
                index += 1
                lastStringWasASCII = ascii
                if !hasEscapes { return try Self.validated(tail, ascii: ascii) }
                // JSONEncoder's escapes are few; which one it would choose is not for this to guess.
                canonical = false
                escaped.append(contentsOf: tail)
                return try escaped.withUnsafeBufferPointer { (buffer) throws(Deviation) -> String in
                    try Self.validated(buffer, ascii: ascii)
                }
            }
            guard byte >= 0x20 else { throw Deviation() }
            if byte >= 0x80 { ascii = false }
            guard byte == UInt8(ascii: "\\") else { index += 1; continue }
            hasEscapes = true
            escaped.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[run..<index]))
            index += 1
            guard index < bytes.count else { throw Deviation() }
            let escape = bytes[index]
            index += 1
            switch escape {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): escaped.append(escape)
            case UInt8(ascii: "b"): escaped.append(0x08)
            case UInt8(ascii: "f"): escaped.append(0x0C)
            case UInt8(ascii: "n"): escaped.append(0x0A)
            case UInt8(ascii: "r"): escaped.append(0x0D)
            case UInt8(ascii: "t"): escaped.append(0x09)
            case UInt8(ascii: "u"):
                var scalar = try hex4()
                if (0xD800...0xDBFF).contains(scalar) {
                    try expect(UInt8(ascii: "\\"))
                    try expect(UInt8(ascii: "u"))
                    let low = try hex4()
                    guard (0xDC00...0xDFFF).contains(low) else { throw Deviation() }
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                }
                guard let unicode = Unicode.Scalar(scalar) else { throw Deviation() }
                escaped.append(contentsOf: String(unicode).utf8)
            default: throw Deviation()
            }
            run = index
        }
        throw Deviation()
    }

    /// The text of valid UTF-8. ASCII needs no check; otherwise decoding repairs an invalid
    /// sequence with U+FFFD, which changes the bytes, so equal bytes mean valid input. (The
    /// generic `String(validating:as:)` spent a fifth of the reader's time on metadata.)
    private static func validated(_ bytes: UnsafeBufferPointer<UInt8>, ascii: Bool) throws(Deviation) -> String {
        var text = String(decoding: bytes, as: UTF8.self)
        if ascii { return text }
        let same = text.withUTF8 { decoded in
            decoded.count == bytes.count && decoded.elementsEqual(bytes)
        }
        guard same else { throw Deviation() }
        return text
    }

    private mutating func hex4() throws(Deviation) -> UInt32 {
        guard bytes.count - index >= 4 else { throw Deviation() }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[index]
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw Deviation()
            }
            value = value << 4 | UInt32(digit)
            index += 1
        }
        return value
    }

    /// `YYYY-MM-DDTHH:MM:SSZ`, the form `.iso8601` writes, with every field in range: the
    /// decoder's parser rolls a 30 February over into March, which this leaves to it.
    private mutating func date() throws(Deviation) -> Date {
        let text = Array(try string().utf8)
        guard text.count == 20, text[4] == UInt8(ascii: "-"), text[7] == UInt8(ascii: "-"), text[10] == UInt8(ascii: "T"),
              text[13] == UInt8(ascii: ":"), text[16] == UInt8(ascii: ":"), text[19] == UInt8(ascii: "Z") else { throw Deviation() }
        func number(_ range: Range<Int>) throws(Deviation) -> Int {
            var value = 0
            for byte in text[range] {
                guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { throw Deviation() }
                value = value * 10 + Int(byte - UInt8(ascii: "0"))
            }
            return value
        }
        let year = try number(0..<4), month = try number(5..<7), day = try number(8..<10)
        let hour = try number(11..<13), minute = try number(14..<16), second = try number(17..<19)
        let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
        let monthDays = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
        guard (2000...2999).contains(year), (1...12).contains(month), (1...monthDays[month - 1]).contains(day),
              hour < 24, minute < 60, second < 60 else { throw Deviation() }
        // Days since 1970-01-01 in the proleptic Gregorian calendar, counted from March so that
        // the leap day ends a year.
        let shiftedYear = month <= 2 ? year - 1 : year
        let era = shiftedYear / 400
        let yearOfEra = shiftedYear - era * 400
        let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        let days = era * 146_097 + dayOfEra - 719_468
        return Date(timeIntervalSince1970: Double(days * 86_400 + hour * 3_600 + minute * 60 + second))
    }
}
