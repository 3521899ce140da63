import Synchronization
import TestSupport
import Testing

/// `WorkSlots`, which makes the tests' browsers and conversions take turns: never more at once than its slots,
/// first come first served, and a task that holds a slot runs nested heavy work in it (no deadlock).
@Suite(.tags(.unit), .timeLimit(.minutes(1))) struct WorkSlotsTests {
    final class Counts: Sendable {
        let state = Mutex((running: 0, most: 0, order: [Int]()))
    }

    @Test func neverMoreAtOnceThanItsSlots() async throws {
        let slots = WorkSlots(count: 2)
        let counts = Counts()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<8 {
                group.addTask {
                    try await slots.withSlot {
                        counts.state.withLock {
                            $0.running += 1
                            $0.most = max($0.most, $0.running)
                        }
                        try await Task.sleep(for: .milliseconds(20))
                        counts.state.withLock { $0.running -= 1 }
                    }
                }
            }
            try await group.waitForAll()
        }
        let (running, most, _) = counts.state.withLock { $0 }
        #expect(running == 0)
        #expect(most == 2)
    }

    @Test func waitersGoInTheOrderTheyCame() async throws {
        let slots = WorkSlots(count: 1)
        let counts = Counts()
        let release = Mutex<CheckedContinuation<Void, Never>?>(nil)
        // The one slot is held until all three waiters queue.
        let holder = Task {
            await slots.withSlot {
                await withCheckedContinuation { continuation in release.withLock { $0 = continuation } }
            }
        }
        while release.withLock({ $0 == nil }) { try await Task.sleep(for: .milliseconds(5)) }
        var waiters: [Task<Void, Never>] = []
        for index in 0..<3 {
            waiters.append(Task { await slots.withSlot { counts.state.withLock { $0.order.append(index) } } })
            // Each queued before the next starts.
            while slots.waiting < index + 1 { try await Task.sleep(for: .milliseconds(5)) }
        }
        release.withLock { $0?.resume() }
        await holder.value
        for waiter in waiters { await waiter.value }
        #expect(counts.state.withLock { $0.order } == [0, 1, 2])
    }

    @Test func aHolderRunsNestedWorkInItsOwnSlot() async throws {
        let slots = WorkSlots(count: 1)
        let ran = await slots.withSlot {
            await slots.withSlot {
                await withTaskGroup(of: Int.self) { group in
                    group.addTask { await slots.withSlot { 1 } }
                    return await group.reduce(0, +)
                }
            }
        }
        #expect(ran == 1)
    }
}
