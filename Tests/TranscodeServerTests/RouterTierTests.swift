import Foundation
import Synchronization
import TestSupport
import Testing

@testable import TranscodeCore
@testable import TranscodeHTTP
@testable import TranscodeServer

/// The routes over a stub `TranscodeJobs` that answers each job itself and converts nothing: what `POST /transcode`
/// and `GET /jobs/{id}` answer for a job that is still running, refused, or unknown, without a download or an
/// encoder (issue 54's router tier).
@Suite(.tags(.integration), .timeLimit(.minutes(2))) struct RouterTierTests {
    /// Jobs answered by `answer`, each recorded; a job submitted is running until the test says otherwise.
    final class StubJobs: TranscodeJobs {
        let answer: @Sendable (TranscodeJob) throws -> TranscodeAnswer
        let submitted = Mutex<[TranscodeJob]>([])

        init(answer: @escaping @Sendable (TranscodeJob) throws -> TranscodeAnswer) {
            self.answer = answer
        }

        func submit(
            _ job: TranscodeJob, upload: [UInt8]?, waitingUpTo seconds: Double?, subscriber: JobSubscription?
        ) async throws -> TranscodeAnswer {
            self.submitted.withLock { $0.append(job) }
            return try self.answer(job)
        }

        func isRunning(_ id: String) async -> Bool {
            self.submitted.withLock { jobs in jobs.contains { $0.id == id } }
        }

        func failure(of id: String) -> JobFailure? { nil }
    }

    /// A job that outlives its wait: 202 with where to poll, the poll says pending, and nothing was downloaded.
    @Test func aJobStillRunningIsAcceptedThenPolled() async throws {
        let jobs = StubJobs { .pending(jobID: $0.id) }
        try await withHarness(jobs: { _ in jobs }) { harness in
            let url = harness.originURL("/corpus/loop_1.gif")
            let accepted = try await harness.transcode(url: url)
            #expect(accepted.status == 202, "\(accepted.text)")
            let job = try #require(jobs.submitted.withLock { $0.first })
            #expect(job.source == .url(url) && job.priority == .interactive)
            #expect(accepted.headers.first(name: "Location")?.hasSuffix("/jobs/\(job.id)") == true)
            #expect(accepted.headers.first(name: "Retry-After") == "2")
            let body = try accepted.json()
            #expect(body["status"] as? String == "pending" && body["id"] as? String == job.id)
            #expect(body["result"] == nil && body["error"] == nil)
            let poll = try await harness.request(.GET, "/jobs/\(job.id)")
            #expect(poll.status == 200)
            #expect(try poll.json()["status"] as? String == "pending")
            #expect(harness.origin.total == 0, "the stub downloads nothing")
        }
    }

    /// An upload's job carries its bytes and is named by the object they make: 202 with that id, and its poll.
    @Test func anUploadsJobIsNamedByItsObject() async throws {
        let jobs = StubJobs { .pending(jobID: $0.id) }
        try await withHarness(jobs: { _ in jobs }) { harness in
            let accepted = try await harness.upload(try corpusBytes("loop_1.gif"))
            #expect(accepted.status == 202, "\(accepted.text)")
            let job = try #require(jobs.submitted.withLock { $0.first })
            guard case .upload(let key) = job.source else {
                Issue.record("the job's source is \(job.source), not an upload")
                return
            }
            #expect(job.id == key.rawValue)
            #expect(accepted.headers.first(name: "Location")?.hasSuffix("/jobs/\(key.rawValue)") == true)
            #expect(try await harness.request(.GET, "/jobs/\(key.rawValue)").json()["status"] as? String == "pending")
            #expect(harness.origin.total == 0)
        }
    }

    /// A job the queue refuses: its error's status and code, and the poll knows no such job.
    @Test func aRefusedJobAnswersItsError() async throws {
        let jobs = StubJobs { _ in throw ServiceError(.queueFull, "stubbed: the queue is full") }
        try await withHarness(jobs: { _ in jobs }) { harness in
            let refused = try await harness.transcode(url: harness.originURL("/corpus/loop_1.gif"))
            #expect(refused.status == 429, "\(refused.text)")
            #expect(refused.errorCode == "queue-full")
            #expect(refused.headers.first(name: "Retry-After") == "2")
            let unknown = try await harness.request(.GET, "/jobs/\(String(repeating: "0", count: 64))")
            #expect(unknown.status == 404)
            #expect(unknown.errorCode == "not-found")
        }
    }
}
