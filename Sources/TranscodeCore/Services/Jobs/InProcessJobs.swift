import Foundation
import Synchronization

/// Jobs run in this process: one single flight per job id on the transcode pool, admitted against the pool's
/// bound when a flight starts (joining costs nothing), with recent failures kept for `GET /jobs/{id}`.
package final class InProcessJobs: TranscodeJobs {
    let pool: TranscodePool
    let performer: any JobPerformer
    let metrics: ServiceMetrics
    private let flights = SingleFlight<String, TranscodeOutcome>()
    private let failures = Mutex<[String: JobFailure]>([:])
    /// Failures kept for `GET /jobs/{id}`: enough for clients polling a job, bounded however many bad
    /// requests arrive (scripts/soak sent 120,000 not-a-GIF uploads in 30 minutes, and every one was kept).
    let maxRecordedFailures: Int

    init(pool: TranscodePool, performer: any JobPerformer, metrics: ServiceMetrics, maxRecordedFailures: Int = 10_000) {
        self.pool = pool
        self.performer = performer
        self.metrics = metrics
        self.maxRecordedFailures = max(2, maxRecordedFailures)
    }

    package func submit(
        _ job: TranscodeJob, upload: [UInt8]?, waitingUpTo seconds: Double?, subscriber: JobSubscription?
    ) async throws -> TranscodeAnswer {
        let id = job.id
        // Admission is claimed when a flight starts, before any download: a full queue is refused at once.
        // The end of this run is told to `subscriber` once the run has left the table (a poll then finds it over),
        // by the run's own task.
        let observer = subscriber.map { subscriber in
            { @Sendable (result: Result<TranscodeOutcome, any Error>) in
                subscriber.tell(JobEnd(result.map(\.withoutFiles)))
            }
        }
        let (task, joined) = try await self.flights.task(
            for: id, admit: { try self.pool.admit(job.priority) }, observer: observer
        ) { admission in
            defer { admission.release() }
            do {
                let outcome = try await self.performer.perform(job, upload: upload)
                self.failures.withLock { $0[id] = nil }
                return outcome
            } catch {
                self.recordFailure(id, ServiceError.from(error))
                throw error
            }
        }
        if joined {
            self.metrics.joined()
            // A batch item's or a queue claim's slot (`TranscodePool.Reservation`): the job it joined holds one.
            self.pool.endReservation()
        }
        guard let seconds else {
            return .done(try await task.value, cacheHit: false)
        }
        guard let result = await task.waitForResult(upTo: seconds) else {
            return .pending(jobID: id)
        }
        return .done(try result.get(), cacheHit: false)
    }

    package func isRunning(_ id: String) async -> Bool {
        await self.flights.isRunning(id)
    }

    package func failure(of id: String) -> JobFailure? {
        self.failures.withLock { $0[id] }
    }

    private func recordFailure(_ key: String, _ error: ServiceError) {
        let now = Date()
        self.failures.withLock { failures in
            if failures.count >= self.maxRecordedFailures {
                // Keep the newer half: amortised, one sort per 5,000 failures.
                let newer = failures.sorted { $0.value.at > $1.value.at }.prefix(self.maxRecordedFailures / 2)
                failures = Dictionary(uniqueKeysWithValues: newer.map { ($0.key, $0.value) })
            }
            failures[key] = JobFailure(error: error, at: now)
        }
    }

    /// Failures currently kept (tests read it).
    var recordedFailures: Int { self.failures.withLock { $0.count } }
}
