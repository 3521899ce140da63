import Foundation
import Logging
import PostgresNIO
import Transcoder

/// The batch routes' side of `PostgresBatches` (`BatchStore`): a batch and its items written in one transaction,
/// its counts and result lines read back, and its deletion; each call within `queue.timeoutSeconds`
/// (`withDatabase`), else 503 `queue-unavailable`.
extension PostgresBatches {
    package func submit(_ request: BatchRequest) async throws -> String {
        let id = BatchID.random()
        let options = try BatchItemRules.options(
            background: request.background, output: request.outputKind, service: self.service)
        var jobs: [String: TranscodeJob] = [:]
        var positions: [Int] = []
        var keys: [String] = []
        var failures: [String] = []
        var traceparents: [String] = []
        for (position, text) in request.urls.enumerated() {
            positions.append(position)
            do {
                let url = try Downloader.validate(text)
                let key = SourceKeys(url: url, options: options).urlKey.rawValue
                var job = TranscodeJob(id: key, source: .url(text), options: options, priority: .backfill)
                // With `tracing.propagate`, a trace per item from its enqueue to its end on whichever node claims it,
                // and to its batch's webhook (without, each item's run is a trace of its own there).
                job.traceparent =
                    Traces.propagates
                    ? Traces.startTrace("batch.enqueue", attributes: ["batch.id": id, "batch.item": String(position)])
                    : nil
                jobs[key] = job
                keys.append(key)
                failures.append("")
                traceparents.append(job.traceparent ?? "")
            } catch {
                keys.append("")
                failures.append(QueuedJobResult(ServiceError.from(error)).json)
                traceparents.append("")
            }
        }
        let requestJSON = String(decoding: try JSONEncoder().encode(request), as: UTF8.self)
        let (allJobs, itemKeys, itemPositions) = (jobs, keys, positions)
        let (itemFailures, itemTraces) = (failures, traceparents)
        let maxAttempts = self.configuration.maxAttempts
        let logger = self.logger
        try await self.withDatabase {
            try await self.queue.client.withTransaction(logger: logger) { connection in
                try await connection.query(
                    """
                    INSERT INTO transcode_batches (id, request, total)
                    VALUES (\(id), \(requestJSON)::jsonb, \(request.urls.count))
                    """, logger: logger)
                var payloads: [String: String] = [:]
                for (key, job) in allJobs {
                    payloads[key] = String(decoding: try JSONEncoder().encode(job), as: UTF8.self)
                }
                let jobIDs =
                    payloads.isEmpty
                    ? [:]
                    : try await PostgresQueue.enqueue(
                        on: connection, kind: .conversion, jobs: payloads, maxAttempts: maxAttempts, logger: logger)
                let items = itemKeys.map { jobIDs[$0] ?? 0 }
                try await connection.query(
                    """
                    INSERT INTO transcode_batch_items
                        (batch_id, position, url, job_id, result, finished_seq, traceparent)
                    SELECT \(id), item.position, item.url, nullif(item.job_id, 0), nullif(item.result, '')::jsonb,
                        CASE WHEN item.result = '' THEN NULL ELSE nextval('transcode_batch_finished') END,
                        nullif(item.traceparent, '')
                    FROM unnest(\(itemPositions)::integer[], \(request.urls)::text[], \(items)::bigint[],
                        \(itemFailures)::text[], \(itemTraces)::text[])
                        AS item (position, url, job_id, result, traceparent)
                    """, logger: logger)
            }
        }
        // A batch of refused URLs only is complete already.
        if jobs.isEmpty { try? await self.conversions.notifyCompleted([id]) }
        return id
    }

    package func status(_ id: String) async throws -> BatchStatus? {
        try await self.withDatabase {
            try await self.queue.client.withConnection { try await Self.status(id, on: $0, logger: self.logger) }
        }
    }

    /// Batch `id`'s counts as `connection` sees them (a caller's transaction included).
    static func status(_ id: String, on connection: PostgresConnection, logger: Logger) async throws -> BatchStatus? {
        let rows = try await connection.query(
            """
            SELECT batch.total, (batch.request ->> 'createdAt')::float8,
                count(item.finished_seq),
                count(*) FILTER (WHERE item.result ->> 'status' = \(ItemStatus.done.rawValue)),
                count(*) FILTER (WHERE item.result ->> 'status' = \(ItemStatus.failed.rawValue)),
                count(*) FILTER (WHERE item.result ->> 'status' = \(ItemStatus.keptGIF.rawValue))
            FROM transcode_batches AS batch
            LEFT JOIN transcode_batch_items AS item
                ON item.batch_id = batch.id AND item.finished_seq IS NOT NULL
            WHERE batch.id = \(id)
            GROUP BY batch.id
            """, logger: logger)
        for try await (total, createdAt, finished, done, failed, keptGif) in rows.decode(
            (Int, Double, Int, Int, Int, Int).self)
        {
            return BatchStatus(
                id: id, total: total, counts: [.done: done, .failed: failed, .keptGIF: keptGif],
                complete: finished == total, createdAt: createdAt)
        }
        return nil
    }

    /// The batch's finished items, in the order they were first listed: each read first lists, under the batch's
    /// lock, the items finished since the last read (`listed_seq`), after every line listed before. A page once
    /// read never changes, however items finish meanwhile (`finished_seq` is taken before a commit, so it is not
    /// commit order, and paging by it could repeat one line and skip another).
    package func results(_ id: String, offset: Int, limit: Int) async throws -> (lines: [[UInt8]], total: Int)? {
        let logger = self.logger
        return try await self.withDatabase {
            try await self.queue.client.withTransaction(logger: logger) { connection in
                var found: String??
                var output = BatchOutput.img
                for try await (background, outputText) in try await connection.query(
                    "SELECT request ->> 'background', request ->> 'output' FROM transcode_batches WHERE id = \(id)",
                    logger: logger
                ).decode((String?, String?).self) {
                    found = .some(background)
                    output = outputText.flatMap(BatchOutput.init(rawValue:)) ?? .img
                }
                guard let found else { return nil }
                // Readers of one batch one at a time.
                try await connection.query(
                    "SELECT pg_advisory_xact_lock(hashtext('transcode_batch:' || \(id))::bigint)", logger: logger)
                try await connection.query(
                    """
                    UPDATE transcode_batch_items AS item SET listed_seq = next.seq
                    FROM (SELECT position, nextval('transcode_batch_listed') AS seq
                          FROM (SELECT position FROM transcode_batch_items
                                WHERE batch_id = \(id) AND finished_seq IS NOT NULL AND listed_seq IS NULL
                                ORDER BY finished_seq) AS unlisted) AS next
                    WHERE item.batch_id = \(id) AND item.position = next.position
                    """, logger: logger)
                var total = 0
                for try await count in try await connection.query(
                    "SELECT count(*) FROM transcode_batch_items WHERE batch_id = \(id) AND listed_seq IS NOT NULL",
                    logger: logger
                ).decode(Int.self) {
                    total = count
                }
                let encoder = JSONEncoder()
                encoder.outputFormatting = [.sortedKeys]
                var lines: [[UInt8]] = []
                for try await (position, url, result) in try await connection.query(
                    """
                    SELECT position, url, result::text FROM transcode_batch_items
                    WHERE batch_id = \(id) AND listed_seq IS NOT NULL
                    ORDER BY listed_seq OFFSET \(offset) LIMIT \(limit)
                    """, logger: logger
                ).decode((Int, String, String).self) {
                    let ended = try JSONDecoder().decode(QueuedJobResult.self, from: Data(result.utf8))
                    let line = BatchItemRules.line(
                        index: position, url: url, status: ended.status, key: ended.key,
                        recommendation: ended.recommendation, error: ended.error, output: output,
                        background: found ?? nil, links: self.links)
                    lines.append(Array(try encoder.encode(line)))
                }
                return (lines, total)
            }
        }
    }

    package func delete(_ id: String) async throws -> Bool {
        let logger = self.logger
        return try await self.withDatabase {
            try await self.queue.client.withTransaction(logger: logger) { connection in
                var jobs: [Int64] = []
                for try await job in try await connection.query(
                    "SELECT DISTINCT job_id FROM transcode_batch_items WHERE batch_id = \(id) AND job_id IS NOT NULL",
                    logger: logger
                ).decode(Int64.self) {
                    jobs.append(job)
                }
                var existed = false
                for try await _ in try await connection.query(
                    "DELETE FROM transcode_batches WHERE id = \(id) RETURNING id", logger: logger
                ).decode(String.self) {
                    existed = true
                }
                // Its jobs not yet started that nothing else waits for are not run. Locked first (skipping those a
                // submit holds: it is tying items to them), then deleted by a later statement, whose snapshot
                // sees every item committed meanwhile.
                var locked: [Int64] = []
                for try await job in try await connection.query(
                    """
                    SELECT id FROM transcode_jobs WHERE id = ANY(\(jobs)::bigint[]) AND state = 'queued'
                    FOR UPDATE SKIP LOCKED
                    """, logger: logger
                ).decode(Int64.self) {
                    locked.append(job)
                }
                try await connection.query(
                    """
                    DELETE FROM transcode_jobs AS job WHERE job.id = ANY(\(locked)::bigint[])
                        AND NOT EXISTS (SELECT 1 FROM transcode_batch_items WHERE job_id = job.id)
                    """, logger: logger)
                return existed
            }
        }
    }
}
