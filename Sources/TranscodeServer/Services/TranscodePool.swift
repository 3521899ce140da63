import Foundation
import NIOPosix
import ServiceLifecycle
import Synchronization

/// The threads transcodes run on, and the bound on how much work may be admitted.
///
/// A transcode is synchronous CPU work: it runs on this `NIOThreadPool`, never on the async executor
/// whose threads serve requests. Admission is counted per job (download and transcode), up to
/// `workers + queueLength`; past that a request is refused at once (429) before any work is spent.
/// As a `Service`, it stops admitting on graceful shutdown and lets admitted jobs finish within the grace
/// period before its threads stop.
final class TranscodePool: Service, Sendable {
    let workers: Int
    let capacity: Int
    private let threadPool: NIOThreadPool
    private let state = Mutex(State())
    private let graceSeconds: Double

    private struct State {
        var admitted = 0
        var accepting = true
    }

    init(workers: Int, queueLength: Int, graceSeconds: Double) {
        self.workers = max(1, workers)
        self.capacity = self.workers + max(0, queueLength)
        self.graceSeconds = graceSeconds
        self.threadPool = NIOThreadPool(numberOfThreads: self.workers)
        self.threadPool.start()
    }

    /// A claim on one job slot; `release()` it exactly once.
    struct Admission: Sendable {
        fileprivate let pool: TranscodePool
        func release() { self.pool.state.withLock { $0.admitted -= 1 } }
    }

    /// Claims a slot. - Throws: `ServiceError` 429 when full, 503 when shutting down.
    func admit() throws -> Admission {
        try self.state.withLock { state in
            guard state.accepting else { throw ServiceError.shuttingDown }
            guard state.admitted < self.capacity else {
                throw ServiceError.queueFull()
            }
            state.admitted += 1
        }
        return Admission(pool: self)
    }

    /// Throws what `admit()` would, without claiming a slot: an upload is turned away (429) before a byte
    /// of its body is read when no job could be admitted now.
    func checkRoom() throws {
        try self.state.withLock { state in
            guard state.accepting else { throw ServiceError.shuttingDown }
            guard state.admitted < self.capacity else { throw ServiceError.queueFull() }
        }
    }

    /// Whether new jobs are admitted (false once shutdown began).
    var isAccepting: Bool { self.state.withLock { $0.accepting } }

    /// Jobs admitted and not yet finished (running or waiting).
    var load: Int { self.state.withLock { $0.admitted } }

    /// Runs `body` on a pool thread.
    func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await self.threadPool.runIfActive(body)
    }

    func run() async throws {
        try? await gracefulShutdown()
        try await self.stop()
    }

    /// Stops admitting, lets admitted jobs finish within the grace period, then stops the threads.
    func stop() async throws {
        self.state.withLock { $0.accepting = false }
        let deadline = Date().addingTimeInterval(self.graceSeconds)
        while self.load > 0, Date() < deadline {
            try? await Task.sleep(for: .milliseconds(50))
        }
        try await self.threadPool.shutdownGracefully()
    }
}
