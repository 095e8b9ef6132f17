import FingerlyModel
import FingerlyPolicy
import FingerlyStore

/// An answer of the engine: an HTTP status and its JSON body (an `IdentifyAnswer`, an event,
/// or a `WireError`), and the error code when it is one. The server writes it as is; the local
/// mode decodes it.
package struct EngineAnswer: Sendable, Hashable {
    package let status: Int
    package let body: [UInt8]
    package let code: String?

    package init(status: Int, body: [UInt8], code: String?) {
        self.status = status
        self.body = body
        self.code = code
    }
}

/// Resolution, idempotency and scoring over a store (server.md). SKELETON: the engine work
/// replaces the bodies.
package final class IdentityEngine: Sendable {
    package let store: any IdentityStore
    package let policy: Policy

    package init(store: any IdentityStore, policy: Policy) {
        self.store = store
        self.policy = policy
    }

    /// `POST /v1/identify` for an authenticated organization.
    package func identify(organization: String, idempotencyKey: String, body: [UInt8], deviceKeyID: String?,
                          signatureVerified: Bool, now: Int64) -> EngineAnswer {
        EngineAnswer(status: 501, body: Array(#"{"error":{"code":"not_implemented","message":"engine not built yet"}}"#.utf8), code: "not_implemented")
    }

    /// `GET /v1/events/{requestId}` for an authenticated organization.
    package func event(requestId: String, organization: String) -> EngineAnswer {
        EngineAnswer(status: 501, body: Array(#"{"error":{"code":"not_implemented","message":"engine not built yet"}}"#.utf8), code: "not_implemented")
    }
}
