import Foundation
import Logging
import NIOPosix
import Transcoder

/// The work of a job (`JobPerformer`): for a URL, revalidate or download it, convert its bytes, link the URL
/// to the object and publish both; for an upload, convert it. The same bytes are converted once however many
/// jobs (URLs, uploads) bring them. Runs inside a job; whether to run one is the caller's business.
struct TranscodeWork: JobPerformer {
    /// This node's disk, read through to the fleet's shared store.
    let results: ReadThroughResults
    let downloader: Downloader
    let pool: TranscodePool
    let resolver: SourceResolver
    let metrics: ServiceMetrics
    let logger: Logger
    /// Across a fleet, one conversion of the same bytes at a time (`queue.kind: postgres`); nil on one node.
    let contentLocks: (any ContentLocks)?
    private let contents = SingleFlight<String, TranscodeMetadata>()
    /// One download of a URL however many of its variants (`w:`, `h:`, background, formats) are converting it at
    /// once: keyed by the normalized URL and the conditions of the request.
    private let downloads = SingleFlight<String, SharedDownload>()

    /// A download as every job in flight for the URL sees it: the GIF's bytes in memory (its file removed), or the
    /// origin's 304.
    enum SharedDownload: Sendable {
        case notModified
        case gif(bytes: [UInt8], etag: String?, lastModified: String?)
    }

    /// The configured box (`transcode.maxOutputWidth` x `maxOutputHeight`): the box of a URL without `w:` or `h:`.
    let defaultBox: (width: Int, height: Int)

    init(
        results: ReadThroughResults, downloader: Downloader, pool: TranscodePool, resolver: SourceResolver,
        contentLocks: (any ContentLocks)? = nil, defaultBox: (width: Int, height: Int) = (1920, 1080),
        metrics: ServiceMetrics, logger: Logger
    ) {
        self.defaultBox = defaultBox
        self.contentLocks = contentLocks
        self.results = results
        self.downloader = downloader
        self.pool = pool
        self.resolver = resolver
        self.metrics = metrics
        self.logger = logger
    }

    var takedowns: Takedowns { self.results.takedowns }
    var cache: DiskCache { self.results.local }

    func perform(_ job: TranscodeJob, upload: [UInt8]?) async throws -> TranscodeOutcome {
        switch job.source {
        case .url(let text):
            guard let url = URL(string: text) else { throw ServiceError.internal("a job's URL did not parse") }
            return try await self.convert(url: url, options: job.options, priority: job.priority)
        case .upload(let key):
            guard let upload else { throw ServiceError.internal("an upload's job came without its bytes") }
            return try await self.store(
                upload, key: key, options: job.options, requestKey: job.id, priority: job.priority)
        }
    }

    /// Converts the GIF at `url`, or answers with what the cache has while it is fresh. A stale URL is
    /// revalidated with the origin: a 304 keeps the object, new bytes make a new object and move the link;
    /// when the origin fails (5xx, timeout) the stored result is served and the next request tries again.
    private func convert(url: URL, options: TranscodeOptions, priority: JobPriority) async throws -> TranscodeOutcome {
        let keys = SourceKeys(url: url, options: options)
        let urlKey = keys.urlKey
        var stale: TranscodeOutcome?
        // Asked again inside the job: another job may have revalidated the URL since the caller looked.
        switch try await self.resolver.resolve(url, keys: keys) {
        case .fresh(let outcome): return outcome.withoutFiles
        case .stale(let outcome): stale = outcome
        case .miss:
            switch try await self.resolver.resolveShared(url, keys: keys) {
            case .fresh(let outcome): return outcome
            case .stale(let outcome): stale = outcome
            case .miss: break
            }
        }
        // A box at or above the GIF's size changes nothing: when the plain URL's object is fresh and fits it, that
        // object is this URL's, with no download and no conversion (a leaked key once made thousands of copies).
        if stale == nil, let plain = self.plainOptions(options) {
            let plainKeys = SourceKeys(url: url, options: plain)
            if case .fresh(let outcome) = try await self.resolver.resolve(url, keys: plainKeys),
                Self.box(of: options, holds: outcome.metadata.sourceWidth, outcome.metadata.sourceHeight)
            {
                if let record = self.cache.links.sourceRecord(urlKey: plainKeys.urlKey) {
                    try await self.results.link(urlKey: urlKey, to: outcome.key, source: record)
                }
                return outcome.withoutFiles
            }
        }
        let record = stale == nil ? nil : self.cache.links.sourceRecord(urlKey: urlKey)
        let downloaded: SharedDownload
        do {
            downloaded = try await self.download(url, normalized: keys.normalized.text, record: record)
        } catch let error as ServiceError where stale != nil {
            return try await self.resolver.revalidationFailed(error, stale: stale!, urlKey: urlKey, record: record)
        }
        let (gif, etag, lastModified): ([UInt8], String?, String?)
        switch downloaded {
        case .notModified:
            guard let stale else { throw ServiceError.originError("the origin answered 304 to a plain GET") }
            await self.resolver.notModified(stale, urlKey: urlKey, record: record)
            return stale
        case .gif(let bytes, let tag, let modified):
            (gif, etag, lastModified) = (bytes, tag, modified)
        }
        // Hashing up to 50 MB is blocking work: off the async executor, on the shared I/O pool (not the transcode
        // pool, where it would queue behind running transcodes).
        let plain = self.plainOptions(options)
        let (content, effective) = try await NIOThreadPool.singleton.runIfActive {
            // The same for a box the GIF fits in: the plain object's options, key and files.
            var effective = options
            if let plain, let canvas = MemoryPrediction.canvasSize(of: gif),
                Self.box(of: options, holds: canvas.width, canvas.height)
            {
                effective = plain
            }
            return (ObjectKey.derive(source: gif, options: effective), effective)
        }
        if try await self.takedowns.isBuried([.gif(content.source), .object(content.key)]) {
            throw ServiceError.takenDown("this GIF was taken down")
        }
        let outcome = try await self.store(
            gif, key: content.key, options: effective, requestKey: urlKey.rawValue, priority: priority)
        if stale != nil { self.metrics.revalidated(outcome.key == stale?.key ? .sameBytes : .changed) }
        // A takedown of the URL that arrived while this job downloaded and converted: what it made goes
        // too, and is refused from now on.
        if try await self.takedowns.isBuried([.source(keys.sourceHash)]) {
            await self.results.purgeConverted(
                outcome.key, source: keys.sourceHash, takedown: "taken down while being converted")
            throw ServiceError.takenDown("this URL was taken down")
        }
        let source = SourceRecord(
            url: keys.normalized.text, etag: etag, lastModified: lastModified,
            validatedAt: Date().timeIntervalSince1970, sourceSha256: content.source.rawValue)
        try await self.results.link(urlKey: urlKey, to: outcome.key, source: source)
        if let plain, effective.maxOutputWidth == plain.maxOutputWidth,
            effective.maxOutputHeight == plain.maxOutputHeight
        {
            // The plain URL is this object too: the next box of the URL finds it without downloading.
            try await self.results.link(
                urlKey: SourceKeys(url: url, options: plain).urlKey, to: outcome.key, source: source)
        }
        return outcome
    }

    /// Downloads `url` (with `record`'s conditions, to revalidate), once for every job in flight for it with the
    /// same conditions: the variants of one URL asked together share one origin request and one read of the file.
    private func download(_ url: URL, normalized: String, record: SourceRecord?) async throws -> SharedDownload {
        let key = [normalized, record?.etag ?? "", record?.lastModified ?? ""].joined(separator: "\n")
        let (task, _) = try await self.downloads.task(for: key, admit: {}) { _ in
            let fetched = try await Traces.span("transcode.download", ofKind: .client) {
                try await self.downloader.fetch(url, etag: record?.etag, lastModified: record?.lastModified)
            }
            switch fetched {
            case .notModified:
                return .notModified
            case .file(let file):
                defer { unlink(file.path) }
                self.metrics.downloaded(bytes: file.byteCount)
                // Reading up to 50 MB is blocking work: on the shared I/O pool.
                let bytes = try await ReceivingFile.readAll(file.path, what: "downloaded file")
                return .gif(bytes: bytes, etag: file.etag, lastModified: file.lastModified)
            }
        }
        return try await task.value
    }

    /// `options` with the configured box instead of its own (`w:`, `h:`); nil when it has the configured box.
    private func plainOptions(_ options: TranscodeOptions) -> TranscodeOptions? {
        guard options.maxOutputWidth != self.defaultBox.width || options.maxOutputHeight != self.defaultBox.height
        else { return nil }
        var plain = options
        (plain.maxOutputWidth, plain.maxOutputHeight) = self.defaultBox
        return plain
    }

    /// Whether `options`' box holds a `width` x `height` GIF unscaled, padding to even sizes included: its video is
    /// then the plain one (a box is never larger than the configured one, which then holds it too).
    static func box(of options: TranscodeOptions, holds width: Int, _ height: Int) -> Bool {
        options.maxOutputWidth >= width + width % 2 && options.maxOutputHeight >= height + height % 2
    }

    /// Converts `gif` into its content-addressed object, once per content key however many requests
    /// (or URLs) bring the same bytes.
    private func store(
        _ gif: [UInt8], key: ObjectKey, options: TranscodeOptions, requestKey: String, priority: JobPriority
    ) async throws -> TranscodeOutcome {
        if let metadata = try await self.results.localObject(key) {
            return TranscodeOutcome(key: key, metadata: metadata)
        }
        let (task, _) = try await self.contents.task(for: key.rawValue, admit: {}) { _ in
            guard let locks = self.contentLocks else {
                return try await self.render(
                    gif, key: key, options: options, requestKey: requestKey, priority: priority)
            }
            return try await locks.whileHolding(key) {
                try await self.render(gif, key: key, options: options, requestKey: requestKey, priority: priority)
            }
        }
        return TranscodeOutcome(key: key, metadata: try await task.value)
    }

    /// The options to render `gif` with and its predicted peak: `options`, or, when their AVIF alone would pass what
    /// the budget leaves conversions, the same without the AVIFs (animated and still).
    private func fitting(
        _ options: TranscodeOptions, gif: [UInt8], key: ObjectKey
    ) -> (options: TranscodeOptions, memory: Int) {
        let memory = MemoryPrediction.peakBytes(of: gif, options: options)
        guard let limit = self.pool.conversionBytes, memory > limit,
            options.rendition.extraFormats.contains(where: \.isAVIF)
        else { return (options, memory) }
        var lighter = options
        lighter.rendition.extraFormats.removeAll(where: \.isAVIF)
        self.logger.info(
            "avif not made: over the memory budget",
            metadata: [
                "object.key": "\(key.rawValue.prefix(16))", "memory.predicted": "\(memory)",
                "memory.limit": "\(limit)",
            ])
        return (lighter, MemoryPrediction.peakBytes(of: gif, options: lighter))
    }

    /// Converts `gif` on the pool, commits and publishes it; unless the fleet has it already.
    private func render(
        _ gif: [UInt8], key: ObjectKey, options: TranscodeOptions, requestKey: String, priority: JobPriority
    ) async throws -> TranscodeMetadata {
        // In a fleet, the same bytes may have come to another node (an upload, another URL), or be
        // converted there now (then this waited for its content lock, and finds the result).
        if let metadata = try await self.results.object(key) { return metadata }
        // Admitted by its predicted peak against the node's budget, in its priority's turn. An AVIF the budget cannot
        // hold is not made (as above its canvas cap): the object keeps its key and serves its other files, and
        // `.auto` answers the next format.
        let (renderOptions, memory) = self.fitting(options, gif: gif, key: key)
        let started = ContinuousClock.now
        let steps = Traces.stepLog()
        let metadata = try await Traces.span(
            "transcode.convert", attributes: ["transcode.priority": priority.rawValue, "object.key": key.rawValue]
        ) {
            defer { Traces.record(steps) }
            return try await self.convert(
                gif, key: key, options: renderOptions, memory: memory, priority: priority, steps: steps)
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
        try await Traces.span("storage.publish") { try await self.results.publish(key) }
        return metadata
    }

    /// Renders `gif` on the pool in its turn and commits it to this node's disk, timing its steps in `steps`.
    private func convert(
        _ gif: [UInt8], key: ObjectKey, options renderOptions: TranscodeOptions, memory: Int, priority: JobPriority,
        steps: StepLog?
    ) async throws -> TranscodeMetadata {
        try await self.pool.run(priority: priority, memory: memory) {
            // Another flight of the same bytes (another URL, an upload) may have stored it meanwhile.
            if let existing = try self.cache.objects.metadata(key) { return existing }
            // Rendered beside the cache and committed by it: the transcoder writes nothing in objects/.
            let scratch = try self.cache.objects.makeScratchDirectory("render")
            defer { try? FileManager.default.removeItem(atPath: scratch) }
            #if canImport(Glibc)
                // What a large conversion freed goes back now, not at the next conversion on this thread. Only after
                // large ones: `malloc_trim` walks every arena under its lock, which every other thread's allocation
                // then waits for.
                defer { if memory >= EncoderHeap.trimAfterBytes { EncoderHeap.releaseFreedMemory() } }
            #endif
            var transcoder = Transcoder(options: renderOptions)
            transcoder.steps = steps
            let rendered = try transcoder.render(gif, into: scratch, name: key.rawValue)
            try steps.record("store.commit") { try self.cache.objects.commit(key, rendered) }
            return rendered.metadata
        }
    }
}
