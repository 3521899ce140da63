import Foundation
import TestSupport
import Testing

@testable import TranscodeCore
@testable import TranscodeHTTP
@testable import TranscodeServer

@Suite(.tags(.integration), .timeLimit(.minutes(10))) struct JobTests {
    /// Past the wait budget: 202 with a Location to poll, which reports pending, then the result.
    @Test(.tags(.wallClock)) func slowJobsAnswer202AndCanBePolled() async throws {
        try await withHarness(configure: { $0.transcode.syncWaitSeconds = 0.1 }) { harness in
            let reply = try await harness.transcode(url: harness.originURL("/delayed/700/cartoon_hotdog.gif"))
            #expect(reply.status == 202, "\(reply.text)")
            let location = try #require(reply.headers.first(name: "Location"))
            #expect(location.hasPrefix("/jobs/"))
            let first = try await harness.request(.GET, location)
            #expect(try first.json()["status"] as? String == "pending", "\(first.text)")
            var status = "pending"
            var result: [String: Any]?
            for _ in 0..<100 where status == "pending" {
                try await Task.sleep(for: .milliseconds(100))
                let poll = try await harness.request(.GET, location).json()
                status = poll["status"] as? String ?? "?"
                result = poll["result"] as? [String: Any]
            }
            #expect(status == "done")
            let key = try #require(result?["key"] as? String)
            #expect(try await harness.request(.GET, "/media/\(key).mp4").status == 200)
        }
    }

    @Test(.tags(.wallClock)) func failedJobsReportTheirError() async throws {
        try await withHarness(configure: { $0.transcode.syncWaitSeconds = 0.1 }) { harness in
            let reply = try await harness.transcode(url: harness.originURL("/delayed/400/notgif_jpeg_photo.gif"))
            #expect(reply.status == 202)
            let location = try #require(reply.headers.first(name: "Location"))
            var poll: [String: Any] = [:]
            for _ in 0..<100 {
                try await Task.sleep(for: .milliseconds(100))
                poll = try await harness.request(.GET, location).json()
                if poll["status"] as? String != "pending" { break }
            }
            #expect(poll["status"] as? String == "failed")
            #expect((poll["error"] as? [String: Any])?["code"] as? String == "unsupported-format")
        }
    }

    @Test func unknownJobs() async throws {
        try await withHarness { harness in
            let unknown = try await harness.request(.GET, "/jobs/\(String(repeating: "0", count: 64))")
            #expect(unknown.status == 404)
            let malformed = try await harness.request(.GET, "/jobs/nonsense")
            #expect(malformed.status == 404)
        }
    }

    /// One worker, no queue: a second job while the first runs is refused at once, with Retry-After,
    /// and costs no download.
    @Test(.tags(.wallClock)) func aFullQueueAnswers429() async throws {
        try await withHarness(configure: {
            $0.transcode.workers = 1
            $0.transcode.queueLength = 0
        }) { harness in
            let slow = try await harness.startSlowJob()
            let refused = try await harness.transcode(url: harness.originURL("/corpus/loop_1.gif"))
            #expect(refused.status == 429, "\(refused.text)")
            #expect(refused.errorCode == "queue-full")
            #expect(refused.headers.first(name: "Retry-After") != nil)
            #expect(harness.origin.count("/corpus/loop_1.gif") == 0)
            // Joining the running job is not a new job: it is accepted.
            let joined = try await harness.transcode(url: harness.originURL("/delayed/1000/cartoon_hotdog.gif"))
            #expect(joined.status == 200)
            #expect(try await slow.value.status == 200)
            // Once it is done, there is room again.
            #expect(try await harness.transcode(url: harness.originURL("/corpus/loop_1.gif")).status == 200)
        }
    }

    /// A job that ends at once is answered with its result, never "pending": the timer's cancellation used
    /// to race the result (a not-a-gif upload was answered 202 about once in 1,800 under scripts/soak).
    @Test func aJobThatEndsAtOnceIsNeverPending() async throws {
        struct Failure: Error {}
        for _ in 0..<2000 {
            let task = Task<Int, any Error> { throw Failure() }
            let result = await task.waitForResult(upTo: 30)
            #expect(result != nil)
            if result == nil { break }
        }
    }
}
