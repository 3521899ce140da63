import Foundation
import Logging
import ServiceLifecycle
import Synchronization
import Transcoder

/// Backfill batches on this node: many URLs converted through the same queue as interactive requests, without starving
/// them, and surviving a restart.
///
/// A batch lives in `<cache>/batches/<id>/` (`BatchFolder`): its URLs, its options (written once) and
/// `results.ndjson` (one line per finished URL, appended). At startup every batch is read back and its URLs
/// without a result line are queued again; a line cut short by a crash is ignored (that URL runs again, and
/// its result comes from the cache).
///
/// A complete batch is kept `retentionSeconds` after it was created, then deleted; `delete` removes one at once.
/// In memory a batch is its options and counts, and while unfinished a bit per URL: its URLs are read from disk one
/// at a time as items start, and its results a page at a time, so memory grows with neither the batches kept on
/// disk nor their URLs' length.
///
/// Batch jobs take only idle workers: an item starts only while fewer jobs are admitted than there are
/// workers, and batches hold at most `workers - 1` of them (one, with a single worker), so an interactive
/// request always finds a worker or, with one worker, waits for at most one batch item.
package final class BatchRunner: BatchStore, Service, Sendable {
    let directory: String
    let service: TranscodeService
    let links: PublicLinks
    let webhooks: WebhookDispatcher
    /// How long a complete batch is kept after it was created (`batch.retentionSeconds`).
    let retentionSeconds: Double
    let logger: Logger
    private let state = Mutex(State())
    private let pendingNotifications: [String]
    /// Wakes the loop: a slot of the pool released, a batch submitted.
    private let wakeup = Wakeup()

    private struct Batch {
        let record: BatchRecord
        var total: Int { self.record.total }
        /// A bit per item recorded; emptied once all are (`finishedCount` goes on counting).
        var finished: [UInt64]
        var finishedCount = 0
        var running: Set<Int> = []
        var counts: [ItemStatus: Int] = [:]
        var next = 0
        var complete: Bool { self.finishedCount == self.total }

        init(record: BatchRecord) {
            self.record = record
            self.finished = [UInt64](repeating: 0, count: (record.total + 63) / 64)
        }

        /// Records item `index` with `status`. - Returns: false when it was recorded before.
        mutating func finish(_ index: Int, status: ItemStatus) -> Bool {
            guard !self.isFinished(index) else { return false }
            self.finished[index / 64] |= 1 << UInt64(index % 64)
            self.finishedCount += 1
            self.counts[status, default: 0] += 1
            // A complete batch keeps its counts only.
            if self.complete { self.finished = [] }
            return true
        }

        func isFinished(_ index: Int) -> Bool {
            self.complete || self.finished[index / 64] & (1 << UInt64(index % 64)) != 0
        }
    }

    private struct State {
        var batches: [String: Batch] = [:]
        /// Batch ids in the order they arrived: older batches go first.
        var order: [String] = []
        var running = 0
        /// No item starts before this (after an item failed for a passing reason: the store or the queue).
        var pausedUntil: ContinuousClock.Instant?
    }

    /// Reads back every batch in `directory` (created if missing). - Throws: when it cannot be created.
    package init(
        directory: String, service: TranscodeService, links: PublicLinks, webhooks: WebhookDispatcher,
        retentionSeconds: Double = 604_800, logger: Logger
    ) throws {
        self.directory = directory
        self.service = service
        self.links = links
        self.webhooks = webhooks
        self.retentionSeconds = retentionSeconds
        self.logger = logger
        service.pool.wakeOnRelease(self.wakeup)
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var loaded: [(String, Batch)] = []
        for id in (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [] where BatchID.isValid(id) {
            let folder = BatchFolder(path: "\(directory)/\(id)")
            guard let record = folder.load() else {
                // Never recorded whole (a crash before its request.json), damaged, or in the older form and not
                // rewritten (a full disk): left on disk, said once.
                if FileManager.default.fileExists(atPath: folder.requestPath) {
                    logger.error(
                        "a batch cannot be read back; its folder is left as it is", metadata: ["batch.id": "\(id)"])
                }
                continue
            }
            var batch = Batch(record: record)
            folder.dropPartialLine()
            folder.forEachResult { index, status in
                if (0..<batch.total).contains(index) { _ = batch.finish(index, status: status) }
            }
            loaded.append((id, batch))
        }
        loaded.sort { $0.1.record.createdAt < $1.1.record.createdAt }
        // A batch that completed but whose batch.done was not delivered (the process stopped first).
        self.pendingNotifications = loaded.filter { id, batch in
            batch.complete && batch.record.callbackURL != nil
                && !FileManager.default.fileExists(atPath: "\(directory)/\(id)/notified")
        }.map(\.0)
        self.state.withLock { state in
            for (id, batch) in loaded {
                state.batches[id] = batch
                state.order.append(id)
            }
        }
    }

    /// Batches known (tests read it).
    var count: Int { self.state.withLock { $0.batches.count } }

    /// Records a new batch and queues its URLs. - Returns: its id.
    package func submit(_ request: BatchRequest) throws -> String {
        let id = BatchID.random()
        let folder = self.folder(id)
        let record: BatchRecord
        do {
            record = try folder.create(request)
        } catch {
            try? FileManager.default.removeItem(atPath: folder.path)
            throw error
        }
        self.state.withLock { state in
            state.batches[id] = Batch(record: record)
            state.order.append(id)
        }
        self.wakeup.signal()
        return id
    }

    package func status(_ id: String) -> BatchStatus? {
        self.state.withLock { state in
            guard let batch = state.batches[id] else { return nil }
            return BatchStatus(
                id: id, total: batch.total, counts: batch.counts, complete: batch.complete,
                createdAt: batch.record.createdAt)
        }
    }

    /// Result lines `offset..<offset+limit` in the order they finished. - Returns: nil for an unknown batch.
    package func results(_ id: String, offset: Int, limit: Int) -> (lines: [[UInt8]], total: Int)? {
        guard self.state.withLock({ $0.batches[id] != nil }) else { return nil }
        return self.folder(id).results(offset: offset, limit: limit)
    }

    private func folder(_ id: String) -> BatchFolder { BatchFolder(path: "\(self.directory)/\(id)") }

    // MARK: Running

    /// Starts batch items whenever a worker is idle, until shutdown.
    package func run() async throws {
        for id in self.pendingNotifications { self.notify(id) }
        var swept = ContinuousClock.now
        await withDiscardingTaskGroup { group in
            while !Task.isCancelled, !Task.isShuttingDownGracefully, self.service.pool.isAccepting {
                if ContinuousClock.now - swept > .seconds(1) {
                    self.deleteExpired()
                    swept = ContinuousClock.now
                }
                // The item holds its worker's slot from its start (the pool's `load` counts it before the next look),
                // and its job's admission takes the slot over.
                if let (id, index, slot) = self.nextItem() {
                    group.addTask {
                        await TranscodePool.withReservation(slot) {
                            // One trace per item: its download, conversion and storage are the item's spans.
                            await Traces.span("batch.item", attributes: ["batch.id": id, "batch.item": String(index)]) {
                                await self.runItem(id: id, index: index)
                            }
                        }
                        // Its place in the batches' share is free now. Its job's slot was released a moment before the
                        // item recorded its line, and the wake-up that release gave may have found the item running.
                        self.wakeup.signal()
                    }
                    continue
                }
                // Nothing to start (no idle worker, or no item): until a slot is released, an item ends or a batch
                // comes, and at least every 250 ms (a pause ends, expired batches go). It used to look every 25 ms.
                await self.wakeup.wait(upTo: 0.25)
            }
        }
    }

    /// The next item to start, claimed, with a slot reserved for it, when a worker is idle and batches hold fewer
    /// than their share.
    private func nextItem() -> (String, Int, TranscodePool.Reservation)? {
        let pool = self.service.pool
        guard pool.load < pool.workers, let (id, index) = self.claimItem(share: max(1, pool.workers - 1)) else {
            return nil
        }
        guard let slot = pool.reserve() else {
            self.release(id: id, index: index)
            return nil
        }
        return (id, index, slot)
    }

    private func claimItem(share: Int) -> (String, Int)? {
        self.state.withLock { state -> (String, Int)? in
            guard state.running < share else { return nil }
            if let until = state.pausedUntil, ContinuousClock.now < until { return nil }
            for id in state.order {
                guard var batch = state.batches[id] else { continue }
                // Past what is finished and what is running: an item given back (`release`) rewinds `next` to
                // itself, behind items after it that may still run.
                while batch.next < batch.total, batch.isFinished(batch.next) || batch.running.contains(batch.next) {
                    batch.next += 1
                }
                guard batch.next < batch.total else {
                    state.batches[id] = batch
                    continue
                }
                let index = batch.next
                batch.next += 1
                batch.running.insert(index)
                state.batches[id] = batch
                state.running += 1
                return (id, index)
            }
            return nil
        }
    }

    private func runItem(id: String, index: Int) async {
        guard let request = self.state.withLock({ $0.batches[id]?.record }) else {
            // Deleted since it was claimed: its place is given back.
            self.release(id: id, index: index)
            return
        }
        guard let text = self.folder(id).url(at: index) else {
            // Deleted meanwhile, or its URL files damaged: a batch still here records the item failed, so that it is
            // not taken again and again ahead of every later item.
            guard self.state.withLock({ $0.batches[id] != nil }) else { return self.release(id: id, index: index) }
            self.logger.error(
                "a batch's URL cannot be read", metadata: ["batch.id": "\(id)", "batch.item": "\(index)"])
            var result = BatchResult(index: index, url: "", status: .failed)
            result.error = ReportedFailure(
                code: .internal, message: "this item's URL could not be read from the batch's files")
            return self.record(result, batch: id)
        }
        var result = BatchResult(index: index, url: text, status: .failed)
        do {
            let url = try Downloader.validate(text)
            let options = try BatchItemRules.options(
                background: request.background, output: request.outputKind, service: self.service)
            let keys = SourceKeys(url: url, options: options)
            // The item's end is heard from its job, whatever the request answers (a job id, after the wait).
            let ended = JobSubscription()
            _ = try? await self.service.transcode(
                url: url, options: options, keys: keys, subscriber: ended, priority: .backfill)
            // Its job was admitted by now (taking the slot over), or never will be (a hit, a failure, a job joined).
            self.service.pool.endReservation()
            let outcome: TranscodeOutcome
            switch await ended.end() {
            case .done(let done): outcome = done
            case .failed(let failure): throw failure
            }
            result = BatchItemRules.line(
                index: index, url: text, status: ItemStatus(outcome), key: outcome.key,
                recommendation: outcome.metadata.recommendation.rawValue, error: nil, output: request.outputKind,
                background: request.background, links: self.links)
        } catch {
            let failure = ServiceError.from(error)
            // Not the URL's failure: shutting down (it runs again after the restart), the shared store down, the
            // queue full. The item goes back, and no item starts for a while.
            if BatchItemRules.passes(failure) || Task.isCancelled {
                self.release(id: id, index: index)
                self.state.withLock { $0.pausedUntil = ContinuousClock.now + .seconds(2) }
                return
            }
            result.error = ReportedFailure(failure)
        }
        self.record(result, batch: id)
    }

    private func record(_ result: BatchResult, batch id: String) {
        // One line per item: an item already recorded, or a batch deleted meanwhile, records nothing more.
        let recordable = self.state.withLock { state -> Bool in
            guard let batch = state.batches[id], !batch.isFinished(result.index) else {
                state.batches[id]?.running.remove(result.index)
                state.running -= 1
                return false
            }
            return true
        }
        guard recordable else { return }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        if var line = try? encoder.encode(result) {
            line.append(UInt8(ascii: "\n"))
            let folder = self.folder(id)
            guard folder.append(result: [UInt8](line)) else {
                // Not recorded (a full disk): the item runs again, here or after a restart; a partial line is
                // cut off at startup.
                self.logger.error(
                    "cannot record a batch result", metadata: ["batch.id": "\(id)", "file": "\(folder.resultsPath)"])
                self.release(id: id, index: result.index)
                self.state.withLock { $0.pausedUntil = ContinuousClock.now + .seconds(5) }
                return
            }
        }
        let completed = self.state.withLock { state -> Bool in
            state.running -= 1
            guard var batch = state.batches[id] else { return false }
            batch.running.remove(result.index)
            let recorded = batch.finish(result.index, status: result.status)
            state.batches[id] = batch
            return recorded && batch.complete
        }
        if completed { self.notify(id) }
    }

    /// Queues the `batch.done` webhook of a complete batch; `notified` is written once it is over, so a
    /// restart before then sends it again.
    private func notify(_ id: String) {
        guard let record = self.state.withLock({ $0.batches[id]?.record }), let callback = record.callbackURL,
            let url = URL(string: callback), let status = self.status(id)
        else { return }
        let marker = "\(self.directory)/\(id)/notified"
        self.webhooks.enqueue(
            WebhookDelivery(url: url, onEnd: { _ = FileManager.default.createFile(atPath: marker, contents: nil) }) {
                let data = (try? JSONEncoder().encode(status)).map { [UInt8]($0) } ?? Array("{}".utf8)
                return ("batch.done", data)
            })
    }

    /// Deletes batch `id`: its record on disk and in memory. Items of it still running finish and record
    /// nothing. - Returns: whether there was such a batch.
    @discardableResult
    package func delete(_ id: String) -> Bool {
        guard BatchID.isValid(id) else { return false }
        let existed = self.state.withLock { state in
            state.order.removeAll { $0 == id }
            return state.batches.removeValue(forKey: id) != nil
        }
        if existed { try? FileManager.default.removeItem(atPath: "\(self.directory)/\(id)") }
        return existed
    }

    /// Deletes the complete batches created more than `retentionSeconds` ago.
    func deleteExpired(now: Date = Date()) {
        let expired = self.state.withLock { state in
            state.batches.filter { _, batch in
                batch.complete && now.timeIntervalSince1970 - batch.record.createdAt > self.retentionSeconds
            }.map(\.key)
        }
        for id in expired {
            self.delete(id)
            self.logger.info("batch deleted after its retention", metadata: ["batch.id": "\(id)"])
        }
    }

    /// Gives an unfinished item back to the queue.
    private func release(id: String, index: Int) {
        self.state.withLock { state in
            state.running -= 1
            guard var batch = state.batches[id] else { return }
            batch.running.remove(index)
            batch.next = min(batch.next, index)
            state.batches[id] = batch
        }
    }
}
