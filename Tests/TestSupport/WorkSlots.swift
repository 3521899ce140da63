import Foundation
import Synchronization

/// Slots for the tests' heavy programs: browser sessions (Chromium, Firefox, WebKitGTK) and command-line
/// conversions. Swift Testing starts every suite at once, and a tier starts about thirty browser sessions in its
/// first second; on two cores each then took minutes and ran past its own timeout. With a slot per core they take
/// turns, first come first served, and a program's timeout starts only once it has its slot.
///
/// A test's time then includes its turns: the tier is bound by the slots (about 540 s here), and a test that
/// starts at once can end with the tier. The system suites that take slots have 20-minute limits for that reason,
/// not the 10 minutes their own work would need.
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

    /// How many callers wait for a slot now.
    public var waiting: Int { self.state.withLock { $0.waiting.count } }

    /// The slot sets whose slot the current task holds (its child tasks inherit it).
    @TaskLocal private static var held: Set<ObjectIdentifier> = []

    /// Runs `body` once a slot is free, and frees it afterwards. Waiting for a slot does not end when the task is
    /// cancelled: `body` then sees the cancellation. A task that holds a slot already runs `body` in it: a test may
    /// keep its turn across several heavy programs (each call would otherwise queue behind every other test's
    /// anew, and the test that makes the most calls would end last, near its time limit).
    public func withSlot<Result>(_ body: () async throws -> Result) async rethrows -> Result {
        let identifier = ObjectIdentifier(self)
        if Self.held.contains(identifier) { return try await body() }
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
        return try await Self.$held.withValue(Self.held.union([identifier])) { try await body() }
    }
}
