import Foundation
import Hummingbird
import HummingbirdTesting
import Synchronization
import TestSupport
import Testing

@testable import TranscodeCore
@testable import TranscodeHTTP
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

    /// The webhook verification snippets of docs/cms.md (```LANGUAGE webhook-verify), by language: what a CMS
    /// copies, run as written, so that the guide cannot drift from what the server sends.
    static func verifier(_ language: String) throws -> String {
        let guide = try PackagingTests.read("docs/cms.md")
        let fence = "```\(language) webhook-verify\n"
        let start = try #require(guide.range(of: fence), "docs/cms.md has no \(fence)")
        let end = try #require(guide.range(of: "```", range: start.upperBound..<guide.endIndex))
        return String(guide[start.upperBound..<end.lowerBound])
    }

    /// Checks a Standard Webhooks signature with the guide's snippet in `language` (python, js, php): an
    /// implementation independent of ours, run by Python, Node.js or PHP. - Returns: whether it said valid.
    static func verify(
        _ delivery: WebhookReceiver.Delivery, secret: String, with language: String = "python", body: [UInt8]? = nil
    ) async throws -> Bool {
        try await withTemporaryDirectory { directory in
            let (interpreter, fileExtension) =
                switch language {
                case "js": ("/usr/bin/node", "js")
                case "php": ("/usr/bin/php", "php")
                default: ("/usr/bin/python3", "py")
                }
            let script = directory + "/verify." + fileExtension
            try Data(try Self.verifier(language).utf8).write(to: URL(fileURLWithPath: script))
            let bodyPath = directory + "/body"
            try Data(body ?? delivery.body).write(to: URL(fileURLWithPath: bodyPath))
            let run = try await runProcess(
                interpreter,
                [
                    script, secret, delivery.headers["webhook-id"] ?? "", delivery.headers["webhook-timestamp"] ?? "",
                    delivery.headers["webhook-signature"] ?? "", bodyPath,
                ], timeout: .seconds(30))
            let said = run.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(run.status == 0 && ["valid", "invalid"].contains(said), "\(language): \(run.stderr)")
            return said == "valid"
        }
    }

    /// The guide's three snippets accept a real delivery, and refuse it with one byte of the body changed or
    /// with another secret.
    @Test(.tags(.childProcess)) func theGuidesVerifiersAgreeWithTheServer() async throws {
        let receiver = WebhookReceiver()
        try await withReceiver(receiver) { port in
            try await withHarness(configure: Self.configure) { harness in
                let body = try JSONSerialization.data(withJSONObject: [
                    "url": harness.originURL("/corpus/loop_1.gif"), "callbackURL": "http://127.0.0.1:\(port)/hook",
                ])
                let reply = try await harness.request(
                    .POST, "/transcode", headers: [("Content-Type", "application/json")], body: Array(body))
                #expect(reply.status == 200)
                try await receiver.wait(for: 1)
                let delivery = try #require(receiver.deliveries.first)
                var tampered = delivery.body
                tampered[tampered.count / 2] ^= 0x01
                let other = "whsec_" + Data(repeating: 9, count: 24).base64EncodedString()
                for language in ["python", "js", "php"] {
                    #expect(try await Self.verify(delivery, secret: Self.secret, with: language), "\(language)")
                    #expect(try await Self.verify(delivery, secret: Self.retired, with: language), "\(language)")
                    #expect(
                        try await !Self.verify(delivery, secret: Self.secret, with: language, body: tampered),
                        "\(language)")
                    #expect(try await !Self.verify(delivery, secret: other, with: language), "\(language)")
                }
            }
        }
    }

    /// Delivered after the receiver fails twice: three attempts, one webhook-id, valid signatures for both
    /// secrets, the result in the body.
    @Test(.tags(.childProcess)) func deliveredSignedAndRetried() async throws {
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
                    #expect(try await Self.verify(delivery, secret: Self.secret))
                    #expect(try await Self.verify(delivery, secret: Self.retired))
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
                #expect(try await Self.verify(tampered, secret: Self.secret) == false)
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
