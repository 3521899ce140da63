import Foundation
import Logging
import Synchronization

/// `TranscodeJobs` for a fleet (`queue.kind: postgres`), the second implementation of the seam. A job still runs
/// in this process, through `InProcessJobs` (the single flight, admission against the pool): a request answered
/// within its wait never touches the database, and requests work while it is away. What the fleet adds is for a
/// job that outlives its request's wait (answered 202 `pending`):
/// - before the 202 is sent (within `queue.timeoutSeconds`; not tried for 10 s after the database failed to take
///   one), it is recorded in the job table (`PostgresQueue.adopt`) as running, leased to this node; the lease is
///   renewed while it runs, and it ends there with its result (batch items that joined it take that result);
/// - any node answers `GET /jobs/{id}` for it: pending while it runs, its error when it failed (done is the
///   shared store's answer); 503 `queue-unavailable` when the table cannot be read, never a 404 for a job that
///   may be running elsewhere;
/// - when this node dies, its lease expires and another node's workers claim and run it (`PostgresBatches`);
///   its lease and its end are handled as a batch worker's claim is (`ConversionJobs.hold`): stopped gracefully,
///   it is queued again at once, and after a passing failure (the shared store down) in 2 s.
///
/// Jobs of an upload stay in this process (the bytes are only here), and so do those the database did not
/// take in time: then only this node knows them, as on one node.
package final class FleetJobs: TranscodeJobs {
    let local: InProcessJobs
    let queue: PostgresQueue
    let configuration: QueueConfiguration
    let logger: Logger
    /// This node's name in leases.
    let owner: String
    /// Where a recorded job's lease is held and its end recorded.
    let conversions: ConversionJobs
    private let adoptions = Mutex(0)
    /// Until when not to ask the database to take a pending job (it failed to, a moment ago).
    private let unavailableUntil = Mutex<ContinuousClock.Instant?>(nil)

    package init(local: InProcessJobs, conversions: ConversionJobs, owner: String, logger: Logger) {
        self.local = local
        self.conversions = conversions
        self.queue = conversions.queue
        self.configuration = conversions.configuration
        self.owner = owner
        self.logger = logger
    }

    package func submit(
        _ job: TranscodeJob, upload: [UInt8]?, waitingUpTo seconds: Double?, subscriber: JobSubscription?
    ) async throws -> TranscodeAnswer {
        // Waited for until the end (a batch item, a CLI), or an upload: nothing for the fleet to know.
        guard seconds != nil, case .url = job.source else {
            return try await self.local.submit(job, upload: upload, waitingUpTo: seconds, subscriber: subscriber)
        }
        let watcher = JobSubscription(forwardingTo: subscriber)
        let answer = try await self.local.submit(job, upload: upload, waitingUpTo: seconds, subscriber: watcher)
        // Recorded before the client learns the job's id, so that any node it asks knows the job.
        if case .pending = answer {
            await self.adopt(job, endingWith: watcher)
        }
        return answer
    }

    package func isRunning(_ id: String) async -> Bool {
        await self.local.isRunning(id)
    }

    package func failure(of id: String) -> JobFailure? {
        self.local.failure(of: id)
    }

    package func recorded(_ id: String) async throws -> JobState? {
        let latest: (state: PostgresQueue.State, result: String?, lastError: String?)?
        do {
            latest = try await self.configuration.bounded {
                try await self.migrate()
                return try await self.queue.latest(resultKey: id, kind: .conversion)
            }
        } catch {
            // Not "no such job": it may be running on another node.
            throw ServiceError(.queueUnavailable, "the job database cannot be read now; try again")
        }
        guard let found = latest else { return nil }
        switch found.state {
        case .queued, .running:
            return .pending
        case .done, .dead:
            if let json = found.result,
                let result = try? JSONDecoder().decode(QueuedJobResult.self, from: Data(json.utf8))
            {
                guard let error = result.error else { return nil }
                return .failed(ServiceError(error.code, error.message))
            }
            // A dead letter whose last lease expired (its worker died each time) keeps only its last error.
            guard found.state == .dead else { return nil }
            return .failed(.internal(found.lastError ?? "the job failed on every node that ran it"))
        }
    }

    /// Records `job` as this node's running job, within `queue.timeoutSeconds`, then follows it to its end. Not
    /// tried for 10 s after the database failed to take one: a 202 does not wait on a database that is away.
    private func adopt(_ job: TranscodeJob, endingWith watcher: JobSubscription) async {
        if let until = self.unavailableUntil.withLock({ $0 }), ContinuousClock.now < until { return }
        let owner = "\(self.owner)#r\(self.adoptions.withLock { $0 += 1; return $0 })"
        guard let payload = try? String(decoding: JSONEncoder().encode(job), as: UTF8.self) else { return }
        do {
            let adopted = try await PostgresQueue.bounded(
                seconds: self.configuration.timeoutSeconds,
                {
                    try await self.migrate()
                    return try await self.queue.adopt(
                        resultKey: job.id, kind: .conversion, payload: payload, owner: owner,
                        leaseSeconds: self.configuration.leaseSeconds, maxAttempts: self.configuration.maxAttempts)
                },
                // Taken after all, once the 202 was sent: followed all the same, not left as a lease nobody holds.
                late: { id in
                    guard let id else { return }
                    await self.follow(id, job: job, payload: payload, owner: owner, endingWith: watcher)
                })
            // Nil: a live job of this URL elsewhere (a batch item), which reports itself.
            if let id = adopted {
                Task { await self.follow(id, job: job, payload: payload, owner: owner, endingWith: watcher) }
            }
        } catch {
            self.unavailableUntil.withLock { $0 = ContinuousClock.now + .seconds(10) }
            self.logger.warning(
                "the job database did not take a pending job; only this node knows it",
                metadata: ["job.id": "\(job.id.prefix(16))", "error": "\(String(reflecting: error))"])
        }
    }

    /// Brings the schema up to date first (a request may come before the workers' startup migrated it: the job
    /// table, or its columns, may not exist yet).
    private func migrate() async throws {
        try await self.conversions.schema.migrate()
    }

    /// Holds the lease of job `id` until `watcher` is told its end, then records that end, as a batch worker does
    /// (`ConversionJobs.hold`).
    private func follow(
        _ id: Int64, job: TranscodeJob, payload: String, owner: String, endingWith watcher: JobSubscription
    )
        async
    {
        let claimed = PostgresQueue.Claimed(
            id: id, resultKey: job.id, kind: .conversion, payload: payload, attempt: 1, reclaimed: false,
            owner: owner)
        await self.conversions.hold(claimed) { await watcher.end() }
    }
}
