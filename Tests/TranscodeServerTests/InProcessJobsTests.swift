import Foundation
import Synchronization
import TestSupport
import Testing
import Transcoder

@testable import TranscodeCore
@testable import TranscodeHTTP
@testable import TranscodeServer

/// The jobs seam without a server: a job as a value a queue can carry, one run per id, and each subscriber (a
/// webhook, a batch item) told the end of the run its request started or joined.
@Suite(.tags(.unit), .timeLimit(.minutes(10))) struct InProcessJobsTests {
    static let key = ObjectKey(String(repeating: "ab", count: 32))!

    static func code(_ end: JobEnd) -> ErrorCode? {
        if case .failed(let error) = end { return error.code }
        return nil
    }

    @Test func anEndToldBeforeAnyoneWaitsIsKeptAndTheFirstWins() async throws {
        let subscription = JobSubscription()
        #expect(!subscription.hasEnded)
        subscription.tell(.failed(ServiceError.queueFull()))
        subscription.tell(.failed(ServiceError.takenDown("later")))
        #expect(Self.code(await subscription.end()) == .queueFull)
    }

    @Test func anEndToldWhileWaitingResumesTheWaiter() async throws {
        let subscription = JobSubscription()
        let waiter = Task { await subscription.end() }
        try await Task.sleep(for: .milliseconds(50))
        subscription.tell(.failed(ServiceError.takenDown("gone")))
        #expect(Self.code(await waiter.value) == .takenDown)
    }

    /// What a queue would store: the job round-trips through JSON, options and all.
    @Test(arguments: [
        TranscodeJob.Source.url("https://example.com/a.gif?b=1"), TranscodeJob.Source.upload(Self.key),
    ])
    func aJobIsAValueAQueueCanCarry(source: TranscodeJob.Source) throws {
        var options = TranscodeOptions()
        options.background = RGBColor(hex: "#102030")!
        options.limits.maxFrames = 12
        let job = TranscodeJob(id: Self.key.rawValue, source: source, options: options)
        let decoded = try JSONDecoder().decode(TranscodeJob.self, from: try JSONEncoder().encode(job))
        #expect(decoded == job)
        #expect(decoded.options.outputFingerprint == options.outputFingerprint)
    }

    /// A performer whose runs wait to be let go, then fail with the next of `failures`.
    final class Gate: JobPerformer {
        let calls = Atomic<Int>(0)
        let release = Mutex<CheckedContinuation<Void, Never>?>(nil)
        let failures: [ServiceError]

        init(failures: [ServiceError]) { self.failures = failures }

        func perform(_ job: TranscodeJob, upload: [UInt8]?) async throws -> TranscodeOutcome {
            let call = self.calls.add(1, ordering: .relaxed).oldValue
            await withCheckedContinuation { continuation in self.release.withLock { $0 = continuation } }
            throw self.failures[min(call, self.failures.count - 1)]
        }

        /// Lets the running perform go on, once it waits.
        func open() async throws {
            for _ in 0..<500 {
                if let continuation = self.release.withLock({ $0.take() }) {
                    continuation.resume()
                    return
                }
                try await Task.sleep(for: .milliseconds(10))
            }
            Issue.record("the job never started")
        }
    }

    /// A performer whose every run fails at once.
    struct Refuser: JobPerformer {
        func perform(_ job: TranscodeJob, upload: [UInt8]?) async throws -> TranscodeOutcome {
            throw ServiceError.originNotFound("no such GIF")
        }
    }

    /// Failures are kept for polling clients, each under its job's id, but not without bound: at the bound the
    /// older half goes.
    @Test func recordedFailuresAreBounded() async throws {
        let pool = TranscodePool(workers: 1, queueLength: 4, graceSeconds: 1)
        let jobs = InProcessJobs(pool: pool, performer: Refuser(), metrics: ServiceMetrics(), maxRecordedFailures: 100)
        for index in 0..<110 {
            let job = TranscodeJob(id: "job-\(index)", source: .upload(Self.key), options: TranscodeOptions())
            _ = try? await jobs.submit(job, upload: [1], waitingUpTo: nil, subscriber: nil)
        }
        #expect(jobs.recordedFailures <= 100)
        #expect(jobs.recordedFailures >= 50)
        #expect(jobs.failure(of: "job-109")?.error.code == .originNotFound)
        #expect(jobs.failure(of: "job-0") == nil)
    }

    static func job() -> TranscodeJob {
        TranscodeJob(id: "job", source: .upload(Self.key), options: TranscodeOptions())
    }

    /// Three submits of one id run the work once; the early ones are answered "pending"; every subscriber
    /// hears the one failure, and by then the run is over: not running, its slot free, its failure on record.
    @Test func oneIdIsOneRunAndEverySubscriberHearsItsEnd() async throws {
        let pool = TranscodePool(workers: 1, queueLength: 1, graceSeconds: 1)
        let gate = Gate(failures: [ServiceError.originNotFound("no such GIF")])
        let jobs = InProcessJobs(pool: pool, performer: gate, metrics: ServiceMetrics())
        let subscribers = [JobSubscription(), JobSubscription()]
        for subscriber in subscribers {
            let answer = try await jobs.submit(Self.job(), upload: [1], waitingUpTo: 0.05, subscriber: subscriber)
            guard case .pending(let id) = answer else {
                Issue.record("expected pending")
                return
            }
            #expect(id == "job")
        }
        #expect(await jobs.isRunning("job"))
        #expect(pool.load == 1)
        let waited = Task { try await jobs.submit(Self.job(), upload: [1], waitingUpTo: nil, subscriber: nil) }
        try await gate.open()
        await #expect(throws: ServiceError.self) { try await waited.value }
        for subscriber in subscribers {
            #expect(Self.code(await subscriber.end()) == .originNotFound)
            #expect(await !jobs.isRunning("job"))
            #expect(pool.load == 0)
            #expect(jobs.failure(of: "job")?.error.code == .originNotFound)
        }
        #expect(gate.calls.load(ordering: .relaxed) == 1)
        try await pool.stop()
    }

    /// A subscriber hears the run its own submit joined, not one that ended before: the same id run again
    /// (a URL that failed, asked again) tells its new end to its new subscribers only.
    @Test func aSubscriberHearsItsOwnRun() async throws {
        let pool = TranscodePool(workers: 1, queueLength: 1, graceSeconds: 1)
        let gate = Gate(failures: [ServiceError.originError("503"), ServiceError.originNotFound("gone now")])
        let jobs = InProcessJobs(pool: pool, performer: gate, metrics: ServiceMetrics())
        let first = JobSubscription()
        _ = try await jobs.submit(Self.job(), upload: [1], waitingUpTo: 0.01, subscriber: first)
        try await gate.open()
        #expect(Self.code(await first.end()) == .originError)
        let second = JobSubscription()
        _ = try await jobs.submit(Self.job(), upload: [1], waitingUpTo: 0.01, subscriber: second)
        #expect(!second.hasEnded)
        try await gate.open()
        #expect(Self.code(await second.end()) == .originNotFound)
        #expect(gate.calls.load(ordering: .relaxed) == 2)
        try await pool.stop()
    }

    /// A job that cannot be admitted is refused before any work, and nothing runs.
    @Test func aFullPoolRefusesBeforeWork() async throws {
        let pool = TranscodePool(workers: 1, queueLength: 0, graceSeconds: 1)
        let gate = Gate(failures: [ServiceError.originNotFound("no such GIF")])
        let jobs = InProcessJobs(pool: pool, performer: gate, metrics: ServiceMetrics())
        _ = try await jobs.submit(Self.job(), upload: [1], waitingUpTo: 0.01, subscriber: nil)
        let other = TranscodeJob(id: "other", source: .upload(Self.key), options: TranscodeOptions())
        let refusal = await #expect(throws: ServiceError.self) {
            try await jobs.submit(other, upload: [1], waitingUpTo: 0.01, subscriber: nil)
        }
        #expect(refusal?.code == .queueFull)
        try await gate.open()
        #expect(gate.calls.load(ordering: .relaxed) == 1)
        try await pool.stop()
    }
}
