import Foundation
import Synchronization

/// Slots for the tests' heavy programs: browser sessions (Chromium, Firefox, WebKitGTK) and command-line
/// conversions. Swift Testing starts every suite at once, and a tier starts about thirty browser sessions in its
/// first second; on two cores each then took minutes and ran past its own timeout. With a slot per core they take
/// turns, first come first served, and a program's timeout starts only once it has its slot.
public final class WorkSlots: Sendable {
    /// One slot per core.
    public static let heavy = WorkSlots(count: max(1, ProcessInfo.processInfo.activeProcessorCount))

    private struct State {
        var free: Int
        var waiting: [CheckedContinuation<Void, Never>] = []
    }
    private let state: Mutex<State>

    public init(count: Int) {
        self.state = Mutex(State(free: count))
    }

    /// Runs `body` once a slot is free, and frees it afterwards. Waiting for a slot does not end when the task is
    /// cancelled: `body` then sees the cancellation.
    public func withSlot<Result>(_ body: () async throws -> Result) async rethrows -> Result {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = self.state.withLock { state in
                if state.free > 0 {
                    state.free -= 1
                    return true
                }
                state.waiting.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
        defer {
            // The slot goes to the first waiter, or back to the free ones, in one step: a caller arriving in between
            // could otherwise wait beside a free slot.
            let next = self.state.withLock { state -> CheckedContinuation<Void, Never>? in
                if state.waiting.isEmpty {
                    state.free += 1
                    return nil
                }
                return state.waiting.removeFirst()
            }
            next?.resume()
        }
        return try await body()
    }
}
