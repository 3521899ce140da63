import Synchronization

/// Wakes one waiting loop: a signal given while nobody waits is kept for the next wait.
final class Wakeup: Sendable {
    private struct State {
        var signalled = false
        var waiter: CheckedContinuation<Void, Never>?
    }

    private let state = Mutex(State())

    func signal() {
        let waiter = self.state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard let waiter = state.waiter else {
                state.signalled = true
                return nil
            }
            state.waiter = nil
            return waiter
        }
        waiter?.resume()
    }

    /// Returns on a signal, or after `seconds`.
    func wait(upTo seconds: Double) async {
        let timer = Task {
            guard (try? await Task.sleep(for: .milliseconds(Int64(seconds * 1000)))) != nil else { return }
            self.signal()
        }
        defer { timer.cancel() }
        await withCheckedContinuation { continuation in
            let now = self.state.withLock { state -> Bool in
                if state.signalled {
                    state.signalled = false
                    return true
                }
                state.waiter = continuation
                return false
            }
            if now { continuation.resume() }
        }
    }
}
