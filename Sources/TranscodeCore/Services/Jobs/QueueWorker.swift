import Foundation
import Logging
import ServiceLifecycle
import Synchronization

/// The kinds of job the fleet's queue holds, as its `spec` column names them (the values are the rows').
package enum JobKind: String, CaseIterable, Sendable {
    /// A conversion of a URL (`TranscodeJob`): a batch's item, or a request's job that outlived its wait.
    case conversion = "mp4"
    /// A webhook delivery kept in the outbox (`WebhookMessage`).
    case webhook
    /// `transcode-server queue bench`'s empty jobs.
    case bench
}

/// What runs one kind of job for a `QueueWorker`: when another may start, and how one runs to its end.
protocol JobHandler: Sendable {
    /// Whether another job may start while `running` of this worker's are under way.
    func hasRoom(running: Int) -> Bool
    /// Runs a claimed job and records how it ended (under its lease: `complete`, `fail`, or the lease left to
    /// expire).
    func perform(_ claimed: PostgresQueue.Claimed) async
    /// Whether the worker goes on claiming (false once this node stops taking work).
    var isWorking: Bool { get }
    /// Work beside the claims, every `QueueWorker.Settings.sweepSeconds`: what no single job's end records.
    func sweep() async
    /// The pool slot a claimed job holds from its claim until its admission takes it over, so that `hasRoom`
    /// counts the job at once (`TranscodePool.Reservation`); nil for work that takes no slot.
    func reserve() -> TranscodePool.Reservation?
}

extension JobHandler {
    var isWorking: Bool { true }
    func sweep() async {}
    func reserve() -> TranscodePool.Reservation? { nil }
}

/// Claims jobs of one kind from the fleet's queue and runs them on this node, while its handler has room, until
/// shutdown: the claim (within `queue.timeoutSeconds`, a claim that comes too late given back), the wait for work
/// (woken by `wakeup`, which the fleet's `LISTEN` signals on every enqueue, or by the time the next backoff or lease
/// ends), and a back-off of a second while the database fails. Leases, heartbeats and how a job's end is recorded are
/// the handler's (`ConversionJobs.hold`, `PostgresWebhookOutbox`). One loop for every kind of job.
final class QueueWorker<Handler: JobHandler>: Sendable {
    struct Settings: Sendable {
        /// How long a claim leases its job.
        var leaseSeconds: Double
        /// How long each database call may take (`queue.timeoutSeconds`).
        var timeoutSeconds: Double
        /// How long to wait before looking again when the handler has no room (a finishing job wakes it sooner).
        var busyWaitSeconds: Double
        /// Every how many seconds the handler sweeps (nil: never).
        var sweepSeconds: Double? = nil
        /// Between the node's name and each claim's number in the lease's owner.
        var ownerTag = ""
    }

    let queue: PostgresQueue
    let kind: JobKind
    let handler: Handler
    let settings: Settings
    /// This node's name on leases: each claim adds its own number, so that a job this node claims again after its
    /// own lease expired is not reported twice (the first claim's report finds the lease gone).
    let owner: String
    /// Counts claims (`transcode_queue_claim_duration_seconds`, lease expiries), when given.
    let metrics: ServiceMetrics?
    let logger: Logger
    /// Wakes the loop: an enqueue anywhere in the fleet, or one of its jobs ending.
    let wakeup = Wakeup()
    private let claims = Mutex(0)
    private let running = Mutex(0)

    init(
        queue: PostgresQueue, kind: JobKind, handler: Handler, settings: Settings, owner: String,
        metrics: ServiceMetrics? = nil, logger: Logger
    ) {
        self.queue = queue
        self.kind = kind
        self.handler = handler
        self.settings = settings
        self.owner = owner
        self.metrics = metrics
        self.logger = logger
    }

    /// Claims and runs jobs while the handler has room, until cancelled or shutting down; jobs under way are
    /// awaited.
    func run() async {
        var swept = ContinuousClock.now - .seconds(3600)
        await withDiscardingTaskGroup { group in
            while !Task.isCancelled, !Task.isShuttingDownGracefully, self.handler.isWorking {
                if let every = self.settings.sweepSeconds, ContinuousClock.now - swept > .milliseconds(every * 1000) {
                    await self.handler.sweep()
                    swept = ContinuousClock.now
                }
                guard self.handler.hasRoom(running: self.running.withLock({ $0 })) else {
                    await self.wakeup.wait(upTo: self.settings.busyWaitSeconds)
                    continue
                }
                do {
                    let started = ContinuousClock.now
                    let owner = self.claimOwner()
                    let (queue, kind, lease) = (self.queue, self.kind, self.settings.leaseSeconds)
                    let timeout = self.settings.timeoutSeconds
                    if let claimed = try await PostgresQueue.bounded(
                        seconds: timeout,
                        { try await queue.claim(owner: owner, leaseSeconds: lease, kind: kind) },
                        late: { await queue.giveBack($0, within: timeout) })
                    {
                        self.metrics?.queueClaimed(after: ContinuousClock.now - started, reclaimed: claimed.reclaimed)
                        self.running.withLock { $0 += 1 }
                        // Taken before the next look at the room: the job counts in the pool's load from now on.
                        let slot = self.handler.reserve()
                        group.addTask {
                            if let slot {
                                await TranscodePool.withReservation(slot) { await self.handler.perform(claimed) }
                            } else {
                                await self.handler.perform(claimed)
                            }
                            self.running.withLock { $0 -= 1 }
                            self.wakeup.signal()
                        }
                        continue
                    }
                    // At least 0.2 s: a due job a submit holds locked reads as due now (NOTIFY wakes for new ones).
                    let due = try await PostgresQueue.bounded(seconds: timeout) {
                        try await queue.secondsToNextDue(kind: kind)
                    }
                    await self.wakeup.wait(upTo: min(30, max(0.2, due ?? 30)))
                } catch {
                    self.logger.warning(
                        "cannot claim a job: the job database failed",
                        metadata: ["queue.kind": "\(self.kind.rawValue)", "error": "\(String(reflecting: error))"])
                    await self.wakeup.wait(upTo: 1)
                }
            }
        }
    }

    /// The owner of one claim: this node's name and the claim's number.
    private func claimOwner() -> String {
        "\(self.owner)#\(self.settings.ownerTag)\(self.claims.withLock { $0 += 1; return $0 })"
    }
}
