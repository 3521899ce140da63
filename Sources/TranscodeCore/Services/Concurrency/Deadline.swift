extension Task where Failure == any Error {
    /// The task's result, or nil when `seconds` pass first: the one deadline of the service's waits (a request's
    /// wait budget for its job, a database call's `queue.timeoutSeconds`). Waiting ends at the deadline even though
    /// the task goes on (awaiting `Task.value` cannot be interrupted, so a task group would wait for it): a watcher,
    /// which lives exactly as long as the task, and a timer race to resume one continuation.
    func waitForResult(upTo seconds: Double) async -> Result<Success, any Error>? {
        let pending = ResumeOnce<Result<Success, any Error>?>()
        return await withCheckedContinuation { continuation in
            pending.set(continuation)
            let timer = Task<Void, Never> {
                // Cancelled means the result came first: only a timer that ran its course answers "too late".
                // (A cancelled sleep throws at once; resuming then raced the result, and a GIF that failed in
                // a millisecond was answered 202 now and then: found by scripts/soak.)
                guard (try? await Task<Never, Never>.sleep(for: .milliseconds(Int64(seconds * 1000)))) != nil
                else { return }
                pending.resume(returning: nil)
            }
            Task<Void, Never> {
                let result = await self.result
                pending.resume(returning: result)
                timer.cancel()
            }
        }
    }
}
