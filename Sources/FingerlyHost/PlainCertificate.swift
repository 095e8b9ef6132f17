import CFingerlyTLS

/// A certificate described without libcrypto, as libcrypto would describe it, when it is written the plain way:
/// DER throughout, names of single-valued RDNs whose attributes are common ones, in PrintableString, UTF8String
/// or IA5String of printable ASCII. Anything else is no `PlainCertificate`, and goes to libcrypto.
///
/// Opening libcrypto to describe a local root (its initialisation, relocation and first decode) cost more than
/// the rest of the trust store's scan. A reader that accepts less than libcrypto can only send more to it; a
/// certificate it accepts that libcrypto would refuse (a malformed extension's contents, which are not read here)
/// is reported as a local root where libcrypto would have skipped it: more said of a host, never less.
package struct PlainCertificate: Equatable {
    package let subject: String
    package let issuer: String
    /// SHA-256 of the SubjectPublicKeyInfo, base64.
    package let pin: String

    /// libcrypto's short names (`OBJ_nid2sn`) of the attributes read here, by the OID's content bytes.
    static let attributeNames: [[UInt8]: String] = [
        [0x55, 0x04, 0x03]: "CN", [0x55, 0x04, 0x04]: "SN", [0x55, 0x04, 0x05]: "serialNumber",
        [0x55, 0x04, 0x06]: "C", [0x55, 0x04, 0x07]: "L", [0x55, 0x04, 0x08]: "ST", [0x55, 0x04, 0x09]: "street",
        [0x55, 0x04, 0x0a]: "O", [0x55, 0x04, 0x0b]: "OU", [0x55, 0x04, 0x0c]: "title",
        [0x55, 0x04, 0x11]: "postalCode", [0x55, 0x04, 0x2a]: "GN", [0x55, 0x04, 0x61]: "organizationIdentifier",
        [0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x01]: "emailAddress",
        [0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x19]: "DC",
        [0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x01]: "UID",
    ]

    package init?(der: ArraySlice<UInt8>) {
        var outer = DERCursor(der)
        guard let certificate = outer.element(0x30), outer.atEnd else { return nil }
        var body = DERCursor(certificate)
        guard let tbs = body.element(0x30), Self.isPlainAlgorithm(body.element(0x30)),
              let signature = body.element(0x03), signature.first == 0, body.atEnd else { return nil }
        var fields = DERCursor(tbs)
        if let version = fields.element(0xa0) {
            // Only v2 and v3 are written out: DER leaves the default, v1, unwritten.
            var inner = DERCursor(version)
            guard let number = inner.element(0x02), inner.atEnd, number.count == 1,
                  number.first == 1 || number.first == 2 else { return nil }
        }
        guard let serial = fields.element(0x02), Self.isMinimalInteger(serial),
              Self.isPlainAlgorithm(fields.element(0x30)),
              let issuerName = fields.element(0x30), let issuer = Self.text(ofName: issuerName),
              let validity = fields.element(0x30), Self.isValidity(validity),
              let subjectName = fields.element(0x30), let subject = Self.text(ofName: subjectName),
              let keyInfo = fields.elementWithHeader(0x30), Self.isKeyInfo(keyInfo.contents) else { return nil }
        if let extensions = fields.element(0xa3) {
            guard Self.isExtensionList(extensions) else { return nil }
        }
        // Unique identifiers ([1], [2]) and anything after the extensions: libcrypto's to read.
        guard fields.atEnd else { return nil }
        self.subject = subject
        self.issuer = issuer
        pin = StrictBase64.encode(SHA256.hash(keyInfo.whole))
    }

    /// The description libcrypto's scan gives, its fixed-size fields' cut included.
    package func description(fingerprint: String) -> CertificateDescription {
        let limit = Certificates.nameLimit
        // ASCII throughout: a cut by bytes splits no character.
        return CertificateDescription(fingerprint: fingerprint, pin: pin,
                                      subject: String(decoding: subject.utf8.prefix(limit), as: UTF8.self),
                                      issuer: String(decoding: issuer.utf8.prefix(limit), as: UTF8.self),
                                      subjectTruncated: subject.utf8.count > limit, issuerTruncated: issuer.utf8.count > limit)
    }

    /// RFC 2253 as `X509_NAME_print_ex(XN_FLAG_RFC2253 & ~ASN1_STRFLGS_ESC_MSB)` writes it: the last RDN first,
    /// joined by ",", each `short name=value` with RFC 2253's specials escaped by a backslash.
    static func text(ofName name: ArraySlice<UInt8>) -> String? {
        var rdns = DERCursor(name)
        var parts: [String] = []
        while !rdns.atEnd {
            guard let set = rdns.element(0x31) else { return nil }
            var entries = DERCursor(set)
            guard let entry = entries.element(0x30), entries.atEnd else { return nil }  // one attribute per RDN
            var attribute = DERCursor(entry)
            guard let oid = attribute.element(0x06), let field = attributeNames[Array(oid)],
                  let (tag, value) = attribute.anyElement(), attribute.atEnd,
                  tag == 0x13 || tag == 0x0c || tag == 0x16, value.allSatisfy({ (0x20...0x7e).contains($0) })
            else { return nil }
            parts.append(field + "=" + escaped(value))
        }
        // Joined by hand, last first: a joined reversed view costs a generic-metadata lookup at run time.
        var text = ""
        for index in parts.indices.reversed() {
            text += parts[index]
            if index != parts.startIndex { text += "," }
        }
        return text
    }

    static func escaped(_ value: ArraySlice<UInt8>) -> String {
        var text = ""
        for (offset, byte) in value.enumerated() {
            // libcrypto takes the last character's rule alone for a value of one character: "#" is then written
            // as it is, " " escaped.
            let first = offset == 0 && value.count > 1, last = offset == value.count - 1
            let special = ",+\"\\<>;".utf8.contains(byte)
                || (first && (byte == UInt8(ascii: "#") || byte == UInt8(ascii: " ")))
                || (last && byte == UInt8(ascii: " "))
            if special { text += "\\" }
            text.unicodeScalars.append(Unicode.Scalar(byte))
        }
        return text
    }

    /// An algorithm libcrypto writes back byte for byte: an OID, with no parameters, NULL or an OID.
    static func isPlainAlgorithm(_ algorithm: ArraySlice<UInt8>?) -> Bool {
        guard let algorithm else { return false }
        var parts = DERCursor(algorithm)
        guard let oid = parts.element(0x06), isMinimalOID(oid) else { return false }
        if parts.atEnd { return true }
        guard let (tag, parameters) = parts.anyElement(), parts.atEnd else { return false }
        return (tag == 0x05 && parameters.isEmpty) || (tag == 0x06 && isMinimalOID(parameters))
    }

    static func isKeyInfo(_ keyInfo: ArraySlice<UInt8>) -> Bool {
        var parts = DERCursor(keyInfo)
        return isPlainAlgorithm(parts.element(0x30)) && parts.element(0x03)?.first == 0 && parts.atEnd
    }

    static func isValidity(_ validity: ArraySlice<UInt8>) -> Bool {
        var times = DERCursor(validity)
        for _ in 0..<2 {
            guard let (tag, time) = times.anyElement(), tag == 0x17 || tag == 0x18, !time.isEmpty,
                  time.allSatisfy({ (0x20...0x7e).contains($0) }) else { return false }
        }
        return times.atEnd
    }

    /// SEQUENCE OF Extension { OID, critical BOOLEAN (only TRUE is written in DER), OCTET STRING }.
    static func isExtensionList(_ wrapper: ArraySlice<UInt8>) -> Bool {
        var outer = DERCursor(wrapper)
        guard let list = outer.element(0x30), outer.atEnd, !list.isEmpty else { return false }
        var extensions = DERCursor(list)
        while !extensions.atEnd {
            guard let item = extensions.element(0x30) else { return false }
            var parts = DERCursor(item)
            guard let oid = parts.element(0x06), isMinimalOID(oid) else { return false }
            if let critical = parts.element(0x01), critical != [0xff] { return false }
            guard parts.element(0x04) != nil, parts.atEnd else { return false }
        }
        return true
    }

    static func isMinimalInteger(_ integer: ArraySlice<UInt8>) -> Bool {
        guard let first = integer.first else { return false }
        guard integer.count > 1 else { return true }
        let second = integer[integer.index(after: integer.startIndex)]
        return !(first == 0 && second & 0x80 == 0) && !(first == 0xff && second & 0x80 != 0)
    }

    /// Subidentifiers without a leading 0x80 and a last byte that ends one.
    static func isMinimalOID(_ oid: ArraySlice<UInt8>) -> Bool {
        guard let last = oid.last, last & 0x80 == 0 else { return false }
        var atStart = true
        for byte in oid {
            if atStart && byte == 0x80 { return false }
            atStart = byte & 0x80 == 0
        }
        return true
    }
}

/// DER elements one after another: single-byte tags and the shortest length form only, every length inside
/// what holds it.
struct DERCursor {
    private let bytes: ArraySlice<UInt8>
    private var index: Int

    init(_ bytes: ArraySlice<UInt8>) {
        self.bytes = bytes
        index = bytes.startIndex
    }

    var atEnd: Bool { index == bytes.endIndex }

    /// The next element's contents when its tag is `tag`; otherwise nil, and nothing is consumed.
    mutating func element(_ tag: UInt8) -> ArraySlice<UInt8>? {
        elementWithHeader(tag)?.contents
    }

    mutating func elementWithHeader(_ tag: UInt8) -> (whole: ArraySlice<UInt8>, contents: ArraySlice<UInt8>)? {
        guard let (found, whole, contents) = peek(), found == tag else { return nil }
        index = whole.endIndex
        return (whole, contents)
    }

    mutating func anyElement() -> (tag: UInt8, contents: ArraySlice<UInt8>)? {
        guard let (tag, whole, contents) = peek() else { return nil }
        index = whole.endIndex
        return (tag, contents)
    }

    private func peek() -> (tag: UInt8, whole: ArraySlice<UInt8>, contents: ArraySlice<UInt8>)? {
        var at = index
        guard bytes.endIndex - at >= 2 else { return nil }
        let tag = bytes[at]
        guard tag & 0x1f != 0x1f else { return nil }
        var length = Int(bytes[at + 1])
        at += 2
        if length & 0x80 != 0 {
            let digits = length & 0x7f
            guard (1...3).contains(digits), bytes.endIndex - at >= digits, bytes[at] != 0 else { return nil }
            length = 0
            for _ in 0..<digits {
                length = length << 8 | Int(bytes[at])
                at += 1
            }
            guard length >= 0x80 else { return nil }
        }
        guard length <= bytes.endIndex - at else { return nil }
        return (tag, bytes[index..<(at + length)], bytes[at..<(at + length)])
    }
}
