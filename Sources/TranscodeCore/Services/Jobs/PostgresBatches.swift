import Foundation
import Logging
import PostgresNIO
import ServiceLifecycle
import Synchronization
import Transcoder

/// Batches kept in the fleet's PostgreSQL database (`queue.kind: postgres`): any node answers for any batch,
/// and every node's idle workers convert its items.
///
/// - A batch is a row of `transcode_batches`, each URL a row of `transcode_batch_items` tied to a job of
///   `transcode_jobs` (`PostgresQueue`): one live job per URL key fleet-wide, so a URL in several batches, or
///   submitted twice, converts once.
/// - Its service runs this node's two `QueueWorker`s: conversions (`ConversionWorker`: only while the node has an
///   idle worker and batch items hold fewer than `workers - 1` of them, as `BatchRunner` does, so interactive
///   requests come first) and webhook deliveries (`PostgresWebhookOutbox`). A conversion runs through the same
///   `TranscodeService` as a request (the single flight, the shared store); `ConversionJobs` holds its lease and
///   records its end, and the items waiting on the job take it in the same transaction.
/// - Idle workers wait on `LISTEN transcode_jobs`, woken by each enqueue, or by the time the next backoff or
///   lease ends; a node whose pool is busy with requests is woken when a slot of it is released.
/// - The routes give the database `queue.timeoutSeconds`, then answer 503 `queue-unavailable`; interactive
///   requests never touch it.
package final class PostgresBatches: BatchStore, Service, Sendable {
    let queue: PostgresQueue
    let service: TranscodeService
    let links: PublicLinks
    let configuration: QueueConfiguration
    let logger: Logger
    /// How the conversion jobs end: leases, results, the items and batches waiting on them.
    let conversions: ConversionJobs
    /// This node's name on its leases: host, process and a random part (a restarted node is a new owner).
    let owner: String
    let conversionWorker: QueueWorker<ConversionWorker>
    let webhookWorker: QueueWorker<PostgresWebhookOutbox>

    package init(
        conversions: ConversionJobs, service: TranscodeService, links: PublicLinks, metrics: ServiceMetrics,
        logger: Logger
    ) {
        let configuration = conversions.configuration
        self.queue = conversions.queue
        self.conversions = conversions
        self.service = service
        self.links = links
        self.configuration = configuration
        self.logger = logger
        self.owner = Self.nodeName()
        self.conversionWorker = QueueWorker(
            queue: conversions.queue, kind: .conversion,
            handler: ConversionWorker(conversions: conversions) { await service.run($0) },
            settings: .init(
                leaseSeconds: configuration.leaseSeconds, timeoutSeconds: configuration.timeoutSeconds,
                // Busy with requests or with its share of items: a finishing item, or any slot of the pool released,
                // wakes it. An item claimed holds its slot at once (`reserve`).
                busyWaitSeconds: 0.25, sweepSeconds: 30),
            owner: self.owner, metrics: metrics, logger: logger)
        conversions.pool.wakeOnRelease(self.conversionWorker.wakeup)
        self.webhookWorker = QueueWorker(
            queue: conversions.queue, kind: .webhook, handler: conversions.outbox,
            settings: .init(
                leaseSeconds: max(30, configuration.leaseSeconds), timeoutSeconds: configuration.timeoutSeconds,
                busyWaitSeconds: 1, ownerTag: "webhook-"),
            owner: self.owner, logger: logger)
    }

    /// A name for this process in leases: host, pid and a random part (a restarted node is another owner).
    package static func nodeName() -> String {
        "\(ProcessInfo.processInfo.hostName):\(getpid()):\(BatchID.random().prefix(8))"
    }

    /// Runs `body` against the database within `queue.timeoutSeconds`.
    /// - Throws: 503 `queue-unavailable` when the database does not answer in time or fails.
    func withDatabase<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) async throws -> T {
        do {
            return try await self.configuration.bounded {
                try await self.conversions.schema.migrate()
                return try await body()
            }
        } catch let error as ServiceError {
            throw error
        } catch is DatabaseTimeout {
            throw ServiceError(
                .queueUnavailable,
                "the job database did not answer within \(self.configuration.timeoutSeconds) s; try again")
        } catch {
            self.logger.error("the job database failed", metadata: ["error": "\(String(reflecting: error))"])
            throw ServiceError(.queueUnavailable, "the job database cannot be reached; try again")
        }
    }

    // MARK: The workers

    package func run() async throws {
        let listener = Task { await self.listen() }
        defer { listener.cancel() }
        let work = Task {
            // The schema first, however long the database takes to come up.
            while !Task.isCancelled {
                do {
                    // Bounded like every other call, more generously: another node may be migrating.
                    try await self.configuration.bounded(seconds: max(60, self.configuration.timeoutSeconds)) {
                        try await self.conversions.schema.migrate()
                    }
                    break
                } catch {
                    self.logger.warning(
                        "the job database cannot be reached; batches wait for it",
                        metadata: ["error": "\(String(reflecting: error))"])
                    try? await Task.sleep(for: .seconds(1))
                }
            }
            await self.conversionWorker.run()
        }
        let deliveries = Task { await self.webhookWorker.run() }
        let stop: @Sendable () -> Void = {
            work.cancel()
            deliveries.cancel()
            self.conversionWorker.wakeup.signal()
            self.webhookWorker.wakeup.signal()
        }
        // At shutdown the loops are cancelled, not waited for: a call to a database that went away can wait
        // for a connection indefinitely. An item being converted still finishes (a conversion is not
        // cancelled); what it cannot record then is claimed again after its lease.
        await withGracefulShutdownHandler {
            await withTaskCancellationHandler {
                await work.value
                await deliveries.value
            } onCancel: {
                stop()
            }
        } onGracefulShutdown: {
            stop()
        }
    }

    /// Wakes the workers on every enqueue anywhere in the fleet, listening again after the database comes back.
    private func listen() async {
        let wake = {
            self.conversionWorker.wakeup.signal()
            self.webhookWorker.wakeup.signal()
        }
        while !Task.isCancelled {
            do {
                try await self.queue.client.withConnection { connection in
                    try await connection.listen(on: PostgresQueue.channel) { notifications in
                        // Listening from now: look once for what was enqueued before.
                        wake()
                        for try await _ in notifications { wake() }
                    }
                }
            } catch {
                if !Task.isCancelled {
                    self.logger.debug("listening for jobs failed", metadata: ["error": "\(error)"])
                }
            }
            try? await Task.sleep(for: .seconds(1))
        }
    }
}

/// The fleet's conversion jobs as a `QueueWorker` runs them: claimed only while this node has an idle worker and
/// batch items hold fewer than `workers - 1` of them (`BatchRunner`'s rule), each run to its end by `performer`
/// under the lease `ConversionJobs` holds, in a `batch.item` span that continues the job's trace.
struct ConversionWorker: JobHandler {
    let conversions: ConversionJobs
    /// Runs a job to its end as a request's job runs (`TranscodeService.run`).
    let performer: @Sendable (TranscodeJob) async -> JobEnd

    func hasRoom(running: Int) -> Bool {
        let pool = self.conversions.pool
        return pool.load < pool.workers && running < max(1, pool.workers - 1)
    }

    var isWorking: Bool { self.conversions.pool.isAccepting }

    func reserve() -> TranscodePool.Reservation? { self.conversions.pool.reserve() }

    func sweep() async {
        await self.conversions.sweep()
    }

    func perform(_ claimed: PostgresQueue.Claimed) async {
        let job = try? JSONDecoder().decode(TranscodeJob.self, from: Data(claimed.payload.utf8))
        await Traces.span("batch.item", continuing: job?.traceparent, attributes: ["queue.job": String(claimed.id)]) {
            await self.conversions.hold(claimed) {
                guard let job else { return .failed(.internal("a queued job cannot be read")) }
                return await self.performer(job)
            }
        }
    }
}

extension TranscodeService {
    /// Runs a queued conversion job of a URL to its end, as a request's job runs (the single flight, the shared
    /// store, its priority).
    func run(_ job: TranscodeJob) async -> JobEnd {
        do {
            guard case .url(let text) = job.source else { throw ServiceError.internal("a queued job names no URL") }
            let url = try Downloader.validate(text)
            let ended = JobSubscription()
            _ = try? await self.transcode(
                url: url, options: job.options, untilDone: true, keys: SourceKeys(url: url, options: job.options),
                subscriber: ended, priority: job.priority)
            // Its job took the claim's slot over by now, or never will: a hit holds no worker while its end is
            // recorded in the database.
            self.pool.endReservation()
            return await ended.end()
        } catch {
            return .failed(ServiceError.from(error))
        }
    }
}
