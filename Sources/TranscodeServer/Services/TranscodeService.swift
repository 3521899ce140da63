import Foundation
import Logging
import NIOPosix
import Synchronization
import Transcoder

/// A finished transcode: the object's key and its metadata.
struct TranscodeOutcome: Sendable {
    let key: ObjectKey
    let metadata: TranscodeMetadata
    /// On a cache hit, the object's files as checked and held open: served without checking them again.
    var object: DiskCache.CheckedObject? = nil
}

/// The cache's names for a URL converted with some options: its normalized form, the link's key and the
/// hash every option variant shares (purge index, tombstones).
struct SourceKeys: Sendable {
    let normalized: NormalizedURL
    let urlKey: URLKey
    let sourceHash: SourceHash
    /// The URL's host as the downloader remembers its decisions (`Downloader.bareHost`): read once, not by
    /// every cache hit answered from memory (parsing the URL again was a visible part of one).
    let host: String

    init(url: URL, options: TranscodeOptions) {
        self.host = Downloader.bareHost(url)
        self.normalized = NormalizedURL(url)
        self.urlKey = URLKey(self.normalized, options: options)
        self.sourceHash = SourceHash(self.normalized)
    }
}

/// What `POST /transcode` gets back: the result, or a job to poll when the wait budget ran out.
enum TranscodeAnswer: Sendable {
    case done(TranscodeOutcome, cacheHit: Bool)
    case pending(jobID: String)
}

/// The state of a job, for `GET /jobs/{id}`.
enum JobState: Sendable {
    case pending
    case done(TranscodeOutcome)
    case failed(ServiceError)
}

/// What the service has done so far, as tests read it (the Prometheus counters are for operators).
struct ServiceCounters: Sendable {
    var downloads = 0
    var transcodes = 0
    var cacheHits = 0
    var dedupeJoins = 0
    /// Revalidations by result (`not-modified`, `same-bytes`, `changed`, `failed`).
    var revalidations: [String: Int] = [:]
    /// Operations on the shared result store (`pull`, `publish`).
    var storage: [String: Int] = [:]
    /// Webhook deliveries by result (`delivered`, `retried`, `failed`, `refused`).
    var webhooks: [String: Int] = [:]
}

/// Turns requests into cached results: cache lookup, single-flight per request, download, content
/// addressing, and the transcode on the pool.
///
/// A request key is the URL key (normalized URL + output options) or, for an uploaded GIF, the content
/// key. Jobs are identified by their request key, so `GET /jobs/{id}` needs no table of its own beyond
/// the recent failures.
final class TranscodeService: Sendable {
    let cache: DiskCache
    /// The results a fleet shares (S3), nil on a single node.
    let shared: SharedResults?
    let downloader: Downloader
    let pool: TranscodePool
    let defaultOptions: TranscodeOptions
    let syncWaitSeconds: Double
    /// How long a URL's result is served before the origin is asked again (`cache.urlTTLSeconds`).
    let urlTTLSeconds: Double
    /// How long past its TTL a URL's result may still be served while its origin fails
    /// (`cache.staleIfErrorSeconds`).
    let staleIfErrorSeconds: Double
    /// After a failed revalidation, the stored result is served without asking the origin for this long.
    static var revalidationBackoffSeconds: Double { 60 }
    let logger: Logger
    /// Whether something may be converted or served: the one takedown rule, here and in a fleet.
    let takedowns: Takedowns

    private let requests = SingleFlight<String, TranscodeOutcome>()
    private let contents = SingleFlight<String, TranscodeMetadata>()
    private let failures = Mutex<[String: (error: ServiceError, at: Date)]>([:])
    let metrics: ServiceMetrics

    init(
        cache: DiskCache, downloader: Downloader, pool: TranscodePool, defaultOptions: TranscodeOptions,
        syncWaitSeconds: Double, urlTTLSeconds: Double = 86400, staleIfErrorSeconds: Double = 604_800,
        shared: SharedResults? = nil, metrics: ServiceMetrics, logger: Logger
    ) {
        self.shared = shared
        self.takedowns = Takedowns(cache: cache, shared: shared)
        self.urlTTLSeconds = urlTTLSeconds
        self.staleIfErrorSeconds = staleIfErrorSeconds
        self.metrics = metrics
        self.cache = cache
        self.downloader = downloader
        self.pool = pool
        self.defaultOptions = defaultOptions
        self.syncWaitSeconds = syncWaitSeconds
        self.logger = logger
    }

    var counters: ServiceCounters { self.metrics.counters }

    /// The options of one request: the defaults with the request's background, if it gave one.
    func options(background: RGBColor?) -> TranscodeOptions {
        var options = self.defaultOptions
        if let background { options.background = background }
        return options
    }

    /// Converts the GIF at `url`, or answers from the cache while the URL is fresh (fetched or revalidated
    /// less than `urlTTLSeconds` ago). A stale URL is revalidated with the origin under the single flight:
    /// a 304 keeps the object, new bytes make a new object and move the link; when the origin fails
    /// (5xx, timeout) the stored result is served and the next request tries again.
    /// - Parameter untilDone: wait for the result however long it takes (`GET /v1/...`, which a `<video>`
    ///   cannot poll), instead of answering `pending` after `syncWaitSeconds`.
    /// - Parameter keys: the URL's keys, when the caller has them already (`SourceKeys(url:options:)`).
    func transcode(
        url: URL, options: TranscodeOptions, untilDone: Bool = false, keys: SourceKeys? = nil
    ) async throws -> TranscodeAnswer {
        let keys = keys ?? SourceKeys(url: url, options: options)
        let normalized = keys.normalized
        let urlKey = keys.urlKey
        let sourceHash = keys.sourceHash
        if try await self.takedowns.isBuried([.source(sourceHash)], recently: true) {
            throw ServiceError.takenDown("this URL was taken down")
        }
        var found: TranscodeOutcome?
        if let key = self.cache.lookup(urlKey: urlKey), let object = self.cache.verifiedObject(key) {
            try await self.takedowns.check(key, metadata: object.metadata, recently: true)
            // The policy of today decides, not the one the URL was fetched under.
            try await self.downloader.checkCachedDestination(url)
            try await self.shared?.publishIfPending(key)
            if let age = self.cache.linkAge(urlKey: urlKey), age < self.urlTTLSeconds {
                self.metrics.cacheHit()
                return .done(TranscodeOutcome(key: key, metadata: object.metadata, object: object), cacheHit: true)
            }
            found = TranscodeOutcome(key: key, metadata: object.metadata)
        }
        let storedResult = found
        return try await self.run(requestKey: urlKey.rawValue, untilDone: untilDone) {
            var stale = storedResult
            if stale == nil, let shared = self.shared, let link = try await shared.link(urlKey: urlKey) {
                // Another node fetched it under its policy; this node's decides here too.
                try await self.downloader.checkCachedDestination(url)
                // Another node (or this one, before a restart) converted this URL: its result, unless the URL
                // is due for revalidation.
                if let outcome = try await self.adopt(link, urlKey: urlKey) {
                    let validated = link.source?.validatedAt ?? 0
                    let age = max(0, Date().timeIntervalSince1970 - validated)
                    self.cache.renewLink(urlKey: urlKey, age: age)
                    if age < self.urlTTLSeconds { return outcome }
                    stale = outcome
                }
            }
            let record = stale == nil ? nil : self.cache.sourceRecord(urlKey: urlKey)
            let fetched: Fetched
            do {
                fetched = try await self.downloader.fetch(url, etag: record?.etag, lastModified: record?.lastModified)
            } catch let error as ServiceError where stale != nil {
                return try await self.revalidationFailed(error, stale: stale!, urlKey: urlKey, record: record)
            }
            let file: DownloadedFile
            switch fetched {
            case .notModified:
                guard let stale else { throw ServiceError.originError("the origin answered 304 to a plain GET") }
                if var record {
                    record.validatedAt = Date().timeIntervalSince1970
                    try? self.cache.writeSource(record, urlKey: urlKey, key: stale.key)
                    try? await self.shared?.putLink(urlKey: urlKey, ResultLink(key: stale.key, source: record))
                }
                self.cache.renewLink(urlKey: urlKey)
                self.metrics.revalidated(.notModified)
                return stale
            case .file(let downloaded):
                file = downloaded
            }
            defer { unlink(file.path) }
            self.metrics.downloaded(bytes: file.byteCount)
            // Reading and hashing up to 50 MB is blocking work: off the async executor, on the shared I/O
            // pool (not the transcode pool, where it would queue behind running transcodes).
            let (gif, content) = try await NIOThreadPool.singleton.runIfActive {
                guard let data = FileManager.default.contents(atPath: file.path) else {
                    throw ServiceError.internal("the downloaded file vanished")
                }
                let gif = [UInt8](data)
                return (gif, ObjectKey.derive(source: gif, options: options))
            }
            if try await self.takedowns.isBuried([.gif(content.source), .object(content.key)]) {
                throw ServiceError.takenDown("this GIF was taken down")
            }
            let outcome = try await self.store(gif, key: content.key, options: options, requestKey: urlKey.rawValue)
            if stale != nil { self.metrics.revalidated(outcome.key == stale?.key ? .sameBytes : .changed) }
            // A takedown of the URL that arrived while this flight downloaded and converted: what it made goes
            // too, and is refused from now on.
            if try await self.takedowns.isBuried([.source(sourceHash)]) {
                let reason = "taken down while being converted"
                if var report = try? self.cache.purge(key: outcome.key, takedown: reason) {
                    // Published already: the fleet's copy goes too.
                    try? await self.shared?.purge(
                        objects: [outcome.key], links: [], source: sourceHash, takedown: reason, into: &report)
                }
                throw ServiceError.takenDown("this URL was taken down")
            }
            let source = DiskCache.SourceRecord(
                url: normalized.text, etag: file.etag, lastModified: file.lastModified,
                validatedAt: Date().timeIntervalSince1970)
            try self.cache.link(urlKey: urlKey, to: outcome.key, source: source)
            try await self.shared?.putLink(urlKey: urlKey, ResultLink(key: outcome.key, source: source))
            return outcome
        }
    }

    /// A revalidation the origin did not answer: the stored result stays in service (stale-if-error) when
    /// the origin is down or slow; a URL the origin no longer has, or may no longer be fetched, fails.
    private func revalidationFailed(
        _ error: ServiceError, stale: TranscodeOutcome, urlKey: URLKey, record: DiskCache.SourceRecord?
    ) async throws -> TranscodeOutcome {
        switch error.code {
        case .originError, .originTimeout:
            self.metrics.revalidated(.failed)
            // Stale for too long: the origin has been failing past the grace; answer its error.
            let now = Date().timeIntervalSince1970
            let validated = record?.validatedAt ?? (now - (self.cache.linkAge(urlKey: urlKey) ?? .infinity))
            guard now - validated < self.urlTTLSeconds + self.staleIfErrorSeconds else { throw error }
            self.logger.warning(
                "revalidation failed; serving the stored result",
                metadata: ["request.key": "\(urlKey.rawValue.prefix(16))", "error.code": "\(error.code)"])
            // Back off: the next minute's requests are answered from the cache at once instead of each waiting
            // for the failing origin. The grace counts from the last validation, which this does not move.
            let backoff = min(Self.revalidationBackoffSeconds, self.urlTTLSeconds)
            self.cache.renewLink(urlKey: urlKey, age: self.urlTTLSeconds - backoff)
            return stale
        case .originNotFound, .originRefused:
            self.cache.removeLink(urlKey: urlKey)
            try? await self.shared?.deleteLink(urlKey: urlKey)
            throw error
        default:
            throw error
        }
    }

    /// Converts an uploaded GIF.
    /// - Parameter untilDone: wait however long it takes (a webhook's event) instead of answering `pending`.
    func transcode(upload gif: [UInt8], options: TranscodeOptions, untilDone: Bool = false) async throws
        -> TranscodeAnswer
    {
        let keys = try await NIOThreadPool.singleton.runIfActive { ObjectKey.derive(source: gif, options: options) }
        if try await self.takedowns.isBuried([.gif(keys.source), .object(keys.key)], recently: true) {
            throw ServiceError.takenDown("this GIF was taken down")
        }
        let key = keys.key
        if let metadata = self.cache.metadata(key) {
            try await self.shared?.publishIfPending(key)
            self.metrics.cacheHit()
            return .done(TranscodeOutcome(key: key, metadata: metadata), cacheHit: true)
        }
        return try await self.run(requestKey: key.rawValue, untilDone: untilDone) {
            try await self.store(gif, key: key, options: options, requestKey: key.rawValue)
        }
    }

    /// Where job `id` stands.
    func job(_ id: String) async -> JobState? {
        // A job's id is its request key: a URL key or, for an upload, an object key (both a SHA-256).
        guard let urlKey = URLKey(id), let objectKey = ObjectKey(id) else { return nil }
        if await self.requests.isRunning(id) { return .pending }
        if let key = self.cache.lookup(urlKey: urlKey) ?? (self.cache.contains(objectKey) ? objectKey : nil),
            let metadata = self.cache.metadata(key)
        {
            return .done(TranscodeOutcome(key: key, metadata: metadata))
        }
        if let failure = self.failures.withLock({ $0[id] }) { return .failed(failure.error) }
        // A job another node ran: its URL link or its object in the shared store.
        if let shared = self.shared {
            if let link = try? await shared.link(urlKey: urlKey),
                let outcome = try? await self.adopt(link, urlKey: urlKey)
            {
                return .done(outcome)
            }
            if let metadata = try? await shared.pull(objectKey) {
                return .done(TranscodeOutcome(key: objectKey, metadata: metadata))
            }
        }
        return nil
    }

    /// The metadata of `url`'s result when this node has it already (a rewrite's sizes and loop counts).
    func cachedMetadata(url: URL, options: TranscodeOptions) -> TranscodeMetadata? {
        let keys = SourceKeys(url: url, options: options)
        return self.cache.lookup(urlKey: keys.urlKey).flatMap { self.cache.metadata($0) }
    }

    // MARK: The shared store

    /// The object the URL of `keys` leads to, when a hit needs no `await` (`MediaHitHandler`): the URL not
    /// taken down in a fleet by a recent "no" of the store, its link fresh, its host's policy decision
    /// remembered as allowed, the object not waiting to be published. `nil` leaves the request to
    /// `transcode(url:...)`, which decides everything afresh. The object's own checks, and the URL's local
    /// tombstone (`DiskCache.Tombstone.source`, asked with the object's in one look), are the caller's.
    func freshHitKey(keys: SourceKeys) -> ObjectKey? {
        guard self.takedowns.isURLClearNow(keys.sourceHash),
            let (key, age) = self.cache.freshLink(urlKey: keys.urlKey), age < self.urlTTLSeconds,
            self.downloader.isRememberedAllowed(host: keys.host), self.shared?.isUnpublished(key) != true
        else { return nil }
        return key
    }

    /// Follows a link of the shared store: the object onto the local disk, the link beside it.
    /// - Returns: nil when the object is gone from the store.
    private func adopt(_ link: ResultLink, urlKey: URLKey) async throws -> TranscodeOutcome? {
        guard let shared = self.shared else { return nil }
        if try await self.takedowns.isBuried([.object(link.key)]) {
            throw ServiceError.takenDown("this was taken down")
        }
        var metadata = self.cache.metadata(link.key)
        if metadata == nil { metadata = try await shared.pull(link.key) }
        guard let metadata else { return nil }
        try await self.takedowns.check(link.key, metadata: metadata)
        try self.cache.link(urlKey: urlKey, to: link.key, source: link.source)
        return TranscodeOutcome(key: link.key, metadata: metadata)
    }

    // MARK: -

    /// Joins or starts the single flight for `requestKey`, and waits for it up to the sync budget.
    private func run(
        requestKey: String, untilDone: Bool, operation: @escaping @Sendable () async throws -> TranscodeOutcome
    ) async throws -> TranscodeAnswer {
        self.metrics.cacheMiss()
        // Admission is claimed when a flight starts (joining costs nothing), before any download: a full
        // queue is refused at once.
        let (task, joined) = try await self.requests.task(for: requestKey, admit: { try self.pool.admit() }) {
            admission in
            defer { admission.release() }
            do {
                let outcome = try await operation()
                self.failures.withLock { $0[requestKey] = nil }
                return outcome
            } catch {
                self.recordFailure(requestKey, ServiceError.from(error))
                throw error
            }
        }
        if joined {
            self.metrics.joined()
        }

        if untilDone {
            return .done(try await task.value, cacheHit: false)
        }
        guard let result = await Self.wait(for: task, upTo: self.syncWaitSeconds) else {
            return .pending(jobID: requestKey)
        }
        let outcome = try result.get()
        return .done(outcome, cacheHit: false)
    }

    /// The task's result, or nil when `seconds` pass first. Waiting ends at the deadline even though the
    /// task goes on (awaiting `Task.value` cannot be interrupted, so a task group would wait for it): a
    /// watcher, which lives exactly as long as the job, and a timer race to resume one continuation.
    static func wait<Value: Sendable>(
        for task: Task<Value, any Error>, upTo seconds: Double
    ) async -> Result<Value, any Error>? {
        let pending = ResumeOnce<Result<Value, any Error>?>()
        return await withCheckedContinuation { continuation in
            pending.set(continuation)
            let timer = Task {
                // Cancelled means the result came first: only a timer that ran its course answers "pending".
                // (A cancelled sleep throws at once; resuming then raced the result, and a GIF that failed in
                // a millisecond was answered 202 now and then: found by scripts/soak.)
                guard (try? await Task.sleep(for: .milliseconds(Int64(seconds * 1000)))) != nil else { return }
                pending.resume(returning: nil)
            }
            Task {
                let result = await task.result
                pending.resume(returning: result)
                timer.cancel()
            }
        }
    }

    /// Converts `gif` into its content-addressed object, once per content key however many requests
    /// (or URLs) bring the same bytes.
    private func store(
        _ gif: [UInt8], key: ObjectKey, options: TranscodeOptions, requestKey: String
    ) async throws -> TranscodeOutcome {
        if let metadata = self.cache.metadata(key) {
            try await self.shared?.publishIfPending(key)
            return TranscodeOutcome(key: key, metadata: metadata)
        }
        let (task, _) = try await self.contents.task(for: key.rawValue, admit: {}) { _ in
            // In a fleet, the same bytes may have come to another node (an upload, another URL).
            if let metadata = try await self.shared?.pull(key) { return metadata }
            let started = ContinuousClock.now
            let metadata = try await self.pool.run {
                // Another flight of the same bytes (another URL, an upload) may have stored it meanwhile.
                if let existing = self.cache.metadata(key) { return existing }
                // Rendered beside the cache and committed by it: the transcoder writes nothing in objects/.
                let scratch = try self.cache.makeScratchDirectory("render")
                defer { try? FileManager.default.removeItem(atPath: scratch) }
                let rendered = try Transcoder(options: options).render(gif, into: scratch, name: key.rawValue)
                try self.cache.commit(key, rendered)
                return rendered.metadata
            }
            let elapsed = ContinuousClock.now - started
            self.metrics.transcoded(
                duration: elapsed, savedBytes: max(0, metadata.sourceBytes - metadata.mp4Bytes),
                reencodes: max(0, (metadata.sizeGuard?.attempts.count ?? 1) - 1))
            self.logger.info(
                "transcoded",
                metadata: [
                    "request.key": "\(requestKey.prefix(16))", "object.key": "\(key.rawValue.prefix(16))",
                    "source.format": "\(metadata.sourceFormat.rawValue)",
                    "source.frames": "\(metadata.sourceFrameCount)", "transcode.ms": "\(elapsed.milliseconds)",
                    "source.bytes": "\(metadata.sourceBytes)", "mp4.bytes": "\(metadata.mp4Bytes)",
                ])
            // Published before anyone is answered: a result the fleet cannot find is no result.
            try await self.shared?.publish(key)
            return metadata
        }
        return TranscodeOutcome(key: key, metadata: try await task.value)
    }

    /// Failures kept for `GET /jobs/{id}`: enough for clients polling a job, bounded however many bad
    /// requests arrive (scripts/soak sent 120,000 not-a-GIF uploads in 30 minutes, and every one was kept).
    static var maxRecordedFailures: Int { 10_000 }

    private func recordFailure(_ key: String, _ error: ServiceError) {
        let now = Date()
        self.failures.withLock { failures in
            if failures.count >= Self.maxRecordedFailures {
                // Keep the newer half: amortised, one sort per 5,000 failures.
                let newer = failures.sorted { $0.value.at > $1.value.at }.prefix(Self.maxRecordedFailures / 2)
                failures = Dictionary(uniqueKeysWithValues: newer.map { ($0.key, $0.value) })
            }
            failures[key] = (error, now)
        }
    }

    /// Failures currently kept (tests read it).
    var recordedFailures: Int { self.failures.withLock { $0.count } }
}

/// A continuation resumed by whichever of several racers comes first; the others find it gone.
private final class ResumeOnce<Value: Sendable>: Sendable {
    private let continuation = Mutex<CheckedContinuation<Value, Never>?>(nil)

    func set(_ continuation: CheckedContinuation<Value, Never>) {
        self.continuation.withLock { $0 = continuation }
    }

    func resume(returning value: Value) {
        self.continuation.withLock { $0.take() }?.resume(returning: value)
    }
}

extension Duration {
    /// Whole milliseconds, for log lines.
    var milliseconds: Int64 {
        self.components.seconds * 1000 + self.components.attoseconds / 1_000_000_000_000_000
    }
}
