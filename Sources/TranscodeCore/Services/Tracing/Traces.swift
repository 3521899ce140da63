import AsyncHTTPClient
import Instrumentation
import NIOHTTP1
import ServiceContextModule
import Synchronization
import Tracing
import Transcoder

/// The service's spans (OpenTelemetry, `tracing.*`): off unless `serve` bootstrapped the exporter
/// (`TraceExport`); off, each helper runs its body and nothing else (no span, no context, no clock read).
///
/// A request's trace: the server span (Hummingbird's `TracingMiddleware`, which continues a W3C `traceparent`),
/// then `transcode.download`, `transcode.convert` with `transcode.queue_wait` (admission to a worker in its turn)
/// and the conversion's steps as children (`decode`, each size-guard `encode.attempt`, `encode.<format>` for each
/// extra, `store.commit`), `storage.publish`, and `webhook.deliver` for a callback.
package enum Traces {
    private static let flags = Atomic<UInt8>(0)
    private static let onFlag: UInt8 = 1
    private static let propagateFlag: UInt8 = 2

    /// Whether spans are made (set once by `TraceExport.bootstrap`).
    package static var isOn: Bool { self.flags.load(ordering: .relaxed) & self.onFlag != 0 }

    /// Whether requests to origins, S3 and webhook receivers carry the trace's `traceparent` (`tracing.propagate`).
    static var propagates: Bool { self.flags.load(ordering: .relaxed) & self.propagateFlag != 0 }

    static func turnOn(propagating: Bool) {
        self.flags.store(self.onFlag | (propagating ? self.propagateFlag : 0), ordering: .relaxed)
    }

    /// Runs `body` inside span `name` (a child of the task's current span), when spans are made.
    static func span<T>(
        _ name: String, ofKind kind: SpanKind = .internal, attributes: [String: String] = [:],
        isolation: isolated (any Actor)? = #isolation, _ body: () async throws -> T
    ) async rethrows -> T {
        guard self.isOn else { return try await body() }
        return try await withSpan(name, ofKind: kind, isolation: isolation) { span in
            for (key, value) in attributes { span.attributes[key] = value }
            return try await body()
        }
    }

    /// Starts a trace of its own for work that runs later, elsewhere (a fleet batch item, queued in PostgreSQL):
    /// one span `name`, ended at once, whose W3C `traceparent` the work carries (`TranscodeJob.traceparent`).
    /// - Returns: nil when spans are not made.
    static func startTrace(_ name: String, attributes: [String: String]) -> String? {
        guard self.isOn else { return nil }
        let span = startSpan(name, context: .topLevel, ofKind: .producer)
        for (key, value) in attributes { span.attributes[key] = value }
        var carrier: [String: String] = [:]
        InstrumentationSystem.instrument.inject(span.context, into: &carrier, using: DictionaryInjector())
        span.end()
        return carrier["traceparent"]
    }

    /// Runs `body` inside span `name`, continuing the trace `traceparent` names (a queued job's), or in a trace of
    /// its own without one; when spans are made.
    static func span<T>(
        _ name: String, continuing traceparent: String?, attributes: [String: String] = [:],
        isolation: isolated (any Actor)? = #isolation, _ body: () async throws -> T
    ) async rethrows -> T {
        guard self.isOn else { return try await body() }
        var context = ServiceContext.topLevel
        if let traceparent {
            InstrumentationSystem.instrument.extract(
                ["traceparent": traceparent], into: &context, using: DictionaryExtractor())
        }
        return try await withSpan(name, context: context, ofKind: .consumer, isolation: isolation) { span in
            for (key, value) in attributes { span.attributes[key] = value }
            return try await body()
        }
    }

    /// The current span's trace and span ids, when spans are made and its trace is sampled: the exemplar of a
    /// histogram observation made in it.
    static func currentExemplar() -> TraceExemplar? {
        guard self.isOn, let context = ServiceContext.current else { return nil }
        var carrier: [String: String] = [:]
        InstrumentationSystem.instrument.inject(context, into: &carrier, using: DictionaryInjector())
        // version-trace-span-flags; bit 0 of the flags: sampled.
        guard let fields = carrier["traceparent"]?.split(separator: "-"), fields.count == 4,
            fields[1].utf8.count == 32, fields[2].utf8.count == 16, let flags = UInt8(fields[3], radix: 16),
            flags & 1 == 1
        else { return nil }
        return TraceExemplar(traceID: String(fields[1]), spanID: String(fields[2]))
    }

    private struct DictionaryInjector: Injector {
        func inject(_ value: String, forKey key: String, into carrier: inout [String: String]) {
            carrier[key] = value
        }
    }

    private struct DictionaryExtractor: Extractor {
        func extract(key: String, from carrier: [String: String]) -> String? { carrier[key] }
    }

    /// A log for the conversion's steps when spans are made; nil otherwise (then nothing is timed).
    static func stepLog() -> StepLog? { self.isOn ? StepLog() : nil }

    /// Makes a span of each step in `log`, children of the task's current span, with the times they ran.
    static func record(_ log: StepLog?) {
        guard let log, self.isOn else { return }
        let parent = ServiceContext.current ?? .topLevel
        for step in log.steps {
            let span = startSpan(
                step.name, at: DefaultTracerClock.Timestamp(nanosecondsSinceEpoch: step.startNanoseconds),
                context: parent)
            for (key, value) in step.attributes { span.attributes[key] = value }
            if step.failed { span.setStatus(SpanStatus(code: .error)) }
            span.end(at: DefaultTracerClock.Timestamp(nanosecondsSinceEpoch: step.endNanoseconds))
        }
    }

    /// Now, on the tracer's clock (the start of a span made afterwards, `end(_:with:from:)`); 0 when spans are not made.
    static func now() -> UInt64 {
        guard self.isOn else { return 0 }
        return DefaultTracerClock.now.nanosecondsSinceEpoch
    }

    /// Ends each trace of `traceparents` with span `name`, from `start` to now: one piece of work that finishes many
    /// traces (a fleet batch's webhook delivery ends each of its items'), each span linked to the current one (the
    /// work's own) when `linkedToCurrent`.
    static func end(
        _ traceparents: [String], with name: String, from start: UInt64, linkedToCurrent: Bool,
        attributes: [String: String], failed: Bool
    ) {
        guard self.isOn, !traceparents.isEmpty else { return }
        let end = DefaultTracerClock.now
        let current = linkedToCurrent ? ServiceContext.current : nil
        for traceparent in traceparents {
            var context = ServiceContext.topLevel
            InstrumentationSystem.instrument.extract(
                ["traceparent": traceparent], into: &context, using: DictionaryExtractor())
            let span = startSpan(name, at: DefaultTracerClock.Timestamp(nanosecondsSinceEpoch: start), context: context)
            for (key, value) in attributes { span.attributes[key] = value }
            if let current { span.addLink(SpanLink(context: current, attributes: [:])) }
            if failed { span.setStatus(SpanStatus(code: .error)) }
            span.end(at: end)
        }
    }

    /// Adds the current trace's `traceparent` (and `tracestate`) to an outgoing request's headers, when
    /// `tracing.propagate` is on.
    static func inject(into headers: inout HTTPHeaders) {
        guard self.propagates, let context = ServiceContext.current else { return }
        InstrumentationSystem.instrument.inject(context, into: &headers, using: HeadersInjector())
    }

    private struct HeadersInjector: Injector {
        func inject(_ value: String, forKey key: String, into headers: inout HTTPHeaders) {
            headers.replaceOrAdd(name: key, value: value)
        }
    }
}

extension HTTPClient.Configuration {
    /// No span of AsyncHTTPClient's own and no `traceparent` of its own (it would otherwise use the global tracer,
    /// and send every trace onward whatever `tracing.propagate` says): `Traces.inject` adds the field when asked.
    mutating func withoutClientTracing() -> Self {
        self.tracing.tracer = nil
        return self
    }
}

extension HTTPClient {
    /// AsyncHTTPClient's shared client, without its own tracing (`withoutClientTracing`): the S3 client's.
    static let sharedUntraced: HTTPClient = {
        var configuration = HTTPClient.Configuration.singletonConfiguration
        return HTTPClient(
            eventLoopGroupProvider: .singleton, configuration: configuration.withoutClientTracing())
    }()
}
