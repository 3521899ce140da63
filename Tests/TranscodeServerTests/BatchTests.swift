import Foundation
import Hummingbird
import HummingbirdTesting
import TestSupport
import Testing

@testable import TranscodeCore
@testable import TranscodeHTTP
@testable import TranscodeServer

/// Backfill batches: every URL accounted for, paged NDJSON results, a restart mid-way, and interactive
/// requests never refused because of a batch.
@Suite(.serialized, .tags(.integration), .timeLimit(.minutes(15))) struct BatchTests {
    /// The 50 smallest animated GIFs of the corpus that convert.
    static let gifs: [String] = {
        let manifest = (try? String(contentsOfFile: corpusDirectory + "/MANIFEST.tsv", encoding: .utf8)) ?? ""
        var rows: [(Int, String)] = []
        for line in manifest.split(separator: "\n").dropFirst() {
            let fields = line.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)
            guard fields.count > 6, fields[0].hasSuffix(".gif"), let bytes = Int(fields[1]),
                let frames = Int(fields[5]), frames >= 2, bytes <= 600_000,
                !["corrupt", "not-gif", "apng", "webp"].contains(fields[6])
            else { continue }
            rows.append((bytes, fields[0]))
        }
        return rows.sorted { $0.0 < $1.0 }.prefix(50).map(\.1)
    }()

    /// An origin that outlives the service's restarts.
    func withOrigin(_ body: @Sendable (Int) async throws -> Void) async throws {
        let application = Application(
            router: Origin().router(), configuration: .init(address: .hostname("127.0.0.1", port: 0)))
        try await application.test(.live) { client in try await body(try #require(client.port)) }
    }

    /// 196 GIF URLs (49 GIFs x 4 query variants: the same bytes, converted once each) and 4 that fail.
    static func urls(origin port: Int) -> [String] {
        var urls: [String] = []
        for variant in 0..<4 {
            for name in Self.gifs.prefix(49) { urls.append("http://127.0.0.1:\(port)/corpus/\(name)?v=\(variant)") }
            urls.append("http://127.0.0.1:\(port)/corpus/no-such-\(variant).gif")
        }
        return urls
    }

    /// `POST /v1/batches` of `urls`. `output` is `mp4` unless given (nil: the service's default, `img`): the plain
    /// objects, as these tests were written for; the `.auto` objects' AVIFs, tens of CPU-seconds each in a debug
    /// build, are `aBatchPreparesWhatTheRewriteServes`' business.
    static func submitReply(
        _ harness: Harness, _ urls: [String], callbackURL: String? = nil, output: String? = "mp4"
    ) async throws -> Reply {
        var object: [String: Any] = ["urls": urls]
        if let callbackURL { object["callbackURL"] = callbackURL }
        if let output { object["output"] = output }
        return try await harness.request(
            .POST, "/v1/batches", headers: [("Content-Type", "application/json")],
            body: Array(try JSONSerialization.data(withJSONObject: object)))
    }

    static func submit(
        _ harness: Harness, _ urls: [String], callbackURL: String? = nil, output: String? = "mp4"
    ) async throws -> String {
        let reply = try await Self.submitReply(harness, urls, callbackURL: callbackURL, output: output)
        #expect(reply.status == 202, "\(reply.text)")
        #expect(reply.headers.first(name: "Location")?.hasPrefix("/v1/batches/") == true)
        return try #require(try reply.json()["id"] as? String)
    }

    static func status(_ harness: Harness, _ id: String) async throws -> [String: Any] {
        let reply = try await harness.request(.GET, "/v1/batches/\(id)")
        #expect(reply.status == 200)
        return try reply.json()
    }

    /// Polls until `condition` holds on the batch's status (or 5 minutes pass, however long each poll takes).
    static func wait(
        _ harness: Harness, _ id: String, seconds: Int = 300, until condition: ([String: Any]) -> Bool
    ) async throws -> [String: Any] {
        let deadline = ContinuousClock.now + .seconds(seconds)
        while ContinuousClock.now < deadline {
            // A fleet's batch routes answer 503 `queue-unavailable` while the database is away: asked again.
            let reply = try await harness.request(.GET, "/v1/batches/\(id)")
            if reply.status == 503, reply.errorCode == "queue-unavailable" {
                try await Task.sleep(for: .milliseconds(500))
                continue
            }
            #expect(reply.status == 200, "\(reply.text)")
            let status = try reply.json()
            if condition(status) { return status }
            try await Task.sleep(for: .milliseconds(100))
        }
        Issue.record("the batch did not get there in \(seconds) s: \(try await Self.status(harness, id))")
        return try await Self.status(harness, id)
    }

    /// Every result line, paged `limit` at a time.
    static func results(_ harness: Harness, _ id: String, limit: Int) async throws -> [[String: Any]] {
        var lines: [[String: Any]] = []
        var offset = 0
        while true {
            let page = try await harness.request(.GET, "/v1/batches/\(id)/results?offset=\(offset)&limit=\(limit)")
            #expect(page.status == 200)
            #expect(page.headers.first(name: "Content-Type") == "application/x-ndjson")
            for line in page.text.split(separator: "\n") {
                lines.append(try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]))
            }
            guard let next = page.headers.first(name: "X-Next-Offset").flatMap(Int.init) else { break }
            #expect(next == offset + limit)
            offset = next
        }
        return lines
    }

    /// By default a batch makes the object a rewritten page's `.auto` URLs answer from: its line carries that `.auto`
    /// URL, which then answers Chromium the AVIF at once (final, no conversion), and its `.mp4` link names the one
    /// object (`also:webp,avif`).
    @Test(.tags(.heavy)) func aBatchPreparesWhatTheRewriteServes() async throws {
        try await withHarness(configure: NegotiatedImageTests.configure) { harness in
            let url = harness.originURL("/corpus/cartoon_hotdog.gif")
            let id = try await Self.submit(harness, [url], output: nil)
            _ = try await Self.wait(harness, id) { $0["complete"] as? Bool == true }
            let line = try #require(try await Self.results(harness, id, limit: 10).first)
            #expect(line["status"] as? String == "done", "\(line)")
            let auto = try #require(line["auto"] as? String, "\(line)")
            #expect((line["mp4"] as? String)?.contains("/also:webp,avif/") == true, "\(line)")
            let transcodes = harness.services.transcodes.counters.transcodes
            let path = String(auto[try #require(auto.range(of: "/v1/")).lowerBound...])
            let answer = try await harness.request(.GET, path, headers: [("Accept", NegotiatedImageTests.chromium)])
            #expect(answer.status == 200, "\(answer.text)")
            #expect(answer.headers.first(name: "Content-Type") == "image/avif")
            #expect(answer.headers.first(name: "Cache-Control") == "public, max-age=3600, immutable")
            #expect(harness.services.transcodes.counters.transcodes == transcodes)
            #expect(harness.services.transcodes.pool.startedByPriority[.backfill] == 1)
        }
    }

    @Test(.tags(.heavy)) func aBatchAccountsForEveryURL() async throws {
        let receiver = WebhookReceiver()
        try await withReceiver(receiver) { hookPort in
            try await withOrigin { port in
                try await withHarness(configure: {
                    $0.webhooks.secrets = [WebhookTests.secret]
                    $0.signing.keys = [RewriteTests.key]
                    $0.signing.salts = [RewriteTests.salt]
                }) { harness in
                    let urls = Self.urls(origin: port)
                    #expect(urls.count == 200)
                    let id = try await Self.submit(harness, urls, callbackURL: "http://127.0.0.1:\(hookPort)/hook")
                    let status = try await Self.wait(harness, id) { $0["complete"] as? Bool == true }
                    #expect(status["total"] as? Int == 200)
                    #expect(status["pending"] as? Int == 0)
                    #expect(status["failed"] as? Int == 4)
                    #expect((status["done"] as? Int ?? 0) + (status["keptGif"] as? Int ?? 0) == 196)
                    let lines = try await Self.results(harness, id, limit: 64)
                    #expect(lines.count == 200)
                    #expect(Set(lines.compactMap { $0["index"] as? Int }) == Set(0..<200))
                    for line in lines {
                        let index = try #require(line["index"] as? Int)
                        #expect(line["url"] as? String == urls[index])
                        if line["status"] as? String == "failed" {
                            #expect(urls[index].contains("no-such"))
                            #expect((line["error"] as? [String: Any])?["code"] as? String == "origin-not-found")
                        } else {
                            #expect((line["mp4"] as? String)?.hasPrefix("/v1/") == true)
                            #expect(line["key"] as? String != nil)
                        }
                    }
                    // Each distinct GIF converted once, whatever its URL.
                    #expect(harness.services.transcodes.counters.transcodes == 49)
                    try await receiver.wait(for: 1)
                    let delivery = try #require(receiver.deliveries.first)
                    let event = try #require(
                        try JSONSerialization.jsonObject(with: Data(delivery.body)) as? [String: Any])
                    #expect(event["type"] as? String == "batch.done")
                    #expect((event["data"] as? [String: Any])?["failed"] as? Int == 4)
                    // Marked delivered, so a restart does not send it again.
                    for _ in 0..<50
                    where !FileManager.default.fileExists(
                        atPath: harness.localBatches.directory + "/\(id)/notified")
                    {
                        try await Task.sleep(for: .milliseconds(100))
                    }
                    #expect(
                        FileManager.default.fileExists(atPath: harness.localBatches.directory + "/\(id)/notified"))
                }
            }
        }
    }

    /// An item given back for a passing reason (here the shared store refusing its publish) is run again, and
    /// the items after it that are still running are not handed out a second time: one line per URL.
    @Test(.tags(.wallClock)) func anItemGivenBackDoesNotRerunTheOnesStillRunning() async throws {
        try await withTemporaryDirectory { directory in
            let sharedDisk = try DiskCache(root: directory + "/shared", maxBytes: 1 << 30)
            let store = FailingPuts(CopyingDiskStore(sharedDisk), failures: 1)
            try await withHarness(sharedStore: store, configure: { $0.transcode.workers = 3 }) { harness in
                // Item 0 fails its publish at once and goes back; item 1 is still downloading when it does.
                let urls = [
                    harness.originURL("/corpus/loop_1.gif"), harness.originURL("/delayed/4000/cartoon_hotdog.gif"),
                    harness.originURL("/corpus/loop_0_infinite.gif"),
                ]
                let id = try await Self.submit(harness, urls)
                let status = try await Self.wait(harness, id) { $0["complete"] as? Bool == true }
                #expect(status["failed"] as? Int == 0)
                // A second run of an item would end with its first (they share one flight).
                try await Task.sleep(for: .seconds(1))
                let lines = try await Self.results(harness, id, limit: 100)
                #expect(lines.compactMap { $0["index"] as? Int }.sorted() == [0, 1, 2])
                #expect(harness.origin.count("/delayed/4000/cartoon_hotdog.gif") == 1)
            }
        }
    }

    @Test(.tags(.heavy)) func aBatchSurvivesARestart() async throws {
        try await withTemporaryDirectory { directory in
            let cache = directory + "/cache"
            try await withOrigin { port in
                let urls = Self.urls(origin: port)
                let id = try await Self.first(cache: cache, urls: urls)
                // A line cut short by a crash mid-write: cut off at startup, the next line starts afresh.
                let handle = try #require(FileHandle(forWritingAtPath: cache + "/batches/\(id)/results.ndjson"))
                try handle.seekToEnd()
                try handle.write(contentsOf: Data(#"{"index":3,"ur"#.utf8))
                try handle.close()
                try await withHarness(cacheDirectory: cache) { harness in
                    let before = try await Self.status(harness, id)
                    #expect((before["pending"] as? Int ?? 0) > 0, "\(before)")
                    let status = try await Self.wait(harness, id) { $0["complete"] as? Bool == true }
                    #expect(status["total"] as? Int == 200)
                    #expect(status["failed"] as? Int == 4)
                    let lines = try await Self.results(harness, id, limit: 1000)
                    #expect(lines.count == 200)
                    #expect(Set(lines.compactMap { $0["index"] as? Int }) == Set(0..<200))
                }
            }
        }
    }

    /// Batches cost the server no memory for their URLs: 4 batches of 10,000 URLs of 2,000 characters (80 MB of URLs)
    /// leave the serving binary's resident memory within 20 MiB of what it was before them (issue 56: it held every
    /// URL of every batch for the batch's whole retention, +86 MiB here and as much after a restart).
    @Test(.tags(.childProcess, .wallClock)) func batchesKeepTheirURLsOnDisk() async throws {
        func residentMiB(_ process: ChildProcess) throws -> Double {
            let status = try String(contentsOfFile: "/proc/\(process.processIdentifier)/status", encoding: .utf8)
            let line = try #require(status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") })
            return try #require(Double(line.split(separator: " ")[1])) / 1024
        }
        try await OperationsTests.withServingBinary { process, client, _, directory in
            func submit(_ urls: [String]) async throws -> String {
                let body = try JSONSerialization.data(withJSONObject: ["urls": urls, "output": "mp4"])
                let (status, reply) = try await client.post(
                    "/v1/batches", contentType: "application/json", body: Array(body))
                #expect(status == 202, "\(String(decoding: reply, as: UTF8.self))")
                let object = try #require(try JSONSerialization.jsonObject(with: Data(reply)) as? [String: Any])
                return try #require(object["id"] as? String)
            }
            // Each URL is refused at once when its item runs (loopback is not a destination by default): no item
            // downloads or converts anything that would weigh on the reading.
            let pad = String(repeating: "p", count: 1960)
            _ = try await submit(["http://127.0.0.1:9/warm-up.gif"])
            try await Task.sleep(for: .seconds(1))
            let atRest = try residentMiB(process)
            var ids: [String] = []
            for batch in 0..<4 {
                ids.append(try await submit((0..<10_000).map { "http://127.0.0.1:9/\(batch)/\($0)/\(pad).gif" }))
            }
            try await Task.sleep(for: .seconds(2))
            let after = try residentMiB(process)
            #expect(after - atRest <= 20, "resident memory \(atRest) MiB before the batches, \(after) MiB after")
            // Each URL is still there to run, read from disk: the first items of the last batch ran and failed on
            // their own URL.
            var (_, page) = try await client.fetch("/v1/batches/\(ids[0])/results?limit=1")
            // On a loaded machine the first item may not have run yet: its line is waited for (a minute at most).
            for _ in 0..<600 where page.isEmpty {
                try await Task.sleep(for: .milliseconds(100))
                (_, page) = try await client.fetch("/v1/batches/\(ids[0])/results?limit=1")
            }
            let line = try #require(
                try JSONSerialization.jsonObject(with: Data(page.split(separator: UInt8(ascii: "\n")).first ?? []))
                    as? [String: Any])
            #expect(line["url"] as? String == "http://127.0.0.1:9/0/\(line["index"] as? Int ?? -1)/\(pad).gif")
            #expect((line["error"] as? [String: Any])?["code"] as? String == "destination-not-allowed", "\(line)")
            try OperationsTests.requireRunning(process, directory)
        }
    }

    /// Submits the batch and stops the service once some (not all) of it is done.
    static func first(cache: String, urls: [String]) async throws -> String {
        let result = ResultBox()
        try await withHarness(cacheDirectory: cache) { harness in
            let id = try await Self.submit(harness, urls)
            let status = try await Self.wait(harness, id) {
                ($0["total"] as? Int ?? 0) - ($0["pending"] as? Int ?? 0) >= 20
            }
            #expect(status["complete"] as? Bool == false, "the batch finished before the restart: \(status)")
            result.set(id)
        }
        return try #require(result.value)
    }

    /// A batch holds at most `workers - 1` workers: an interactive request never finds the queue full because
    /// of it.
    @Test(.tags(.wallClock)) func interactiveRequestsAreNotStarved() async throws {
        try await withOrigin { port in
            try await withHarness(configure: {
                $0.transcode.workers = 2
                $0.transcode.queueLength = 0
            }) { harness in
                // Slow enough that the batch outlasts five uploads on a loaded machine (12 s at least).
                let slow = (0..<12).map { "http://127.0.0.1:\(port)/delayed/1000/\(Self.gifs[$0])" }
                let id = try await Self.submit(harness, slow)
                _ = try await Self.wait(harness, id) { ($0["pending"] as? Int ?? 0) < 12 }
                for name in Self.gifs.suffix(5) {
                    let reply = try await harness.upload(try corpusBytes(name))
                    #expect(reply.status == 200, "\(reply.text)")
                    #expect(harness.services.pool.load <= 2)
                }
                let status = try await Self.status(harness, id)
                #expect(status["complete"] as? Bool == false)
            }
        }
    }

    /// A complete batch is deleted once past `batch.retentionSeconds` (also after a restart), and at once by
    /// `DELETE /v1/batches/{id}`; what it converted stays in the cache.
    @Test(.tags(.wallClock)) func batchesExpireAndCanBeDeleted() async throws {
        try await withTemporaryDirectory { directory in
            let cache = directory + "/cache"
            let (deletedID, keptID) = (ResultBox(), ResultBox())
            try await withHarness(cacheDirectory: cache) { harness in
                var ids: [String] = []
                for name in ["loop_1.gif", "loop_0_infinite.gif"] {
                    let id = try await Self.submit(harness, [harness.originURL("/corpus/\(name)")])
                    _ = try await Self.wait(harness, id) { $0["complete"] as? Bool == true }
                    ids.append(id)
                }
                deletedID.set(ids[0])
                keptID.set(ids[1])
                let deleted = try await harness.request(.DELETE, "/v1/batches/\(ids[0])")
                #expect(deleted.status == 204)
                #expect(try await harness.request(.GET, "/v1/batches/\(ids[0])").status == 404)
                #expect(try await harness.request(.GET, "/v1/batches/\(ids[0])/results").status == 404)
                #expect(try await harness.request(.DELETE, "/v1/batches/\(ids[0])").status == 404)
                #expect(!FileManager.default.fileExists(atPath: harness.localBatches.directory + "/\(ids[0])"))
                // Kept while within its retention.
                #expect(try await harness.request(.GET, "/v1/batches/\(ids[1])").status == 200)
            }
            // Past its retention after a restart: gone within a second or two, and its results with it.
            let kept = try #require(keptID.value)
            #expect(deletedID.value != nil)
            try await withHarness(cacheDirectory: cache, configure: { $0.batchRetentionSeconds = 0.001 }) { harness in
                var status = 200
                for _ in 0..<50 where status == 200 {
                    status = try await harness.request(.GET, "/v1/batches/\(kept)").status
                    if status == 200 { try await Task.sleep(for: .milliseconds(100)) }
                }
                #expect(status == 404)
                #expect(!FileManager.default.fileExists(atPath: harness.localBatches.directory + "/\(kept)"))
                #expect(harness.localBatches.count == 0)
                // The conversions stay.
                #expect(harness.services.cache.objects.indexedKeys.count == 2)
            }
        }
    }

    @Test func limitsAndBadRequests() async throws {
        try await withHarness(configure: { $0.batchMaxURLs = 3 }) { harness in
            func post(_ body: String, _ type: String = "application/json") async throws -> Reply {
                try await harness.request(
                    .POST, "/v1/batches", headers: [("Content-Type", type)], body: Array(body.utf8))
            }
            let many = try await post(
                #"{"urls": ["https://a.example/1.gif", "https://a.example/2.gif", "https://a.example/3.gif", "https://a.example/4.gif"]}"#
            )
            #expect(many.status == 413)
            #expect(many.errorCode == "too-many-urls")
            #expect(try await post(#"{"urls": []}"#).status == 400)
            #expect(try await post(#"{"urls": ["https://a.example/1.gif"], "crf": 20}"#).status == 400)
            #expect(try await post("urls", "text/plain").status == 415)
            #expect(try await harness.request(.GET, "/v1/batches/\(String(repeating: "a", count: 32))").status == 404)
            #expect(try await harness.request(.GET, "/v1/batches/not-a-batch-id/results").status == 404)
        }
    }

    func withReceiver(_ receiver: WebhookReceiver, _ body: @Sendable (Int) async throws -> Void) async throws {
        try await WebhookTests().withReceiver(receiver, body)
    }
}

/// A value set inside a `@Sendable` closure and read after it.
final class ResultBox: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: String?
    func set(_ value: String) { self.lock.withLock { self.stored = value } }
    var value: String? { self.lock.withLock { self.stored } }
}
