import Foundation
import Logging
import PostgresNIO

/// The fleet's job table in PostgreSQL: the storage half of the queue of issue 34. Nothing submits to it yet;
/// `TranscodeJobs` gets its PostgreSQL implementation on top of it. One row per job:
/// - at most one live (queued or running) job per result and kind (`JobKind`, the `spec` column), fleet-wide: a unique index, so
///   two nodes that enqueue the same result at once get the same job instead of racing;
/// - claimed with `FOR UPDATE SKIP LOCKED` (workers never wait on each other's rows) under a lease the worker
///   renews (`heartbeat`); a lease that expires is claimed again by any worker, and counted;
/// - a failure retried after a backoff the caller chooses, until `maxAttempts` claims, then kept as a dead
///   letter with its last error;
/// - `pg_notify` on every enqueue, on `channel`, for idle workers that `LISTEN` instead of polling.
///
/// Times are the database's (`now()`), so the nodes' clocks do not matter.
package struct PostgresQueue: Sendable {
    package let client: PostgresClient
    package let logger: Logger

    package init(client: PostgresClient, logger: Logger) {
        self.client = client
        self.logger = logger
    }

    /// The channel `enqueue` notifies.
    static let channel = "transcode_jobs"

    /// The advisory lock that serializes migrations: nodes that start together apply each one once.
    static let migrationLock: Int64 = 0x6769_6632_6d70_3401

    package enum State: String, CaseIterable, Sendable {
        case queued, running, done, dead
    }

    /// A job a worker holds the lease of.
    package struct Claimed: Sendable, Equatable {
        package let id: Int64
        let resultKey: String
        let kind: JobKind
        /// The job, as enqueued (JSON).
        let payload: String
        /// Which claim this is: 1 for the first.
        let attempt: Int
        /// Claimed from a worker whose lease had expired (it died, or stalled past its lease).
        let reclaimed: Bool
        /// Who holds the lease: the `owner` the claim was made for.
        var owner = ""
    }

    /// A job as the table has it.
    struct Row: Sendable, Equatable {
        let state: State
        let attempts: Int
        let lastError: String?
    }

    /// The schema, one version per entry, each a list of statements (the extended protocol takes one at a
    /// time). Applied in order, each once, by `migrate`; a version is never edited once released.
    static let migrations: [[String]] = [
        [
            """
            CREATE TABLE transcode_jobs (
                id bigserial PRIMARY KEY,
                result_key text NOT NULL,
                spec text NOT NULL,
                payload jsonb NOT NULL,
                state text NOT NULL DEFAULT 'queued' CHECK (state IN ('queued', 'running', 'done', 'dead')),
                attempts integer NOT NULL DEFAULT 0,
                max_attempts integer NOT NULL CHECK (max_attempts > 0),
                run_after timestamptz NOT NULL DEFAULT now(),
                lease_owner text,
                lease_until timestamptz,
                last_error text,
                created_at timestamptz NOT NULL DEFAULT now(),
                updated_at timestamptz NOT NULL DEFAULT now()
            )
            """,
            """
            CREATE UNIQUE INDEX transcode_jobs_one_live ON transcode_jobs (result_key, spec)
                WHERE state IN ('queued', 'running')
            """,
            "CREATE INDEX transcode_jobs_ready ON transcode_jobs (run_after, id) WHERE state = 'queued'",
            "CREATE INDEX transcode_jobs_leases ON transcode_jobs (lease_until) WHERE state = 'running'",
        ],
        [
            // How a job ended, for whoever waits on it (batch items): kept when it is done or dead.
            "ALTER TABLE transcode_jobs ADD COLUMN result jsonb",
            """
            CREATE TABLE transcode_batches (
                id text PRIMARY KEY,
                request jsonb NOT NULL,
                total integer NOT NULL,
                created_at timestamptz NOT NULL DEFAULT now(),
                notified boolean NOT NULL DEFAULT false
            )
            """,
            // One row per URL of a batch, tied to the job that converts it (none when the URL was refused at
            // once). Several items may share a job: the same URL in two batches converts once.
            """
            CREATE TABLE transcode_batch_items (
                batch_id text NOT NULL REFERENCES transcode_batches (id) ON DELETE CASCADE,
                position integer NOT NULL,
                url text NOT NULL,
                job_id bigint REFERENCES transcode_jobs (id) ON DELETE SET NULL,
                result jsonb,
                finished_seq bigint,
                PRIMARY KEY (batch_id, position)
            )
            """,
            "CREATE SEQUENCE transcode_batch_finished",
            // Plain, not partial: the foreign key's ON DELETE SET NULL looks items up by job alone.
            "CREATE INDEX transcode_batch_items_job ON transcode_batch_items (job_id)",
            """
            CREATE INDEX transcode_batch_items_finished ON transcode_batch_items (batch_id, finished_seq)
                WHERE finished_seq IS NOT NULL
            """,
        ],
        [
            // The order results are listed in, given by their reader under the batch's lock: an item whose
            // transaction took its finished_seq before another's but committed after it would otherwise appear
            // before lines already read, and paging by offset would repeat one line and skip another.
            "ALTER TABLE transcode_batch_items ADD COLUMN listed_seq bigint",
            "CREATE SEQUENCE transcode_batch_listed",
            """
            CREATE INDEX transcode_batch_items_listed ON transcode_batch_items (batch_id, listed_seq)
                WHERE listed_seq IS NOT NULL
            """,
        ],
        [
            // Each item's trace (`tracing.propagate`), which its batch's webhook ends: items that share a job
            // share its run, not their traces.
            "ALTER TABLE transcode_batch_items ADD COLUMN traceparent text"
        ],
        [
            // The fleet's quota buckets (`PostgresQuotaBuckets`): tokens and the refill's time in seconds of the
            // database's clock; `taken` is what the last take did.
            """
            CREATE TABLE transcode_quota_buckets (
                client text PRIMARY KEY,
                tokens float8 NOT NULL,
                updated_at float8 NOT NULL,
                taken boolean NOT NULL
            )
            """
        ],
        [
            // Claims by class first (`JobPriority`: interactive 0, upgrade 1, backfill 2), read from the job's
            // payload: a reader's job a dead node leaves behind is claimed before a backfill's items.
            """
            ALTER TABLE transcode_jobs ADD COLUMN priority smallint GENERATED ALWAYS AS (
                CASE payload ->> 'priority' WHEN 'interactive' THEN 0 WHEN 'upgrade' THEN 1 ELSE 2 END) STORED
            """,
            "DROP INDEX transcode_jobs_ready",
            "CREATE INDEX transcode_jobs_ready ON transcode_jobs (priority, run_after, id) WHERE state = 'queued'",
        ],
    ]

    /// Brings the schema to the latest version, under a transaction-scoped advisory lock.
    /// - Returns: the versions this call applied (none when another node had).
    @discardableResult
    package func migrate() async throws -> [Int] {
        let logger = self.logger
        return try await self.client.withTransaction(logger: logger) { connection in
            try await connection.query("SELECT pg_advisory_xact_lock(\(Self.migrationLock))", logger: logger)
            try await connection.query(
                "CREATE TABLE IF NOT EXISTS transcode_schema (version integer PRIMARY KEY)", logger: logger)
            var current = 0
            for try await version in try await connection.query(
                "SELECT coalesce(max(version), 0) FROM transcode_schema", logger: logger
            ).decode(Int.self) {
                current = version
            }
            var applied: [Int] = []
            for (index, statements) in Self.migrations.enumerated() where index + 1 > current {
                for statement in statements {
                    try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                }
                try await connection.query(
                    "INSERT INTO transcode_schema (version) VALUES (\(index + 1))", logger: logger)
                applied.append(index + 1)
            }
            return applied
        }
    }

    /// Adds a job for `resultKey` and `kind`, unless one is live: then that one is the job.
    /// - Returns: the live job's id, and whether this call created it.
    func enqueue(resultKey: String, kind: JobKind, payload: String, maxAttempts: Int) async throws
        -> (id: Int64, created: Bool)
    {
        try await self.client.withConnection { connection in
            try await Self.enqueue(
                on: connection, resultKey: resultKey, kind: kind, payload: payload, maxAttempts: maxAttempts,
                logger: self.logger)
        }
    }

    /// `enqueue` on `connection`, for a caller's transaction. A live job found is locked `FOR SHARE` until the
    /// transaction ends: it cannot end (`complete`, `fail`) before what the transaction ties to it is
    /// committed, and a job that ended first is not found (a new one is added). Callers that enqueue several
    /// jobs in one transaction take them in one order (by result key and spec), so that two such transactions
    /// never wait on each other's rows.
    package static func enqueue(
        on connection: PostgresConnection, resultKey: String, kind: JobKind, payload: String, maxAttempts: Int,
        logger: Logger
    ) async throws -> (id: Int64, created: Bool) {
        let spec = kind.rawValue
        // A live job may end between the insert that saw it and the select that reads it: then insert again.
        for _ in 0..<3 {
            for try await id in try await connection.query(
                """
                INSERT INTO transcode_jobs (result_key, spec, payload, max_attempts)
                VALUES (\(resultKey), \(spec), \(payload)::jsonb, \(maxAttempts))
                ON CONFLICT (result_key, spec) WHERE state IN ('queued', 'running') DO NOTHING
                RETURNING id
                """, logger: logger
            ).decode(Int64.self) {
                // Delivered when the transaction commits; several in one transaction are delivered as one.
                try await connection.query("SELECT pg_notify(\(Self.channel), '')", logger: logger)
                return (id, true)
            }
            for try await id in try await connection.query(
                """
                SELECT id FROM transcode_jobs
                WHERE result_key = \(resultKey) AND spec = \(spec) AND state IN ('queued', 'running')
                FOR SHARE
                """, logger: logger
            ).decode(Int64.self) {
                return (id, false)
            }
        }
        throw PostgresQueueError.contended
    }

    /// `enqueue` of many jobs of one `kind` at once on `connection`, for a caller's transaction: one insert and
    /// one locking read for the lot (a 10,000-URL batch is three statements, not 20,000), rows taken in key
    /// order so that two such transactions never wait on each other. Live jobs found are locked `FOR SHARE`, as
    /// `enqueue(on:...)` does, and one notification is sent (on commit).
    /// - Parameter jobs: payload (JSON) by result key.
    /// - Returns: the live job's id by result key.
    static func enqueue(
        on connection: PostgresConnection, kind: JobKind, jobs: [String: String], maxAttempts: Int, logger: Logger
    ) async throws -> [String: Int64] {
        let spec = kind.rawValue
        var ids: [String: Int64] = [:]
        var missing = jobs
        // A live job may end between the insert that saw it and the read: those are inserted again.
        for _ in 0..<3 where !missing.isEmpty {
            let keys = missing.keys.sorted()
            let payloads = keys.map { missing[$0]! }
            try await connection.query(
                """
                INSERT INTO transcode_jobs (result_key, spec, payload, max_attempts)
                SELECT job.key, \(spec), job.payload::jsonb, \(maxAttempts)
                FROM unnest(\(keys)::text[], \(payloads)::text[]) AS job (key, payload)
                ORDER BY job.key
                ON CONFLICT (result_key, spec) WHERE state IN ('queued', 'running') DO NOTHING
                """, logger: logger)
            for try await (key, id) in try await connection.query(
                """
                SELECT result_key, id FROM transcode_jobs
                WHERE result_key = ANY(\(keys)::text[]) AND spec = \(spec) AND state IN ('queued', 'running')
                ORDER BY result_key
                FOR SHARE
                """, logger: logger
            ).decode((String, Int64).self) {
                ids[key] = id
                missing[key] = nil
            }
        }
        guard missing.isEmpty else { throw PostgresQueueError.contended }
        try await connection.query("SELECT pg_notify(\(Self.channel), '')", logger: logger)
        return ids
    }

    /// Takes the job of the highest class (its payload's `JobPriority`) that is due, or whose lease expired, the
    /// oldest of its class first, for `owner`, leased for `leaseSeconds`.
    /// A running job whose lease expired after its last allowed claim becomes a dead letter instead.
    /// - Parameter kind: only jobs of this kind.
    /// - Returns: nil when no job is ready.
    package func claim(owner: String, leaseSeconds: Double, kind: JobKind) async throws -> Claimed? {
        let spec = kind.rawValue
        // One statement, one round trip per claim. Each candidate is looked up through its own partial index
        // (a single query with an OR of the two read every row, done ones included: 4 ms a claim at 10,000
        // rows; scripts/bench-queue); the one due first is taken and the other's lock is let go at the
        // statement's end. The dead-letter part touches other rows (attempts at the limit), and a
        // data-modifying CTE runs whether or not it is read.
        let rows = try await self.client.query(
            """
            WITH expired AS (
                UPDATE transcode_jobs
                SET state = 'dead', last_error = coalesce(last_error, 'lease expired'), lease_owner = NULL,
                    lease_until = NULL, updated_at = now()
                WHERE state = 'running' AND lease_until < now() AND attempts >= max_attempts
            ), due AS (
                SELECT id, priority, run_after AS since FROM transcode_jobs
                WHERE state = 'queued' AND run_after <= now() AND spec = \(spec)
                ORDER BY priority, run_after, id
                LIMIT 1
                FOR UPDATE SKIP LOCKED
            ), stale AS (
                SELECT id, priority, lease_until AS since FROM transcode_jobs
                WHERE state = 'running' AND lease_until < now() AND attempts < max_attempts AND spec = \(spec)
                ORDER BY priority, lease_until, id
                LIMIT 1
                FOR UPDATE SKIP LOCKED
            ), next AS (
                SELECT id, false AS reclaimed, priority, since FROM due
                UNION ALL
                SELECT id, true, priority, since FROM stale
                ORDER BY priority, since
                LIMIT 1
            )
            UPDATE transcode_jobs AS job
            SET state = 'running', lease_owner = \(owner),
                lease_until = now() + make_interval(secs => \(leaseSeconds)), attempts = job.attempts + 1,
                updated_at = now()
            FROM next WHERE job.id = next.id
            RETURNING job.id, job.result_key, job.payload::text, job.attempts, next.reclaimed
            """, logger: self.logger)
        for try await (id, resultKey, payload, attempt, reclaimed) in rows.decode(
            (Int64, String, String, Int, Bool).self)
        {
            return Claimed(
                id: id, resultKey: resultKey, kind: kind, payload: payload, attempt: attempt, reclaimed: reclaimed,
                owner: owner)
        }
        return nil
    }

    /// Records a job this node is running already, as claimed by `owner` for `leaseSeconds` (its first claim): a
    /// request's job that outlived the request's wait. Other nodes then see it, and claim it once the lease
    /// expires without a report.
    /// - Returns: the job's id; nil when a live job of that result key and kind exists (a batch item queued or
    ///   running elsewhere: that one reports).
    func adopt(
        resultKey: String, kind: JobKind, payload: String, owner: String, leaseSeconds: Double, maxAttempts: Int
    ) async throws -> Int64? {
        let spec = kind.rawValue
        let rows = try await self.client.query(
            """
            INSERT INTO transcode_jobs
                (result_key, spec, payload, max_attempts, state, attempts, lease_owner, lease_until)
            VALUES (\(resultKey), \(spec), \(payload)::jsonb, \(maxAttempts), 'running', 1, \(owner),
                now() + make_interval(secs => \(leaseSeconds)))
            ON CONFLICT (result_key, spec) WHERE state IN ('queued', 'running') DO NOTHING
            RETURNING id
            """, logger: self.logger)
        for try await id in rows.decode(Int64.self) { return id }
        return nil
    }

    /// The newest job of `resultKey` and `kind`: its state and, once it ended, its result (JSON) and last error.
    func latest(resultKey: String, kind: JobKind) async throws -> (state: State, result: String?, lastError: String?)? {
        let spec = kind.rawValue
        let rows = try await self.client.query(
            """
            SELECT state, result::text, last_error FROM transcode_jobs
            WHERE result_key = \(resultKey) AND spec = \(spec)
            ORDER BY id DESC LIMIT 1
            """, logger: self.logger)
        for try await (state, result, lastError) in rows.decode((String, String?, String?).self) {
            guard let state = State(rawValue: state) else { return nil }
            return (state, result, lastError)
        }
        return nil
    }

    /// Renews `owner`'s lease of job `id` for `leaseSeconds` from now.
    /// - Returns: false when the lease is no longer `owner`'s (it expired and another worker claimed the job):
    ///   the worker stops and does not report.
    func heartbeat(_ id: Int64, owner: String, leaseSeconds: Double) async throws -> Bool {
        try await self.updated(
            """
            UPDATE transcode_jobs
            SET lease_until = now() + make_interval(secs => \(leaseSeconds)), updated_at = now()
            WHERE id = \(id) AND state = 'running' AND lease_owner = \(owner)
            RETURNING id
            """)
    }

    /// Marks job `id` done, keeping `result` (JSON) for whoever waits on it, when `owner` still holds its lease.
    /// - Returns: false when it does not (the job was claimed again: its new owner reports).
    package func complete(_ id: Int64, owner: String, result: String? = nil) async throws -> Bool {
        try await self.updated(
            """
            UPDATE transcode_jobs
            SET state = 'done', lease_owner = NULL, lease_until = NULL, last_error = NULL,
                result = \(result)::jsonb, updated_at = now()
            WHERE id = \(id) AND state = 'running' AND lease_owner = \(owner)
            RETURNING id
            """)
    }

    /// Records the failure of `owner`'s claim of job `id`: queued again after `retryAfterSeconds`, or a dead
    /// letter once it has had `maxAttempts` claims; `error` is kept either way, and `result` (JSON) when it
    /// is dead.
    /// - Parameter counted: false for a failure that is not the job's (the shared store down, shutting down):
    ///   the claim is given back without counting, and the job never becomes a dead letter for it.
    /// - Returns: the job's state now; nil when `owner` no longer holds the lease.
    func fail(
        _ id: Int64, owner: String, error: String, retryAfterSeconds: Double, result: String? = nil,
        counted: Bool = true
    ) async throws -> State? {
        let rows = try await self.client.query(
            """
            UPDATE transcode_jobs
            SET state = CASE WHEN \(counted) AND attempts >= max_attempts THEN 'dead' ELSE 'queued' END,
                attempts = CASE WHEN \(counted) THEN attempts ELSE attempts - 1 END,
                run_after = now() + make_interval(secs => \(retryAfterSeconds)), last_error = \(error),
                result = CASE WHEN \(counted) AND attempts >= max_attempts THEN \(result)::jsonb END,
                lease_owner = NULL, lease_until = NULL, updated_at = now()
            WHERE id = \(id) AND state = 'running' AND lease_owner = \(owner)
            RETURNING state
            """, logger: self.logger)
        for try await state in rows.decode(String.self) { return State(rawValue: state) }
        return nil
    }

    /// Job `id` as the table has it; nil when there is no such job.
    func row(_ id: Int64) async throws -> Row? {
        let rows = try await self.client.query(
            "SELECT state, attempts, last_error FROM transcode_jobs WHERE id = \(id)", logger: self.logger)
        for try await (state, attempts, lastError) in rows.decode((String, Int, String?).self) {
            guard let state = State(rawValue: state) else { return nil }
            return Row(state: state, attempts: attempts, lastError: lastError)
        }
        return nil
    }

    /// Seconds until the next job of `kind` becomes due (its `run_after`) or a lease expires; nil when neither will
    /// happen without a new enqueue. An idle worker sleeps this long unless notified first.
    func secondsToNextDue(kind: JobKind) async throws -> Double? {
        let spec = kind.rawValue
        let rows = try await self.client.query(
            """
            SELECT extract(epoch FROM least(
                (SELECT min(run_after) FROM transcode_jobs
                 WHERE state = 'queued' AND spec = \(spec)),
                (SELECT min(lease_until) FROM transcode_jobs
                 WHERE state = 'running' AND spec = \(spec))) - now())::float8
            """, logger: self.logger)
        for try await seconds in rows.decode(Double?.self) { return seconds.map { max(0, $0) } }
        return nil
    }

    /// How many jobs are in each state (the queue-depth metric).
    package func depth() async throws -> [State: Int] {
        var depth = Dictionary(uniqueKeysWithValues: State.allCases.map { ($0, 0) })
        let rows = try await self.client.query(
            "SELECT state, count(*) FROM transcode_jobs GROUP BY state", logger: self.logger)
        for try await (state, count) in rows.decode((String, Int).self) {
            if let state = State(rawValue: state) { depth[state] = count }
        }
        return depth
    }

    /// Runs an `UPDATE ... RETURNING id`: whether it changed a row.
    private func updated(_ query: PostgresQuery) async throws -> Bool {
        for try await _ in try await self.client.query(query, logger: self.logger).decode(Int64.self) {
            return true
        }
        return false
    }
}

enum PostgresQueueError: Error, CustomStringConvertible {
    /// A live job appeared and ended three times between an insert and a read.
    case contended

    var description: String {
        switch self {
        case .contended: "the job was enqueued and ended repeatedly while being added; try again"
        }
    }
}
