import CoreMetrics
import Metrics
import Prometheus
import Synchronization

/// The service's metrics, in a registry of its own (no global bootstrap, so every application, and every
/// test, counts apart), rendered for `GET /metrics` in the Prometheus text format. Labels are bounded:
/// route templates, status codes and error codes, never URLs.
final class ServiceMetrics: Sendable {
    let registry: PrometheusCollectorRegistry
    private let factory: PrometheusMetricsFactory
    private let snapshot = Mutex(ServiceCounters())

    private let cacheHits: CoreMetrics.Counter
    private let cacheMisses: CoreMetrics.Counter
    private let cacheEvictions: CoreMetrics.Counter
    private let dedupeJoins: CoreMetrics.Counter
    private let bytesDownloaded: CoreMetrics.Counter
    private let bytesServed: CoreMetrics.Counter
    private let bytesSaved: CoreMetrics.Counter
    private let transcodes: CoreMetrics.Counter
    private let transcodeDuration: CoreMetrics.Timer
    private let queueDepth: CoreMetrics.Gauge
    private let cacheBytes: CoreMetrics.Gauge

    init() {
        let registry = PrometheusCollectorRegistry()
        var factory = PrometheusMetricsFactory(registry: registry)
        factory.durationHistogramBuckets["transcode.duration"] = [
            .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .seconds(2),
            .seconds(5), .seconds(10), .seconds(30), .seconds(60), .seconds(120),
        ]
        self.registry = registry
        self.factory = factory
        self.cacheHits = CoreMetrics.Counter(label: "cache.hits", factory: factory)
        self.cacheMisses = CoreMetrics.Counter(label: "cache.misses", factory: factory)
        self.cacheEvictions = CoreMetrics.Counter(label: "cache.evictions", factory: factory)
        self.dedupeJoins = CoreMetrics.Counter(label: "dedupe.joins", factory: factory)
        self.bytesDownloaded = CoreMetrics.Counter(label: "download.bytes", factory: factory)
        self.bytesServed = CoreMetrics.Counter(label: "media.bytes.served", factory: factory)
        self.bytesSaved = CoreMetrics.Counter(label: "transcode.bytes.saved", factory: factory)
        self.transcodes = CoreMetrics.Counter(label: "transcode.count", factory: factory)
        self.transcodeDuration = CoreMetrics.Timer(label: "transcode.duration", factory: factory)
        self.queueDepth = CoreMetrics.Gauge(label: "transcode.queue.depth", factory: factory)
        self.cacheBytes = CoreMetrics.Gauge(label: "cache.bytes", factory: factory)
    }

    /// What has been counted so far (tests read it).
    var counters: ServiceCounters { self.snapshot.withLock { $0 } }

    func cacheHit() {
        self.cacheHits.increment()
        self.snapshot.withLock { $0.cacheHits += 1 }
    }

    func cacheMiss() {
        self.cacheMisses.increment()
    }

    func evicted(_ count: Int) {
        self.cacheEvictions.increment(by: count)
    }

    func joined() {
        self.dedupeJoins.increment()
        self.snapshot.withLock { $0.dedupeJoins += 1 }
    }

    func downloaded(bytes: Int) {
        self.bytesDownloaded.increment(by: bytes)
        self.snapshot.withLock { $0.downloads += 1 }
    }

    func served(bytes: Int) {
        self.bytesServed.increment(by: bytes)
    }

    func transcoded(duration: Duration, savedBytes: Int) {
        self.transcodes.increment()
        self.transcodeDuration.recordNanoseconds(
            duration.components.seconds * 1_000_000_000 + duration.components.attoseconds / 1_000_000_000)
        self.bytesSaved.increment(by: savedBytes)
        self.snapshot.withLock { $0.transcodes += 1 }
    }

    /// One request answered, by route template and status.
    func request(route: String, status: Int) {
        CoreMetrics.Counter(
            label: "http.requests", dimensions: [("route", route), ("status", String(status))], factory: self.factory
        )
        .increment()
    }

    /// One error answered, by its code.
    func error(code: String) {
        CoreMetrics.Counter(label: "errors", dimensions: [("code", code)], factory: self.factory).increment()
    }

    /// The Prometheus text exposition, with the gauges read at scrape time.
    func render(queueDepth: Int, cacheBytes: Int64) -> String {
        self.queueDepth.record(queueDepth)
        self.cacheBytes.record(cacheBytes)
        return self.registry.emitToString()
    }
}
