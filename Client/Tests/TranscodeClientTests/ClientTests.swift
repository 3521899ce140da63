import Crypto
import Foundation
import Testing

@testable import TranscodeClient

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The typed calls against the real service on loopback.
@Suite(.serialized) struct ClientTests {
    static let files = [
        "a/hotdog.gif": "cartoon_hotdog.gif", "a/banana.gif": "cartoon_dancing_banana.gif",
        "a/loop1.gif": "loop_1.gif",
    ]

    /// The client's error codes are the ones the service publishes (`/openapi.yaml`, which the server's own tests
    /// hold to its registry).
    @Test func errorCodesAreTheServersRegistry() async throws {
        try await Service.with { service in
            let (data, _) = try await URLSession.shared.data(
                from: service.baseURL.appendingPathComponent("openapi.yaml"))
            let text = String(decoding: data, as: UTF8.self)
            let line = try #require(text.split(separator: "\n").first { $0.contains("enum: [bad-request") })
            let inside = line.split(separator: "[", maxSplits: 1)[1].split(separator: "]")[0]
            let codes = inside.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
            #expect(codes == ServiceErrorCode.allCases.map(\.rawValue))
        }
    }

    @Test func transcodesByURLAndByBytesAndSaysWhyNot() async throws {
        try await Service.with(files: Self.files) { service in
            let client = service.client
            guard
                case .done(let manifest) = try await client.transcode(
                    url: service.origin("a/banana.gif"), formats: [.webp])
            else {
                Issue.record("not done")
                return
            }
            #expect(manifest.key?.count == 64)
            #expect(manifest.hasTransparency && manifest.loopsForever && manifest.playCount == nil)
            #expect(manifest.artifact(.webp) != nil && manifest.artifact(.mp4) != nil && manifest.artifact(.jpg) != nil)
            #expect(manifest.signed?["mp4"]?.hasPrefix("/v1/") == true)
            // The signed manifest of the same URL is the same object.
            let signed = try await client.manifest(
                of: service.origin("a/banana.gif"), options: RenditionOptions(also: [.webp]))
            #expect(
                signed.mp4Sha256 == manifest.mp4Sha256
                    && signed.artifact(.webp)?.sha256 == manifest.artifact(.webp)?.sha256)
            // Bytes, and the poster's bytes are those of the manifest.
            let bytes = try Data(contentsOf: Paths.corpus.appendingPathComponent("loop_1.gif"))
            guard case .done(let uploaded) = try await client.transcode(bytes: bytes, background: "#000000") else {
                Issue.record("not done")
                return
            }
            #expect(uploaded.playCount == 2 && !uploaded.loopsForever, "\(uploaded)")
            #expect(uploaded.background == "#000000")
            let (poster, _) = try await URLSession.shared.data(from: client.absolute(try #require(uploaded.poster)))
            #expect(SHA256.hash(data: poster).map { String(format: "%02x", $0) }.joined() == uploaded.posterSha256)
            // Errors are the service's codes.
            do {
                _ = try await client.transcode(url: service.origin("a/none.gif"))
                Issue.record("a missing GIF converted")
            } catch let error as TranscodeClientError {
                #expect(error.code == .originNotFound, "\(error)")
            }
            do {
                _ = try await client.transcode(bytes: Data("GIF89a not really".utf8))
                Issue.record("a broken GIF converted")
            } catch let error as TranscodeClientError {
                #expect(error.code?.isTheSource == true, "\(error)")
                #expect(error.description.contains("422"), "\(error)")
            }
        }
    }

    /// Past the service's wait, a conversion is a job; polling it gives the object.
    @Test func aSlowConversionIsAJobToPoll() async throws {
        try await Service.with(files: Self.files, arguments: ["--transcode-sync-wait-seconds", "0.001"]) { service in
            let client = service.client
            guard case .pending(let id) = try await client.transcode(url: service.origin("a/hotdog.gif")) else {
                Issue.record("answered within 1 ms")
                return
            }
            let manifest = try await client.result(ofJob: id, every: .milliseconds(50))
            #expect(manifest.sourceWidth == 200 && manifest.recommendation == .video)
            await #expect(throws: TranscodeClientError.self) { _ = try await client.job("0000") }
            guard case .pending(let failing) = try await client.transcode(url: service.origin("a/none.gif")) else {
                Issue.record("answered within 1 ms")
                return
            }
            do {
                _ = try await client.result(ofJob: failing, every: .milliseconds(50))
                Issue.record("a missing GIF converted")
            } catch let error as TranscodeClientError {
                #expect(error.code == .originNotFound, "\(error)")
            }
        }
    }

    @Test func rewritesAPage() async throws {
        try await Service.with(files: Self.files) { service in
            let html = """
                <p>Two GIFs <img src="a/hotdog.gif" alt="x"> and <img src="\(service.origin("a/banana.gif"))"></p>
                """
            let page = "http://127.0.0.1:\(service.originPort)/post.html"
            let rewritten = try await service.client.rewrite(html: html, base: page)
            #expect(rewritten.gifsFound == 2 && rewritten.gifsRewritten == 2, "\(rewritten)")
            #expect(rewritten.html.components(separatedBy: ".auto\"").count == 3, "\(rewritten.html)")
            #expect(rewritten.html.hasPrefix("<p>Two GIFs <img src=\""))
            let video = try await service.client.rewrite(html: html, base: page, output: .video, mode: .eager)
            #expect(video.html.contains("<video"), "\(video.html)")
        }
    }

    /// A batch's progress is an async sequence that ends complete; its results are typed; it can be deleted.
    @Test func batchProgressEndsComplete() async throws {
        try await Service.with(files: Self.files) { service in
            let client = service.client
            let urls = [service.origin("a/hotdog.gif"), service.origin("a/loop1.gif"), service.origin("a/none.gif")]
            let batch = try await client.createBatch(urls: urls, output: .mp4)
            #expect(batch.total == 3)
            var seen: [TranscodeClient.BatchStatus] = []
            for try await status in client.progress(ofBatch: batch.id, every: .milliseconds(100)) {
                seen.append(status)
            }
            #expect(seen.last?.complete == true && seen.last?.failed == 1, "\(seen)")
            #expect(zip(seen, seen.dropFirst()).allSatisfy { $0 != $1 })
            let (results, next) = try await client.batchResults(batch.id)
            #expect(results.count == 3 && next == 3)
            #expect(Set(results.map(\.index)) == [0, 1, 2])
            let failed = try #require(results.first { $0.status == "failed" })
            #expect(failed.url == urls[2] && failed.error?.errorCode == .originNotFound)
            #expect(results.filter { $0.status != "failed" }.allSatisfy { $0.mp4?.contains("/v1/") == true })
            try await client.deleteBatch(batch.id)
            do {
                _ = try await client.batch(batch.id)
                Issue.record("a deleted batch answered")
            } catch let error as TranscodeClientError {
                #expect(error.code == .notFound, "\(error)")
            }
        }
    }

    /// A busy answer is asked again after its `Retry-After`; a refusal is not asked again.
    @Test func retryAfterIsHonoured() async throws {
        let busy: [String: Any] = [
            "status": 503, "headers": ["Retry-After": "1", "Content-Type": "application/json"],
            "body": #"{"error":{"code":"overloaded","message":"busy"}}"#,
        ]
        let done: [String: Any] = [
            "status": 200,
            "body": #"{"id":"b1","total":1,"pending":0,"done":1,"failed":0,"keptGif":0,"complete":true}"#,
        ]
        try await ScriptedServer.with(["/v1/batches/b1": [busy, done], "/v1/batches/b2": [busy]]) { server in
            var client = TranscodeClient(baseURL: server.baseURL)
            let started = ContinuousClock.now
            let status = try await client.batch("b1")
            #expect(status.complete)
            #expect(ContinuousClock.now - started >= .milliseconds(950))
            #expect(server.requests().count == 2)
            client.maxRetries = 1
            client.maxRetryDelay = 0.1
            do {
                _ = try await client.batch("b2")
                Issue.record("answered")
            } catch let error as TranscodeClientError {
                #expect(error == .service(status: 503, code: .overloaded, message: "busy", retryAfter: 1))
            }
            #expect(server.requests().count == 4)
        }
        #expect(TranscodeClient.retryAfter("120") == 120)
        #expect(TranscodeClient.retryAfter("-3") == 0)
        #expect(TranscodeClient.retryAfter("soon") == nil)
        let now = Date(timeIntervalSince1970: 1_445_412_480)  // Wed, 21 Oct 2015 07:28:00 GMT
        #expect(TranscodeClient.retryAfter("Wed, 21 Oct 2015 07:28:30 GMT", now: now) == 30)
        #expect(TranscodeClient.delay(.badRequest("x"), attempt: 3, cap: 30) == 2)
    }

    /// The webhook the service sends verifies; a changed body, an old one or another secret does not.
    @Test func verifiesTheServicesWebhooks() async throws {
        try await ScriptedServer.with(["/hook": [["status": 204]]]) { receiver in
            try await Service.with(files: Self.files) { service in
                var request = URLRequest(url: service.baseURL.appendingPathComponent("transcode"))
                request.httpMethod = "POST"
                request.setValue("application/json", forHTTPHeaderField: "Content-Type")
                request.setValue("Bearer " + Service.token, forHTTPHeaderField: "Authorization")
                request.httpBody = try JSONSerialization.data(withJSONObject: [
                    "url": service.origin("a/hotdog.gif"),
                    "callbackURL": receiver.baseURL.appendingPathComponent("hook").absoluteString,
                ])
                _ = try await URLSession.shared.data(for: request)
                var deliveries: [[String: Any]] = []
                for _ in 0..<200 where deliveries.isEmpty {
                    deliveries = receiver.requests().filter { $0["path"] as? String == "/hook" }
                    try await Task.sleep(for: .milliseconds(100))
                }
                let delivery = try #require(deliveries.first)
                let headers = Dictionary(
                    uniqueKeysWithValues: (delivery["headers"] as? [String: String] ?? [:]).map {
                        ($0.key.lowercased(), $0.value)
                    })
                let body = try #require(Data(base64Encoded: delivery["body"] as? String ?? ""))
                let verifier = try WebhookVerifier(secrets: [Service.webhookSecret])
                let id = try verifier.verify(body: body) { headers[$0] }
                #expect(id == headers["webhook-id"])
                #expect(throws: WebhookVerifier.Failure.noMatchingSignature) {
                    try verifier.verify(body: body + Data(" ".utf8)) { headers[$0] }
                }
                #expect(throws: WebhookVerifier.Failure.self) {
                    try verifier.verify(body: body, now: Date().addingTimeInterval(3600)) { headers[$0] }
                }
                let other = try WebhookVerifier(secrets: [
                    "whsec_" + Data(repeating: 1, count: 24).base64EncodedString()
                ])
                #expect(throws: WebhookVerifier.Failure.noMatchingSignature) {
                    try other.verify(body: body) { headers[$0] }
                }
            }
        }
    }

    /// Standard Webhooks' published example (its reference libraries' test vector).
    @Test func verifiesTheStandardsExample() throws {
        let verifier = try WebhookVerifier(secrets: ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"])
        let headers = [
            "webhook-id": "msg_p5jXN8AQM9LWM0D4loKWxJek", "webhook-timestamp": "1614265330",
            "webhook-signature": "v1,bad v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
        ]
        let body = Data(#"{"test": 2432232314}"#.utf8)
        let now = Date(timeIntervalSince1970: 1_614_265_330)
        #expect(try verifier.verify(body: body, now: now) { headers[$0] } == "msg_p5jXN8AQM9LWM0D4loKWxJek")
        #expect(throws: WebhookVerifier.Failure.missingHeader("webhook-id")) {
            try verifier.verify(body: body, now: now) { _ in nil }
        }
        #expect(throws: WebhookVerifier.Failure.badTimestamp) {
            try verifier.verify(body: body, now: now) { $0 == "webhook-timestamp" ? "soon" : headers[$0] }
        }
        #expect(throws: TranscodeClientError.self) { try WebhookVerifier(secrets: ["whsec_c2hvcnQ="]) }
    }
}
