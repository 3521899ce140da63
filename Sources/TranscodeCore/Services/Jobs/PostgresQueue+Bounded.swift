import Foundation

extension PostgresQueue {
    /// Gives back a claim that came after its caller stopped waiting: queued again at once, not counted; within
    /// `seconds` (`bounded`), and dropped if that fails (its lease then expires).
    func giveBack(_ claimed: Claimed?, within seconds: Double) async {
        guard let claimed else { return }
        _ = try? await Self.bounded(seconds: seconds) {
            try await self.fail(
                claimed.id, owner: claimed.owner, error: "claim answered too late", retryAfterSeconds: 0,
                counted: false)
        }
    }
}

/// The database did not answer one call within `queue.timeoutSeconds`.
struct DatabaseTimeout: Error, CustomStringConvertible {
    var seconds: Double
    var description: String { "the job database did not answer within \(self.seconds) s" }
}

extension PostgresQueue {
    /// Runs one database call within `seconds`, cancelling it after that. Every call the routes and the workers
    /// make goes through here: a call waits for one of the pool's connections, and while the database is away
    /// (or the pool is between connection attempts) that wait has no end of its own. An item whose end could not
    /// be recorded held a worker's place for as long, and with two cores its node's only batch place: after an
    /// outage a node then stopped claiming. A call cut short is safe to lose: a claim not returned, or a result
    /// not recorded, is a lease that expires and is claimed again (counted in the metrics).
    /// - Parameter late: given the result of a call that was cut short but still came (the statement was
    ///   running when the time ran out: postgres-nio cancels a wait for a connection, not a statement under way,
    ///   and a claim or an adoption committed so must not be left as a lease nobody holds).
    /// - Throws: `DatabaseTimeout`, or what `body` threw.
    static func bounded<T: Sendable>(
        seconds: Double, _ body: @escaping @Sendable () async throws -> T,
        late: (@Sendable (T) async -> Void)? = nil
    ) async throws -> T {
        let task = Task { try await body() }
        guard let result = await task.waitForResult(upTo: seconds) else {
            task.cancel()
            if let late {
                Task {
                    if case .success(let value) = await task.result { await late(value) }
                }
            }
            throw DatabaseTimeout(seconds: seconds)
        }
        return try result.get()
    }
}

extension QueueConfiguration {
    /// One database call within `timeoutSeconds`, or `seconds` when given (`PostgresQueue.bounded`).
    func bounded<T: Sendable>(
        seconds: Double? = nil, _ body: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        try await PostgresQueue.bounded(seconds: seconds ?? self.timeoutSeconds, body)
    }
}
