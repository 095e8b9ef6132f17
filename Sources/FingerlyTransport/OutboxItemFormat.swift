import FingerlyHost

/// One queued request as a file. Every integer big-endian:
///
///     16  magic and version: "fingerly-outbox" then 0x02
///      8  createdAt, signed seconds since the epoch
///      4  attempts, unsigned
///      2  key length (1…256), then the key: printable ASCII
///      2  organization length (0…256), then the organization: printable ASCII
///      2  destination length (0…2048), then the URL it is for: printable ASCII
///      4  body length (0…1 MiB), then the body
///     32  SHA-256 of every byte before it
///
/// and nothing after. The digest is a check against truncation and bit rot, not a seal: anyone
/// who may write the outbox may write a valid item, which is why the directory is this user's.
package enum OutboxItemFormat {
    package static let magic: [UInt8] = Array("fingerly-outbox".utf8) + [2]
    package static let maxKeyBytes = 256
    package static let maxOrganizationBytes = 256
    package static let maxDestinationBytes = 2048
    /// The wire contract's body cap.
    package static let maxBodyBytes = 1 << 20
    static let digestBytes = 32
    static let fixedBytes = 16 + 8 + 4 + 2 + 2 + 2 + 4 + digestBytes
    /// No valid item is larger: a file beyond it is refused without being read.
    package static let maxEncodedBytes = fixedBytes + maxKeyBytes + maxOrganizationBytes + maxDestinationBytes + maxBodyBytes

    package enum Problem: Error, Sendable, Hashable, CustomStringConvertible {
        case truncated
        case trailingBytes
        case notAnItem
        case unsupportedVersion(UInt8)
        case keyInvalid
        case organizationInvalid
        case destinationInvalid
        case bodyTooLarge(Int)
        case negativeAttempts
        case digestMismatch

        package var description: String {
            switch self {
            case .truncated: return "truncated"
            case .trailingBytes: return "bytes after the digest"
            case .notAnItem: return "not an outbox item (no magic)"
            case .unsupportedVersion(let version): return "unsupported version \(version)"
            case .keyInvalid: return "the idempotency key is empty, too long or not printable ASCII"
            case .organizationInvalid: return "the organization is too long or not printable ASCII"
            case .destinationInvalid: return "the destination is too long or not printable ASCII"
            case .bodyTooLarge(let count): return "a body of \(count) bytes, over the cap of \(maxBodyBytes)"
            case .negativeAttempts: return "negative attempts"
            case .digestMismatch: return "the digest does not match"
            }
        }
    }

    package static func encode(_ request: OutgoingRequest) throws(Problem) -> [UInt8] {
        let key = Array(request.idempotencyKey.utf8)
        let organization = Array(request.organization.utf8)
        guard !key.isEmpty, key.count <= maxKeyBytes, key.allSatisfy(isPrintable) else { throw .keyInvalid }
        guard organization.count <= maxOrganizationBytes, organization.allSatisfy(isPrintable) else { throw .organizationInvalid }
        let destination = Array(request.destination.utf8)
        guard destination.count <= maxDestinationBytes, destination.allSatisfy(isPrintable) else { throw .destinationInvalid }
        guard request.body.count <= maxBodyBytes else { throw .bodyTooLarge(request.body.count) }
        guard request.attempts >= 0 else { throw .negativeAttempts }
        var bytes = magic
        bytes.reserveCapacity(fixedBytes + key.count + organization.count + destination.count + request.body.count)
        append(UInt64(bitPattern: request.createdAt), width: 8, to: &bytes)
        append(UInt64(min(request.attempts, Int(UInt32.max))), width: 4, to: &bytes)
        append(UInt64(key.count), width: 2, to: &bytes)
        bytes += key
        append(UInt64(organization.count), width: 2, to: &bytes)
        bytes += organization
        append(UInt64(destination.count), width: 2, to: &bytes)
        bytes += destination
        append(UInt64(request.body.count), width: 4, to: &bytes)
        bytes += request.body
        bytes += sha256(bytes[...])
        return bytes
    }

    package static func decode(_ bytes: [UInt8]) throws(Problem) -> OutgoingRequest {
        var reader = Reader(bytes: bytes)
        guard let head = reader.take(magic.count) else { throw bytes.count < magic.count && magic.starts(with: bytes) ? .truncated : .notAnItem }
        guard head.prefix(magic.count - 1).elementsEqual(magic.prefix(magic.count - 1)) else { throw .notAnItem }
        guard head.last == magic.last else { throw .unsupportedVersion(head.last ?? 0) }
        guard let createdAt = reader.integer(8), let attempts = reader.integer(4), let keyLength = reader.integer(2) else { throw .truncated }
        guard keyLength >= 1, keyLength <= UInt64(maxKeyBytes) else { throw .keyInvalid }
        guard let key = reader.take(Int(keyLength)) else { throw .truncated }
        guard key.allSatisfy(isPrintable) else { throw .keyInvalid }
        guard let organizationLength = reader.integer(2) else { throw .truncated }
        guard organizationLength <= UInt64(maxOrganizationBytes) else { throw .organizationInvalid }
        guard let organization = reader.take(Int(organizationLength)) else { throw .truncated }
        guard organization.allSatisfy(isPrintable) else { throw .organizationInvalid }
        guard let destinationLength = reader.integer(2) else { throw .truncated }
        guard destinationLength <= UInt64(maxDestinationBytes) else { throw .destinationInvalid }
        guard let destination = reader.take(Int(destinationLength)) else { throw .truncated }
        guard destination.allSatisfy(isPrintable) else { throw .destinationInvalid }
        guard let bodyLength = reader.integer(4) else { throw .truncated }
        guard bodyLength <= UInt64(maxBodyBytes) else { throw .bodyTooLarge(Int(bodyLength)) }
        guard let body = reader.take(Int(bodyLength)) else { throw .truncated }
        let covered = reader.offset
        guard let digest = reader.take(digestBytes) else { throw .truncated }
        guard reader.offset == bytes.count else { throw .trailingBytes }
        guard digest.elementsEqual(sha256(bytes[..<covered])) else { throw .digestMismatch }
        return OutgoingRequest(idempotencyKey: String(decoding: key, as: UTF8.self),
                               createdAt: Int64(bitPattern: createdAt),
                               organization: String(decoding: organization, as: UTF8.self),
                               destination: String(decoding: destination, as: UTF8.self),
                               body: Array(body), attempts: Int(attempts))
    }

    /// The file an item with this key lives in: the same key always lands on the same name, so
    /// queueing a request twice keeps one copy, and a name says nothing about the report.
    package static func fileName(forKey key: String) -> String {
        DurableFile.hex(sha256(Array(key.utf8)[...]).prefix(16)) + fileSuffix
    }

    package static let fileSuffix = ".item"

    /// Whether a directory entry's name is one `fileName(forKey:)` could give.
    static func isItemName(_ name: [UInt8]) -> Bool {
        let suffix = Array(fileSuffix.utf8)
        guard name.count == 32 + suffix.count, name.suffix(suffix.count).elementsEqual(suffix) else { return false }
        return name.prefix(32).allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
    }

    private static func isPrintable(_ byte: UInt8) -> Bool { (0x21...0x7e).contains(byte) }

    private static func append(_ value: UInt64, width: Int, to bytes: inout [UInt8]) {
        for index in stride(from: width - 1, through: 0, by: -1) {
            bytes.append(UInt8(truncatingIfNeeded: value >> (UInt64(index) * 8)))
        }
    }

    static func sha256(_ bytes: ArraySlice<UInt8>) -> [UInt8] { SHA256.hash(bytes) }

    private struct Reader {
        let bytes: [UInt8]
        var offset = 0

        /// nil when fewer than `count` bytes are left; `count` is at most a few MiB, so the sum
        /// cannot overflow.
        mutating func take(_ count: Int) -> ArraySlice<UInt8>? {
            guard count >= 0, bytes.count - offset >= count else { return nil }
            defer { offset += count }
            return bytes[offset..<(offset + count)]
        }

        mutating func integer(_ width: Int) -> UInt64? {
            guard let slice = take(width) else { return nil }
            return slice.reduce(0) { $0 << 8 | UInt64($1) }
        }
    }
}
