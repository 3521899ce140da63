import AsyncHTTPClient
import Foundation
import NIOCore
import TestSupport
import Testing

@testable import TranscodeCore
@testable import TranscodeHTTP
@testable import TranscodeServer

@Suite(.tags(.integration), .timeLimit(.minutes(10))) struct DedupeTests {
    /// 50 concurrent POSTs for one URL: one origin request, one transcode, 50 identical answers.
    @Test func fiftyConcurrentRequestsOneDownloadOneTranscode() async throws {
        try await withHarness { harness in
            let url = harness.originURL("/delayed/500/cartoon_hotdog.gif")
            let replies = try await withThrowingTaskGroup(of: Reply.self) { group in
                for _ in 0..<50 {
                    group.addTask { try await harness.transcode(url: url) }
                }
                var replies: [Reply] = []
                for try await reply in group { replies.append(reply) }
                return replies
            }
            #expect(replies.count == 50)
            #expect(replies.allSatisfy { $0.status == 200 })
            let keys = Set(replies.compactMap { try? $0.json()["key"] as? String })
            #expect(keys.count == 1)
            #expect(harness.origin.count("/delayed/500/cartoon_hotdog.gif") == 1)
            let counters = harness.services.transcodes.counters
            #expect(counters.downloads == 1)
            #expect(counters.transcodes == 1)
            #expect(counters.dedupeJoins + counters.cacheHits == 49)
        }
    }

    /// Variants of one URL asked at once (four backgrounds: four objects) share one download (issue 56: each
    /// variant's job asked the origin for the GIF again).
    @Test(.tags(.wallClock)) func variantsOfOneURLInFlightShareOneDownload() async throws {
        try await withHarness { harness in
            let path = "/delayed/800/cartoon_hotdog.gif"
            let url = harness.originURL(path)
            let replies = try await withThrowingTaskGroup(of: Reply.self) { group in
                for background in ["#00ff00", "#ffffff", "#000000", "#ff0000"] {
                    group.addTask { try await harness.transcode(url: url, background: background) }
                }
                var replies: [Reply] = []
                for try await reply in group { replies.append(reply) }
                return replies
            }
            #expect(replies.allSatisfy { $0.status == 200 }, "\(replies.map(\.status))")
            #expect(Set(replies.compactMap { try? $0.json()["key"] as? String }).count == 4)
            #expect(harness.origin.count(path) == 1)
            #expect(harness.services.transcodes.counters.downloads == 1)
        }
    }

    /// Every waiter gets the same error too, from one attempt.
    @Test(.tags(.wallClock)) func concurrentRequestsShareTheError() async throws {
        try await withHarness { harness in
            let url = harness.originURL("/delayed/300/notgif_png_static.gif")
            let replies = try await withThrowingTaskGroup(of: Reply.self) { group in
                for _ in 0..<10 { group.addTask { try await harness.transcode(url: url) } }
                var replies: [Reply] = []
                for try await reply in group { replies.append(reply) }
                return replies
            }
            #expect(replies.allSatisfy { $0.status == 422 && $0.errorCode == "not-animated" })
            #expect(harness.origin.count("/delayed/300/notgif_png_static.gif") == 1)
        }
    }

    /// An origin's failure is answered again without asking it, for its TTL (`download.failureTTLSeconds`,
    /// `download.notFoundTTLSeconds`): concurrent and later requests for a failing URL make one fetch. With
    /// the TTL at 0 every request asks the origin again.
    @Test func originFailuresAreAnsweredAgainWithoutAsking() async throws {
        try await withHarness { harness in
            for (path, status, code) in [
                ("/status/500", 502, "origin-error"), ("/corpus/gone.gif", 404, "origin-not-found"),
            ] {
                let url = harness.originURL(path)
                for _ in 0..<3 {
                    let replies = try await withThrowingTaskGroup(of: Reply.self) { group in
                        for _ in 0..<10 { group.addTask { try await harness.transcode(url: url) } }
                        var replies: [Reply] = []
                        for try await reply in group { replies.append(reply) }
                        return replies
                    }
                    #expect(replies.allSatisfy { $0.status == status && $0.errorCode == code }, "\(path)")
                }
                #expect(harness.origin.count(path) == 1, "\(path)")
            }
        }
        try await withHarness(configure: {
            $0.download.failureTTLSeconds = 0
            $0.download.notFoundTTLSeconds = 0
        }) { harness in
            for path in ["/status/500", "/corpus/gone.gif"] {
                for _ in 0..<3 { _ = try await harness.transcode(url: harness.originURL(path)) }
                #expect(harness.origin.count(path) == 3, "\(path)")
            }
        }
    }

    /// The same bytes at two URLs are encoded once; both URLs answer with the same object.
    @Test func twoURLsWithTheSameBytesTranscodeOnce() async throws {
        try await withHarness { harness in
            let first = try await harness.transcode(url: harness.originURL("/corpus/cartoon_flag_delaware.gif"))
            let second = try await harness.transcode(url: harness.originURL("/copy/cartoon_flag_delaware.gif"))
            #expect(first.status == 200 && second.status == 200)
            #expect(try first.json()["key"] as? String == second.json()["key"] as? String)
            #expect(harness.services.transcodes.counters.downloads == 2)
            #expect(harness.services.transcodes.counters.transcodes == 1)
            // And uploading the same bytes finds the object too.
            let upload = try await harness.upload(try corpusBytes("cartoon_flag_delaware.gif"))
            #expect(upload.headers.first(name: "X-Cache") == "hit")
            #expect(harness.services.transcodes.counters.transcodes == 1)
        }
    }

    /// A client that gives up does not cancel the work: the others still get the result, and so does a
    /// request that arrives later.
    @Test(.tags(.wallClock)) func aDisconnectingClientDoesNotCancelTheJob() async throws {
        try await withHarness { harness in
            let url = harness.originURL("/delayed/800/cartoon_spinner_loading.gif")
            async let impatient: Result<Reply, any Error> = {
                do {
                    return .success(
                        try await harness.request(
                            .POST, "/transcode", headers: [("Content-Type", "application/json")],
                            body: Array(#"{"url": "\#(url)"}"#.utf8), timeout: .milliseconds(200)))
                } catch {
                    return .failure(error)
                }
            }()
            try await Task.sleep(for: .milliseconds(50))
            let patient = try await harness.transcode(url: url)
            #expect(patient.status == 200, "\(patient.text)")
            let gaveUp = await impatient
            #expect((try? gaveUp.get()) == nil, "the impatient client was expected to time out")
            #expect(harness.origin.count("/delayed/800/cartoon_spinner_loading.gif") == 1)
            #expect(harness.services.transcodes.counters.transcodes == 1)
        }
    }
}
