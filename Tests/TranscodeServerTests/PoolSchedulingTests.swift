import Foundation
import Synchronization
import Testing
import Transcoder

@testable import TranscodeCore
@testable import TranscodeHTTP
@testable import TranscodeServer

/// The pool's order and memory admission: jobs waiting for a worker start interactive first, then upgrades, then
/// backfill, oldest first within a class; conversions start only while their predicted peaks fit the budget; one
/// predicted above the budget alone is refused; upgrades have a queue of their own.
@Suite(.tags(.unit), .timeLimit(.minutes(2))) struct PoolSchedulingTests {
    /// A latch a pool thread blocks on until the test opens it.
    final class Latch: Sendable {
        private let open = Mutex(false)
        func release() { self.open.withLock { $0 = true } }
        func wait() {
            while !self.open.withLock({ $0 }) { usleep(1000) }
        }
    }

    /// A value behind a lock, shared with pool threads.
    final class Shared<Value: Sendable>: Sendable {
        private let value: Mutex<Value>
        init(_ value: Value) { self.value = Mutex(value) }
        func withLock<T: Sendable>(_ body: (inout sending Value) -> T) -> T { self.value.withLock { body(&$0) } }
    }

    /// Waits until `condition` holds (checked every millisecond, for at most 10 s).
    static func until(_ condition: () -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(10)
        while !condition() {
            guard ContinuousClock.now < deadline else { throw CancellationError() }
            try await Task.sleep(for: .milliseconds(1))
        }
    }

    /// One worker, held by a job; then a backfill, an upgrade, an interactive job and a second upgrade queue in that
    /// order. Released, they start interactive, upgrade, upgrade, backfill.
    @Test func waitingJobsStartByPriorityThenAge() async throws {
        let pool = TranscodePool(workers: 1, queueLength: 8, graceSeconds: 1)
        let latch = Latch()
        let order = Shared<[String]>([])
        let holder = Task { try await pool.run { latch.wait() } }
        try await Self.until { pool.startedByPriority[.interactive] == 1 }
        @Sendable func start(_ name: String, _ priority: JobPriority) -> Task<Void, any Error> {
            Task { try await pool.run(priority: priority) { order.withLock { $0.append(name) } } }
        }
        var waiting: [Task<Void, any Error>] = []
        for (name, priority) in [
            ("backfill", JobPriority.backfill), ("upgrade-1", .upgrade), ("interactive", .interactive),
            ("upgrade-2", .upgrade),
        ] {
            waiting.append(start(name, priority))
            // Each in the list before the next arrives (their age is their arrival).
            let queued = waiting.count
            try await Self.until { pool.waiting == queued }
        }
        latch.release()
        try await holder.value
        for task in waiting { try await task.value }
        #expect(order.withLock { $0 } == ["interactive", "upgrade-1", "upgrade-2", "backfill"])
        try await pool.stop()
    }

    /// Upgrades and backfill run at nice 10 (their encoders' threads inherit it), so a reader's conversion gets the
    /// cores first; a reader's runs at the process's own.
    @Test func backgroundWorkRunsAtALowerCPUPriority() async throws {
        let pool = TranscodePool(workers: 2, queueLength: 8, graceSeconds: 1)
        let base = TranscodePool.thisThreadsNice()
        let interactive = try await pool.run { TranscodePool.thisThreadsNice() }
        let backfill = try await pool.run(priority: .backfill) { TranscodePool.thisThreadsNice() }
        let upgrade = try await pool.run(priority: .upgrade) { TranscodePool.thisThreadsNice() }
        #expect(interactive == base)
        #expect(backfill == max(base, TranscodePool.backgroundNice))
        #expect(upgrade == max(base, TranscodePool.backgroundNice))
        // And a reader's still does not, after a thread ran background work.
        for _ in 0..<8 { #expect(try await pool.run { TranscodePool.thisThreadsNice() } == base) }
        try await pool.stop()
    }

    /// A client refused by its quota in the last ten seconds presses it: its admitted interactive conversions run at
    /// the background's nice value, another client's do not, and its own run at full priority again once it has
    /// kept within its quota for ten seconds.
    @Test func aClientPressingItsQuotaYieldsTheCPU() async throws {
        let clock = Shared(100.0)
        let quotas = ClientQuotas(
            policies: ["a": QuotaPolicy(ratePerSecond: 0.5, burst: 1)], now: { clock.withLock { $0 } })
        let pool = TranscodePool(workers: 2, queueLength: 8, graceSeconds: 1, lowersCPU: quotas.isPressing)
        let base = TranscodePool.thisThreadsNice()
        @Sendable func nice(_ client: RequestClient) async throws -> Int32 {
            try await RequestClient.$current.withValue(client) {
                try await pool.run { TranscodePool.thisThreadsNice() }
            }
        }
        let (a, b) = (RequestClient.named("a"), RequestClient.named("b"))
        guard case .taken = quotas.take(a) else { Issue.record("a's first token"); return }
        #expect(try await nice(a) == base)
        guard case .refused = quotas.take(a) else { Issue.record("a's second token"); return }
        #expect(quotas.isPressing(a.key) && !quotas.isPressing(b.key))
        #expect(try await nice(a) == max(base, TranscodePool.backgroundNice))
        for _ in 0..<4 { #expect(try await nice(b) == base) }
        clock.withLock { $0 += ClientQuotas.pressingSeconds + 0.5 }
        #expect(!quotas.isPressing(a.key))
        for _ in 0..<4 { #expect(try await nice(a) == base) }
        try await pool.stop()
    }

    /// A budget that leaves conversions 200 MiB: two jobs of 150 MiB never run at once, though two workers are
    /// free; a job of 40 MiB runs beside one of them; one of 300 MiB is refused `overloaded` before it waits.
    @Test func conversionsStartOnlyWithinTheMemoryBudget() async throws {
        let budget = MemoryPrediction.processBaseBytes + (200 << 20)
        let pool = TranscodePool(workers: 2, queueLength: 8, graceSeconds: 1, memoryBudgetBytes: budget)
        let running = Shared(0)
        let most = Shared(0)
        @Sendable func work() {
            let now = running.withLock {
                $0 += 1; return $0
            }
            most.withLock { $0 = max($0, now) }
            usleep(50_000)
            running.withLock { $0 -= 1 }
        }
        let first = Task { try await pool.run(memory: 150 << 20) { work() } }
        let second = Task { try await pool.run(memory: 150 << 20) { work() } }
        try await first.value
        try await second.value
        #expect(most.withLock { $0 } == 1)
        #expect(pool.memoryInUse.peak <= 200 << 20)

        most.withLock { $0 = 0 }
        let large = Task { try await pool.run(memory: 150 << 20) { work() } }
        let small = Task { try await pool.run(memory: 40 << 20) { work() } }
        try await large.value
        try await small.value
        #expect(most.withLock { $0 } == 2)

        await #expect {
            try await pool.run(memory: 300 << 20) {}
        } throws: { error in
            (error as? ServiceError)?.code == .overloaded
        }
        #expect(pool.memoryInUse.now == 0)
        try await pool.stop()
    }

    /// Upgrades are admitted up to a queue of their own: a full one refuses the next upgrade (queue-full) and leaves
    /// the interactive room untouched.
    @Test func upgradesHaveARoomOfTheirOwn() throws {
        let pool = TranscodePool(workers: 1, queueLength: 0, graceSeconds: 1, upgradeQueueLength: 2)
        let upgrades = [try pool.admit(.upgrade), try pool.admit(.upgrade)]
        #expect(throws: ServiceError.self) { try pool.admit(.upgrade) }
        let reader = try pool.admit(.interactive)
        #expect(throws: ServiceError.self) { try pool.admit(.interactive) }
        #expect(pool.load == 3)
        for admission in upgrades + [reader] { admission.release() }
        #expect(pool.load == 0)
    }

    /// The canvas from the first bytes: a GIF's logical screen, an APNG's IHDR, an animated WebP's VP8X; nothing
    /// from anything else. Checked against the corpus files' own sizes.
    @Test func canvasSizesComeFromTheHeaders() throws {
        let gif: [UInt8] = Array("GIF89a".utf8) + [0x6E, 0x01, 0x68, 0x01] + [0, 0, 0]
        #expect(MemoryPrediction.canvasSize(of: gif)! == (366, 360))
        var png: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 13] + Array("IHDR".utf8)
        png += [0, 0, 0x04, 0x38, 0, 0, 0x02, 0x1C]
        #expect(MemoryPrediction.canvasSize(of: png)! == (1080, 540))
        var webp = Array("RIFF".utf8) + [0, 0, 0, 0] + Array("WEBPVP8X".utf8) + [10, 0, 0, 0, 0x12, 0, 0, 0]
        webp += [0x37, 0x04, 0x00, 0x1B, 0x02, 0x00]
        #expect(MemoryPrediction.canvasSize(of: webp)! == (1080, 540))
        #expect(MemoryPrediction.canvasSize(of: Array("not an image at all, no header".utf8)) == nil)
        #expect(MemoryPrediction.canvasSize(of: [0x47, 0x49]) == nil)
    }

    /// The prediction follows the formats and the box: the AVIF with alpha is the largest part; an AVIF above the
    /// cap is not counted (it is not made); a canvas larger than the box is predicted at the box's size.
    @Test func predictionsFollowFormatsAndTheBox() {
        var options = TranscodeOptions()
        let video = MemoryPrediction.peakBytes(width: 1080, height: 1080, sourceBytes: 0, options: options)
        options.rendition = options.rendition.withExtraFormats([.webp, .avif])
        let avif = MemoryPrediction.peakBytes(width: 1080, height: 1080, sourceBytes: 0, options: options)
        #expect(video == MemoryPrediction.video.bytes(pixels: 1080 * 1080))
        #expect(avif == MemoryPrediction.avif.bytes(pixels: 1080 * 1080))
        #expect(avif > 4 * video)
        // 1600x1600 fits the 1920x1080 box at 1080x1080... and stays under the AVIF's 1,200 px cap.
        let fitted = MemoryPrediction.peakBytes(width: 1600, height: 1600, sourceBytes: 0, options: options)
        #expect(fitted == avif)
        // 1900x1000 is above the cap: its AVIF is not made, its WebP is the largest part.
        let wide = MemoryPrediction.peakBytes(width: 1900, height: 1000, sourceBytes: 10, options: options)
        #expect(wide == MemoryPrediction.webp.bytes(pixels: 1900 * 1000) + 10)
    }
}
