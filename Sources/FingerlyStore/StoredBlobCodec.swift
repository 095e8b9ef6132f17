import CLZ4

/// How the stores keep event documents and idempotency answers: SQLite compresses large ones
/// with LZ4; PostgreSQL keeps them plain (TOAST compresses them) but reads either, so both
/// backends have one schema and one meaning for it.
///
/// An event document is 13 KB of JSON for a typical report: four pages of its own in the WAL,
/// again in the checkpoint that copies it, and in the file for the retention period. LZ4 makes
/// it 5.7 KB in about 12 µs. The compression runs inside the store's lock, where every
/// microsecond holds every other request: zstd's level 1 made it 4 KB but cost 70–95 µs there
/// (`bench/server` under perf), as much as the pages it saved. The column beside each blob
/// says which encoding it is in; rows written before migration 3 are `plain`.
///
/// An `lz4` blob is the decoded length as 4 bytes, little-endian, then one LZ4 block.
package final class StoredBlobCodec {
    package enum Encoding: Int64 {
        case plain = 0
        case lz4 = 1
    }

    /// Below this a blob fits its row's page anyway, and compressing it saves no page.
    package static let smallestCompressed = 512
    /// The most bytes one stored blob may decode to: beyond the largest body the server takes
    /// (64 MiB) and the answer beside it, so a damaged block cannot claim gigabytes.
    package static let largestDecoded = 128 << 20
    private static let lengthBytes = 4

    // One per connection, used under the store's lock only: LZ4's 16 KB hash table, kept off
    // the stack of whichever thread holds the lock.
    private let state: UnsafeMutableRawPointer

    package init() {
        state = UnsafeMutableRawPointer.allocate(byteCount: Int(LZ4_sizeofState()), alignment: 16)
    }

    deinit { state.deallocate() }

    /// The bytes to store and their encoding: compressed when that is smaller.
    package func encode(_ bytes: [UInt8]) -> (bytes: [UInt8], encoding: Encoding) {
        guard bytes.count >= Self.smallestCompressed, bytes.count <= Self.largestDecoded else { return (bytes, .plain) }
        let bound = Int(LZ4_compressBound(Int32(bytes.count)))
        guard bound > 0 else { return (bytes, .plain) }
        var stored = [UInt8](repeating: 0, count: Self.lengthBytes + bound)
        let length = UInt32(bytes.count)
        for index in 0..<Self.lengthBytes { stored[index] = UInt8(truncatingIfNeeded: length >> (8 * index)) }
        let written = stored.withUnsafeMutableBytes { output in
            bytes.withUnsafeBytes { input in
                LZ4_compress_fast_extState(state, input.baseAddress?.assumingMemoryBound(to: CChar.self),
                                           (output.baseAddress! + Self.lengthBytes).assumingMemoryBound(to: CChar.self),
                                           Int32(input.count), Int32(bound), 1)
            }
        }
        guard written > 0, Self.lengthBytes + Int(written) < bytes.count else { return (bytes, .plain) }
        stored.removeSubrange((Self.lengthBytes + Int(written))...)
        return (stored, .lz4)
    }

    /// The stored bytes as they were given to `encode`.
    package static func decode(_ stored: [UInt8], encoding code: Int64) throws(StoreError) -> [UInt8] {
        switch Encoding(rawValue: code) {
        case .plain?:
            return stored
        case .lz4?:
            return try decompress(stored)
        case nil:
            throw StoreError("a stored blob has the unknown encoding \(code)")
        }
    }

    private static func decompress(_ stored: [UInt8]) throws(StoreError) -> [UInt8] {
        guard stored.count > lengthBytes else { throw StoreError("a stored LZ4 blob is too short to hold its length") }
        let declared = (0..<Self.lengthBytes).reduce(0) { $0 | Int(stored[$1]) << (8 * $1) }
        guard declared <= largestDecoded else {
            throw StoreError("a stored LZ4 blob claims \(declared) bytes, more than \(Self.largestDecoded)")
        }
        var output = [UInt8](repeating: 0, count: declared)
        let written = output.withUnsafeMutableBytes { buffer in
            stored.withUnsafeBytes { input in
                LZ4_decompress_safe((input.baseAddress! + Self.lengthBytes).assumingMemoryBound(to: CChar.self),
                                    buffer.baseAddress?.assumingMemoryBound(to: CChar.self),
                                    Int32(input.count - Self.lengthBytes), Int32(buffer.count))
            }
        }
        guard written >= 0 else { throw StoreError("a stored LZ4 blob is damaged") }
        guard Int(written) == declared else { throw StoreError("a stored LZ4 blob decoded to \(written) bytes, not the \(declared) it gives") }
        return output
    }
}
