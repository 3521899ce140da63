import Foundation
import Logging
import NIOPosix
import Synchronization
import Transcoder

/// A finished transcode: the object's key and its metadata.
package struct TranscodeOutcome: Sendable {
    package let key: ObjectKey
    package let metadata: TranscodeMetadata
    /// On a cache hit, the object's files as checked and held open: served without checking them again.
    package var object: LocalObjects.CheckedObject? = nil

    package init(key: ObjectKey, metadata: TranscodeMetadata, object: LocalObjects.CheckedObject? = nil) {
        self.key = key
        self.metadata = metadata
        self.object = object
    }

    /// The same outcome without the files held open: what is kept for later (a job's end told to a subscriber, a
    /// job's result), so that no descriptor outlives the answer that needed it.
    var withoutFiles: TranscodeOutcome { TranscodeOutcome(key: self.key, metadata: self.metadata) }
}

/// The cache's names for a URL converted with some options: its normalized form, the link's key and the
/// hash every option variant shares (purge index, tombstones).
package struct SourceKeys: Sendable {
    let normalized: NormalizedURL
    package let urlKey: URLKey
    let sourceHash: SourceHash
    /// The URL's host as the downloader remembers its decisions (`Downloader.bareHost`): read once, not by
    /// every cache hit answered from memory (parsing the URL again was a visible part of one).
    let host: String

    package init(url: URL, options: TranscodeOptions) {
        self.host = Downloader.bareHost(url)
        self.normalized = NormalizedURL(url)
        self.urlKey = URLKey(self.normalized, options: options)
        self.sourceHash = SourceHash(self.normalized)
    }
}

/// What `POST /transcode` gets back: the result, or a job to poll when the wait budget ran out.
package enum TranscodeAnswer: Sendable {
    case done(TranscodeOutcome, cacheHit: Bool)
    case pending(jobID: String)
}

/// The state of a job, for `GET /jobs/{id}`: still running somewhere, or ended as its subscribers hear it.
package enum JobState: Sendable {
    case pending
    case ended(JobEnd)

    static func done(_ outcome: TranscodeOutcome) -> JobState { .ended(.done(outcome)) }
    static func failed(_ failure: ServiceError) -> JobState { .ended(.failed(failure)) }
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
    /// The fleet queue's claims (`claimed`), retries (`retried`) and dead letters (`dead`).
    var queue: [String: Int] = [:]
    /// `.auto` answers that redirected to the source, by reason (`AutoFallback.label`).
    var autoFallbacks: [String: Int] = [:]
}

/// Turns requests into cached results: the cache's answer when it has a fresh one (`SourceResolver`),
/// otherwise a job (`TranscodeJobs`) that downloads and converts (`TranscodeWork`), waited for up to the sync
/// budget. A request's subscriber (a webhook, a batch item) is told how it ends: at once for a hit or a refusal,
/// by the job otherwise.
///
/// A request key is the URL key (normalized URL + output options) or, for an uploaded GIF, the content
/// key. Jobs are identified by their request key, so `GET /jobs/{id}` needs no table of its own beyond
/// the recent failures.
package final class TranscodeService: Sendable {
    /// This node's disk, read through to the fleet's shared store.
    package let results: ReadThroughResults
    let downloader: Downloader
    package let pool: TranscodePool
    package let defaultOptions: TranscodeOptions
    let syncWaitSeconds: Double
    package let logger: Logger
    /// Whether something may be converted or served: the one takedown rule, here and in a fleet.
    let takedowns: Takedowns
    /// What the cache has for a URL, and the revalidation policy.
    let resolver: SourceResolver
    /// Where the work runs.
    package let jobs: any TranscodeJobs
    package let metrics: ServiceMetrics
    /// The clients' token buckets (`quota.limits`): a request that spends work takes a token first.
    let quotas: ClientQuotas

    package init(
        cache: DiskCache, downloader: Downloader, pool: TranscodePool, defaultOptions: TranscodeOptions,
        syncWaitSeconds: Double, urlTTLSeconds: Double, staleIfErrorSeconds: Double,
        originFailureTTL: SourceResolver.OriginFailureTTL = .init(), shared: SharedResults? = nil,
        contentLocks: (any ContentLocks)? = nil,
        jobs makeJobs: (InProcessJobs) -> any TranscodeJobs = { $0 },
        quotas: ClientQuotas = ClientQuotas(policies: [:]),
        metrics: ServiceMetrics, logger: Logger
    ) {
        self.quotas = quotas
        self.results = ReadThroughResults(local: cache, shared: shared)
        self.takedowns = self.results.takedowns
        self.metrics = metrics
        self.downloader = downloader
        self.pool = pool
        self.defaultOptions = defaultOptions
        self.syncWaitSeconds = syncWaitSeconds
        self.logger = logger
        self.resolver = SourceResolver(
            results: self.results, downloader: downloader, urlTTLSeconds: urlTTLSeconds,
            staleIfErrorSeconds: staleIfErrorSeconds, originFailureTTL: originFailureTTL, metrics: metrics,
            logger: logger)
        let work = TranscodeWork(
            results: self.results, downloader: downloader, pool: pool, resolver: self.resolver,
            contentLocks: contentLocks,
            defaultBox: (defaultOptions.maxOutputWidth, defaultOptions.maxOutputHeight), metrics: metrics,
            logger: logger)
        self.jobs = makeJobs(InProcessJobs(pool: pool, performer: work, metrics: metrics))
    }

    var counters: ServiceCounters { self.metrics.counters }

    /// This node's disk.
    var cache: DiskCache { self.results.local }

    /// How long a URL's result is served before the origin is asked again (`cache.urlTTLSeconds`).
    var urlTTLSeconds: Double { self.resolver.urlTTLSeconds }

    /// The options of one request: the defaults with the request's background, if it gave one, its box (a
    /// rendition: `maxWidth` x `maxHeight` within the configured box; the video fits inside, never upscaled), and
    /// whether it is a preview (`RenditionSpec.previewSeconds`).
    package func options(
        background: RGBColor?, maxWidth: Int? = nil, maxHeight: Int? = nil, previewSeconds: Int? = nil,
        extraFormats: [OutputFormat] = []
    ) -> TranscodeOptions {
        var options = self.defaultOptions
        if let background { options.background = background }
        options.rendition.previewSeconds = previewSeconds
        if let maxWidth { options.maxOutputWidth = min(options.maxOutputWidth, maxWidth) }
        if let maxHeight { options.maxOutputHeight = min(options.maxOutputHeight, maxHeight) }
        options.rendition = options.rendition.withExtraFormats(extraFormats)
        return options
    }

    /// Converts the GIF at `url`, or answers from the cache while the URL is fresh (fetched or revalidated
    /// less than `urlTTLSeconds` ago). A stale URL is revalidated with the origin in its job.
    /// - Parameter untilDone: wait for the result however long it takes (`GET /v1/...`, which a `<video>`
    ///   cannot poll), instead of answering `pending` after `syncWaitSeconds`.
    /// - Parameter keys: the URL's keys, when the caller has them already (`SourceKeys(url:options:)`).
    /// - Parameter subscriber: told how this request ends, however long its job takes.
    /// - Parameter priority: where its job waits among others for a worker (`TranscodePool`).
    /// - Parameter waitSeconds: how long to wait instead of `syncWaitSeconds` (0: queue it and answer `pending`).
    package func transcode(
        url: URL, options: TranscodeOptions, untilDone: Bool = false, keys: SourceKeys? = nil,
        subscriber: JobSubscription? = nil, priority: JobPriority = .interactive, waitSeconds: Double? = nil
    ) async throws -> TranscodeAnswer {
        let keys = keys ?? SourceKeys(url: url, options: options)
        return try await Self.telling(subscriber) {
            if case .fresh(let outcome) = try await self.resolver.resolve(url, keys: keys) {
                self.metrics.cacheHit()
                return .done(outcome, cacheHit: true)
            }
            // The origin failed this URL a moment ago: its answer again, without asking it (a failing origin is
            // not asked once per request).
            // In a fleet another node may have converted it since: then the job below adopts that result.
            if let failure = self.resolver.cachedFailure(self.jobs.failure(of: keys.urlKey.rawValue)),
                case .miss = try await self.resolver.resolveShared(url, keys: keys)
            {
                self.metrics.cacheMiss()
                throw failure
            }
            self.metrics.cacheMiss()
            // What a reader waits for is charged to its client; upgrades and batch items are the service's own
            // scheduling (they wait behind readers instead).
            let charge = priority == .interactive ? try await self.chargeQuota() : nil
            let job = TranscodeJob(
                id: keys.urlKey.rawValue, source: .url(url.absoluteString), options: options, priority: priority)
            do {
                return try await self.jobs.submit(
                    job, upload: nil, waitingUpTo: untilDone ? nil : (waitSeconds ?? self.syncWaitSeconds),
                    subscriber: subscriber)
            } catch let error as ServiceError where [.queueFull, .shuttingDown].contains(error.code) {
                // Refused before any work: the token was not spent.
                if let charge { await self.quotas.refund(charge) }
                throw error
            }
        }
    }

    /// Takes a token from the bucket of the request this task serves (`RequestClient.current`), and notes what
    /// is left for its answer's `RateLimit` fields.
    /// - Returns: the token taken; nil when the client has no quota.
    /// - Throws: `quota-exceeded` (429) with `Retry-After`, the seconds until its next token, rounded up.
    @discardableResult
    package func chargeQuota() async throws -> ClientQuotas.Charge? {
        guard !self.quotas.isEmpty, let client = RequestClient.current else { return nil }
        switch await self.quotas.charge(client) {
        case .unlimited:
            return nil
        case .taken(let reading):
            QuotaNote.current?.record(reading)
            return ClientQuotas.Charge(client: client, fleet: reading.fleet)
        case .refused(let reading, let retryAfter):
            QuotaNote.current?.record(reading)
            self.metrics.quotaRefused(client: client.label)
            var error = ServiceError(
                .quotaExceeded,
                "\(client.label) may start \(reading.policy.ratePerSecond) conversions per second, "
                    + "\(reading.policy.burst) at once (quota.limits)")
            error.retryAfterSeconds = max(1, Int(retryAfter.rounded(.up)))
            throw error
        }
    }

    /// What the cache has for `url` under `keys` now (this node's disk, then the fleet's store), starting nothing.
    package func cached(url: URL, keys: SourceKeys) async throws -> Resolution {
        switch try await self.resolver.resolve(url, keys: keys) {
        case .miss: try await self.resolver.resolveShared(url, keys: keys)
        case let found: found
        }
    }

    /// Queues the conversion of `url` with `options` at `priority` (an `.auto` URL's upgrade, a rewrite's prefetch)
    /// and returns without waiting for it. A job already running for it is joined, not started again.
    /// - Throws: `queue-full` when the upgrades' queue is full, the origin's failure when it failed a moment ago.
    package func queue(url: URL, options: TranscodeOptions, keys: SourceKeys, priority: JobPriority) async throws {
        _ = try await self.transcode(url: url, options: options, keys: keys, priority: priority, waitSeconds: 0)
    }

    /// The keys of an upload: its object and the digest of its bytes. Hashing up to 50 MB is blocking work,
    /// done on the shared I/O pool.
    package func uploadKeys(_ gif: [UInt8], options: TranscodeOptions) async throws -> (
        key: ObjectKey, source: ContentDigest
    ) {
        try await NIOThreadPool.singleton.runIfActive { ObjectKey.derive(source: gif, options: options) }
    }

    /// Converts an uploaded GIF whose keys are `keys` (`uploadKeys`).
    /// - Parameter untilDone: wait however long it takes instead of answering `pending`.
    /// - Parameter subscriber: told how this request ends, however long its job takes.
    package func transcode(
        upload gif: [UInt8], keys: (key: ObjectKey, source: ContentDigest), options: TranscodeOptions,
        untilDone: Bool = false, subscriber: JobSubscription? = nil
    ) async throws -> TranscodeAnswer {
        let key = keys.key
        return try await Self.telling(subscriber) {
            if try await self.takedowns.isBuried([.gif(keys.source), .object(key)], recently: true) {
                throw ServiceError.takenDown("this GIF was taken down")
            }
            if let metadata = try await self.results.localObject(key) {
                self.metrics.cacheHit()
                return .done(TranscodeOutcome(key: key, metadata: metadata), cacheHit: true)
            }
            self.metrics.cacheMiss()
            let job = TranscodeJob(id: key.rawValue, source: .upload(key), options: options)
            return try await self.jobs.submit(
                job, upload: gif, waitingUpTo: untilDone ? nil : self.syncWaitSeconds, subscriber: subscriber)
        }
    }

    /// Runs `body` and tells `subscriber` how it ended when it ended here: a hit, a refusal, a job that ended
    /// within the wait. A job still running tells it when it ends.
    private static func telling(
        _ subscriber: JobSubscription?, _ body: () async throws -> TranscodeAnswer
    ) async throws -> TranscodeAnswer {
        do {
            let answer = try await body()
            if case .done(let outcome, _) = answer {
                subscriber?.tell(.done(outcome.withoutFiles))
            }
            return answer
        } catch {
            subscriber?.tell(.failed(ServiceError.from(error)))
            throw error
        }
    }

    /// Where job `id` stands.
    /// - Throws: `overloaded` when this node's object cannot be checked now; `queue-unavailable` when a fleet's
    ///   job table cannot be read (the job may be running on another node).
    package func job(_ id: String) async throws -> JobState? {
        // A job's id is its request key: a URL key or, for an upload, an object key (both a SHA-256).
        guard let urlKey = URLKey(id), let objectKey = ObjectKey(id) else { return nil }
        if await self.jobs.isRunning(id) { return .pending }
        if let key = self.cache.lookup(urlKey: urlKey) ?? (self.cache.objects.contains(objectKey) ? objectKey : nil),
            let metadata = try self.cache.objects.metadata(key)
        {
            return .done(TranscodeOutcome(key: key, metadata: metadata))
        }
        if let failure = self.jobs.failure(of: id) { return .failed(failure.error) }
        if let outcome = await self.sharedOutcome(urlKey, objectKey) { return .done(outcome) }
        // Pending or failed on another node of the fleet.
        if let state = try await self.jobs.recorded(id) { return state }
        // Done on another node, or unknown. That node published the result before it recorded the job done, but
        // the look above may have come before both: looked again, the poll never answers 404 between pending and
        // done.
        return await self.sharedOutcome(urlKey, objectKey).map { .done($0) }
    }

    /// A job another node ran: its URL link or its object in the shared store.
    private func sharedOutcome(_ urlKey: URLKey, _ objectKey: ObjectKey) async -> TranscodeOutcome? {
        if let link = try? await self.results.sharedLink(urlKey: urlKey),
            let outcome = try? await self.resolver.adopt(link, urlKey: urlKey)
        {
            return outcome
        }
        if let metadata = try? await self.results.object(objectKey) {
            return TranscodeOutcome(key: objectKey, metadata: metadata)
        }
        return nil
    }

    /// The metadata of `url`'s result when this node has it already (a rewrite's sizes and loop counts).
    /// - Throws: `overloaded` when it cannot be checked now.
    package func cachedMetadata(url: URL, options: TranscodeOptions) throws -> TranscodeMetadata? {
        let keys = SourceKeys(url: url, options: options)
        return try self.cache.lookup(urlKey: keys.urlKey).flatMap { try self.cache.objects.metadata($0) }
    }

    /// The object the URL of `keys` leads to, when a hit needs no `await` (`MediaHitHandler`): the URL not
    /// taken down in a fleet by a recent "no" of the store, its link fresh, its host's policy decision
    /// remembered as allowed, the object not waiting to be published. `nil` leaves the request to
    /// `transcode(url:...)`, which decides everything afresh. The object's own checks, and the URL's local
    /// tombstone (`Tombstone.source`, asked with the object's in one look), are the caller's.
    func freshHitKey(keys: SourceKeys) -> ObjectKey? {
        guard self.takedowns.isURLClearNow(keys.sourceHash),
            let (key, age) = self.cache.links.freshLink(urlKey: keys.urlKey), age < self.urlTTLSeconds,
            self.downloader.isRememberedAllowed(host: keys.host), !self.results.isUnpublished(key)
        else { return nil }
        return key
    }
}

extension Duration {
    /// Whole milliseconds, for log lines.
    var milliseconds: Int64 {
        self.components.seconds * 1000 + self.components.attoseconds / 1_000_000_000_000_000
    }
}
