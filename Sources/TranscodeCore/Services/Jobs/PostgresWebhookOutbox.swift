import Foundation
import Logging
import PostgresNIO
import ServiceLifecycle
import Synchronization

/// The fleet's webhook outbox (`queue.kind: postgres`): a delivery whose event is known is kept as a job of kind
/// `webhook` in `transcode_jobs` (its result key the `webhook-id`), so it survives restarts, and any node's
/// `QueueWorker` of that kind (run by `PostgresBatches` beside its conversions) claims and attempts it, up to
/// `maxDeliveries` at once, with the dispatcher's checks, signing and backoff, until `webhooks.maxRetrySeconds` have
/// passed.
package final class PostgresWebhookOutbox: WebhookOutbox, JobHandler, Sendable {
    let queue: PostgresQueue
    let webhooks: WebhookDispatcher
    let metrics: ServiceMetrics
    let configuration: QueueConfiguration
    let logger: Logger
    private let schema: JobSchema

    /// Webhook deliveries one node makes at once from the outbox (the dispatcher's own bound applies too).
    static let maxDeliveries = 16

    package init(
        queue: PostgresQueue, schema: JobSchema, webhooks: WebhookDispatcher, metrics: ServiceMetrics,
        configuration: QueueConfiguration, logger: Logger
    ) {
        self.queue = queue
        self.schema = schema
        self.webhooks = webhooks
        self.metrics = metrics
        self.configuration = configuration
        self.logger = logger
    }

    package func keep(_ message: WebhookMessage) async throws {
        try await self.configuration.bounded {
            try await self.schema.migrate()
            try await self.queue.client.withConnection { try await self.keep(message, on: $0) }
        }
    }

    /// Keeps `message` on `connection`, in its caller's transaction (a batch marked announced and its webhook kept
    /// together).
    func keep(_ message: WebhookMessage, on connection: PostgresConnection) async throws {
        let payload = String(decoding: try JSONEncoder().encode(message), as: UTF8.self)
        // Retried until `webhooks.maxRetrySeconds` have passed, not until a number of attempts.
        _ = try await PostgresQueue.enqueue(
            on: connection, resultKey: message.id, kind: .webhook, payload: payload, maxAttempts: 1_000_000,
            logger: self.logger)
    }

    func hasRoom(running: Int) -> Bool {
        running < Self.maxDeliveries
    }

    /// One attempt at a claimed webhook: done when delivered or refused, retried after the dispatcher's backoff
    /// while `webhooks.maxRetrySeconds` allow, then given up.
    func perform(_ claimed: PostgresQueue.Claimed) async {
        guard let message = try? JSONDecoder().decode(WebhookMessage.self, from: Data(claimed.payload.utf8)) else {
            _ = try? await self.configuration.bounded {
                try await self.queue.complete(claimed.id, owner: claimed.owner)
            }
            return
        }
        let outcome = await self.webhooks.attempt(message)
        do {
            switch outcome {
            case .delivered, .refused:
                _ = try await self.configuration.bounded {
                    try await self.queue.complete(claimed.id, owner: claimed.owner)
                }
            case .failed(let reason):
                let wait = self.webhooks.retryWait(after: claimed.attempt)
                if Date().timeIntervalSince1970 - message.createdAt + wait > self.webhooks.maxRetrySeconds {
                    self.metrics.webhook(.failed)
                    self.logger.warning(
                        "webhook given up",
                        metadata: [
                            "webhook.id": "\(message.id)", "webhook.attempts": "\(claimed.attempt)",
                            "error": "\(reason)",
                        ])
                    _ = try await self.configuration.bounded {
                        try await self.queue.complete(claimed.id, owner: claimed.owner)
                    }
                } else {
                    self.metrics.webhook(.retried)
                    _ = try await self.configuration.bounded {
                        try await self.queue.fail(
                            claimed.id, owner: claimed.owner, error: reason, retryAfterSeconds: wait)
                    }
                }
            }
        } catch {
            self.logger.warning(
                "cannot record a webhook attempt; its lease will expire and it is tried again",
                metadata: ["webhook.id": "\(message.id)"])
        }
    }
}

/// The job database's schema, brought up to date once per process: the first caller migrates (a no-op under the
/// lock when another node did), later ones return at once.
package final class JobSchema: Sendable {
    let queue: PostgresQueue
    let logger: Logger
    private let migrated = Mutex(false)

    package init(queue: PostgresQueue, logger: Logger) {
        self.queue = queue
        self.logger = logger
    }

    func migrate() async throws {
        guard !self.migrated.withLock({ $0 }) else { return }
        let applied = try await self.queue.migrate()
        if !applied.isEmpty { self.logger.info("job database migrated", metadata: ["versions": "\(applied)"]) }
        self.migrated.withLock { $0 = true }
    }
}
