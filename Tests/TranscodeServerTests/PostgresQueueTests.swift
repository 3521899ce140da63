import Foundation
import Logging
import PostgresNIO
import Synchronization
import TestSupport
import Testing

@testable import TranscodeCore
@testable import TranscodeHTTP
@testable import TranscodeServer

/// The fleet's job table (`PostgresQueue`) against a real PostgreSQL started by each test on a free loopback
/// port.
@Suite(.serialized, .tags(.integration, .database), .timeLimit(.minutes(5))) struct PostgresQueueTests {
    static let logger = Logger(label: "test")

    static func migrated(_ client: PostgresClient) async throws -> PostgresQueue {
        let queue = PostgresQueue(client: client, logger: Self.logger)
        try await queue.migrate()
        return queue
    }

    /// The advisory locks in `pg_locks` that meet `condition` (SQL: `granted`, `NOT granted`, `true`).
    static func advisoryLocks(_ client: PostgresClient, where condition: String) async throws -> Int {
        try await client.withConnection { connection in
            var count = 0
            for try await value in try await connection.query(
                "SELECT count(*)::int FROM pg_locks WHERE locktype = 'advisory' AND \(unescaped: condition)",
                logger: Self.logger
            ).decode(Int.self) { count = value }
            return count
        }
    }

    @Test func nodesStartingTogetherApplyEachMigrationOnce() async throws {
        try await withPostgres { _, client in
            let queue = PostgresQueue(client: client, logger: Self.logger)
            let applied = try await withThrowingTaskGroup(of: [Int].self) { group in
                for _ in 0..<3 { group.addTask { try await queue.migrate() } }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(applied.sorted { $0.count < $1.count } == [[], [], Array(1...PostgresQueue.migrations.count)])
            #expect(try await queue.migrate() == [])
        }
    }

    @Test func oneLiveJobPerResult() async throws {
        try await withPostgres { _, client in
            let queue = try await Self.migrated(client)
            // Ten enqueues of one result at once: one job.
            let ids = try await withThrowingTaskGroup(of: (Int64, Bool).self) { group in
                for index in 0..<10 {
                    group.addTask {
                        let added = try await queue.enqueue(
                            resultKey: "k1", kind: .conversion, payload: "{\"n\":\(index)}", maxAttempts: 3)
                        return (added.id, added.created)
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(Set(ids.map(\.0)).count == 1)
            #expect(ids.filter(\.1).count == 1)
            // Another kind of job for the same result is another job.
            let other = try await queue.enqueue(resultKey: "k1", kind: .webhook, payload: "{}", maxAttempts: 3)
            #expect(other.created && other.id != ids[0].0)
            // Once the job is done, the result may be enqueued again (a purge, a new conversion).
            let claimed = try #require(try await queue.claim(owner: "a", leaseSeconds: 30, kind: .conversion))
            #expect(claimed.id == ids[0].0 && claimed.attempt == 1 && !claimed.reclaimed)
            #expect(try await queue.complete(claimed.id, owner: "a"))
            let again = try await queue.enqueue(resultKey: "k1", kind: .conversion, payload: "{}", maxAttempts: 3)
            #expect(again.created && again.id != claimed.id)
        }
    }

    @Test func workersClaimDistinctJobs() async throws {
        try await withPostgres { _, client in
            let queue = try await Self.migrated(client)
            for index in 0..<40 {
                _ = try await queue.enqueue(
                    resultKey: "k\(index)", kind: .conversion, payload: "{\"n\":\(index)}", maxAttempts: 3)
            }
            // Four workers claim until the table is empty: every job once.
            let claimed = try await withThrowingTaskGroup(of: [Int64].self) { group in
                for worker in 0..<4 {
                    group.addTask {
                        var mine: [Int64] = []
                        while let job = try await queue.claim(owner: "w\(worker)", leaseSeconds: 30, kind: .conversion)
                        {
                            mine.append(job.id)
                            #expect(try await queue.complete(job.id, owner: "w\(worker)"))
                        }
                        return mine
                    }
                }
                return try await group.reduce(into: []) { $0 += $1 }
            }
            #expect(claimed.count == 40 && Set(claimed).count == 40)
            #expect(try await queue.depth() == [.queued: 0, .running: 0, .done: 40, .dead: 0])
        }
    }

    @Test(.tags(.wallClock)) func anExpiredLeaseIsClaimedAgainAndTheOldOwnerLosesIt() async throws {
        try await withPostgres { _, client in
            let queue = try await Self.migrated(client)
            let job = try await queue.enqueue(resultKey: "k", kind: .conversion, payload: "{\"a\":1}", maxAttempts: 3)
            let first = try #require(try await queue.claim(owner: "dead-node", leaseSeconds: 0.2, kind: .conversion))
            #expect(first.payload == "{\"a\": 1}" && first.resultKey == "k" && first.kind == .conversion)
            // Leased: nobody else gets it.
            #expect(try await queue.claim(owner: "other", leaseSeconds: 30, kind: .conversion) == nil)
            try await Task.sleep(for: .milliseconds(400))
            let second = try #require(try await queue.claim(owner: "other", leaseSeconds: 30, kind: .conversion))
            #expect(second.id == job.id && second.attempt == 2 && second.reclaimed)
            // The first owner's reports are refused: the job is not its any more.
            #expect(try await !queue.heartbeat(job.id, owner: "dead-node", leaseSeconds: 30))
            #expect(try await !queue.complete(job.id, owner: "dead-node"))
            #expect(try await queue.fail(job.id, owner: "dead-node", error: "late", retryAfterSeconds: 0) == nil)
            #expect(try await queue.heartbeat(job.id, owner: "other", leaseSeconds: 30))
            #expect(try await queue.complete(job.id, owner: "other"))
            #expect(try await queue.row(job.id) == .init(state: .done, attempts: 2, lastError: nil))
        }
    }

    /// Claims go by class before age: a backfill item queued first waits behind a reader's job, whether that one is
    /// due or was left behind by a dead node (its lease expired).
    @Test(.tags(.wallClock)) func claimsTakeTheHigherClassFirst() async throws {
        try await withPostgres { _, client in
            let queue = try await Self.migrated(client)
            let backfill = try await queue.enqueue(
                resultKey: "b", kind: .conversion, payload: #"{"priority":"backfill"}"#, maxAttempts: 3)
            let upgrade = try await queue.enqueue(
                resultKey: "u", kind: .conversion, payload: #"{"priority":"upgrade"}"#, maxAttempts: 3)
            let reader = try await queue.enqueue(
                resultKey: "i", kind: .conversion, payload: #"{"priority":"interactive"}"#, maxAttempts: 3)
            let first = try #require(try await queue.claim(owner: "dead-node", leaseSeconds: 0.2, kind: .conversion))
            #expect(first.id == reader.id)
            try await Task.sleep(for: .milliseconds(400))
            // Its lease expired: claimed again before the upgrade and the backfill, though they were due earlier.
            let again = try #require(try await queue.claim(owner: "other", leaseSeconds: 30, kind: .conversion))
            #expect(again.id == reader.id && again.reclaimed)
            #expect(try await queue.claim(owner: "other", leaseSeconds: 30, kind: .conversion)?.id == upgrade.id)
            #expect(try await queue.claim(owner: "other", leaseSeconds: 30, kind: .conversion)?.id == backfill.id)
        }
    }

    @Test(.tags(.wallClock)) func aHeartbeatKeepsTheLease() async throws {
        try await withPostgres { _, client in
            let queue = try await Self.migrated(client)
            let job = try await queue.enqueue(resultKey: "k", kind: .conversion, payload: "{}", maxAttempts: 3)
            _ = try #require(try await queue.claim(owner: "a", leaseSeconds: 0.5, kind: .conversion))
            for _ in 0..<4 {
                try await Task.sleep(for: .milliseconds(250))
                #expect(try await queue.heartbeat(job.id, owner: "a", leaseSeconds: 0.5))
            }
            #expect(try await queue.claim(owner: "b", leaseSeconds: 30, kind: .conversion) == nil)
        }
    }

    @Test(.tags(.wallClock)) func failuresBackOffThenBecomeADeadLetterWithTheLastError() async throws {
        try await withPostgres { _, client in
            let queue = try await Self.migrated(client)
            let job = try await queue.enqueue(resultKey: "k", kind: .conversion, payload: "{}", maxAttempts: 2)
            let first = try #require(try await queue.claim(owner: "a", leaseSeconds: 30, kind: .conversion))
            #expect(try await queue.fail(first.id, owner: "a", error: "origin 503", retryAfterSeconds: 0.3) == .queued)
            // Not due before its backoff.
            #expect(try await queue.claim(owner: "a", leaseSeconds: 30, kind: .conversion) == nil)
            try await Task.sleep(for: .milliseconds(500))
            let second = try #require(try await queue.claim(owner: "b", leaseSeconds: 30, kind: .conversion))
            #expect(second.id == job.id && second.attempt == 2 && !second.reclaimed)
            #expect(try await queue.fail(second.id, owner: "b", error: "origin 500", retryAfterSeconds: 0) == .dead)
            #expect(try await queue.row(job.id) == .init(state: .dead, attempts: 2, lastError: "origin 500"))
            #expect(try await queue.claim(owner: "c", leaseSeconds: 30, kind: .conversion) == nil)
            // A dead letter is not live: the result may be enqueued again.
            #expect(try await queue.enqueue(resultKey: "k", kind: .conversion, payload: "{}", maxAttempts: 2).created)
        }
    }

    /// A failure that is not the job's (the store down, shutting down) gives the claim back uncounted: however
    /// many, the job is never a dead letter for them.
    @Test func uncountedFailuresNeverMakeADeadLetter() async throws {
        try await withPostgres { _, client in
            let queue = try await Self.migrated(client)
            let job = try await queue.enqueue(resultKey: "k", kind: .conversion, payload: "{}", maxAttempts: 1)
            for round in 0..<4 {
                let claimed = try #require(
                    try await queue.claim(owner: "w\(round)", leaseSeconds: 30, kind: .conversion))
                #expect(claimed.attempt == 1)
                #expect(
                    try await queue.fail(
                        claimed.id, owner: "w\(round)", error: "storage-unavailable", retryAfterSeconds: 0,
                        counted: false) == .queued)
            }
            #expect(try await queue.row(job.id) == .init(state: .queued, attempts: 0, lastError: "storage-unavailable"))
        }
    }

    @Test(.tags(.wallClock)) func aLeaseThatExpiresOnTheLastAttemptIsADeadLetter() async throws {
        try await withPostgres { _, client in
            let queue = try await Self.migrated(client)
            let job = try await queue.enqueue(resultKey: "k", kind: .conversion, payload: "{}", maxAttempts: 1)
            _ = try #require(try await queue.claim(owner: "a", leaseSeconds: 0.2, kind: .conversion))
            try await Task.sleep(for: .milliseconds(400))
            #expect(try await queue.claim(owner: "b", leaseSeconds: 30, kind: .conversion) == nil)
            #expect(try await queue.row(job.id) == .init(state: .dead, attempts: 1, lastError: "lease expired"))
        }
    }

    @Test func jobsSurviveADatabaseRestart() async throws {
        try await withPostgres { server, client in
            let queue = try await Self.migrated(client)
            let job = try await queue.enqueue(resultKey: "k", kind: .conversion, payload: "{}", maxAttempts: 3)
            server.stop()
            try await server.start()
            // The port changed: a new client, as a node whose database moved would have.
            try await withClient(of: server) { again in
                let queue = PostgresQueue(client: again, logger: Self.logger)
                #expect(try await queue.migrate() == [])
                let claimed = try #require(try await queue.claim(owner: "a", leaseSeconds: 30, kind: .conversion))
                #expect(claimed.id == job.id)
            }
        }
    }

    /// `transcode-server queue bench`'s measurement: every job enqueued is claimed and completed once, and the
    /// bench's rows are gone afterwards. (Its speed is measured by scripts/bench-queue, not here.)
    @Test func theQueueBenchDrainsEveryJobOnce() async throws {
        try await withPostgres { _, client in
            let queue = try await Self.migrated(client)
            let report = try await QueueCommand.Bench.measure(queue: queue, jobs: 300, workers: 4, connections: 20)
            #expect(report.jobs == 300)
            #expect(report.claimP50Milliseconds <= report.claimP99Milliseconds)
            #expect(try await queue.depth().values.reduce(0, +) == 0)
            // Live jobs that are not its own: refused, nothing claimed.
            let live = try await queue.enqueue(resultKey: "real", kind: .conversion, payload: "{}", maxAttempts: 1)
            await #expect(throws: (any Error).self) {
                _ = try await QueueCommand.Bench.measure(queue: queue, jobs: 10, workers: 1, connections: 20)
            }
            #expect(try await queue.row(live.id)?.state == .queued)
        }
    }
    /// A configured client's quota is the fleet's (issue 55): two nodes (two `ClientQuotas`) take from one bucket in
    /// the database; 40 takes at once across them admit exactly its burst, the rest refused with the bucket's refill
    /// time; a token given back on one node is taken on the other; with the database gone each node counts with its
    /// own bucket.
    @Test func aClientsQuotaIsTheFleets() async throws {
        try await withPostgres { server, client in
            _ = try await Self.migrated(client)
            let policies = ["cms": QuotaPolicy(ratePerSecond: 0.001, burst: 10)]
            let nodes = (0..<2).map { _ in
                ClientQuotas(
                    policies: policies, shared: PostgresQuotaBuckets(client: client, logger: Self.logger),
                    sharedTimeoutSeconds: 2, logger: Self.logger)
            }
            let cms = RequestClient.named("cms")
            let verdicts = await withTaskGroup(of: ClientQuotas.Verdict.self) { group in
                for index in 0..<40 { group.addTask { await nodes[index % 2].charge(cms) } }
                return await group.reduce(into: []) { $0.append($1) }
            }
            let taken = verdicts.compactMap { verdict -> ClientQuotas.Reading? in
                if case .taken(let reading) = verdict { reading } else { nil }
            }
            let refused = verdicts.compactMap { verdict -> (ClientQuotas.Reading, Double)? in
                if case .refused(let reading, let after) = verdict { (reading, after) } else { nil }
            }
            #expect(taken.count == 10 && taken.allSatisfy(\.fleet), "\(verdicts)")
            #expect(refused.count == 30, "\(verdicts)")
            // An empty bucket refills one token in 1,000 s.
            #expect(refused.allSatisfy { $0.0.remaining == 0 && $0.1 > 990 && $0.1 <= 1000 }, "\(refused)")
            #expect(nodes.allSatisfy { $0.isPressing(cms.key) })
            // Given back on one node, taken on the other.
            await nodes[0].refund(ClientQuotas.Charge(client: cms, fleet: true))
            guard case .taken = await nodes[1].charge(cms) else {
                Issue.record("the token given back was not taken")
                return
            }
            guard case .refused = await nodes[0].charge(cms) else {
                Issue.record("the bucket should be empty again")
                return
            }
            // The database gone: this node's own bucket, full.
            server.stop()
            guard case .taken(let reading) = await nodes[0].charge(cms) else {
                Issue.record("a node without its database should count with its own bucket")
                return
            }
            #expect(!reading.fleet && reading.remaining == 9)
        }
    }

    /// A content lock another node holds is waited for in the database (`pg_advisory_lock`, seen in `pg_locks` as
    /// a lock not yet granted), not by polling `pg_try_advisory_lock`; the body runs once the other node lets go,
    /// holding the lock, and the lock is given back after it.
    @Test func aHeldContentLockIsWaitedForInTheDatabase() async throws {
        try await withPostgres { _, client in
            let locks = PostgresContentLocks(client: client, timeoutSeconds: 30, logger: Self.logger)
            let key = try #require(ObjectKey(String(repeating: "c", count: 64)))
            let id = PostgresContentLocks.lockID(key)
            let count = { @Sendable (condition: String) in try await Self.advisoryLocks(client, where: condition) }
            let released = PoolSchedulingTests.Shared(false)
            try await client.withConnection { other in
                try await other.query("SELECT pg_advisory_lock(\(id))", logger: Self.logger)
                async let ran = locks.whileHolding(key) {
                    // Runs after the other node let go, holding the lock itself.
                    (released.withLock { $0 }, try await count("granted"))
                }
                var waiting = 0
                for _ in 0..<300 where waiting == 0 {
                    waiting = try await count("NOT granted")
                    if waiting == 0 { try await Task.sleep(for: .milliseconds(100)) }
                }
                #expect(waiting == 1, "the waiter never waited in the database")
                released.withLock { $0 = true }
                try await other.query("SELECT pg_advisory_unlock(\(id))", logger: Self.logger)
                let (afterRelease, granted) = try await ran
                #expect(afterRelease)
                #expect(granted == 1)
            }
            var left = 1
            for _ in 0..<100 where left > 0 {
                left = try await count("true")
                if left > 0 { try await Task.sleep(for: .milliseconds(100)) }
            }
            #expect(left == 0, "the lock was not given back")
        }
    }

    /// A content lock another node holds past the wait's bound (`maxWaitSeconds`, 1 s here): the body runs without
    /// it, and the wait in the database ends too (no lock left waiting), saying the lock was not had and leaving
    /// the connection's `lock_timeout` as it was.
    @Test func aContentLockHeldTooLongIsGivenUp() async throws {
        try await withPostgres { _, client in
            let locks = PostgresContentLocks(client: client, timeoutSeconds: 30, maxWaitSeconds: 1, logger: Self.logger)
            let key = try #require(ObjectKey(String(repeating: "d", count: 64)))
            let id = PostgresContentLocks.lockID(key)
            let count = { @Sendable (condition: String) in try await Self.advisoryLocks(client, where: condition) }
            try await client.withConnection { other in
                try await other.query("SELECT pg_advisory_lock(\(id))", logger: Self.logger)
                // Only the other node's lock is granted while the body runs.
                #expect(try await locks.whileHolding(key) { try await count("granted") } == 1)
                var waiting = 1
                for _ in 0..<100 where waiting > 0 {
                    waiting = try await count("NOT granted")
                    if waiting > 0 { try await Task.sleep(for: .milliseconds(100)) }
                }
                #expect(waiting == 0, "the wait in the database did not end")
                // The wait itself: it says the lock was not had (the timeout's error comes with the rows, and used to
                // be missed), and leaves the connection's lock_timeout as it was.
                try await client.withConnection { connection in
                    #expect(try await locks.waitInDatabase(for: id, on: connection) == false)
                    var setting = ""
                    for try await value in try await connection.query("SHOW lock_timeout", logger: Self.logger)
                        .decode(String.self)
                    { setting = value }
                    #expect(setting == "0")
                }
                #expect(try await count("granted") == 1)
                try await other.query("SELECT pg_advisory_unlock(\(id))", logger: Self.logger)
            }
        }
    }
}
