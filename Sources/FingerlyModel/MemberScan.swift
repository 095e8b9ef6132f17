/// A member name given twice in one object of a submission. Readers disagree on which one counts
/// (JSONDecoder keeps the first, Python, Go and JavaScript the last), so a body with one is refused:
/// the server must judge and store what every later reader of the event reads.
package struct DuplicateMember: Error, Sendable, Hashable {
    /// Where the second one sits, as `report.probes[3].signals.x` (bounded).
    package let path: String
}

/// Where a submission's members stand against the types the server reads: an object of a known
/// type, an array of one, a map whose names are data (a probe's signals), or a value below an
/// unknown member, whose own members are not counted again.
indirect enum MemberShape: Sendable {
    case object([String: MemberShape])
    case array(MemberShape)
    case map
    case opaque

    /// The body of `POST /v1/identify` as `SubmissionBody` decodes it.
    static let submission: MemberShape = {
        let issue = MemberShape.object(["path": .opaque, "status": .opaque, "detail": .opaque])
        let component = MemberShape.object([
            "scope": .opaque, "name": .opaque, "hash": .opaque, "worldReadable": .opaque,
        ])
        let probe = MemberShape.object([
            "id": .opaque, "tier": .opaque, "status": .opaque, "durationMs": .opaque, "detail": .opaque,
            "issues": .array(issue), "signals": .map, "identityComponents": .array(component),
        ])
        let identity = MemberShape.object([
            "hardwareId": .opaque, "hardwareIdVersion": .opaque, "instanceId": .opaque, "instanceIdVersion": .opaque,
            "hardwareComponents": .opaque, "instanceComponents": .opaque, "rootOnlyEvidence": .opaque,
        ])
        let report = MemberShape.object([
            "schemaVersion": .opaque, "collectorVersion": .opaque, "collectedAt": .opaque, "tag": .opaque,
            "root": .opaque,
            "tiers": .opaque, "budgetMs": .opaque, "elapsedMs": .opaque, "probes": .array(probe), "identity": identity,
            "identifierKeying": .opaque, "freeText": .opaque, "prefetchedAgeMs": .opaque,
        ])
        let client = MemberShape.object(["proxy": .opaque, "sdk": .opaque, "version": .opaque])
        return .object(["client": client, "report": report])
    }()
}

/// One pass over a body that JSONDecoder is about to read, for what JSONDecoder does not say: a
/// member name given twice in any object, and how many members no type of the submission reads
/// (they are dropped, never stored). Values are only skipped; names are decoded, escapes
/// included, and compared as JSONDecoder's String keys compare them (canonical equivalence),
/// each object with a set of its own, so the work is linear in the body. The containers are on
/// a stack of its own, never the call stack, however deep the body nests.
///
/// Syntax it cannot follow ends the scan with nil: such a body is not JSON, and JSONDecoder,
/// which reads it next, refuses it and names why.
enum MemberScan {
    private struct Container {
        /// nil for an array.
        var names: Set<String>?
        var shape: MemberShape
        var elements = 0
        /// How the container is named in a path: its member name, or its index in an array.
        var label: Label
    }

    enum Label {
        case root
        case member(String)
        case element(Int)
    }

    /// Deepest nesting followed: JSONDecoder refuses deeper bodies, and the stack stays small.
    static let depthLimit = 512
    /// Longest rendered path of a duplicate.
    static let pathByteLimit = 256

    /// Members no type reads, or throws the first duplicate member.
    static func unknownMembers(in bytes: [UInt8], shape: MemberShape = .submission) throws(DuplicateMember) -> Int? {
        var index = 0
        var stack: [Container] = []
        var unknown = 0
        /// The shape of the value a member or element about to be read will have.
        var pending: (shape: MemberShape, label: Label) = (shape, .root)

        func skipWhitespace() {
            while index < bytes.count {
                switch bytes[index] {
                case 0x20, 0x09, 0x0A, 0x0D: index += 1
                default: return
                }
            }
        }
        /// A string at the index: its decoded text when `decode`, else "" (values are only skipped).
        func string(decode: Bool) -> String? {
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { return nil }
            index += 1
            let start = index
            var escaped = false
            while index < bytes.count {
                let byte = bytes[index]
                if byte == UInt8(ascii: "\"") {
                    let end = index
                    index += 1
                    guard decode else { return "" }
                    return escaped ? unescaped(bytes[start..<end]) : String(decoding: bytes[start..<end], as: UTF8.self)
                }
                if byte == UInt8(ascii: "\\") {
                    escaped = true
                    index += 2
                } else {
                    index += 1
                }
            }
            return nil
        }
        func path(_ last: String) -> String {
            var text = ""
            for container in stack {
                switch container.label {
                case .root: break
                case .member(let name): text += (text.isEmpty ? "" : ".") + name
                case .element(let position): text += "[\(position)]"
                }
            }
            text += (text.isEmpty ? "" : ".") + last
            // The path is quoted in an answer and may reach a log: printable ASCII only.
            let printable = String(String.UnicodeScalarView(text.unicodeScalars.map { scalar in
                scalar.value >= 0x20 && scalar.value < 0x7F ? scalar : "?"
            }))
            return BoundedText.bounded(printable, limit: pathByteLimit)
        }

        /// Reads a member name and its colon, for the object on top of the stack.
        func member() throws(DuplicateMember) -> Bool {
            skipWhitespace()
            let top = stack.count - 1
            guard let name = string(decode: true) else { return false }
            guard stack[top].names!.insert(name).inserted else { throw DuplicateMember(path: path(name)) }
            switch stack[top].shape {
            case .object(let members):
                if let shape = members[name] {
                    pending = (shape, .member(name))
                } else {
                    unknown += 1
                    pending = (.opaque, .member(name))
                }
            case .map, .array, .opaque:
                pending = (.opaque, .member(name))
            }
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { return false }
            index += 1
            return true
        }

        func element() {
            let top = stack.count - 1
            let position = stack[top].elements
            stack[top].elements += 1
            if case .array(let shape) = stack[top].shape {
                pending = (shape, .element(position))
            } else {
                pending = (.opaque, .element(position))
            }
        }

        skipWhitespace()
        // A byte-order mark, which JSONDecoder skips.
        if bytes.count >= 3, bytes[0] == 0xEF, bytes[1] == 0xBB, bytes[2] == 0xBF { index = 3 }
        while true {
            // A value starts here.
            skipWhitespace()
            guard index < bytes.count else { return nil }
            switch bytes[index] {
            case UInt8(ascii: "{"), UInt8(ascii: "["):
                let isObject = bytes[index] == UInt8(ascii: "{")
                index += 1
                guard stack.count < depthLimit else { return nil }
                stack.append(Container(names: isObject ? [] : nil, shape: pending.shape, label: pending.label))
                skipWhitespace()
                if index < bytes.count, bytes[index] == (isObject ? UInt8(ascii: "}") : UInt8(ascii: "]")) {
                    index += 1
                    stack.removeLast()
                    break
                }
                if isObject {
                    guard try member() else { return nil }
                } else {
                    element()
                }
                continue
            case UInt8(ascii: "\""):
                guard string(decode: false) != nil else { return nil }
            default:
                // A number or a literal: JSONDecoder judges its spelling.
                while index < bytes.count, JSONParser.continuesToken(bytes[index]) { index += 1 }
            }
            // A value ended: close the containers it ends, then go on to the next member or element.
            while true {
                guard !stack.isEmpty else {
                    skipWhitespace()
                    return index == bytes.count ? unknown : nil
                }
                skipWhitespace()
                guard index < bytes.count else { return nil }
                let isObject = stack[stack.count - 1].names != nil
                let byte = bytes[index]
                index += 1
                if byte == UInt8(ascii: ",") {
                    if isObject {
                        guard try member() else { return nil }
                    } else {
                        element()
                    }
                    break
                }
                guard byte == (isObject ? UInt8(ascii: "}") : UInt8(ascii: "]")) else { return nil }
                stack.removeLast()
            }
        }

    }

    /// A name's text with its escapes applied. An escape JSON does not have, or a lone surrogate,
    /// becomes U+FFFD: JSONDecoder refuses such a body anyway.
    private static func unescaped(_ bytes: ArraySlice<UInt8>) -> String {
        var scalars = String.UnicodeScalarView()
        var raw: [UInt8] = []
        func flush() {
            guard !raw.isEmpty else { return }
            scalars.append(contentsOf: String(decoding: raw, as: UTF8.self).unicodeScalars)
            raw.removeAll()
        }
        func hex(_ at: Int) -> UInt32? {
            guard at + 4 <= bytes.endIndex else { return nil }
            var value: UInt32 = 0
            for byte in bytes[at..<at + 4] {
                guard let digit = hexDigit(byte) else { return nil }
                value = value << 4 | digit
            }
            return value
        }
        var index = bytes.startIndex
        while index < bytes.endIndex {
            let byte = bytes[index]
            guard byte == UInt8(ascii: "\\"), index + 1 < bytes.endIndex else { raw.append(byte); index += 1; continue }
            flush()
            let escape = bytes[index + 1]
            index += 2
            switch escape {
            case UInt8(ascii: "b"): scalars.append("\u{08}")
            case UInt8(ascii: "f"): scalars.append("\u{0C}")
            case UInt8(ascii: "n"): scalars.append("\n")
            case UInt8(ascii: "r"): scalars.append("\r")
            case UInt8(ascii: "t"): scalars.append("\t")
            case UInt8(ascii: "u"):
                guard var code = hex(index) else { scalars.append("\u{FFFD}"); continue }
                index += 4
                if (0xD800..<0xDC00).contains(code), index + 6 <= bytes.endIndex, bytes[index] == UInt8(ascii: "\\"),
                   bytes[index + 1] == UInt8(ascii: "u"), let low = hex(index + 2), (0xDC00..<0xE000).contains(low) {
                    code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                    index += 6
                }
                scalars.append(Unicode.Scalar(code) ?? "\u{FFFD}")
            default: scalars.append(Unicode.Scalar(escape))
            }
        }
        flush()
        return String(scalars)
    }

    private static func hexDigit(_ byte: UInt8) -> UInt32? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): UInt32(byte - UInt8(ascii: "0"))
        case UInt8(ascii: "a")...UInt8(ascii: "f"): UInt32(byte - UInt8(ascii: "a") + 10)
        case UInt8(ascii: "A")...UInt8(ascii: "F"): UInt32(byte - UInt8(ascii: "A") + 10)
        default: nil
        }
    }
}
