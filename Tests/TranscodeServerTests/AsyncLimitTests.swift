import Synchronization
import TestSupport
import Testing

@testable import TranscodeCore
@testable import TranscodeHTTP
@testable import TranscodeServer

/// `AsyncLimit`: never more holders than its limit, waiters served in order, a cancelled waiter gone.
@Suite(.tags(.unit), .timeLimit(.minutes(10))) struct AsyncLimitTests {
    @Test func neverMoreHoldersThanTheLimit() async {
        let limit = AsyncLimit(3)
        final class Counts: Sendable { let value = Mutex<(now: Int, most: Int, done: Int)>((0, 0, 0)) }
        let box = Counts()
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<20 {
                group.addTask {
                    _ = await limit.run {
                        box.value.withLock { $0 = ($0.now + 1, max($0.most, $0.now + 1), $0.done) }
                        try? await Task.sleep(for: .milliseconds(5))
                        box.value.withLock { $0 = ($0.now - 1, $0.most, $0.done + 1) }
                    }
                }
            }
        }
        #expect(box.value.withLock { $0.most } == 3)
        #expect(box.value.withLock { $0.done } == 20)
        #expect(limit.occupancy == (0, 0))
    }

    @Test func aCancelledWaiterStopsWaitingAndHoldsNothing() async throws {
        let limit = AsyncLimit(1)
        let (release, released) = AsyncStream.makeStream(of: Void.self)
        let holder = Task { await limit.run { for await _ in release { break } } }
        while limit.occupancy.held == 0 { try await Task.sleep(for: .milliseconds(1)) }
        let waiter = Task { await limit.run { "ran" } }
        while limit.occupancy.waiting == 0 { try await Task.sleep(for: .milliseconds(1)) }
        waiter.cancel()
        #expect(await waiter.value == nil)
        #expect(limit.occupancy == (1, 0))
        released.yield()
        _ = await holder.value
        #expect(limit.occupancy == (0, 0))
        #expect(await limit.run { "ran" } == "ran")
    }
}
