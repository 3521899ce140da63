import AsyncHTTPClient
import Crypto
import Foundation
import Logging
import NIOCore
import ServiceLifecycle
import Synchronization

/// Standard Webhooks signatures (standardwebhooks.com): `webhook-signature` is `v1,` + base64 of
/// HMAC-SHA256(secret, "<webhook-id>.<webhook-timestamp>.<body>"), one per secret, space-separated, so a
/// receiver can rotate: it accepts any signature it can verify.
package struct WebhookSigner: Sendable {
    let secrets: [[UInt8]]

    /// `whsec_<base64>` (the Standard Webhooks form) or plain base64, at least 16 bytes each; nil when one is
    /// not. - Parameter texts: the configured secrets (`webhooks.secrets`).
    package init?(secrets texts: [String]) {
        var secrets: [[UInt8]] = []
        for text in texts {
            let encoded = text.hasPrefix("whsec_") ? String(text.dropFirst(6)) : text
            guard let bytes = Data(base64Encoded: encoded), bytes.count >= 16 else { return nil }
            secrets.append([UInt8](bytes))
        }
        self.secrets = secrets
    }

    /// Secrets already decoded (`[]`: webhooks off).
    package init(decoded secrets: [[UInt8]]) {
        self.secrets = secrets
    }

    var canSign: Bool { !self.secrets.isEmpty }

    func signature(id: String, timestamp: Int, body: [UInt8]) -> String {
        let content = Array("\(id).\(timestamp).".utf8) + body
        return self.secrets.map { secret in
            let mac = HMAC<SHA256>.authenticationCode(for: content, using: SymmetricKey(data: secret))
            return "v1," + Data(mac).base64EncodedString()
        }.joined(separator: " ")
    }
}

/// One webhook: where, and the event once it is known (a job's end, a batch's end).
package final class WebhookDelivery: Sendable {
    let url: URL
    /// Waits for the event (it may be a running job) and returns its type and JSON `data`. Taken (and so
    /// released) once called: what it holds (an upload's bytes) is not kept through an hour of retries.
    private let event: Mutex<(@Sendable () async -> (type: String, data: [UInt8]))?>
    /// Called once the delivery is over: delivered, given up or refused.
    let onEnd: @Sendable () -> Void

    package init(
        url: URL, onEnd: @escaping @Sendable () -> Void = {},
        event: @escaping @Sendable () async -> (type: String, data: [UInt8])
    ) {
        self.url = url
        self.onEnd = onEnd
        self.event = Mutex(event)
    }

    /// The event, computed once.
    func resolve() async -> (type: String, data: [UInt8])? {
        guard let event = self.event.withLock({ $0.take() }) else { return nil }
        return await event()
    }
}

/// A webhook whose event is known, as a durable outbox keeps it: where, its `webhook-id` (the same on every
/// attempt), the event, and when it was first due (retries stop `webhooks.maxRetrySeconds` after).
package struct WebhookMessage: Codable, Sendable {
    let url: String
    let id: String
    let type: String
    /// The event's `data`, JSON.
    let data: String
    let createdAt: Double
    /// The traces the delivery ends (a fleet batch's items', with `tracing.propagate`): each gets a span of every
    /// attempt (`Traces.end`).
    var traces: [String]? = nil
}

/// Where resolved webhooks are kept until delivered, across restarts (`PostgresBatches` with `queue.kind:
/// postgres`). Without one, deliveries live in memory.
package protocol WebhookOutbox: Sendable {
    /// Keeps `message` for delivery. - Throws: when it cannot (the dispatcher then delivers from memory).
    func keep(_ message: WebhookMessage) async throws
}

/// How one attempt at a delivery ended.
package enum WebhookAttempt: Sendable {
    case delivered
    case refused(String)
    case failed(String)

    /// `delivered`, `refused` or `failed`.
    var result: WebhookResult {
        switch self {
        case .delivered: .delivered
        case .refused: .refused
        case .failed: .failed
        }
    }
}

/// Delivers webhooks in the Standard Webhooks format: a JSON body `{"type", "timestamp", "data"}` POSTed with
/// `webhook-id` (the same on every retry), `webhook-timestamp` and `webhook-signature`. A delivery that fails
/// (no answer, or not 2xx) is retried with exponential backoff (`firstRetrySeconds`, doubling, at most 5
/// minutes apart) until `maxRetrySeconds` have passed. Every attempt first checks the destination with the
/// downloads' SSRF policy, and connects to the address it checked. Deliveries live in memory (a restart loses
/// the ones not yet made) unless an outbox keeps them (`keep(in:)`): then each one is handed to it once its event
/// is known, and the outbox's workers make the attempts (`attempt(_:)`).
package final class WebhookDispatcher: Service, Sendable {
    let signer: WebhookSigner
    let downloader: Downloader
    let metrics: ServiceMetrics
    let firstRetrySeconds: Double
    let maxRetrySeconds: Double
    let logger: Logger
    /// Attempts under way at once (`webhooks.maxConcurrentDeliveries`): each holds a socket, and a receiver that
    /// hangs must not take every descriptor the process has. Deliveries waiting for their event hold none.
    let sending: AsyncLimit
    private let outbox = Mutex<(any WebhookOutbox)?>(nil)
    private let stream: AsyncStream<WebhookDelivery>
    private let continuation: AsyncStream<WebhookDelivery>.Continuation

    package init(
        signer: WebhookSigner, downloader: Downloader, metrics: ServiceMetrics, firstRetrySeconds: Double = 1,
        maxRetrySeconds: Double = 3600, maxConcurrentDeliveries: Int = 64, logger: Logger
    ) {
        self.sending = AsyncLimit(maxConcurrentDeliveries)
        self.signer = signer
        self.downloader = downloader
        self.metrics = metrics
        self.firstRetrySeconds = firstRetrySeconds
        self.maxRetrySeconds = maxRetrySeconds
        self.logger = logger
        (self.stream, self.continuation) = AsyncStream.makeStream(of: WebhookDelivery.self)
    }

    /// Checks `text` as a callback URL: an http(s) URL whose destination the SSRF policy allows.
    /// - Throws: `invalid-url`, `destination-not-allowed`; `webhooks-not-configured` without secrets.
    package func validate(_ text: String) async throws -> URL {
        guard self.signer.canSign else {
            throw ServiceError(
                .webhooksNotConfigured, "callbackURL needs webhooks.secrets (Standard Webhooks signing secrets)")
        }
        let url = try Downloader.validate(text)
        try await self.downloader.checkDestination(url)
        return url
    }

    /// Hands every delivery whose event is known to `outbox` from now on.
    package func keep(in outbox: any WebhookOutbox) {
        self.outbox.withLock { $0 = outbox }
    }

    /// Queues a delivery; it is made once its event is known.
    package func enqueue(_ delivery: WebhookDelivery) {
        self.continuation.yield(delivery)
    }

    /// Runs deliveries until shutdown; those still waiting to be retried then are dropped.
    package func run() async throws {
        await withDiscardingTaskGroup { group in
            await withGracefulShutdownHandler {
                for await delivery in self.stream {
                    group.addTask { await self.deliver(delivery) }
                }
                group.cancelAll()
            } onGracefulShutdown: {
                self.continuation.finish()
            }
        }
    }

    private func deliver(_ delivery: WebhookDelivery) async {
        defer { delivery.onEnd() }
        guard let (type, data) = await delivery.resolve() else { return }
        let id = "msg_" + UUID().uuidString.lowercased()
        if let outbox = self.outbox.withLock({ $0 }) {
            let message = WebhookMessage(
                url: delivery.url.absoluteString, id: id, type: type, data: String(decoding: data, as: UTF8.self),
                createdAt: Date().timeIntervalSince1970)
            do {
                try await outbox.keep(message)
                return
            } catch {
                self.logger.warning(
                    "cannot keep a webhook in the outbox; delivering it from memory",
                    metadata: ["webhook.id": "\(id)", "error": "\(String(reflecting: error))"])
            }
        }
        let started = ContinuousClock.now
        var wait = self.firstRetrySeconds
        var attempt = 0
        while !Task.isCancelled {
            attempt += 1
            let now = Date()
            let timestamp = Int(now.timeIntervalSince1970)
            let body = Self.payload(type: type, data: data, at: now)
            // nil: shutting down while waiting for a place.
            guard
                let outcome = await self.sending.run({
                    await self.attempt(delivery.url, id: id, timestamp: timestamp, body: body)
                })
            else { return }
            switch outcome {
            case .delivered:
                self.metrics.webhook(.delivered)
                return
            case .refused(let reason):
                self.metrics.webhook(.refused)
                self.logger.warning(
                    "webhook refused by the destination policy",
                    metadata: ["webhook.id": "\(id)", "error": "\(reason)"])
                return
            case .failed(let reason):
                let elapsed = ContinuousClock.now - started
                guard elapsed + .milliseconds(Int64(wait * 1000)) <= .milliseconds(Int64(self.maxRetrySeconds * 1000))
                else {
                    self.metrics.webhook(.failed)
                    self.logger.warning(
                        "webhook given up",
                        metadata: ["webhook.id": "\(id)", "webhook.attempts": "\(attempt)", "error": "\(reason)"])
                    return
                }
                self.metrics.webhook(.retried)
                try? await Task.sleep(for: .milliseconds(Int64(wait * 1000)))
                wait = min(wait * 2, 300)
            }
        }
    }

    private typealias Outcome = WebhookAttempt

    /// One attempt at `message`, as an outbox's worker makes it (the same checks, signing and concurrency bound as
    /// a delivery from memory); counted as `delivered` or `refused`, the caller counts retries and give-ups.
    func attempt(_ message: WebhookMessage) async -> WebhookAttempt {
        guard let url = URL(string: message.url) else { return .refused("not a URL") }
        let now = Date()
        let body = Self.payload(type: message.type, data: Array(message.data.utf8), at: now)
        guard
            let outcome = await self.sending.run({
                await self.attempt(
                    url, id: message.id, timestamp: Int(now.timeIntervalSince1970), body: body,
                    traces: message.traces ?? [])
            })
        else { return .failed("shutting down") }
        switch outcome {
        case .delivered: self.metrics.webhook(.delivered)
        case .refused(let reason):
            self.metrics.webhook(.refused)
            self.logger.warning(
                "webhook refused by the destination policy",
                metadata: ["webhook.id": "\(message.id)", "error": "\(reason)"])
        case .failed: break
        }
        return outcome
    }

    /// The wait before retry `attempt + 1` after `attempt` failed ones: `firstRetrySeconds`, doubling, at most 5 min.
    func retryWait(after attempt: Int) -> Double {
        min(self.firstRetrySeconds * pow(2, Double(max(0, attempt - 1))), 300)
    }

    private func attempt(
        _ url: URL, id: String, timestamp: Int, body: [UInt8], traces: [String] = []
    ) async -> Outcome {
        let address: IPAddress
        do {
            address = try await self.downloader.checkDestination(url)
        } catch let error as ServiceError where error.code == .destinationNotAllowed {
            return .refused(error.message)
        } catch {
            return .failed("\(error)")
        }
        let client = self.downloader.pinnedClient(host: Downloader.bareHost(url), address: address)
        let outcome = await Traces.span("webhook.deliver", ofKind: .client, attributes: ["webhook.id": id]) {
            let started = Traces.now()
            let outcome = await self.post(url, id: id, timestamp: timestamp, body: body, client: client)
            Traces.end(
                traces, with: "batch.webhook", from: started, linkedToCurrent: true,
                attributes: ["webhook.id": id, "webhook.result": outcome.result.rawValue],
                failed: outcome.result != .delivered)
            return outcome
        }
        try? await client.shutdown()
        return outcome
    }

    private func post(_ url: URL, id: String, timestamp: Int, body: [UInt8], client: HTTPClient) async -> Outcome {
        var request = HTTPClientRequest(url: url.absoluteString)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        request.headers.add(name: "User-Agent", value: "transcode-server/1 (+gif-to-mp4)")
        request.headers.add(name: "webhook-id", value: id)
        request.headers.add(name: "webhook-timestamp", value: String(timestamp))
        request.headers.add(
            name: "webhook-signature", value: self.signer.signature(id: id, timestamp: timestamp, body: body))
        request.body = .bytes(ByteBuffer(bytes: body))
        Traces.inject(into: &request.headers)
        do {
            let response = try await client.execute(request, timeout: .seconds(10))
            _ = try? await response.body.collect(upTo: 64 * 1024)
            return (200..<300).contains(Int(response.status.code))
                ? .delivered : .failed("the receiver answered \(response.status.code)")
        } catch {
            return .failed("\(error)")
        }
    }

    /// `{"type": …, "timestamp": …, "data": …}` with `data` as given (already JSON).
    static func payload(type: String, data: [UInt8], at date: Date) -> [UInt8] {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        let head = #"{"type":"\#(type)","timestamp":"\#(formatter.string(from: date))","data":"#
        return Array(head.utf8) + data + Array("}".utf8)
    }
}

extension Optional {
    /// `map` with an async transform.
    package func asyncMap<T>(_ transform: (Wrapped) async throws -> T) async rethrows -> T? {
        guard let self else { return nil }
        return try await transform(self)
    }
}
