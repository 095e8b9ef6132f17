import Foundation
import Testing
@testable import FingerlyEngine
@testable import FingerlyModel
@testable import FingerlyServer
@testable import FingerlyStore

/// Fifth hostile review: the fast reader and writer, the admission order, the PostgreSQL
/// store and its URL handling.
@Suite(.serialized) struct Review5AttackTests {
    typealias F = EngineFixtures

    /// R5-1: a body with a `report` member spelt with an escape (`"r\u0065port"`) before a
    /// plain one falls back to JSONDecoder, which judges the first of the two; the stored
    /// event's "report as sent" came from a scan that counts only unescaped names, so it kept
    /// the second. An app verifying a requestId then read a report the server never judged.
    /// Since issue 22 a member given twice, in any spelling, is refused: nothing is judged or stored.
    @Test func aReportMemberGivenTwiceInAnySpellingIsRefused() throws {
        let under = try EngineUnderTest("review5-escaped-report")
        let judged = F.report(F.host(), tag: "first")
        let other = F.report(F.host(machineId: "machine-2", uuid: "uuid-2", disk: "disk-2", nic: "nic-2"), tag: "second")
        let first = String(decoding: try JSONEncoder.fingerly.encode(judged), as: UTF8.self)
        let second = String(decoding: try JSONEncoder.fingerly.encode(other), as: UTF8.self)
        for (a, b) in [(first, second), (second, first)] {
            let text = #"{"client":{"proxy":false,"sdk":"fingerly-linux","version":"0.1.0"},"r\u0065port":"# + a + #","report":"# + b + "}"
            let refused = under.identify(Array(text.utf8))
            #expect(refused.status == 400 && refused.code == "duplicate_member")
            #expect(try refused.wireError().error.message.contains("'report'"))
        }
        // The same report once is judged, and stored as judged.
        let once = #"{"client":{"proxy":false,"sdk":"fingerly-linux","version":"0.1.0"},"r\u0065port":"# + first + "}"
        let identify = try under.identify(Array(once.utf8)).identifyAnswer()
        let event = try JSONDecoder.fingerly.decode(StoredEvent.self,
                                                    from: Data(under.engine.event(requestId: identify.requestId, organization: F.organization).body))
        // The judged report as the server keeps it: its identifiers re-keyed with the organization's secret.
        let secret = try #require(try under.store.transaction { (tx) throws(StoreError) -> [UInt8]? in
            try tx.identifierSecret(organization: F.organization, candidate: [1])
        })
        #expect(event.report == StoredIdentifierKeys(secret: secret).rekeyed(judged) && event.tag == "first")
    }

    /// R5-2: a password given as a URL query parameter (`?password=`, which libpq reads as
    /// well as the userinfo one) went into the error message of `serve`, `migrate` and `keys`.
    @Test func aPasswordInTheURLQueryIsNeverPrinted() {
        for url in ["postgresql://app@db.example/fingerly?password=hunter2",
                    "postgres://app@db.example/fingerly?sslmode=require&password=hunter2&connect_timeout=3",
                    "postgresql:///fingerly?host=/run/postgresql&password=hunter2",
                    "postgresql://app:hunter2@db.example/fingerly?password=hunter2",
                    "postgresql://app@db.example/fingerly?p%61ssword=hunter2",
                    "postgresql://app:hunt?er2@db.example/fingerly"] {
            let label = databaseLabel(url)
            #expect(!label.contains("hunter2") && !label.contains("er2"), "\(label)")
        }
        #expect(databaseLabel("/var/lib/fingerly/server.sqlite") == "/var/lib/fingerly/server.sqlite")
        #expect(databaseLabel("postgresql://app@db.example/fingerly?sslmode=require") == "postgresql://app@db.example/fingerly?sslmode=require")
        #expect(databaseLabel("postgresql://app:pw@db.example/fingerly?password=pw&sslmode=require")
            == "postgresql://app:***@db.example/fingerly?password=***&sslmode=require")
    }
}
