import Synchronization

/// At most `limit` holders at once; the others wait in arrival order. A waiter whose task is cancelled stops
/// waiting (and holds nothing). For work that needs a resource the process has a fixed number of, such as file
/// descriptors: outbound webhook deliveries.
final class AsyncLimit: Sendable {
    private struct State {
        var available: Int
        var nextTicket = 0
        var waiters: [(ticket: Int, continuation: CheckedContinuation<Bool, Never>)] = []
    }

    let limit: Int
    private let state: Mutex<State>

    init(_ limit: Int) {
        precondition(limit > 0, "a limit of at least 1")
        self.limit = limit
        self.state = Mutex(State(available: limit))
    }

    /// Runs `body` holding one of the places. - Returns: nil when the task was cancelled while waiting (then
    /// `body` did not run).
    func run<T: Sendable>(_ body: () async throws -> T) async rethrows -> T? {
        guard await self.acquire() else { return nil }
        defer { self.release() }
        return try await body()
    }

    /// How many hold a place now, and how many wait for one.
    var occupancy: (held: Int, waiting: Int) {
        self.state.withLock { state in (self.limit - state.available, state.waiters.count) }
    }

    /// Waits for a place. - Returns: false when the task was cancelled first.
    private func acquire() async -> Bool {
        let ticket = self.state.withLock { state -> Int in
            state.nextTicket += 1
            return state.nextTicket
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let resumeNow = self.state.withLock { state -> Bool? in
                    if Task.isCancelled { return false }
                    if state.available > 0 {
                        state.available -= 1
                        return true
                    }
                    state.waiters.append((ticket, continuation))
                    return nil
                }
                if let resumeNow { continuation.resume(returning: resumeNow) }
            }
        } onCancel: {
            let waiter = self.state.withLock { state -> CheckedContinuation<Bool, Never>? in
                guard let index = state.waiters.firstIndex(where: { $0.ticket == ticket }) else { return nil }
                return state.waiters.remove(at: index).continuation
            }
            waiter?.resume(returning: false)
        }
    }

    private func release() {
        let next = self.state.withLock { state -> CheckedContinuation<Bool, Never>? in
            if state.waiters.isEmpty {
                state.available += 1
                return nil
            }
            return state.waiters.removeFirst().continuation
        }
        next?.resume(returning: true)
    }
}
