import Foundation
import Logging
import PostgresNIO
import Synchronization

/// A lock per content key across a fleet, held while one node converts those bytes: another node that brings
/// the same bytes at the same time (another URL, an upload) waits, then finds the result in the shared store
/// instead of converting it again. On one node the in-process single flight does this, and no lock is needed.
package protocol ContentLocks: Sendable {
    /// Runs `body` holding the lock of `key` (or without it when the lock cannot be had: never a reason to fail).
    func whileHolding<T: Sendable>(_ key: ObjectKey, _ body: @Sendable () async throws -> T) async throws -> T
}

/// `ContentLocks` as PostgreSQL advisory locks (`queue.kind: postgres`): session locks on a pooled connection,
/// released when the body ends or, if the node dies, when its connection does. A holder task owns the connection:
/// it tries `pg_try_advisory_lock` once, and when another node holds the lock waits for it in the database
/// (`pg_advisory_lock`, no polling), hands the lock over, and lets go when told. A connection on which anything
/// failed is closed, never returned to the pool with a lock or a setting on it. Once it has reached the
/// database it is not cancelled (a cancelled query could leave a lock on a pooled connection): a waiter that gives
/// up tells it instead, and it lets go of whatever it gets after that. One still waiting for a connection when
/// the waiter gives up is cancelled.
///
/// The lock saves work, it guards nothing: when the database does not answer within `timeoutSeconds`, or fails,
/// the conversion goes on unlocked, and the database is not asked again for 10 s. A database that answers but
/// where another node holds the lock is waited for, up to `maxWaitSeconds` (5 minutes). At most
/// `maxHolders` locks are held or wanted at once per node, each on a connection of the client's pool (20), so that
/// claims, heartbeats and the batch routes always find one; conversions past that go unlocked.
package final class PostgresContentLocks: ContentLocks {
    let client: PostgresClient
    let timeoutSeconds: Double
    /// How long a lock another node holds is waited for (5 minutes: longer than a conversion).
    let maxWaitSeconds: Int
    let logger: Logger
    static let maxHolders = 8
    private let unavailableUntil = Mutex<ContinuousClock.Instant?>(nil)
    private let holders = Mutex(0)

    package init(client: PostgresClient, timeoutSeconds: Double, maxWaitSeconds: Int = 300, logger: Logger) {
        self.maxWaitSeconds = maxWaitSeconds
        self.client = client
        self.timeoutSeconds = timeoutSeconds
        self.logger = logger
    }

    /// The lock's 64-bit id: the key's first 16 hex digits.
    static func lockID(_ key: ObjectKey) -> Int64 {
        Int64(bitPattern: UInt64(key.rawValue.prefix(16), radix: 16) ?? 0)
    }

    package func whileHolding<T: Sendable>(_ key: ObjectKey, _ body: @Sendable () async throws -> T) async throws -> T {
        if let until = self.unavailableUntil.withLock({ $0 }), ContinuousClock.now < until {
            return try await body()
        }
        let admitted = self.holders.withLock { holders -> Bool in
            guard holders < Self.maxHolders else { return false }
            holders += 1
            return true
        }
        guard admitted else { return try await body() }
        let id = Self.lockID(key)
        let handoff = LockHandoff()
        let finished = Wakeup()
        let holder = Task {
            defer { self.holders.withLock { $0 -= 1 } }
            do {
                try await self.client.withConnection { connection in
                    do {
                        try await self.hold(id, on: connection, handoff: handoff, until: finished)
                    } catch {
                        // What the connection holds is unknown now (the lock, `lock_timeout`): it is closed, never
                        // given back to the pool as it is, and a lock it held goes with it.
                        try? await connection.close()
                        throw error
                    }
                }
            } catch {
                // The waiter goes on unlocked at once. A lock held on a connection that failed went with it.
                _ = handoff.advance(to: .failed)
            }
        }
        let first = await handoff.wait(for: .reached, upTo: self.timeoutSeconds)
        let stage = first == .reached ? await handoff.wait(for: .held, upTo: Double(self.maxWaitSeconds)) : first
        guard stage == .held else {
            // A holder still waiting for a connection is cancelled: its request must not stay in the pool's queue
            // through an outage (a test that stopped the database saw the client never connect again while such
            // requests waited). One that reached the database is not: it lets go of what it gets.
            if first == .gaveUp { holder.cancel() }
            if first == .reached {
                self.logger.warning(
                    "another node held this content's lock for \(self.maxWaitSeconds) s; converting without it",
                    metadata: ["object.key": "\(key.rawValue.prefix(16))"])
            } else {
                self.unavailableUntil.withLock { $0 = ContinuousClock.now + .seconds(10) }
                self.logger.warning(
                    "the job database did not answer; converting without the fleet's content lock",
                    metadata: ["object.key": "\(key.rawValue.prefix(16))"])
            }
            return try await body()
        }
        defer { finished.signal() }
        return try await body()
    }
}

extension PostgresContentLocks {
    /// Takes lock `id` on `connection` (at once, or waiting for the node that holds it), hands it over, holds it until
    /// `finished` is signalled, and lets go of it. A lock got after the waiter gave up is let go of at once.
    fileprivate func hold(
        _ id: Int64, on connection: PostgresConnection, handoff: LockHandoff, until finished: Wakeup
    ) async throws {
        var held = false
        for try await value in try await connection.query(
            "SELECT pg_try_advisory_lock(\(id))", logger: self.logger
        ).decode(Bool.self) {
            held = value
        }
        if !held {
            guard handoff.advance(to: .reached) else { return }
            held = try await self.waitInDatabase(for: id, on: connection)
        }
        guard held else {
            // The other node held it past `lock_timeout`: the waiter gives up then too.
            _ = handoff.advance(to: .failed)
            return
        }
        if handoff.advance(to: .held) {
            await finished.wait(upTo: 86_400)
        }
        try await self.execute("SELECT pg_advisory_unlock(\(id))", on: connection)
    }

    /// Waits in the database (`pg_advisory_lock`), not in a poll, until the node holding lock `id` lets go: the
    /// lock is this connection's the moment it is free. The wait is bounded by `lock_timeout`, set for this call
    /// only to the waiter's `maxWaitSeconds` (whichever gives up first, the conversion goes on unlocked).
    /// - Returns: whether the lock is held; false when the wait timed out.
    /// - Throws: any other failure (the caller closes the connection).
    func waitInDatabase(for id: Int64, on connection: PostgresConnection) async throws -> Bool {
        let timeout = "\(self.maxWaitSeconds)s"
        try await self.execute("SELECT set_config('lock_timeout', \(timeout), false)", on: connection)
        let held: Bool
        do {
            try await self.execute("SELECT pg_advisory_lock(\(id))", on: connection)
            held = true
        } catch let error as PSQLError where error.serverInfo?[.sqlState] == "55P03" {
            // lock_not_available: the timeout ran out.
            held = false
        }
        try await self.execute("RESET lock_timeout", on: connection)
        return held
    }

    /// Runs `query` and reads its whole answer: an error the server sends once the statement has started (a lock
    /// wait that timed out) comes with the rows, not from `query` itself.
    private func execute(_ query: PostgresQuery, on connection: PostgresConnection) async throws {
        for try await _ in try await connection.query(query, logger: self.logger) {}
    }
}

/// Where a lock's holder task has got to, for the task that waits on it, which may give up first.
private final class LockHandoff: Sendable {
    enum Stage: Int, Comparable {
        /// No answer from the database yet.
        case pending
        /// The database answered; another node holds the lock.
        case reached
        case held
        /// The holder failed (no connection, a query failed): the waiter goes on without the lock.
        case failed
        /// The waiter stopped waiting: the holder lets go of anything it gets.
        case gaveUp

        static func < (a: Stage, b: Stage) -> Bool { a.rawValue < b.rawValue }
    }

    private let stage = Mutex(Stage.pending)
    private let changed = Wakeup()

    /// Moves to `next` unless the waiter gave up. - Returns: false when it did.
    func advance(to next: Stage) -> Bool {
        let moved = self.stage.withLock { stage -> Bool in
            guard stage != .gaveUp else { return false }
            stage = max(stage, next)
            return true
        }
        if moved { self.changed.signal() }
        return moved
    }

    /// Waits until the holder reaches `target` (or further), at most `seconds`; gives up when it does not.
    /// - Returns: the stage reached, or `.gaveUp`.
    func wait(for target: Stage, upTo seconds: Double) async -> Stage {
        let deadline = ContinuousClock.now + .milliseconds(Int64(seconds * 1000))
        while true {
            let now = self.stage.withLock { $0 }
            if now >= target { return now }
            let left = deadline - ContinuousClock.now
            if left <= .zero {
                return self.stage.withLock { stage in
                    if stage < target {
                        stage = .gaveUp
                        return .gaveUp
                    }
                    return stage
                }
            }
            let (whole, fraction) = left.components
            await self.changed.wait(upTo: Double(whole) + Double(fraction) / 1e18)
        }
    }
}
