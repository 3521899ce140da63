import Foundation
import Prometheus
import Synchronization

/// The service's metrics, in a registry of its own (every application, and every test, counts apart),
/// rendered for `GET /metrics`. Named as Prometheus asks, because operators read them there: one namespace
/// (`transcode_`), `_total` on counters, base units in the name (`_seconds`, `_bytes`), a `# HELP` line on
/// each; the standard `process_` metrics beside them. Labels are bounded: route templates, status codes,
/// error codes and the version, never URLs or keys.
package final class ServiceMetrics: Sendable {
    let registry: PrometheusCollectorRegistry
    private let snapshot = Mutex(ServiceCounters())
    private let cpuSecondsReported = Mutex(0.0)
    /// The request metrics made so far: building the labels and asking the registry cost a twentieth of a
    /// cache hit.
    private let requestMetrics = Mutex<[RequestLabel: (Counter, DurationHistogram)]>([:])
    /// The duration histograms' trace exemplars, for the OpenMetrics exposition.
    private let exemplars = HistogramExemplars()

    private let cacheHits: Counter
    private let cacheMisses: Counter
    private let cacheEvictions: Counter
    private let cacheQuarantined: Counter
    private let dedupeJoins: Counter
    private let downloadBytes: Counter
    private let servedBytes: Counter
    private let memoryAnswers: Counter
    private let answersAhead: Counter
    private let fileAnswers: Counter
    private let savedBytes: Counter
    private let conversions: Counter
    private let reencodes: Counter
    private let conversionDuration: DurationHistogram
    private let queueDepth: Gauge
    private let cacheBytes: Gauge
    private let residentMemory: Gauge
    private let openFileDescriptors: Gauge
    private let cpuSeconds: Counter

    /// Buckets of the request duration histogram: a cache hit takes about a millisecond, a conversion
    /// seconds.
    private static var requestBuckets: [Duration] {
        [
            .milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10), .milliseconds(25),
            .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1),
            .seconds(2.5), .seconds(5), .seconds(10), .seconds(30), .seconds(60),
        ]
    }

    private static var conversionBuckets: [Duration] {
        [
            .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1),
            .seconds(2), .seconds(5), .seconds(10), .seconds(30), .seconds(60), .seconds(120),
        ]
    }

    package init(version: String = BuildInfo.version) {
        let registry = PrometheusCollectorRegistry()
        self.registry = registry
        func counter(_ name: String, _ unit: String, _ help: String) -> Counter {
            registry.makeCounter(
                descriptor: .init(namespace: "transcode", metricName: name, unitName: unit, helpText: help))
        }
        func gauge(_ name: String, _ unit: String, _ help: String) -> Gauge {
            registry.makeGauge(
                descriptor: .init(namespace: "transcode", metricName: name, unitName: unit, helpText: help))
        }
        self.cacheHits = counter("cache_hits", "total", "Requests answered from the cache.")
        self.cacheMisses = counter("cache_misses", "total", "Requests that needed a download or a conversion.")
        self.cacheEvictions = counter("cache_evictions", "total", "Objects evicted to stay under cache.maxBytes.")
        self.cacheQuarantined = counter(
            "cache_quarantined", "total", "Objects that failed their checks and were moved to quarantine/.")
        self.dedupeJoins = counter("dedupe_joins", "total", "Requests that joined a download or conversion in flight.")
        self.downloadBytes = counter("download_bytes", "total", "Bytes of GIFs downloaded from origins.")
        self.servedBytes = counter("served_bytes", "total", "Bytes of media sent to clients.")
        self.memoryAnswers = counter(
            "media_memory_answers", "total",
            "Cache hits (media, signed GET, POST /transcode) answered from memory on the event loop, before the "
                + "router (included in requests_total).")
        self.answersAhead = counter(
            "media_answers_ahead", "total",
            "Of media_memory_answers, those answered from the bytes read, ahead of the HTTP codec.")
        self.fileAnswers = counter(
            "media_file_answers", "total",
            "Cache hits on bytes past the head kept in memory of a large file, answered ahead of the HTTP codec "
                + "and sent from the file by the kernel (sendfile; included in requests_total).")
        self.savedBytes = counter("saved_bytes", "total", "Bytes saved: GIF size minus MP4 size, per conversion.")
        self.conversions = counter("conversions", "total", "GIFs converted.")
        self.reencodes = counter(
            "reencodes", "total", "Extra encodes by the size guard (a video not smaller than its GIF).")
        self.conversionDuration = registry.makeDurationHistogram(
            descriptor: .init(
                namespace: "transcode", metricName: "conversion_duration", unitName: "seconds",
                helpText: "Time to convert one GIF, on a transcode worker."),
            labels: [], buckets: Self.conversionBuckets)
        // Exposed from the start (at 0), so that an operator's alert on it finds the family before the first fallback.
        _ = registry.makeCounter(
            descriptor: .init(
                namespace: "transcode", metricName: "auto_fallbacks", unitName: "total",
                helpText: Self.autoFallbacksHelp),
            labels: [("reason", "upgrading")])
        _ = registry.makeCounter(
            descriptor: .init(
                namespace: "transcode", metricName: "quota_refusals", unitName: "total", helpText: Self.quotaHelp),
            labels: [("client", RequestClient.openLabel)])
        self.queueDepth = gauge("queue_depth", "", "Jobs admitted and not finished (running or waiting).")
        self.cacheBytes = gauge("cache", "bytes", "Bytes stored in the cache.")
        registry.makeGauge(
            descriptor: .init(
                namespace: "transcode", metricName: "build", unitName: "info",
                helpText: "The running version (always 1)."),
            labels: [("version", version)]
        ).set(Int64(1))
        self.residentMemory = registry.makeGauge(
            descriptor: .init(
                namespace: "process", metricName: "resident_memory", unitName: "bytes",
                helpText: "Resident memory size in bytes."))
        self.openFileDescriptors = registry.makeGauge(
            descriptor: .init(
                namespace: "process", metricName: "open", unitName: "fds", helpText: "Number of open file descriptors.")
        )
        self.cpuSeconds = registry.makeCounter(
            descriptor: .init(
                namespace: "process", metricName: "cpu_seconds", unitName: "total",
                helpText: "Total user and system CPU time spent in seconds."))
    }

    /// What has been counted so far (tests read it).
    var counters: ServiceCounters { self.snapshot.withLock { $0 } }

    package func cacheHit() {
        self.cacheHits.increment()
        self.snapshot.withLock { $0.cacheHits += 1 }
    }

    func cacheMiss() {
        self.cacheMisses.increment()
    }

    package func evicted(_ count: Int) {
        self.cacheEvictions.increment(by: Int64(count))
    }

    package func quarantined() {
        self.cacheQuarantined.increment()
    }

    func joined() {
        self.dedupeJoins.increment()
        self.snapshot.withLock { $0.dedupeJoins += 1 }
    }

    func downloaded(bytes: Int) {
        self.downloadBytes.increment(by: Int64(bytes))
        self.snapshot.withLock { $0.downloads += 1 }
    }

    package func served(bytes: Int) {
        self.servedBytes.increment(by: Int64(bytes))
    }

    /// One `/media` or signed `/v1/...` request answered by `MediaHitHandler`.
    /// - Parameter ahead: answered from the bytes read, ahead of the HTTP codec (`MediaHitFront`).
    package func answeredFromMemory(ahead: Bool) {
        self.memoryAnswers.increment()
        if ahead { self.answersAhead.increment() }
    }

    /// One `/media` or signed `/v1/...` request answered ahead of the HTTP codec with bytes sent from the file.
    package func answeredFromFile() {
        self.fileAnswers.increment()
    }

    /// One conversion; `exemplar` is the trace it ran in (the current one's, when sampled).
    func transcoded(
        duration: Duration, savedBytes: Int, reencodes: Int = 0, exemplar: TraceExemplar? = Traces.currentExemplar()
    ) {
        self.conversions.increment()
        self.reencodes.increment(by: Int64(reencodes))
        self.conversionDuration.record(duration)
        if let exemplar {
            self.exemplars.record(
                exemplar, histogram: "transcode_conversion_duration_seconds", labels: [],
                buckets: Self.conversionBuckets, value: duration)
        }
        self.savedBytes.increment(by: Int64(savedBytes))
        self.snapshot.withLock { $0.transcodes += 1 }
    }

    /// Increments the labelled counter `transcode_<name>_total`, made on first use.
    private func increment(_ name: String, _ help: String, labels: [(String, String)]) {
        self.registry.makeCounter(
            descriptor: .init(namespace: "transcode", metricName: name, unitName: "total", helpText: help),
            labels: labels
        ).increment()
    }

    /// One request refused by its client's quota; `client` is a configured name or `open`, never an address.
    func quotaRefused(client: String) {
        self.increment("quota_refusals", Self.quotaHelp, labels: [("client", client)])
    }

    private static let quotaHelp = "Requests refused 429 quota-exceeded, by client (a configured name, or open)."

    /// One webhook delivery's end (`delivered`, `failed` after the last retry, `refused` by the destination
    /// policy) or one attempt that will be retried (`retried`).
    func webhook(_ result: WebhookResult) {
        self.increment(
            "webhook_deliveries", "Webhook deliveries by result (delivered, retried, failed, refused).",
            labels: [("result", result.rawValue)])
        self.snapshot.withLock { $0.webhooks[result.rawValue, default: 0] += 1 }
    }

    /// One job claimed from the fleet's queue (`queue.kind: postgres`), how long the claim took, and whether its
    /// previous worker's lease had expired.
    func queueClaimed(after latency: Duration, reclaimed: Bool) {
        self.registry.makeDurationHistogram(
            descriptor: .init(
                namespace: "transcode", metricName: "queue_claim_duration", unitName: "seconds",
                helpText: "Time to claim one job from the fleet's queue (one statement)."),
            labels: [],
            buckets: [
                .microseconds(250), .microseconds(500), .milliseconds(1), .milliseconds(2), .milliseconds(5),
                .milliseconds(10), .milliseconds(25), .milliseconds(100), .seconds(1),
            ]
        ).record(latency)
        if reclaimed {
            self.increment(
                "queue_lease_expiries", "Jobs claimed again because their worker's lease expired (it died or stalled).",
                labels: [])
        }
        self.snapshot.withLock { $0.queue[QueueEvent.claimed.rawValue, default: 0] += 1 }
    }

    /// One queued job's claim that failed for a passing reason: retried after a backoff, or kept as a dead
    /// letter when it was the last allowed.
    func queueRetried(dead: Bool) {
        self.increment(
            "queue_retries", "Queued jobs whose claim failed for a passing reason (retried, or a dead letter).",
            labels: [])
        if dead {
            self.increment(
                "queue_dead_letters", "Queued jobs kept as dead letters after their last attempt.", labels: [])
        }
        self.snapshot.withLock { $0.queue[(dead ? QueueEvent.dead : .retried).rawValue, default: 0] += 1 }
    }

    /// The fleet queue's jobs by state, as last counted.
    func queueDepth(_ depth: [PostgresQueue.State: Int]) {
        for (state, count) in depth.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
            self.registry.makeGauge(
                descriptor: .init(
                    namespace: "transcode", metricName: "queue_jobs", unitName: "",
                    helpText: "Jobs in the fleet's queue by state (queued, running, done, dead), as last counted."),
                labels: [("state", state.rawValue)]
            ).set(Int64(count))
        }
    }

    private static let autoFallbacksHelp =
        "`.auto` answers that redirected to the GIF, by reason (upgrading, upgrade-refused, keep-gif, not-accepted, "
        + "or an error code)."

    /// One `.auto` answer that sent the client to the source, by its reason (`AutoFallback`: `upgrading`,
    /// `upgrade-refused`, `keep-gif`, `not-accepted`, or an error code).
    package func autoFallback(_ reason: AutoFallback) {
        self.increment("auto_fallbacks", Self.autoFallbacksHelp, labels: [("reason", reason.label)])
        self.snapshot.withLock { $0.autoFallbacks[reason.label, default: 0] += 1 }
    }

    /// One operation on the shared result store (`pull`: an object copied to the local disk; `publish`: a
    /// transcode written to the store).
    func storage(_ operation: StorageOperation) {
        self.increment(
            "storage_operations", "Objects pulled from or published to the shared result store, by operation.",
            labels: [("operation", operation.rawValue)])
        self.snapshot.withLock { $0.storage[operation.rawValue, default: 0] += 1 }
    }

    /// One request answered, by route template and status, and how long it took to its response head; `exemplar` is
    /// the trace it ran in (the current one's, when sampled).
    package func request(
        route: String, status: Int, duration: Duration, exemplar: TraceExemplar? = Traces.currentExemplar()
    ) {
        let label = RequestLabel(route: route, status: status)
        let (count, time) =
            self.requestMetrics.withLock { $0[label] }
            ?? {
                let made = (
                    self.registry.makeCounter(
                        descriptor: .init(
                            namespace: "transcode", metricName: "requests", unitName: "total",
                            helpText: "HTTP requests answered, by route template and status code."),
                        labels: [("route", route), ("status", String(status))]),
                    self.registry.makeDurationHistogram(
                        descriptor: .init(
                            namespace: "transcode", metricName: "request_duration", unitName: "seconds",
                            helpText: "Time from a request to its response head, by route template."),
                        labels: [("route", route)], buckets: Self.requestBuckets)
                )
                self.requestMetrics.withLock { $0[label] = made }
                return made
            }()
        count.increment()
        time.record(duration)
        if let exemplar {
            self.exemplars.record(
                exemplar, histogram: "transcode_request_duration_seconds", labels: [("route", route)],
                buckets: Self.requestBuckets, value: duration)
        }
    }

    /// A request metric's labels (bounded: route templates and status codes).
    private struct RequestLabel: Hashable {
        let route: String
        let status: Int
    }

    /// How a stale URL's revalidation ended: the metric's `result` label.
    enum Revalidation: String {
        /// The origin answered 304.
        case notModified = "not-modified"
        /// The origin sent the bytes again (no validators, or it ignored them) and they were the same.
        case sameBytes = "same-bytes"
        /// New bytes: a new object, the link moved.
        case changed
        /// The origin failed; the stored result was served.
        case failed
    }

    /// One revalidation of a stale URL with its origin.
    func revalidated(_ result: Revalidation) {
        self.increment(
            "revalidations", "Stale URLs revalidated with their origin, by result.",
            labels: [("result", result.rawValue)])
        self.snapshot.withLock { $0.revalidations[result.rawValue, default: 0] += 1 }
    }

    /// One error answered, by its code.
    package func error(code: String) {
        self.increment("errors", "Error answers, by error code.", labels: [("code", code)])
    }

    /// The Prometheus text exposition (format 0.0.4), with the gauges read at scrape time.
    package func render(queueDepth: Int, cacheBytes: Int64) -> String {
        self.queueDepth.set(Int64(queueDepth))
        self.cacheBytes.set(cacheBytes)
        self.readProcess()
        return self.registry.emitToString()
    }

    /// The same metrics in the OpenMetrics text format: counter families are named without `_total` on
    /// their `TYPE` and `HELP` lines, the duration histograms' buckets carry their trace exemplars
    /// (`HistogramExemplars`), and the exposition ends with `# EOF`.
    package func renderOpenMetrics(queueDepth: Int, cacheBytes: Int64) -> String {
        let text = self.render(queueDepth: queueDepth, cacheBytes: cacheBytes)
        var counters = Set<String>()
        for line in text.split(separator: "\n") where line.hasPrefix("# TYPE ") && line.hasSuffix(" counter") {
            counters.insert(String(line.split(separator: " ")[2]))
        }
        var lines: [String] = []
        for line in text.split(separator: "\n", omittingEmptySubsequences: true) {
            let words = line.split(separator: " ", maxSplits: 3, omittingEmptySubsequences: false)
            if line.hasPrefix("# "), words.count >= 3, counters.contains(String(words[2])), words[2].hasSuffix("_total")
            {
                lines.append(([words[0], words[1], words[2].dropLast(6)] + words.dropFirst(3)).joined(separator: " "))
            } else {
                lines.append(String(self.exemplars.annotate(line)))
            }
        }
        return lines.joined(separator: "\n") + "\n# EOF\n"
    }

    /// Resident memory and CPU time from /proc/self (Linux), open descriptors from /proc/self/fd.
    private func readProcess() {
        if let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
            let kilobytes = line.split(separator: " ").dropFirst().first.flatMap({ Int64($0) })
        {
            self.residentMemory.set(kilobytes * 1024)
        }
        if let descriptors = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd") {
            self.openFileDescriptors.set(Int64(descriptors.count))
        }
        var usage = rusage()
        if getrusage(RUSAGE_SELF.rawValue, &usage) == 0 {
            let seconds =
                Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec)
                + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1_000_000
            // A counter only goes up: add what was spent since the last scrape.
            let delta = self.cpuSecondsReported.withLock { reported in
                defer { reported = max(reported, seconds) }
                return max(0, seconds - reported)
            }
            self.cpuSeconds.increment(by: delta)
        }
    }
}

/// The `result` label of `transcode_webhook_deliveries_total`.
enum WebhookResult: String, CaseIterable, Sendable {
    case delivered
    /// One attempt failed and another follows.
    case retried
    /// The last attempt failed.
    case failed
    /// The destination policy refused the address.
    case refused
}

/// The `operation` label of `transcode_storage_operations_total`.
enum StorageOperation: String, CaseIterable, Sendable {
    /// An object copied from the shared store to the local disk.
    case pull
    /// A conversion written to the shared store.
    case publish
    /// A published object whose source digest the store refused to record (for takedowns by key).
    case ledgerFailed = "ledger-failed"
}

/// The fleet queue's events as `/stats` counts them.
enum QueueEvent: String, Sendable {
    case claimed
    case retried
    case dead
}
