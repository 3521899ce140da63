import Foundation
import Logging
import PostgresNIO
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

/// How the fleet's conversion jobs end (`JobKind.conversion`, `queue.kind: postgres`), whoever ran them: a batch
/// worker's claim (`PostgresBatches`) or a request's job that outlived its wait (`FleetJobs`). It holds a running
/// job's lease, records its end, gives that end to the batch items waiting on the job, announces the batches that
/// became complete through the webhook outbox, and sweeps what no single end records. It needs the job database
/// and this node's pool, not the service that converts: it is built before the service, and `FleetJobs` is given it
/// at once.
package final class ConversionJobs: Sendable {
    let queue: PostgresQueue
    /// The schema, brought up to date once per process (the routes, and `FleetJobs`' adoptions, may run before the
    /// workers' startup did).
    let schema: JobSchema
    /// Where complete batches' webhooks are kept (its loop runs with the batch workers').
    package let outbox: PostgresWebhookOutbox
    let pool: TranscodePool
    let metrics: ServiceMetrics
    let configuration: QueueConfiguration
    /// How long a complete batch is kept after it was created (`batch.retentionSeconds`).
    let retentionSeconds: Double
    let logger: Logger

    package init(
        queue: PostgresQueue, schema: JobSchema, outbox: PostgresWebhookOutbox, pool: TranscodePool,
        metrics: ServiceMetrics, configuration: QueueConfiguration, retentionSeconds: Double, logger: Logger
    ) {
        self.queue = queue
        self.schema = schema
        self.outbox = outbox
        self.pool = pool
        self.metrics = metrics
        self.configuration = configuration
        self.retentionSeconds = retentionSeconds
        self.logger = logger
    }

    /// Holds `claimed`'s lease, renewed every third of it, until `run` tells how the job ended, then records that
    /// end and finishes the items waiting on it. A failure that is not the URL's own (`BatchItemRules`, or this
    /// node stopping) gives the claim back uncounted, for a retry here or on another node after 2^n s (at once when
    /// shutting down). The batch workers' claims and the requests' jobs `FleetJobs` adopted end here alike.
    func hold(_ claimed: PostgresQueue.Claimed, until run: () async -> JobEnd) async {
        let lease = self.configuration.leaseSeconds
        // Not a child of this task: a graceful shutdown cancels the worker loop and its jobs' tasks, but a conversion
        // under way still finishes, and its lease must be renewed until it does (a child would stop at the cancel,
        // and another node would claim the job and convert it again). It never outlives the run: it is cancelled and
        // awaited (a renewal under way is bounded by `queue.timeoutSeconds`).
        let heartbeat = Task {
            while !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(Int64(lease * 1000 / 3)))
                guard !Task.isCancelled else { return }
                let renewed = try? await self.configuration.bounded {
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
        await heartbeat.value
        let result: QueuedJobResult
        switch end {
        case .done(let outcome):
            result = QueuedJobResult(outcome)
        case .failed(let failure)
        where BatchItemRules.passes(failure) || Task.isCancelled || !self.pool.isAccepting:
            let backoff =
                failure.code == .shuttingDown || !self.pool.isAccepting
                ? 0 : min(60, pow(2, Double(claimed.attempt)))
            do {
                let state = try await self.configuration.bounded {
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
            let completed = try await self.configuration.bounded {
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
            let batches = try await self.configuration.bounded {
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
            if !batches.isEmpty { try await self.configuration.bounded { try await self.notifyCompleted(batches) } }
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
                guard let status = try await PostgresBatches.status(id, on: connection, logger: logger) else {
                    continue
                }
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
    func sweep() async {
        await self.finishItems(of: nil)
        do {
            // Complete but not announced: the node that finished them stopped between the two transactions.
            let unannounced = try await self.configuration.bounded {
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
            if !unannounced.isEmpty {
                try await self.configuration.bounded { try await self.notifyCompleted(unannounced) }
            }
            let cutoff = Date().timeIntervalSince1970 - self.retentionSeconds
            _ = try await self.configuration.bounded {
                try await self.queue.client.query(
                    """
                    DELETE FROM transcode_batches AS batch
                    WHERE (batch.request ->> 'createdAt')::float8 < \(cutoff)
                        AND NOT EXISTS (SELECT 1 FROM transcode_batch_items
                                        WHERE batch_id = batch.id AND finished_seq IS NULL)
                    """, logger: self.logger)
            }
            _ = try await self.configuration.bounded {
                try await self.queue.client.query(
                    """
                    DELETE FROM transcode_jobs AS job
                    WHERE job.state IN ('done', 'dead') AND job.updated_at < now() - make_interval(secs => 3600)
                        AND NOT EXISTS (SELECT 1 FROM transcode_batch_items WHERE job_id = job.id)
                    """, logger: self.logger)
            }
            let depth = try await self.configuration.bounded { try await self.queue.depth() }
            self.metrics.queueDepth(depth)
        } catch {
            self.logger.debug("the queue's sweep failed", metadata: ["error": "\(error)"])
        }
    }
}
