import Foundation
import Hummingbird
import HummingbirdTesting
import Synchronization
import TestSupport
import Testing

@testable import TranscodeServer

/// A webhook receiver on loopback: records every delivery, answers 500 to the first `failures`.
final class WebhookReceiver: Sendable {
    struct Delivery: Sendable {
        let headers: [String: String]
        let body: [UInt8]
    }

    let failures: Int
    /// How long each answer is held back (a receiver that hangs).
    let hold: Duration
    private let received = Mutex<[Delivery]>([])
    /// Requests being answered now, and the most there were at once.
    private let inFlight = Mutex<(now: Int, most: Int)>((0, 0))

    init(failures: Int = 0, hold: Duration = .zero) {
        self.failures = failures
        self.hold = hold
    }

    /// The most deliveries that were being answered at once.
    var mostAtOnce: Int { self.inFlight.withLock { $0.most } }

    var deliveries: [Delivery] { self.received.withLock { $0 } }

    func router() -> Router<BasicRequestContext> {
        let router = Router()
        router.post("hook") { request, _ -> Response in
            self.inFlight.withLock { $0 = ($0.now + 1, max($0.most, $0.now + 1)) }
            defer { self.inFlight.withLock { $0.now -= 1 } }
            if self.hold > .zero { try await Task.sleep(for: self.hold) }
            let body = try await request.body.collect(upTo: 1 << 20)
            var headers: [String: String] = [:]
            for field in request.headers { headers[field.name.canonicalName] = field.value }
            let count = self.received.withLock { received in
                received.append(Delivery(headers: headers, body: Array(body.readableBytesView)))
                return received.count
            }
            return Response(status: count <= self.failures ? .internalServerError : .noContent)
        }
        return router
    }

    /// Waits until `count` deliveries arrived (or 30 s passed).
    func wait(for count: Int) async throws {
        for _ in 0..<300 where self.deliveries.count < count {
            try await Task.sleep(for: .milliseconds(100))
        }
    }
}

@Suite(.tags(.integration), .timeLimit(.minutes(10))) struct WebhookTests {
    /// 32 bytes, Standard Webhooks form.
    static let secret = "whsec_" + Data((0..<32).map { UInt8($0 * 7 % 256) }).base64EncodedString()
    static let retired = "whsec_" + Data((0..<24).map { UInt8(200 - $0) }).base64EncodedString()

    static func configure(_ configuration: inout ServerConfiguration) {
        configuration.webhooks.secrets = [Self.secret, Self.retired]
        configuration.webhooks.firstRetrySeconds = 0.1
    }

    func withReceiver(_ receiver: WebhookReceiver, _ body: @Sendable (Int) async throws -> Void) async throws {
        let application = Application(
            router: receiver.router(), configuration: .init(address: .hostname("127.0.0.1", port: 0)))
        try await application.test(.live) { client in
            try await body(try #require(client.port))
        }
    }

    /// Checks a Standard Webhooks signature with Python's hmac (an implementation independent of ours).
    static func verifyWithPython(_ delivery: WebhookReceiver.Delivery, secret: String) async throws -> Bool {
        try await withTemporaryDirectory { directory in
            let bodyPath = directory + "/body"
            try Data(delivery.body).write(to: URL(fileURLWithPath: bodyPath))
            let script = """
                import base64, hashlib, hmac, sys
                secret, msg_id, ts, header, path = sys.argv[1:]
                key = base64.b64decode(secret.removeprefix("whsec_"))
                body = open(path, "rb").read()
                expected = base64.b64encode(hmac.new(key, f"{msg_id}.{ts}.".encode() + body, hashlib.sha256).digest()).decode()
                ok = any(hmac.compare_digest(part.split(",", 1)[1], expected) for part in header.split(" ") if part.startswith("v1,"))
                print("valid" if ok else "invalid")
                """
            let run = try await runProcess(
                "/usr/bin/python3",
                [
                    "-c", script, secret, delivery.headers["webhook-id"] ?? "",
                    delivery.headers["webhook-timestamp"] ?? "", delivery.headers["webhook-signature"] ?? "", bodyPath,
                ], timeout: .seconds(30))
            return run.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "valid"
        }
    }

    /// Delivered after the receiver fails twice: three attempts, one webhook-id, valid signatures for both
    /// secrets, the result in the body.
    @Test func deliveredSignedAndRetried() async throws {
        let receiver = WebhookReceiver(failures: 2)
        try await withReceiver(receiver) { port in
            try await withHarness(configure: Self.configure) { harness in
                let hook = "http://127.0.0.1:\(port)/hook"
                let body = try JSONSerialization.data(withJSONObject: [
                    "url": harness.originURL("/corpus/cartoon_hotdog.gif"), "callbackURL": hook,
                ])
                let reply = try await harness.request(
                    .POST, "/transcode", headers: [("Content-Type", "application/json")], body: Array(body))
                #expect(reply.status == 200)
                let key = try #require(try reply.json()["key"] as? String)
                try await receiver.wait(for: 3)
                let deliveries = receiver.deliveries
                try #require(deliveries.count == 3)
                #expect(Set(deliveries.compactMap { $0.headers["webhook-id"] }).count == 1)
                #expect(deliveries[0].headers["webhook-id"]?.hasPrefix("msg_") == true)
                for delivery in deliveries {
                    #expect(try await Self.verifyWithPython(delivery, secret: Self.secret))
                    #expect(try await Self.verifyWithPython(delivery, secret: Self.retired))
                    #expect(delivery.headers["content-type"] == "application/json")
                }
                let last = try #require(
                    try JSONSerialization.jsonObject(with: Data(deliveries[2].body)) as? [String: Any])
                #expect(last["type"] as? String == "transcode.done")
                #expect(last["timestamp"] as? String != nil)
                let data = try #require(last["data"] as? [String: Any])
                #expect(data["status"] as? String == "done")
                #expect(data["url"] as? String == harness.originURL("/corpus/cartoon_hotdog.gif"))
                #expect((data["result"] as? [String: Any])?["key"] as? String == key)
                // A tampered body fails verification.
                var tampered = deliveries[2]
                tampered = .init(headers: tampered.headers, body: tampered.body + Array(" ".utf8))
                #expect(try await Self.verifyWithPython(tampered, secret: Self.secret) == false)
                let counters = harness.services.transcodes.counters
                #expect(counters.webhooks["retried"] == 2)
                #expect(counters.webhooks["delivered"] == 1)
            }
        }
    }

    /// A job that fails is reported too; an upload takes callbackURL in its query.
    @Test func failuresAndUploadsAreReported() async throws {
        let receiver = WebhookReceiver()
        try await withReceiver(receiver) { port in
            try await withHarness(configure: Self.configure) { harness in
                let hook = "http://127.0.0.1:\(port)/hook"
                let body = try JSONSerialization.data(withJSONObject: [
                    "url": harness.originURL("/corpus/no-such.gif"), "callbackURL": hook,
                ])
                let reply = try await harness.request(
                    .POST, "/transcode", headers: [("Content-Type", "application/json")], body: Array(body))
                #expect(reply.status == 404)
                let upload = try await harness.request(
                    .POST, "/transcode?callbackURL=\(hook)", headers: [("Content-Type", "image/gif")],
                    body: try corpusBytes("loop_1.gif"))
                #expect(upload.status == 200)
                try await receiver.wait(for: 2)
                let events = try receiver.deliveries.map {
                    try #require(try JSONSerialization.jsonObject(with: Data($0.body)) as? [String: Any])
                }
                let types = Set(events.compactMap { $0["type"] as? String })
                #expect(types == ["transcode.failed", "transcode.done"])
                let failed = try #require(events.first { $0["type"] as? String == "transcode.failed" })
                let error = (failed["data"] as? [String: Any])?["error"] as? [String: Any]
                #expect(error?["code"] as? String == "origin-not-found")
            }
        }
    }

    /// The callback's destination is checked by the downloads' SSRF policy before any work, and a service
    /// without secrets refuses callbacks.
    @Test func refusedDestinationsAndMissingSecrets() async throws {
        try await withHarness(configure: {
            Self.configure(&$0)
            $0.download.allowLoopback = false
        }) { harness in
            for hook in ["http://127.0.0.1:9/hook", "http://[::1]:9/hook", "http://169.254.169.254/latest"] {
                let reply = try await harness.request(
                    .POST, "/transcode?callbackURL=\(hook)", headers: [("Content-Type", "image/gif")],
                    body: try corpusBytes("loop_1.gif"))
                #expect(reply.status == 403, "\(hook)")
                #expect(reply.errorCode == "destination-not-allowed")
            }
            let scheme = try await harness.request(
                .POST, "/transcode?callbackURL=file:///etc/passwd", headers: [("Content-Type", "image/gif")],
                body: try corpusBytes("loop_1.gif"))
            #expect(scheme.status == 400)
            #expect(harness.services.transcodes.counters.transcodes == 0)
        }
        try await withHarness { harness in
            let reply = try await harness.request(
                .POST, "/transcode?callbackURL=https://example.com/hook", headers: [("Content-Type", "image/gif")],
                body: try corpusBytes("loop_1.gif"))
            #expect(reply.status == 501)
            #expect(reply.errorCode == "webhooks-not-configured")
        }
    }

    /// Receivers that hang do not take a socket each: no more than `webhooks.maxConcurrentDeliveries` attempts
    /// are under way at once, and the others are made as places free up.
    @Test func concurrentDeliveriesAreCapped() async throws {
        let receiver = WebhookReceiver(hold: .milliseconds(300))
        try await withReceiver(receiver) { port in
            try await withHarness(configure: {
                Self.configure(&$0)
                $0.webhooks.maxConcurrentDeliveries = 2
            }) { harness in
                let hook = try #require(URL(string: "http://127.0.0.1:\(port)/hook"))
                for _ in 0..<8 {
                    harness.services.webhooks.enqueue(
                        WebhookDelivery(url: hook) { ("test.event", Array(#"{"n":1}"#.utf8)) })
                }
                try await receiver.wait(for: 8)
                #expect(receiver.deliveries.count == 8)
                // Never more than the cap (without it, all 8 arrive at once); exactly 2 is not asserted: under
                // the whole suite the attempts may happen not to overlap.
                #expect((1...2).contains(receiver.mostAtOnce), "\(receiver.mostAtOnce) at once")
            }
        }
    }

    @Test func secretsAreCheckedAtStartup() async throws {
        #expect(WebhookSigner(secrets: ["whsec_c2hvcnQ="]) == nil)
        #expect(WebhookSigner(secrets: ["not base64!"]) == nil)
        #expect(WebhookSigner(secrets: [Self.secret])?.canSign == true)
    }
}
