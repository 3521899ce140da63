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
///   when it stops gracefully, or the job fails for a passing reason (the shared store down), the job is queued
///   again at once.
///
/// Jobs of an upload stay in this process (the bytes are only here), and so do those the database did not
/// take in time: then only this node knows them, as on one node.
final class FleetJobs: TranscodeJobs {
    let local: InProcessJobs
    let queue: PostgresQueue
    let configuration: QueueConfiguration
    let logger: Logger
    /// This node's name in leases.
    let owner: String
    private let adoptions = Mutex(0)
    /// Until when not to ask the database to take a pending job (it failed to, a moment ago).
    private let unavailableUntil = Mutex<ContinuousClock.Instant?>(nil)
    /// Told the id of each job that ended here (`PostgresBatches.finishItems`: items that joined it).
    private let onEnd = Mutex<(@Sendable (Int64) async -> Void)?>(nil)

    init(local: InProcessJobs, queue: PostgresQueue, configuration: QueueConfiguration, owner: String, logger: Logger) {
        self.local = local
        self.queue = queue
        self.configuration = configuration
        self.owner = owner
        self.logger = logger
    }

    /// Calls `body` with the id of each recorded job once its end is recorded.
    func whenEnded(_ body: @escaping @Sendable (Int64) async -> Void) {
        self.onEnd.withLock { $0 = body }
    }

    func submit(
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

    func isRunning(_ id: String) async -> Bool {
        await self.local.isRunning(id)
    }

    func failure(of id: String) -> JobFailure? {
        self.local.failure(of: id)
    }

    func recorded(_ id: String) async throws -> JobState? {
        let latest: (state: PostgresQueue.State, result: String?, lastError: String?)?
        do {
            latest = try await PostgresBatches.bounded(seconds: self.configuration.timeoutSeconds) {
                try await self.queue.latest(resultKey: id, spec: PostgresBatches.spec)
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
                return .failed(ServiceError(ErrorCode(rawValue: error.code) ?? .internal, error.message))
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
            let adopted = try await PostgresBatches.bounded(
                seconds: self.configuration.timeoutSeconds,
                {
                    try await self.queue.adopt(
                        resultKey: job.id, spec: PostgresBatches.spec, payload: payload, owner: owner,
                        leaseSeconds: self.configuration.leaseSeconds, maxAttempts: self.configuration.maxAttempts)
                },
                // Taken after all, once the 202 was sent: followed all the same, not left as a lease nobody holds.
                late: { id in
                    guard let id else { return }
                    await self.follow(id, owner: owner, endingWith: watcher)
                })
            // Nil: a live job of this URL elsewhere (a batch item), which reports itself.
            if let id = adopted {
                Task { await self.follow(id, owner: owner, endingWith: watcher) }
            }
        } catch {
            self.unavailableUntil.withLock { $0 = ContinuousClock.now + .seconds(10) }
            self.logger.warning(
                "the job database did not take a pending job; only this node knows it",
                metadata: ["job.id": "\(job.id.prefix(16))", "error": "\(String(reflecting: error))"])
        }
    }

    /// Renews the lease of job `id` until `watcher` is told its end, then records that end.
    private func follow(_ id: Int64, owner: String, endingWith watcher: JobSubscription) async {
        let lease = self.configuration.leaseSeconds
        let timeout = self.configuration.timeoutSeconds
        let heartbeat = Task {
            while !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(Int64(lease * 1000 / 3)))
                guard !Task.isCancelled else { return }
                let renewed = try? await PostgresBatches.bounded(seconds: timeout) {
                    try await self.queue.heartbeat(id, owner: owner, leaseSeconds: lease)
                }
                if renewed == false { return }
            }
        }
        let end = await watcher.end()
        heartbeat.cancel()
        do {
            switch end {
            case .failed(let failure)
            where PostgresBatches.passingFailures.contains(failure.code) || !self.local.pool.isAccepting:
                // Not the URL's failure (a passing one, or this node stopping): queued again now, for any node.
                _ = try await PostgresBatches.bounded(seconds: timeout) {
                    try await self.queue.fail(
                        id, owner: owner, error: "\(failure.code): \(failure.message)", retryAfterSeconds: 0,
                        result: QueuedJobResult(failure).json, counted: false)
                }
                return
            case .failed(let failure):
                _ = try await PostgresBatches.bounded(seconds: timeout) {
                    try await self.queue.complete(id, owner: owner, result: QueuedJobResult(failure).json)
                }
            case .done(let outcome):
                _ = try await PostgresBatches.bounded(seconds: timeout) {
                    try await self.queue.complete(id, owner: owner, result: QueuedJobResult(outcome).json)
                }
            }
        } catch {
            self.logger.warning(
                "cannot record a request's job's end; its lease will expire and it runs again",
                metadata: ["job.id": "\(id)", "error": "\(String(reflecting: error))"])
            return
        }
        await self.onEnd.withLock { $0 }?(id)
    }
}
