import Foundation
import Logging
import PostgresNIO
import ServiceLifecycle
import Synchronization
import Transcoder

/// How a queued job ended, as the items waiting on it record it (`transcode_jobs.result`).
struct QueuedJobResult: Codable, Sendable {
    /// `done`, `kept-gif` or `failed`, as a batch line says.
    var status: ItemStatus
    var key: ObjectKey?
    var recommendation: String?
    var error: ReportedFailure?

    init(_ outcome: TranscodeOutcome) {
        self.status = ItemStatus(outcome)
        self.key = outcome.key
        self.recommendation = outcome.metadata.recommendation.rawValue
    }

    init(_ failure: ServiceError) {
        self.status = .failed
        self.error = ReportedFailure(failure)
    }

    var json: String { String(decoding: (try? JSONEncoder().encode(self)) ?? Data("{}".utf8), as: UTF8.self) }
}

/// Batches kept in the fleet's PostgreSQL database (`queue.kind: postgres`): any node answers for any batch,
/// and every node's idle workers convert its items.
///
/// - A batch is a row of `transcode_batches`, each URL a row of `transcode_batch_items` tied to a job of
///   `transcode_jobs` (`PostgresQueue`): one live job per URL key fleet-wide, so a URL in several batches, or
///   submitted twice, converts once.
/// - A worker claims a job only while its node has an idle worker and batch items hold fewer than `workers - 1`
///   of them, as `BatchRunner` does: interactive requests come first. It runs the job through the same
///   `TranscodeService` as a request (the single flight, the shared store), renews its lease while it runs, and
///   records the job's result; the items waiting on the job take it in the same transaction.
/// - Idle workers wait on `LISTEN transcode_jobs`, woken by each enqueue, or by the time the next backoff or
///   lease ends; a node whose pool is busy with requests looks again at its own pool every 50 ms.
/// - The routes give the database `queue.timeoutSeconds`, then answer 503 `queue-unavailable`; interactive
///   requests never touch it.
final class PostgresBatches: BatchStore, Service, Sendable {
    let queue: PostgresQueue
    let service: TranscodeService
    let links: PublicLinks
    let webhooks: WebhookDispatcher
    let metrics: ServiceMetrics
    let configuration: QueueConfiguration
    /// How long a complete batch is kept after it was created (`batch.retentionSeconds`).
    let retentionSeconds: Double
    let logger: Logger
    /// This worker's name on its leases: host, process and a random part (a restarted node is a new owner); each
    /// claim adds its own number (`claimOwner`), so that a job this node claims again after its own lease expired
    /// is not reported twice (the first claim's report finds the lease gone).
    let owner: String
    /// Where batches' webhooks are kept and delivered from (its loop runs with this service's).
    let outbox: PostgresWebhookOutbox
    private let claims = Mutex(0)
    private let wakeup = Wakeup()
    private let running = Mutex(0)
    /// The schema, brought up to date once per process (the routes, and `FleetJobs`' adoptions, may run before the
    /// workers' startup did).
    let schema: JobSchema

    init(
        client: PostgresClient, service: TranscodeService, links: PublicLinks, webhooks: WebhookDispatcher,
        metrics: ServiceMetrics, configuration: QueueConfiguration, retentionSeconds: Double, logger: Logger
    ) {
        self.queue = PostgresQueue(client: client, logger: logger)
        self.service = service
        self.links = links
        self.webhooks = webhooks
        self.metrics = metrics
        self.configuration = configuration
        self.retentionSeconds = retentionSeconds
        self.logger = logger
        self.owner = Self.nodeName()
        self.schema = JobSchema(queue: self.queue, logger: logger)
        self.outbox = PostgresWebhookOutbox(
            queue: self.queue, schema: self.schema, webhooks: webhooks, metrics: metrics,
            configuration: configuration, owner: self.owner, logger: logger)
    }

    /// A name for this process in leases: host, pid and a random part (a restarted node is another owner).
    static func nodeName() -> String {
        "\(ProcessInfo.processInfo.hostName):\(getpid()):\(BatchID.random().prefix(8))"
    }

    /// Runs `body` against the database within `queue.timeoutSeconds`.
    /// - Throws: 503 `queue-unavailable` when the database does not answer in time or fails.
    func withDatabase<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) async throws -> T {
        do {
            return try await self.bounded {
                try await self.migrate()
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

    /// One database call within `queue.timeoutSeconds` (`PostgresQueue.bounded`).
    private func bounded<T: Sendable>(
        seconds: Double? = nil, _ body: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        try await PostgresQueue.bounded(seconds: seconds ?? self.configuration.timeoutSeconds, body)
    }

    // MARK: The workers

    func run() async throws {
        let listener = Task { await self.listen() }
        defer { listener.cancel() }
        let work = Task {
            // The schema first, however long the database takes to come up.
            while !Task.isCancelled {
                do {
                    // Bounded like every other call, more generously: another node may be migrating.
                    try await self.bounded(seconds: max(60, self.configuration.timeoutSeconds)) {
                        try await self.migrate()
                    }
                    break
                } catch {
                    self.logger.warning(
                        "the job database cannot be reached; batches wait for it",
                        metadata: ["error": "\(String(reflecting: error))"])
                    try? await Task.sleep(for: .seconds(1))
                }
            }
            await self.work()
        }
        let deliveries = Task { await self.outbox.deliver() }
        let stop: @Sendable () -> Void = {
            work.cancel()
            deliveries.cancel()
            self.wakeup.signal()
            self.outbox.wakeup.signal()
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

    /// Claims and runs jobs while this node has room, until shutdown.
    private func work() async {
        var swept = ContinuousClock.now - .seconds(3600)
        await withDiscardingTaskGroup { group in
            while !Task.isCancelled, !Task.isShuttingDownGracefully, self.service.pool.isAccepting {
                if ContinuousClock.now - swept > .seconds(30) {
                    await self.sweep()
                    swept = ContinuousClock.now
                }
                guard self.hasRoom else {
                    // Busy with requests or with its share of items: a finishing item wakes it; the pool is
                    // looked at again soon (in memory).
                    await self.wakeup.wait(upTo: 0.05)
                    continue
                }
                do {
                    let started = ContinuousClock.now
                    let owner = self.claimOwner()
                    if let claimed = try await PostgresQueue.bounded(
                        seconds: self.configuration.timeoutSeconds,
                        {
                            try await self.queue.claim(
                                owner: owner, leaseSeconds: self.configuration.leaseSeconds, kind: .conversion)
                        }, late: { await self.giveBack($0) })
                    {
                        self.metrics.queueClaimed(after: ContinuousClock.now - started, reclaimed: claimed.reclaimed)
                        self.running.withLock { $0 += 1 }
                        group.addTask {
                            await self.perform(claimed)
                            self.running.withLock { $0 -= 1 }
                            self.wakeup.signal()
                        }
                        // Let the item reach the pool before its load is read again.
                        try? await Task.sleep(for: .milliseconds(5))
                        continue
                    }
                    // At least 0.2 s: a due job a submit holds locked reads as due now (NOTIFY wakes for new ones).
                    let due = try await self.bounded { try await self.queue.secondsToNextDue(kind: .conversion) }
                    await self.wakeup.wait(upTo: min(30, max(0.2, due ?? 30)))
                } catch {
                    self.logger.warning(
                        "cannot claim a job: the job database failed",
                        metadata: ["error": "\(String(reflecting: error))"])
                    await self.wakeup.wait(upTo: 1)
                }
            }
        }
    }

    /// Gives back a claim that came after its caller stopped waiting (`PostgresQueue.giveBack`).
    private func giveBack(_ claimed: PostgresQueue.Claimed?) async {
        await self.queue.giveBack(claimed, within: self.configuration.timeoutSeconds)
    }

    /// Brings the schema up to date once per process (a no-op under the lock when another node did).
    private func migrate() async throws {
        try await self.schema.migrate()
    }

    /// The owner of one claim: this node's name and the claim's number.
    private func claimOwner() -> String {
        "\(self.owner)#\(self.claims.withLock { $0 += 1; return $0 })"
    }

    /// Whether an item may start: an idle worker, and batch items under their share (`BatchRunner`'s rule).
    private var hasRoom: Bool {
        let pool = self.service.pool
        guard pool.load < pool.workers else { return false }
        return self.running.withLock { $0 < max(1, pool.workers - 1) }
    }

    /// Wakes the worker loop on every enqueue anywhere in the fleet, listening again after the database comes
    /// back.
    private func listen() async {
        while !Task.isCancelled {
            do {
                try await self.queue.client.withConnection { connection in
                    try await connection.listen(on: PostgresQueue.channel) { notifications in
                        // Listening from now: look once for what was enqueued before.
                        self.wakeup.signal()
                        self.outbox.wakeup.signal()
                        for try await _ in notifications {
                            self.wakeup.signal()
                            self.outbox.wakeup.signal()
                        }
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

    /// Runs one claimed job under its lease and records how it ended.
    private func perform(_ claimed: PostgresQueue.Claimed) async {
        let job = try? JSONDecoder().decode(TranscodeJob.self, from: Data(claimed.payload.utf8))
        await Traces.span("batch.item", continuing: job?.traceparent, attributes: ["queue.job": String(claimed.id)]) {
            await self.performing(claimed)
        }
    }

    private func performing(_ claimed: PostgresQueue.Claimed) async {
        await self.hold(claimed) {
            do {
                let job = try JSONDecoder().decode(TranscodeJob.self, from: Data(claimed.payload.utf8))
                guard case .url(let text) = job.source else {
                    throw ServiceError.internal("a queued job names no URL")
                }
                let url = try Downloader.validate(text)
                let ended = JobSubscription()
                _ = try? await self.service.transcode(
                    url: url, options: job.options, untilDone: true, keys: SourceKeys(url: url, options: job.options),
                    subscriber: ended, priority: job.priority)
                return await ended.end()
            } catch {
                return .failed(ServiceError.from(error))
            }
        }
    }

    /// Holds `claimed`'s lease, renewed every third of it, until `run` tells how the job ended, then records that
    /// end and finishes the items waiting on it. A failure that is not the URL's own (`BatchItemRules`, or this
    /// node stopping) gives the claim back uncounted, for a retry here or on another node after 2^n s (at once when
    /// shutting down). The batch workers' claims and the requests' jobs `FleetJobs` adopted end here alike.
    func hold(_ claimed: PostgresQueue.Claimed, until run: () async -> JobEnd) async {
        let lease = self.configuration.leaseSeconds
        let heartbeat = Task {
            while !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(Int64(lease * 1000 / 3)))
                guard !Task.isCancelled else { return }
                let renewed = try? await self.bounded {
                    try await self.queue.heartbeat(claimed.id, owner: claimed.owner, leaseSeconds: lease)
                }
                if renewed == false {
                    self.logger.warning("a job's lease was lost", metadata: ["job.id": "\(claimed.id)"])
                    return
                }
            }
        }
        let end = await run()
        heartbeat.cancel()
        let result: QueuedJobResult
        switch end {
        case .done(let outcome):
            result = QueuedJobResult(outcome)
        case .failed(let failure)
        where BatchItemRules.passes(failure) || Task.isCancelled || !self.service.pool.isAccepting:
            let backoff =
                failure.code == .shuttingDown || !self.service.pool.isAccepting
                ? 0 : min(60, pow(2, Double(claimed.attempt)))
            do {
                let state = try await self.bounded {
                    try await self.queue.fail(
                        claimed.id, owner: claimed.owner, error: "\(failure.code): \(failure.message)",
                        retryAfterSeconds: backoff, result: QueuedJobResult(failure).json, counted: false)
                }
                self.metrics.queueRetried(dead: state == .dead)
                if state == .dead { await self.finishItems(of: claimed.id) }
            } catch {
                self.logger.warning(
                    "cannot record a job's failure; its lease will expire", metadata: ["job.id": "\(claimed.id)"])
            }
            return
        case .failed(let failure):
            result = QueuedJobResult(failure)
        }
        do {
            let completed = try await self.bounded {
                try await self.queue.complete(claimed.id, owner: claimed.owner, result: result.json)
            }
            guard completed else { return }
            await self.finishItems(of: claimed.id)
        } catch {
            self.logger.warning(
                "cannot record a job's end; its lease will expire and it runs again",
                metadata: ["job.id": "\(claimed.id)", "error": "\(String(reflecting: error))"])
        }
    }

    /// Gives the items waiting on job `id` (or on any job that ended, when nil) the job's result, then
    /// announces the batches that became complete.
    private func finishItems(of id: Int64?) async {
        do {
            let batches = try await self.bounded {
                var batches: [String] = []
                for try await batch in try await self.queue.client.query(
                    """
                    WITH finished AS (
                        UPDATE transcode_batch_items AS item
                        SET result = coalesce(job.result, jsonb_build_object('status', \(ItemStatus.failed.rawValue)::text,
                                'error', jsonb_build_object('code', \(ErrorCode.internal.rawValue)::text,
                                    'message', coalesce(job.last_error, 'failed')))),
                            finished_seq = nextval('transcode_batch_finished')
                        FROM transcode_jobs AS job
                        WHERE item.job_id = job.id AND item.finished_seq IS NULL AND job.state IN ('done', 'dead')
                            AND (\(id)::bigint IS NULL OR job.id = \(id))
                        RETURNING item.batch_id
                    )
                    SELECT DISTINCT batch_id FROM finished
                    """, logger: self.logger
                ).decode(String.self) {
                    batches.append(batch)
                }
                return batches
            }
            if !batches.isEmpty { try await self.bounded { try await self.notifyCompleted(batches) } }
        } catch {
            self.logger.warning(
                "cannot record batch items; the sweep will", metadata: ["error": "\(String(reflecting: error))"])
        }
    }

    /// Marks those of `batches` that are complete as announced and, in the same transaction, puts their
    /// `batch.done` webhooks in the outbox: one node does, whichever marks it, and a crash loses neither (a batch
    /// completed but not announced, because its node stopped in between, is announced by the next sweep).
    func notifyCompleted(_ batches: [String]) async throws {
        let logger = self.logger
        try await self.queue.client.withTransaction(logger: logger) { connection in
            var announced: [(String, String?)] = []
            for try await row in try await connection.query(
                """
                UPDATE transcode_batches AS batch SET notified = true
                WHERE batch.id = ANY(\(batches)::text[]) AND NOT batch.notified
                    AND NOT EXISTS (SELECT 1 FROM transcode_batch_items
                                    WHERE batch_id = batch.id AND finished_seq IS NULL)
                RETURNING batch.id, batch.request ->> 'callbackURL'
                """, logger: logger
            ).decode((String, String?).self) {
                announced.append(row)
            }
            for case (let id, let callback?) in announced {
                guard let status = try await Self.status(id, on: connection, logger: logger) else { continue }
                var message = WebhookMessage(
                    url: callback, id: "msg_" + UUID().uuidString.lowercased(), type: "batch.done",
                    data: String(decoding: try JSONEncoder().encode(status), as: UTF8.self),
                    createdAt: Date().timeIntervalSince1970)
                // The items' traces, which the delivery ends (`tracing.propagate`: none without).
                var traces: [String] = []
                for try await traceparent in try await connection.query(
                    """
                    SELECT traceparent FROM transcode_batch_items
                    WHERE batch_id = \(id) AND traceparent IS NOT NULL ORDER BY position
                    """, logger: logger
                ).decode(String.self) {
                    traces.append(traceparent)
                }
                message.traces = traces.isEmpty ? nil : traces
                try await self.outbox.keep(message, on: connection)
            }
        }
    }

    /// What no single worker's end records: items of jobs that died with a lost lease, batches past their
    /// retention, and ended jobs nothing waits for.
    private func sweep() async {
        await self.finishItems(of: nil)
        do {
            // Complete but not announced: the node that finished them stopped between the two transactions.
            let unannounced = try await self.bounded {
                var unannounced: [String] = []
                for try await id in try await self.queue.client.query(
                    """
                    SELECT id FROM transcode_batches AS batch WHERE NOT batch.notified
                        AND NOT EXISTS (SELECT 1 FROM transcode_batch_items
                                        WHERE batch_id = batch.id AND finished_seq IS NULL)
                    """, logger: self.logger
                ).decode(String.self) {
                    unannounced.append(id)
                }
                return unannounced
            }
            if !unannounced.isEmpty { try await self.bounded { try await self.notifyCompleted(unannounced) } }
            let cutoff = Date().timeIntervalSince1970 - self.retentionSeconds
            _ = try await self.bounded {
                try await self.queue.client.query(
                    """
                    DELETE FROM transcode_batches AS batch
                    WHERE (batch.request ->> 'createdAt')::float8 < \(cutoff)
                        AND NOT EXISTS (SELECT 1 FROM transcode_batch_items
                                        WHERE batch_id = batch.id AND finished_seq IS NULL)
                    """, logger: self.logger)
            }
            _ = try await self.bounded {
                try await self.queue.client.query(
                    """
                    DELETE FROM transcode_jobs AS job
                    WHERE job.state IN ('done', 'dead') AND job.updated_at < now() - make_interval(secs => 3600)
                        AND NOT EXISTS (SELECT 1 FROM transcode_batch_items WHERE job_id = job.id)
                    """, logger: self.logger)
            }
            let depth = try await self.bounded { try await self.queue.depth() }
            self.metrics.queueDepth(depth)
        } catch {
            self.logger.debug("the queue's sweep failed", metadata: ["error": "\(error)"])
        }
    }
}
