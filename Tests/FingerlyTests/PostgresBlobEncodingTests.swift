@testable import FingerlyPostgresStore
import Foundation
import Testing
@testable import FingerlyStore

/// PostgreSQL writes its blobs plain but reads either encoding, so a row may hold an LZ4 answer
/// (copied from a SQLite store). Rewriting that row must leave it saying how its new bytes are
/// kept, or the next read decodes plain JSON as an LZ4 block.
@Suite(.serialized, .enabled(if: PostgresCluster.isAvailable, "PostgreSQL's server binaries are not installed"))
struct PostgresBlobEncodingTests {
    @Test func anAnswerRewrittenOverAnLZ4RowReadsBackPlain() throws {
        let cluster = try PostgresCluster.shared()
        let database = try cluster.createDatabase()
        defer { cluster.dropDatabase(database) }
        let store = try PostgresStore(url: cluster.url(database: database))
        defer { store.close() }

        let first = Array(String(repeating: "{\"visitorId\":\"vis_first\",\"duplicate\":false}", count: 40).utf8)
        let compressed = StoredBlobCodec().encode(first)
        #expect(compressed.encoding == .lz4)
        let raw = try PostgresConnection(conninfo: cluster.url(database: database), connectTimeoutSeconds: 10)
        _ = try raw.execute("""
            INSERT INTO idempotency (organization, key, body_hash, state, response, status, created_at, updated_at, response_encoding)
            VALUES ('acme', 'k', $1, 'complete', $2, 200, 1, 1, 1)
            """, [.bytes([1]), .bytes(compressed.bytes)])
        raw.close()
        #expect(try store.transaction { tx throws(StoreError) in try tx.idempotency(organization: "acme", key: "k")?.response } == first)

        let second = Array("{\"visitorId\":\"vis_second\",\"duplicate\":false}".utf8)
        try store.transaction { tx throws(StoreError) in
            try tx.putIdempotency(IdempotencyRecord(organization: "acme", key: "k", bodyHash: [1], state: .complete,
                                                    response: second, status: 200, createdAt: 2, updatedAt: 2))
        }
        #expect(try store.transaction { tx throws(StoreError) in try tx.idempotency(organization: "acme", key: "k")?.response } == second)
    }
}
