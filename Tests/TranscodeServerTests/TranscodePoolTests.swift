import Foundation
import Synchronization
import Testing

@testable import TranscodeServer

/// A job alone gets every worker's core for x264's threads; jobs side by side share them, one each at least.
@Suite struct TranscodePoolTests {
    @Test func aJobAloneUsesTheIdleCores() async throws {
        let pool = TranscodePool(workers: 2, queueLength: 4, graceSeconds: 1)
        #expect(try await pool.runUsingIdleCores { $0 } == 2)

        // One job holds a worker (it waits for a signal): the next one gets the core left.
        let started = Mutex(false)
        let release = Mutex(false)
        async let first = pool.runUsingIdleCores { cores in
            started.withLock { $0 = true }
            while !release.withLock({ $0 }) { usleep(1000) }
            return cores
        }
        while !started.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(1)) }
        let second = try await pool.runUsingIdleCores { $0 }
        #expect(pool.running == 1)
        release.withLock { $0 = true }
        #expect(try await first == 2)
        #expect(second == 1)
        #expect(pool.running == 0)
        #expect(try await pool.runUsingIdleCores { $0 } == 2)
    }
}
