/// At most one running operation per key: callers asking for a key that is in flight join it.
///
/// The check and the insert happen in one actor step (no `await` between them), so N concurrent callers
/// for one key start exactly one operation. The operation runs in its own task, owned by this table
/// until it finishes: a caller that goes away (a client that disconnects) does not cancel it for the
/// others, and callers that arrive while it runs join it.
actor SingleFlight<Key: Hashable & Sendable, Value: Sendable> {
    /// Told an operation's result once it has left the table, by the operation's own task.
    typealias Observer = @Sendable (Result<Value, any Error>) -> Void

    private var running: [Key: (task: Task<Value, any Error>, observers: [Observer])] = [:]

    /// The task for `key`: the running one (`joined`), or a new one running `operation`. A new operation
    /// starts only if `admit` (called in the same actor step, only when nothing runs for `key`) returns a
    /// token, which the operation receives; when it throws, nothing starts and the error propagates.
    /// - Parameter observer: told the result of the operation returned, whichever caller started it, without a
    ///   task of its own that waits for it.
    func task<Token: Sendable>(
        for key: Key, admit: () throws -> Token, observer: Observer? = nil,
        operation: @escaping @Sendable (Token) async throws -> Value
    ) throws -> (task: Task<Value, any Error>, joined: Bool) {
        if let entry = self.running[key] {
            if let observer { self.running[key]?.observers.append(observer) }
            return (entry.task, true)
        }
        let token = try admit()
        let task = Task {
            let result: Result<Value, any Error>
            do {
                result = .success(try await operation(token))
            } catch {
                result = .failure(error)
            }
            // Leave the table before handing out the result: a caller arriving later starts afresh
            // (and finds the cache warm).
            for observer in self.finish(key) { observer(result) }
            return try result.get()
        }
        self.running[key] = (task, observer.map { [$0] } ?? [])
        return (task, false)
    }

    /// Whether an operation for `key` is running.
    func isRunning(_ key: Key) -> Bool {
        self.running[key] != nil
    }

    /// Takes `key` out of the table. - Returns: its observers.
    private func finish(_ key: Key) -> [Observer] {
        self.running.removeValue(forKey: key)?.observers ?? []
    }
}
