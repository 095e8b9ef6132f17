import CZstd

/// How SQLite keeps event documents and idempotency answers: large ones as zstd frames.
///
/// An event document is 13 KB of JSON for a typical report, four pages of its own in the WAL,
/// again in the checkpoint that copies it, and in the file for the retention period. At zstd's
/// level 1 it is 4 KB for 28 µs of CPU: `bench/server` wrote a quarter fewer WAL pages per
/// request. PostgreSQL compresses such values itself (TOAST), so only this backend does it.
/// The column beside each blob says which encoding it is in; rows written before migration 3
/// are `plain`.
final class SQLiteBlobCodec {
    enum Encoding: Int64 {
        case plain = 0
        case zstd = 1
    }

    /// Below this a blob fits its row's page anyway, and compressing it saves no page.
    static let smallestCompressed = 512
    /// The most bytes one stored blob may decode to: beyond the largest body the server takes
    /// (64 MiB) and the answer beside it, so a damaged or forged frame cannot claim gigabytes.
    static let largestDecoded = 128 << 20
    private static let level: Int32 = 1

    // One of each per connection, used under the store's lock only: a context is 100 KB or so
    // of tables, and allocating it per call cost more than the compression.
    private let compressor: OpaquePointer
    private let decompressor: OpaquePointer

    init() throws(StoreError) {
        guard let compressor = ZSTD_createCCtx() else { throw StoreError("out of memory for a zstd compressor") }
        guard let decompressor = ZSTD_createDCtx() else {
            ZSTD_freeCCtx(compressor)
            throw StoreError("out of memory for a zstd decompressor")
        }
        self.compressor = compressor
        self.decompressor = decompressor
    }

    deinit {
        ZSTD_freeCCtx(compressor)
        ZSTD_freeDCtx(decompressor)
    }

    /// The bytes to store and their encoding: a zstd frame when that is smaller.
    func encode(_ bytes: [UInt8]) -> (bytes: [UInt8], encoding: Encoding) {
        guard bytes.count >= Self.smallestCompressed, bytes.count <= Self.largestDecoded else { return (bytes, .plain) }
        let bound = ZSTD_compressBound(bytes.count)
        guard ZSTD_isError(bound) == 0 else { return (bytes, .plain) }
        var frame = [UInt8](repeating: 0, count: bound)
        let written = frame.withUnsafeMutableBytes { output in
            bytes.withUnsafeBytes { input in
                ZSTD_compressCCtx(compressor, output.baseAddress, output.count, input.baseAddress, input.count, Self.level)
            }
        }
        guard ZSTD_isError(written) == 0, written < bytes.count else { return (bytes, .plain) }
        frame.removeSubrange(written...)
        return (frame, .zstd)
    }

    /// The stored bytes as they were given to `encode`.
    func decode(_ stored: [UInt8], encoding code: Int64) throws(StoreError) -> [UInt8] {
        switch Encoding(rawValue: code) {
        case .plain?:
            return stored
        case .zstd?:
            return try decompress(stored)
        case nil:
            throw StoreError("a stored blob has the unknown encoding \(code)")
        }
    }

    private func decompress(_ frame: [UInt8]) throws(StoreError) -> [UInt8] {
        // Frames written by `encode` always carry their size; anything else is not ours.
        let declared = frame.withUnsafeBytes { ZSTD_getFrameContentSize($0.baseAddress, $0.count) }
        guard declared < UInt64.max - 1 else { throw StoreError("a stored zstd frame is damaged or does not give its size") }
        guard declared <= UInt64(Self.largestDecoded) else {
            throw StoreError("a stored zstd frame claims \(declared) bytes, more than \(Self.largestDecoded)")
        }
        guard declared > 0 else { return [] }
        var output = [UInt8](repeating: 0, count: Int(declared))
        let written = output.withUnsafeMutableBytes { buffer in
            frame.withUnsafeBytes { input in
                ZSTD_decompressDCtx(decompressor, buffer.baseAddress, buffer.count, input.baseAddress, input.count)
            }
        }
        guard ZSTD_isError(written) == 0 else {
            throw StoreError("a stored zstd frame is damaged: \(String(cString: ZSTD_getErrorName(written)))")
        }
        guard written == Int(declared) else { throw StoreError("a stored zstd frame decoded to \(written) bytes, not the \(declared) it gives") }
        return output
    }
}
