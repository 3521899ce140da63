import Foundation
import Logging
import PostgresNIO
import Synchronization

/// A lock per content key across a fleet, held while one node converts those bytes: another node that brings
/// the same bytes at the same time (another URL, an upload) waits, then finds the result in the shared store
/// instead of converting it again. On one node the in-process single flight does this, and no lock is needed.
protocol ContentLocks: Sendable {
    /// Runs `body` holding the lock of `key` (or without it when the lock cannot be had: never a reason to fail).
    func whileHolding<T: Sendable>(_ key: ObjectKey, _ body: @Sendable () async throws -> T) async throws -> T
}

/// `ContentLocks` as PostgreSQL advisory locks (`queue.kind: postgres`): session locks on a pooled connection,
/// released when the body ends or, if the node dies, when its connection does. Taken with
/// `pg_try_advisory_lock` every 50 ms, so that a wait never leaves a lock request behind a cancelled task.
///
/// The lock saves work, it guards nothing: a database that does not answer within `timeoutSeconds` (the client
/// waits for a connection as long as the database is down) lets the conversion go on unlocked, and the database is
/// not asked again for 10 s. A database that answers but where another node holds the lock is waited for (up to
/// 5 minutes: longer than a conversion).
final class PostgresContentLocks: ContentLocks {
    let client: PostgresClient
    let timeoutSeconds: Double
    let logger: Logger
    private let unavailableUntil = Mutex<ContinuousClock.Instant?>(nil)

    init(client: PostgresClient, timeoutSeconds: Double, logger: Logger) {
        self.client = client
        self.timeoutSeconds = timeoutSeconds
        self.logger = logger
    }

    /// The lock's 64-bit id: the key's first 16 hex digits.
    static func lockID(_ key: ObjectKey) -> Int64 {
        Int64(bitPattern: UInt64(key.rawValue.prefix(16), radix: 16) ?? 0)
    }

    func whileHolding<T: Sendable>(_ key: ObjectKey, _ body: @Sendable () async throws -> T) async throws -> T {
        if let until = self.unavailableUntil.withLock({ $0 }), ContinuousClock.now < until {
            return try await body()
        }
        let id = Self.lockID(key)
        let handoff = LockHandoff()
        let finished = Wakeup()
        // The holder lives on its own task: it owns the connection, and lets go when the body ends.
        let holder = Task {
            try await self.client.withConnection { connection in
                while true {
                    var held = false
                    for try await value in try await connection.query(
                        "SELECT pg_try_advisory_lock(\(id))", logger: self.logger
                    ).decode(Bool.self) {
                        held = value
                    }
                    if held { break }
                    guard handoff.advance(to: .reached) else { return }
                    try await Task.sleep(for: .milliseconds(50))
                }
                if handoff.advance(to: .held) {
                    await finished.wait(upTo: 86_400)
                }
                _ = try? await connection.query("SELECT pg_advisory_unlock(\(id))", logger: self.logger)
            }
        }
        var stage = await handoff.wait(for: .reached, upTo: self.timeoutSeconds)
        if stage == .reached { stage = await handoff.wait(for: .held, upTo: 300) }
        guard stage == .held else {
            holder.cancel()
            self.unavailableUntil.withLock { $0 = ContinuousClock.now + .seconds(10) }
            self.logger.warning(
                "the job database did not answer; converting without the fleet's content lock",
                metadata: ["object.key": "\(key.rawValue.prefix(16))"])
            return try await body()
        }
        defer { finished.signal() }
        return try await body()
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
                    if stage < target { stage = .gaveUp }
                    return stage
                }
            }
            let (whole, fraction) = left.components
            await self.changed.wait(upTo: Double(whole) + Double(fraction) / 1e18)
        }
    }
}
