@testable import FingerlySQLiteStore
import Foundation
import Testing
@testable import FingerlyStore

/// SQLite keeps large event documents and idempotency answers LZ4-compressed, says so in the
/// row, and gives back the bytes it was given; rows from before the change read as they are.
@Suite(.serialized) struct StoredBlobCodecTests {
    private static let document: [UInt8] = {
        // Shaped like an event: JSON with repeated field names around values that do not repeat.
        var text = "{\"report\":{\"probes\":["
        for index in 0..<120 {
            text += "{\"id\":\"probe.\(index)\",\"signals\":{\"hash\":\"\(String(index &* 2_654_435_761, radix: 16))\",\"ok\":true}},"
        }
        return Array((text + "{}]}}").utf8)
    }()

    private static func withStore(_ body: (SQLiteStore, String) throws -> Void) throws {
        let directory = try TestPaths.temporaryDirectory("sqlite-blobs")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/fingerly.db"
        let store = try SQLiteStore(path: path)
        defer { store.close() }
        try body(store, path)
    }

    /// Length and encoding of what the file holds, read past the store.
    private static func stored(_ path: String, _ sql: String) throws -> [(length: Int64, encoding: Int64)] {
        let connection = try SQLiteConnection(path: path, busyTimeoutMilliseconds: 1_000, checkpointOnClose: true)
        defer { connection.close() }
        return try connection.query(sql, []) { (length: $0.integer(0), encoding: $0.integer(1)) }
    }

    @Test func aLargeDocumentIsStoredCompressedAndReadBackWhole() throws {
        try Self.withStore { store, path in
            let small = Array("{\"tiny\":true}".utf8)
            try store.transaction { tx throws(StoreError) in
                try tx.insertEvent(EventRecord(requestId: "big", organization: "acme", visitorId: "v", receivedAt: 1, document: Self.document))
                try tx.insertEvent(EventRecord(requestId: "small", organization: "acme", visitorId: "v", receivedAt: 1, document: small))
                try tx.putIdempotency(IdempotencyRecord(organization: "acme", key: "k", bodyHash: [1], state: .complete,
                                                        response: Self.document, status: 200, createdAt: 1, updatedAt: 1))
            }
            let events = try Self.stored(path, "SELECT length(document), document_encoding FROM events ORDER BY request_id")
            #expect(events.count == 2)
            #expect(events[0].encoding == StoredBlobCodec.Encoding.lz4.rawValue)
            #expect(events[0].length * 2 < Int64(Self.document.count), "stored \(events[0].length) of \(Self.document.count) bytes")
            #expect(events[1].encoding == StoredBlobCodec.Encoding.plain.rawValue)
            #expect(events[1].length == Int64(small.count))
            let answers = try Self.stored(path, "SELECT length(response), response_encoding FROM idempotency")
            #expect(answers.map(\.encoding) == [StoredBlobCodec.Encoding.lz4.rawValue])

            let read = try store.transaction { tx throws(StoreError) in
                (try tx.event(requestId: "big", organization: "acme")?.document, try tx.event(requestId: "small", organization: "acme")?.document,
                 try tx.idempotency(organization: "acme", key: "k")?.response)
            }
            #expect(read.0 == Self.document)
            #expect(read.1 == small)
            #expect(read.2 == Self.document)
        }
    }

    /// Rows written before migration 3 have no encoding of their own: the column's default says plain.
    @Test func rowsFromBeforeTheEncodingColumnReadAsTheyAre() throws {
        try Self.withStore { store, path in
            let connection = try SQLiteConnection(path: path, busyTimeoutMilliseconds: 1_000, checkpointOnClose: true)
            _ = try connection.execute("INSERT INTO events (request_id, organization, visitor_id, received_at, document) VALUES ('old', 'acme', 'v', 1, ?1)",
                                       [.bytes(Self.document)])
            _ = try connection.execute("""
                INSERT INTO idempotency (organization, key, body_hash, state, response, status, created_at, updated_at)
                VALUES ('acme', 'old', x'01', 'complete', ?1, 200, 1, 1)
                """, [.bytes(Self.document)])
            connection.close()
            let read = try store.transaction { tx throws(StoreError) in
                (try tx.event(requestId: "old", organization: "acme")?.document, try tx.idempotency(organization: "acme", key: "old")?.response)
            }
            #expect(read.0 == Self.document)
            #expect(read.1 == Self.document)
        }
    }

    /// A damaged file gives a store error naming the damage, never a crash or a huge allocation.
    @Test func aDamagedOrBoastfulBlobIsAnErrorNotACrash() throws {
        let codec = StoredBlobCodec()
        let frame = codec.encode(Self.document)
        #expect(frame.encoding == .lz4)
        #expect(try StoredBlobCodec.decode(frame.bytes, encoding: frame.encoding.rawValue) == Self.document)

        var truncated = frame.bytes
        truncated.removeLast(8)
        #expect(throws: StoreError.self) { try StoredBlobCodec.decode(truncated, encoding: 1) }
        var flipped = frame.bytes
        flipped[flipped.count / 2] ^= 0x5A
        do {
            // A flipped byte may still decode, but never to more than the blob declares.
            let decoded = try StoredBlobCodec.decode(flipped, encoding: 1)
            #expect(decoded.count == Self.document.count)
        } catch {
            #expect(!error.message.isEmpty)
        }
        #expect(throws: StoreError.self) { try StoredBlobCodec.decode([0x10, 0, 0, 0] + Array("not a block".utf8), encoding: 1) }
        #expect(throws: StoreError.self) { try StoredBlobCodec.decode([], encoding: 1) }
        #expect(throws: StoreError.self) { try StoredBlobCodec.decode([1, 2, 3, 4], encoding: 1) }
        #expect(throws: StoreError.self) { try StoredBlobCodec.decode(frame.bytes, encoding: 7) }
        // A length that understates or overstates the block is refused, not trusted.
        var short = frame.bytes
        short[0] = short[0] &- 1
        #expect(throws: StoreError.self) { try StoredBlobCodec.decode(short, encoding: 1) }
        var long = frame.bytes
        long[1] = long[1] &+ 1
        #expect(throws: StoreError.self) { try StoredBlobCodec.decode(long, encoding: 1) }

        // A length of 4 GiB - 1: refused before any allocation.
        let boastful: [UInt8] = [0xFF, 0xFF, 0xFF, 0xFF, 0x10, 0x41]
        let error = #expect(throws: StoreError.self) { try StoredBlobCodec.decode(boastful, encoding: 1) }
        #expect(error?.message.contains("claims") == true, "\(String(describing: error))")
    }

    @Test func blobsThatDoNotShrinkStayPlain() throws {
        let codec = StoredBlobCodec()
        var generator = SystemRandomNumberGenerator()
        let noise = (0..<4_096).map { _ in UInt8.random(in: 0...255, using: &generator) }
        let result = codec.encode(noise)
        #expect(result.encoding == .plain)
        #expect(result.bytes == noise)
        #expect(codec.encode([]).encoding == .plain)
    }
}
