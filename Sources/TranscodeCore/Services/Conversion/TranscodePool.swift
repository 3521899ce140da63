import Foundation
import NIOPosix
import ServiceLifecycle
import Synchronization
import Transcoder

/// How urgent a job is: the pool starts the jobs waiting for a worker in this order; within a class the clients take
/// turns (`TranscodePool`).
package enum JobPriority: String, Codable, Sendable, CaseIterable, Comparable {
    /// Someone waits for it: a reader's first view, `POST /transcode`, a signed URL's first request.
    case interactive
    /// A better format for a URL already answered with a lesser one (`.auto`'s AVIF and WebP): made when no reader
    /// waits, and answered from then on.
    case upgrade
    /// A batch's item (`POST /v1/batches`, backfill): after everything else.
    case backfill

    private var rank: Int {
        switch self {
        case .interactive: 0
        case .upgrade: 1
        case .backfill: 2
        }
    }

    package static func < (a: JobPriority, b: JobPriority) -> Bool { a.rank < b.rank }
}

/// The threads transcodes run on, the bound on how much work may be admitted, the order waiting work starts in,
/// and the node's memory budget.
///
/// A transcode is synchronous CPU work: it runs on this pool's `NIOThreadPool`s, never on the async executor whose
/// threads serve requests. Upgrades and backfill run on threads of their own at a lower CPU priority (nice
/// `backgroundNice`; an encoder's threads inherit it): the kernel gives a reader's conversion the cores first when
/// both run, so a backfill costs readers its worker, not their CPU time too. So do the interactive conversions of a
/// client pressing its quota (`lowersCPU`, `ClientQuotas.isPressing`): admitted within its quota, they still share
/// the cores with other clients' conversions, and yield them.
/// - **Admission** is counted per job (download and transcode): interactive and backfill jobs up to
///   `workers + queueLength`, upgrades up to `upgradeQueueLength` of their own (a burst of first views never takes
///   the room of readers, and readers never lose an upgrade's place). Past that a job is refused at once (429)
///   before any work is spent.
/// - **Order.** A job admitted waits for a worker in `JobPriority` order (interactive, then upgrades, then
///   backfill). Within a class the clients take turns (`RequestClient`, the task's client when the job was
///   asked for): the client with the fewest conversions running goes first, then the one whose last start is
///   oldest (a client with none waiting or running has no turn on record, so it goes before), then the oldest
///   job. One client's burst of cold URLs, or its backfill, then holds at most its share of the workers, and
///   another client's job waits for one worker to come free, not for the burst. The pool hands work to its
///   threads only when one is free, so `NIOThreadPool`'s own queue (first come, first served) never holds a
///   job.
/// - **Memory.** Each conversion comes with its predicted peak (`MemoryPrediction`); one starts only while the
///   peaks of those running and its own fit `memoryBudgetBytes` less the process's own share
///   (`MemoryPrediction.processBaseBytes`). The first waiter in order that fits starts: a small job may pass a
///   large one that waits for memory. A job predicted above the whole budget is refused (`overloaded`).
///
/// As a `Service`, it stops admitting on graceful shutdown and lets admitted jobs finish within the grace period
/// before its threads stop.
package final class TranscodePool: Service, Sendable {
    let workers: Int
    let capacity: Int
    let upgradeCapacity: Int
    /// The process's budget (`transcode.memoryBudgetBytes`); 0: no memory admission.
    let memoryBudgetBytes: Int
    private let threadPool: NIOThreadPool
    /// Where upgrades and backfill run, each thread at nice `backgroundNice` (set by its first job: a thread may
    /// always lower its own priority, never raise it back, so these threads run nothing else).
    private let backgroundThreadPool: NIOThreadPool
    static let backgroundNice: Int32 = 10
    /// Whether a client's interactive conversions run on the background threads too (by `RequestClient.key`).
    private let lowersCPU: @Sendable (String) -> Bool
    private let state = Mutex(State())
    /// Told each time a slot is released (`wakeOnRelease`).
    private let releaseWakeups = Mutex<[Wakeup]>([])
    private let graceSeconds: Double

    private struct Waiter {
        let sequence: Int
        let priority: JobPriority
        let bytes: Int
        /// `RequestClient.key`.
        let client: String
        let continuation: CheckedContinuation<Void, Never>
    }

    /// A client's place in the turns: conversions running and waiting, and when it last started one (kept while
    /// it has either, so the table holds only clients with work here).
    private struct ClientTurn {
        var running = 0
        var waiting = 0
        var lastStart = 0
    }

    private struct State {
        var admitted = 0
        var admittedUpgrades = 0
        var accepting = true
        var running = 0
        var runningBytes = 0
        var peakRunningBytes = 0
        var waiters: [Waiter] = []
        var sequence = 0
        var started: [JobPriority: Int] = [:]
        var clients: [String: ClientTurn] = [:]
        var starts = 0

        /// Drops `client`'s turn once it has nothing running or waiting.
        mutating func forgetIfIdle(_ client: String) {
            if let turn = self.clients[client], turn.running == 0, turn.waiting == 0 { self.clients[client] = nil }
        }
    }

    package init(
        workers: Int, queueLength: Int, graceSeconds: Double, upgradeQueueLength: Int = 64,
        memoryBudgetBytes: Int = 0, lowersCPU: @escaping @Sendable (String) -> Bool = { _ in false }
    ) {
        self.lowersCPU = lowersCPU
        self.workers = max(1, workers)
        self.capacity = self.workers + max(0, queueLength)
        self.upgradeCapacity = max(0, upgradeQueueLength)
        self.memoryBudgetBytes = max(0, memoryBudgetBytes)
        self.graceSeconds = graceSeconds
        self.threadPool = NIOThreadPool(numberOfThreads: self.workers)
        self.threadPool.start()
        self.backgroundThreadPool = NIOThreadPool(numberOfThreads: self.workers)
        self.backgroundThreadPool.start()
    }

    /// What conversions may take at once: the budget less the process's own share; nil without a budget.
    var conversionBytes: Int? {
        self.memoryBudgetBytes > 0 ? max(0, self.memoryBudgetBytes - MemoryPrediction.processBaseBytes) : nil
    }

    /// A claim on one job slot; `release()` it exactly once.
    struct Admission: Sendable {
        fileprivate let pool: TranscodePool
        fileprivate let priority: JobPriority
        func release() {
            self.pool.state.withLock {
                if self.priority == .upgrade { $0.admittedUpgrades -= 1 } else { $0.admitted -= 1 }
            }
            self.pool.signalRelease()
        }
    }

    /// A slot a worker loop (the batch items, the fleet's claims) holds from the moment it starts a job until the
    /// job is admitted: `load` counts the job at once, so the loop's next look sees the worker taken. The job's own
    /// `admit`, in a task that runs with it (`withReservation`), takes the slot over instead of claiming another;
    /// `end()` gives it back when no admission took it (the item was a hit, joined a running job, or failed first).
    final class Reservation: Sendable {
        fileprivate let pool: TranscodePool
        private let held = Mutex(true)

        fileprivate init(pool: TranscodePool) { self.pool = pool }

        /// Whether the slot was still held; it is not afterwards.
        fileprivate func take() -> Bool {
            self.held.withLock { held in
                defer { held = false }
                return held
            }
        }

        /// Gives the slot back unless an admission took it. Idempotent.
        func end() {
            guard self.take() else { return }
            self.pool.state.withLock { $0.admitted -= 1 }
            self.pool.signalRelease()
        }
    }

    /// The reservation the job started in this task may take over (`withReservation`).
    @TaskLocal private static var reservation: Reservation?

    /// Holds a slot of the interactive and backfill class for a job about to start, when one is free.
    /// - Returns: nil when the pool is full or shutting down.
    func reserve() -> Reservation? {
        let reserved = self.state.withLock { state -> Bool in
            guard state.accepting, state.admitted < self.capacity else { return false }
            state.admitted += 1
            return true
        }
        return reserved ? Reservation(pool: self) : nil
    }

    /// Runs `body` (a job's start) with `reservation` for its admission to take over, and ends the reservation
    /// after it (a no-op once taken).
    static func withReservation<T: Sendable>(
        _ reservation: Reservation, _ body: @Sendable () async throws -> T
    ) async rethrows -> T {
        defer { reservation.end() }
        return try await Self.$reservation.withValue(reservation) { try await body() }
    }

    /// Ends this task's reservation of this pool, if it holds one still: its job joined one that runs (admitted
    /// already), and the slot is not held twice for one conversion.
    func endReservation() {
        Self.reservation.flatMap { $0.pool === self ? $0 : nil }?.end()
    }

    private func signalRelease() {
        for wakeup in self.releaseWakeups.withLock({ $0 }) { wakeup.signal() }
    }

    /// Claims a slot of `priority`'s class (taking over the task's reservation, when it holds one of this pool).
    /// - Throws: `ServiceError` 429 when full, 503 when shutting down.
    func admit(_ priority: JobPriority = .interactive) throws -> Admission {
        let reservation = Self.reservation.flatMap { $0.pool === self ? $0 : nil }
        var tookOver = false
        do {
            return try self.admit(priority, tookOver: &tookOver, reservation: reservation)
        } catch {
            // The reservation's slot was given up, and no admission holds it.
            if tookOver { self.signalRelease() }
            throw error
        }
    }

    private func admit(
        _ priority: JobPriority, tookOver: inout Bool, reservation: Reservation?
    ) throws -> Admission {
        try self.state.withLock { state in
            // The reserved slot becomes this admission (an upgrade's moves to the upgrades' class).
            if reservation?.take() == true {
                state.admitted -= 1
                tookOver = true
            }
            guard state.accepting else { throw ServiceError.shuttingDown }
            if priority == .upgrade {
                guard state.admittedUpgrades < self.upgradeCapacity else {
                    throw ServiceError(.queueFull, "the queue of format upgrades is full")
                }
                state.admittedUpgrades += 1
            } else {
                guard state.admitted < self.capacity else { throw ServiceError.queueFull() }
                state.admitted += 1
            }
            return Admission(pool: self, priority: priority)
        }
    }

    /// Throws what `admit()` would, without claiming a slot: an upload is turned away (429) before a byte
    /// of its body is read when no job could be admitted now.
    package func checkRoom() throws {
        try self.state.withLock { state in
            guard state.accepting else { throw ServiceError.shuttingDown }
            guard state.admitted < self.capacity else { throw ServiceError.queueFull() }
        }
    }

    /// Wakes `wakeup` each time a job's slot is released: a loop that waits for an idle worker (the batch workers,
    /// the drain at shutdown) is told when `load` falls instead of reading it every few milliseconds.
    func wakeOnRelease(_ wakeup: Wakeup) {
        self.releaseWakeups.withLock { $0.append(wakeup) }
    }

    /// Whether new jobs are admitted (false once shutdown began).
    package var isAccepting: Bool { self.state.withLock { $0.accepting } }

    /// Jobs admitted and not yet finished (running or waiting), upgrades included.
    package var load: Int { self.state.withLock { $0.admitted + $0.admittedUpgrades } }

    /// The sum of the predicted peaks running now, and the largest it has been (tests and the benchmark read them).
    var memoryInUse: (now: Int, peak: Int) { self.state.withLock { ($0.runningBytes, $0.peakRunningBytes) } }

    /// Conversions waiting for a worker or for memory.
    var waiting: Int { self.state.withLock { $0.waiters.count } }

    /// How many jobs of each class have started on a thread (tests read the order).
    var startedByPriority: [JobPriority: Int] { self.state.withLock { $0.started } }

    /// Runs `body` on a pool thread once a thread is free and `bytes` (its predicted peak) fit the budget, after
    /// every waiter ahead of it in `priority` order and its client's turn that fits. Its client is the task's
    /// (`RequestClient.current`; `background` outside a request).
    /// - Throws: `overloaded` when `bytes` alone exceed what the budget leaves conversions.
    func run<T: Sendable>(
        priority: JobPriority = .interactive, memory bytes: Int = 0, _ body: @escaping @Sendable () throws -> T
    ) async throws -> T {
        if let limit = self.conversionBytes, bytes > limit {
            throw ServiceError.overloaded(
                "this conversion is predicted to take \(bytes >> 20) MiB; transcode.memoryBudgetBytes leaves "
                    + "conversions \(limit >> 20) MiB")
        }
        let client = (RequestClient.current ?? .background).key
        await Traces.span("transcode.queue_wait", attributes: ["transcode.priority": priority.rawValue]) {
            await self.waitForTurn(priority: priority, bytes: bytes, client: client)
        }
        defer {
            let ready = self.state.withLock { state -> [CheckedContinuation<Void, Never>] in
                state.running -= 1
                state.runningBytes -= bytes
                state.clients[client]?.running -= 1
                state.forgetIfIdle(client)
                return self.startWaiters(&state)
            }
            for waiter in ready { waiter.resume() }
        }
        guard priority != .interactive || self.lowersCPU(client) else {
            return try await self.threadPool.runIfActive(body)
        }
        return try await self.backgroundThreadPool.runIfActive {
            Self.lowerThisThreadsPriority()
            return try body()
        }
    }

    /// Queues a waiter and returns once `startWaiters` started it (counted as running).
    private func waitForTurn(priority: JobPriority, bytes: Int, client: String) async {
        await withCheckedContinuation { continuation in
            let ready = self.state.withLock { state -> [CheckedContinuation<Void, Never>] in
                state.sequence += 1
                state.waiters.append(
                    Waiter(
                        sequence: state.sequence, priority: priority, bytes: bytes, client: client,
                        continuation: continuation))
                state.clients[client, default: ClientTurn()].waiting += 1
                return self.startWaiters(&state)
            }
            for waiter in ready { waiter.resume() }
        }
    }

    /// Sets the calling thread's nice value to `backgroundNice`. On Linux the nice value is a thread's own
    /// (setpriority(2), BUGS): `PRIO_PROCESS` with 0 is the calling thread, and threads it starts inherit it.
    static func lowerThisThreadsPriority() {
        #if os(Linux)
            _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, Self.backgroundNice)
        #endif
    }

    /// The calling thread's nice value (tests read it).
    static func thisThreadsNice() -> Int32 {
        #if os(Linux)
            errno = 0
            return getpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0)
        #else
            return 0
        #endif
    }

    /// Takes the waiters that may start now off the list, in order, counting them as running: each time, the first
    /// that fits the budget by class, its client's running conversions, its client's last start, and age.
    private func startWaiters(_ state: inout State) -> [CheckedContinuation<Void, Never>] {
        var ready: [CheckedContinuation<Void, Never>] = []
        while state.running < self.workers {
            var best: (index: Int, rank: (JobPriority, Int, Int, Int))?
            for (index, waiter) in state.waiters.enumerated() {
                guard self.conversionBytes.map({ state.runningBytes + waiter.bytes <= $0 }) ?? true else { continue }
                let turn = state.clients[waiter.client] ?? ClientTurn()
                let rank = (waiter.priority, turn.running, turn.lastStart, waiter.sequence)
                if best.map({ rank < $0.rank }) ?? true { best = (index, rank) }
            }
            guard let index = best?.index else { break }
            let waiter = state.waiters.remove(at: index)
            state.running += 1
            state.runningBytes += waiter.bytes
            state.peakRunningBytes = max(state.peakRunningBytes, state.runningBytes)
            state.started[waiter.priority, default: 0] += 1
            state.starts += 1
            var turn = state.clients[waiter.client] ?? ClientTurn()
            turn.waiting -= 1
            turn.running += 1
            turn.lastStart = state.starts
            state.clients[waiter.client] = turn
            ready.append(waiter.continuation)
        }
        return ready
    }

    package func run() async throws {
        try? await gracefulShutdown()
        try await self.stop()
    }

    /// Stops admitting, lets admitted jobs finish within the grace period, then stops the threads.
    func stop() async throws {
        self.state.withLock { $0.accepting = false }
        let released = Wakeup()
        self.wakeOnRelease(released)
        let deadline = ContinuousClock.now + .milliseconds(Int64(self.graceSeconds * 1000))
        while self.load > 0, ContinuousClock.now < deadline {
            let left = deadline - ContinuousClock.now
            let seconds = Double(left.components.seconds) + Double(left.components.attoseconds) / 1e18
            await released.wait(upTo: min(1, max(0.01, seconds)))
        }
        try await self.threadPool.shutdownGracefully()
        try await self.backgroundThreadPool.shutdownGracefully()
    }
}
