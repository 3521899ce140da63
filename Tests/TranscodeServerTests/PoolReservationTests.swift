import Foundation
import Testing

@testable import TranscodeCore

/// A worker loop's slot (`TranscodePool.Reservation`): counted in the pool's load from the moment the loop starts a
/// job, taken over by that job's admission, given back when nothing took it. The batch runner and the fleet's
/// claims used to sleep after each start (25 ms, 5 ms) so that the load would count the job before their next look.
@Suite(.tags(.unit), .timeLimit(.minutes(2))) struct PoolReservationTests {
    /// Reserved, the slot counts at once; the job's admission in the item's task takes it over (one slot, not two),
    /// and its release frees it.
    @Test func theJobsAdmissionTakesTheReservedSlotOver() async throws {
        let pool = TranscodePool(workers: 2, queueLength: 0, graceSeconds: 1)
        let slot = try #require(pool.reserve())
        #expect(pool.load == 1)
        try await TranscodePool.withReservation(slot) {
            let admission = try pool.admit(.backfill)
            #expect(pool.load == 1)
            // The one other slot is free for a reader.
            let reader = try pool.admit(.interactive)
            #expect(pool.load == 2)
            #expect(throws: ServiceError.self) { try pool.admit(.interactive) }
            reader.release()
            admission.release()
            #expect(pool.load == 0)
        }
        #expect(pool.load == 0)
        // Ending it again changes nothing.
        slot.end()
        #expect(pool.load == 0)
        try await pool.stop()
    }

    /// A start that admitted nothing (a hit, a failure before its job) gives its slot back when it ends, and a loop
    /// waiting for a worker is woken.
    @Test func anUnusedSlotIsGivenBackAndWakesTheWaiters() async throws {
        let pool = TranscodePool(workers: 1, queueLength: 0, graceSeconds: 1)
        let released = Wakeup()
        pool.wakeOnRelease(released)
        let slot = try #require(pool.reserve())
        #expect(pool.reserve() == nil, "a full pool reserves nothing")
        #expect(throws: ServiceError.self) { try pool.admit(.interactive) }
        await TranscodePool.withReservation(slot) {}
        #expect(pool.load == 0)
        // Returns on the signal; without it the suite's time limit fails the test.
        await released.wait(upTo: 3600)
        let again = try #require(pool.reserve())
        again.end()
        #expect(pool.load == 0)
        try await pool.stop()
    }

    /// Only an admission in the reserving task takes the slot over: another task's job, or another pool's, claims
    /// a slot of its own.
    @Test func otherTasksAndPoolsClaimTheirOwnSlots() async throws {
        let pool = TranscodePool(workers: 2, queueLength: 0, graceSeconds: 1)
        let other = TranscodePool(workers: 1, queueLength: 0, graceSeconds: 1)
        let slot = try #require(pool.reserve())
        let outside = try pool.admit(.interactive)
        #expect(pool.load == 2)
        try await TranscodePool.withReservation(slot) {
            let elsewhere = try other.admit(.interactive)
            #expect(other.load == 1)
            #expect(pool.load == 2, "the other pool's admission left this slot reserved")
            elsewhere.release()
        }
        #expect(pool.load == 1)
        outside.release()
        #expect(pool.load == 0)
        try await pool.stop()
        try await other.stop()
    }

    /// An upgrade's admission moves the slot to the upgrades' class; a job that joined one already running gives
    /// the slot back at once (`endReservation`), so one conversion never holds two.
    @Test func upgradesAndJoinedJobsHoldNoSecondSlot() async throws {
        let pool = TranscodePool(workers: 1, queueLength: 0, graceSeconds: 1, upgradeQueueLength: 1)
        let first = try #require(pool.reserve())
        try await TranscodePool.withReservation(first) {
            let upgrade = try pool.admit(.upgrade)
            #expect(pool.load == 1)
            // The interactive class has its slot back.
            let reader = try pool.admit(.interactive)
            reader.release()
            upgrade.release()
        }
        let second = try #require(pool.reserve())
        await TranscodePool.withReservation(second) {
            #expect(pool.load == 1)
            pool.endReservation()
            #expect(pool.load == 0)
        }
        #expect(pool.load == 0)
        try await pool.stop()
    }
}
