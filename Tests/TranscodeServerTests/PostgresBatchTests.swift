import Foundation
import Hummingbird
import TestSupport
import Testing

@testable import TranscodeCore
@testable import TranscodeHTTP
@testable import TranscodeServer

/// Batches in PostgreSQL (`queue.kind: postgres`), against a server each test starts: nodes that share the
/// database share the work and answer for each other's batches, an expired lease is claimed again, the
/// database going away costs batches a wait (503 `queue-unavailable`) and interactive requests nothing, and a
/// restart loses no item.
@Suite(.serialized, .tags(.integration, .database), .timeLimit(.minutes(10))) struct PostgresBatchTests {
    /// `timeoutSeconds` bounds each database call: long enough for the first call (the migrations and a batch's
    /// rows) on two cores shared with the whole system tier (2 s once failed there, and 10 s in CI beside fourteen
    /// other suites), short where a test waits on it.
    static func configure(
        _ server: PostgresServer, workers: Int = 2, timeoutSeconds: Double = 30
    ) -> (inout ServerConfiguration) -> Void {
        let port = server.port
        return {
            $0.queue.kind = .postgres
            $0.queue.url = URL(string: "postgres://\(PostgresServer.user)@127.0.0.1:\(port)/postgres")
            $0.queue.leaseSeconds = 5
            $0.queue.timeoutSeconds = timeoutSeconds
            $0.transcode.workers = workers
            $0.signing.keys = [RewriteTests.key]
            $0.signing.salts = [RewriteTests.salt]
        }
    }

    /// `count` corpus GIFs of `harness`'s origin, each listed twice, and two URLs that fail.
    static func urls(_ harness: Harness, count: Int) -> [String] {
        Self.urls(count: count) { harness.originURL($0) }
    }

    static func urls(count: Int, origin: (String) -> String) -> [String] {
        let gifs = BatchTests.gifs.prefix(count).map { origin("/corpus/\($0)") }
        return gifs + gifs + [origin("/corpus/no-such-0.gif"), origin("/corpus/no-such-1.gif")]
    }

    /// Every URL accounted for once, answered by `harness`.
    static func expectAccounted(_ harness: Harness, _ id: String, _ urls: [String], seconds: Int = 300) async throws {
        let status = try await BatchTests.wait(harness, id, seconds: seconds) { $0["complete"] as? Bool == true }
        #expect(status["total"] as? Int == urls.count)
        #expect(status["failed"] as? Int == 2, "\(status)")
        let lines = try await BatchTests.results(harness, id, limit: 25)
        #expect(lines.count == urls.count)
        #expect(lines.compactMap { $0["index"] as? Int }.sorted() == Array(0..<urls.count))
        for line in lines {
            let index = try #require(line["index"] as? Int)
            #expect(line["url"] as? String == urls[index])
            if urls[index].contains("no-such") {
                #expect((line["error"] as? [String: Any])?["code"] as? String == "origin-not-found")
            } else {
                #expect(["done", "kept-gif"].contains(line["status"] as? String), "\(line)")
                #expect((line["mp4"] as? String)?.hasPrefix("/v1/") == true)
            }
        }
    }

    @Test func twoNodesShareABatchAndEachURLConvertsOnce() async throws {
        try await withPostgres { server, _ in
            try await withTemporaryDirectory { directory in
                let shared = CopyingDiskStore(try DiskCache(root: directory + "/shared", maxBytes: 1 << 30))
                try await withHarness(sharedStore: shared, configure: Self.configure(server)) { a in
                    try await withHarness(sharedStore: shared, configure: Self.configure(server)) { b in
                        let urls = Self.urls(a, count: 24)
                        let id = try await BatchTests.submit(a, urls)
                        // Node b answers for a batch a took, and both convert its items.
                        try await Self.expectAccounted(b, id, urls)
                        let converted = [a, b].map { $0.services.transcodes.counters.transcodes }
                        #expect(converted.reduce(0, +) == 24, "\(converted)")
                        #expect(converted.allSatisfy { $0 > 0 }, "\(converted)")
                        // The same URLs in a second batch: answered from the shared store, nothing converted.
                        let again = try await BatchTests.submit(b, urls)
                        try await Self.expectAccounted(a, again, urls)
                        #expect([a, b].map { $0.services.transcodes.counters.transcodes }.reduce(0, +) == 24)
                        // Deleted on one node, gone on the other.
                        let deleted = try await a.request(.DELETE, "/v1/batches/\(id)")
                        #expect(deleted.status == 204)
                        #expect(try await b.request(.GET, "/v1/batches/\(id)").status == 404)
                        #expect(try await b.request(.GET, "/v1/batches/\(id)/results").status == 404)
                    }
                }
            }
        }
    }

    /// A worker that claimed an item and vanished: its lease expires, a live node claims the item again,
    /// converts it once, and counts the expiry.
    @Test(.tags(.wallClock)) func anExpiredLeaseIsClaimedAgain() async throws {
        try await withPostgres { server, client in
            try await withHarness(configure: Self.configure(server, workers: 1)) { harness in
                // The node's only worker is busy with a request: it leaves batch items alone meanwhile.
                let slow = try await harness.startSlowJob()
                let url = harness.originURL("/corpus/\(BatchTests.gifs[0])")
                let id = try await BatchTests.submit(harness, [url])
                let queue = PostgresQueue(client: client, logger: harness.services.transcodes.logger)
                let stolen = try await queue.claim(owner: "vanished-node", leaseSeconds: 1, kind: .conversion)
                #expect(stolen != nil)
                #expect(try await slow.value.status == 200)
                let status = try await BatchTests.wait(harness, id) { $0["complete"] as? Bool == true }
                #expect((status["done"] as? Int ?? 0) + (status["keptGif"] as? Int ?? 0) == 1, "\(status)")
                #expect(harness.services.transcodes.counters.queue["claimed"] == 1)
                let metrics = try await harness.request(.GET, "/metrics").text
                #expect(metrics.contains("transcode_queue_lease_expiries_total 1"), "\(metrics.prefix(200))")
                let stolenID = try #require(stolen).id
                let row = try #require(try await queue.row(stolenID))
                #expect(row.state == .done)
                #expect(row.attempts == 2)
            }
        }
    }

    /// The database stopped mid-batch: batch routes answer 503 `queue-unavailable`, `POST /transcode` works,
    /// and once the database is back the batch completes with every URL once.
    @Test(.tags(.wallClock)) func theDatabaseGoingAwayLosesNothing() async throws {
        try await withPostgres { server, _ in
            try await withHarness(configure: Self.configure(server, timeoutSeconds: 5)) { harness in
                let urls = Self.urls(harness, count: 12)
                let id = try await BatchTests.submit(harness, urls)
                _ = try await BatchTests.wait(harness, id) { ($0["pending"] as? Int ?? 0) < urls.count - 4 }
                server.stop()
                let refused = try await harness.request(.GET, "/v1/batches/\(id)")
                #expect(refused.status == 503)
                #expect(refused.errorCode == "queue-unavailable")
                #expect(refused.headers.first(name: "Retry-After") == "5")
                let posted = try await BatchTests.submitReply(harness, [urls[0]])
                #expect(posted.status == 503)
                // A job this node does not know may be running on another: not a 404 while the table is away.
                let job = try await harness.request(.GET, "/jobs/\(String(repeating: "0", count: 64))")
                #expect(job.status == 503, "\(job.text)")
                #expect(job.errorCode == "queue-unavailable")
                let interactive = try await harness.transcode(url: harness.originURL("/corpus/\(BatchTests.gifs[40])"))
                #expect(interactive.status == 200, "\(interactive.text)")
                // Away for 20 s: past the client's circuit breaker (15 s), after which postgres-nio fails every
                // waiting request and refuses new ones until a connection attempt succeeds again.
                try await Task.sleep(for: .seconds(18))
                try await server.start()
                // The routes answer 503 until the client has connected again (BatchTests.wait polls through it).
                try await Self.expectAccounted(harness, id, urls, seconds: 120)
            }
        }
    }

    /// A request's job that outlives its wait is known to every node: pending while it runs on another node,
    /// then done, or its error.
    @Test(.tags(.wallClock)) func anyNodeAnswersForARequestsJob() async throws {
        try await withPostgres { server, _ in
            try await withTemporaryDirectory { directory in
                let shared = CopyingDiskStore(try DiskCache(root: directory + "/shared", maxBytes: 1 << 30))
                let configure: @Sendable (inout ServerConfiguration) -> Void = {
                    Self.configure(server)(&$0)
                    $0.transcode.syncWaitSeconds = 0.1
                }
                try await withHarness(sharedStore: shared, configure: configure) { a in
                    try await withHarness(sharedStore: shared, configure: configure) { b in
                        for (path, ending) in [
                            ("/delayed/2500/cartoon_hotdog.gif", "done"),
                            ("/delayed/2500/notgif_jpeg_photo.gif", "failed"),
                        ] {
                            let reply = try await a.transcode(url: a.originURL(path))
                            #expect(reply.status == 202, "\(reply.text)")
                            let location = try #require(reply.headers.first(name: "Location"))
                            // Node b has no flight of it: it answers from the job table (a recorded it before answering).
                            var seen: [String] = []
                            var last: [String: Any] = [:]
                            let deadline = ContinuousClock.now + .seconds(30)
                            while ContinuousClock.now < deadline {
                                let poll = try await b.request(.GET, location)
                                let status = poll.status == 404 ? "unknown" : try poll.json()["status"] as? String
                                if seen.last != status { seen.append(status ?? "?") }
                                if poll.status != 404 { last = try poll.json() }
                                if status == ending { break }
                                try await Task.sleep(for: .milliseconds(100))
                            }
                            // Pending before it ended: never "unknown" (404) on the node that did not run it.
                            #expect(seen == ["pending", ending], "\(path): \(seen)")
                            if ending == "failed" {
                                #expect((last["error"] as? [String: Any])?["code"] as? String == "unsupported-format")
                            } else {
                                #expect((last["result"] as? [String: Any])?["key"] is String, "\(last)")
                            }
                        }
                        #expect(b.services.transcodes.counters.transcodes == 0)
                    }
                }
            }
        }
    }

    /// Results are paged in the order they were first listed: an item that finished with an earlier sequence number
    /// but committed after a page was read (two workers' transactions) comes after that page, not inside it.
    @Test func aPageOnceReadNeverChanges() async throws {
        try await withPostgres { server, client in
            try await withHarness(configure: Self.configure(server)) { harness in
                // Refused at once (not http): both items finished at submit, A's sequence number before B's.
                let id = try await BatchTests.submit(harness, ["ftp://example.com/a.gif", "ftp://example.com/b.gif"])
                var sequence: [Int: Int64] = [:]
                for try await (position, seq) in try await client.query(
                    "SELECT position, finished_seq FROM transcode_batch_items WHERE batch_id = \(id)"
                ).decode((Int, Int64).self) {
                    sequence[position] = seq
                }
                let (a, b) = (try #require(sequence[0]), try #require(sequence[1]))
                #expect(a < b)
                // A's transaction has not committed yet: only B is finished when the first page is read.
                try await client.query(
                    "UPDATE transcode_batch_items SET finished_seq = NULL WHERE position = 0 AND batch_id = \(id)")
                func page(_ offset: Int) async throws -> [Int] {
                    let reply = try await harness.request(.GET, "/v1/batches/\(id)/results?offset=\(offset)&limit=1")
                    #expect(reply.status == 200)
                    return try reply.text.split(separator: "\n").map {
                        try #require(try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any])["index"]
                            as? Int ?? -1
                    }
                }
                #expect(try await page(0) == [1])
                // Now it commits, with the sequence number it took before B's.
                try await client.query(
                    "UPDATE transcode_batch_items SET finished_seq = \(a) WHERE position = 0 AND batch_id = \(id)")
                #expect(try await page(1) == [0], "the second page repeats the first, and A is never listed")
                #expect(try await page(0) == [1])
            }
        }
    }

    /// Every node stopped mid-batch, and another started: the batch completes, every URL once.
    @Test func aBatchSurvivesItsNodesRestarting() async throws {
        try await withPostgres { server, _ in
            try await BatchTests().withOrigin { port in
                let urls = Self.urls(count: 20) { "http://127.0.0.1:\(port)\($0)" }
                let batch = ResultBox()
                try await withHarness(configure: Self.configure(server)) { harness in
                    let id = try await BatchTests.submit(harness, urls)
                    batch.set(id)
                    _ = try await BatchTests.wait(harness, id) { ($0["pending"] as? Int ?? 0) < urls.count - 6 }
                }
                try await withHarness(configure: Self.configure(server)) { harness in
                    try await Self.expectAccounted(harness, try #require(batch.value), urls)
                }
            }
        }
    }

    /// A `batch.done` webhook whose first attempt failed is still pending when its node stops: the next node
    /// delivers it, with the same `webhook-id`, once.
    @Test(.tags(.wallClock)) func aPendingWebhookIsDeliveredAfterARestart() async throws {
        let receiver = WebhookReceiver(failures: 1)
        try await withPostgres { server, _ in
            try await BatchTests().withReceiver(receiver) { hookPort in
                try await BatchTests().withOrigin { port in
                    let configure: (inout ServerConfiguration) -> Void = {
                        Self.configure(server)(&$0)
                        $0.webhooks.secrets = [WebhookTests.secret]
                        $0.webhooks.firstRetrySeconds = 4
                    }
                    let url = "http://127.0.0.1:\(port)/corpus/\(BatchTests.gifs[1])"
                    try await withHarness(configure: configure) { harness in
                        _ = try await BatchTests.submit(
                            harness, [url], callbackURL: "http://127.0.0.1:\(hookPort)/hook")
                        try await receiver.wait(for: 1)
                    }
                    #expect(receiver.deliveries.count == 1)
                    try await withHarness(configure: configure) { harness in
                        try await receiver.wait(for: 2)
                        // Delivered: not sent again.
                        try await Task.sleep(for: .seconds(2))
                        #expect(harness.services.transcodes.counters.webhooks["delivered"] == 1)
                    }
                    let deliveries = receiver.deliveries
                    #expect(deliveries.count == 2)
                    let ids = deliveries.map { $0.headers["webhook-id"] }
                    #expect(ids.first != nil && ids.first == ids.last, "\(ids)")
                    let last = try #require(deliveries.last)
                    let event = try #require(try JSONSerialization.jsonObject(with: Data(last.body)) as? [String: Any])
                    #expect(event["type"] as? String == "batch.done")
                }
            }
        }
    }

    /// Two URLs of the same bytes asked of two nodes at the same moment: one converts, holding the content's
    /// lock; the other waits for it and pulls the result from the shared store.
    @Test func twoNodesConvertTheSameBytesOnce() async throws {
        try await withPostgres { server, _ in
            try await withTemporaryDirectory { directory in
                let shared = CopyingDiskStore(try DiskCache(root: directory + "/shared", maxBytes: 1 << 30))
                try await withHarness(sharedStore: shared, configure: Self.configure(server)) { a in
                    try await withHarness(sharedStore: shared, configure: Self.configure(server)) { b in
                        // The largest of the batch GIFs: its conversion takes long enough for the two to meet.
                        let name = try #require(BatchTests.gifs.last)
                        for round in 0..<3 {
                            async let first = a.transcode(url: a.originURL("/corpus/\(name)?round=\(round)&node=a"))
                            async let second = b.transcode(url: a.originURL("/corpus/\(name)?round=\(round)&node=b"))
                            let replies = try await [first, second]
                            #expect(replies.map(\.status) == [200, 200], "\(replies.map(\.text))")
                        }
                        let converted = [a, b].map { $0.services.transcodes.counters.transcodes }
                        #expect(converted.reduce(0, +) == 1, "\(converted)")
                    }
                }
            }
        }
    }
}
