import Crypto
import Foundation

/// Verifies the service's webhooks (Standard Webhooks, standardwebhooks.com): `webhook-signature` holds one or more
/// `v1,<base64 HMAC-SHA256(secret, "<webhook-id>.<webhook-timestamp>.<body>")>`, space-separated; a delivery is
/// genuine when one of them is made with one of your secrets, and fresh when its timestamp is within `tolerance`
/// of now. Deliveries are retried with the same `webhook-id`: keep the ids you handled and skip repeats.
public struct WebhookVerifier: Sendable {
    /// Why a delivery is refused.
    public enum Failure: Error, Sendable, Equatable {
        case missingHeader(String)
        case badTimestamp
        /// Older or newer than the tolerance: a replay, or a clock far off.
        case stale(seconds: Int)
        case noMatchingSignature
    }

    private let secrets: [SymmetricKey]
    public let tolerance: Duration

    /// - Parameter secrets: the service's `webhooks.secrets`, `whsec_<base64>` or plain base64, at least 16 bytes.
    /// - Throws: `TranscodeClientError.badRequest` for a secret that is not so.
    public init(secrets: [String], tolerance: Duration = .seconds(300)) throws {
        self.secrets = try secrets.map { text in
            let encoded = text.hasPrefix("whsec_") ? String(text.dropFirst(6)) : text
            guard let bytes = Data(base64Encoded: encoded), bytes.count >= 16 else {
                throw TranscodeClientError.badRequest("a webhook secret is whsec_ and base64 of at least 16 bytes")
            }
            return SymmetricKey(data: bytes)
        }
        self.tolerance = tolerance
    }

    /// Checks one delivery. - Parameter header: the request's header by name, case-insensitively.
    /// - Returns: the delivery's `webhook-id`.
    @discardableResult
    public func verify(body: Data, now: Date = Date(), header: (String) -> String?) throws(Failure) -> String {
        guard let id = header("webhook-id") else { throw .missingHeader("webhook-id") }
        guard let timestampText = header("webhook-timestamp") else { throw .missingHeader("webhook-timestamp") }
        guard let signatures = header("webhook-signature") else { throw .missingHeader("webhook-signature") }
        guard let timestamp = Int(timestampText) else { throw .badTimestamp }
        let age = Int(now.timeIntervalSince1970) - timestamp
        if Double(abs(age)) > Double(self.tolerance.components.seconds) { throw .stale(seconds: age) }
        let content = Data("\(id).\(timestamp).".utf8) + body
        for candidate in signatures.split(separator: " ") {
            guard candidate.hasPrefix("v1,"), let mac = Data(base64Encoded: String(candidate.dropFirst(3))) else {
                continue
            }
            for secret in self.secrets
            where HMAC<SHA256>.isValidAuthenticationCode(mac, authenticating: content, using: secret) {
                return id
            }
        }
        throw .noMatchingSignature
    }
}
