import Instrumentation
import Logging
import OTel
import ServiceLifecycle

/// `tracing.*`: spans exported over OTLP/HTTP (protobuf) to a collector, off by default.
package struct TracingConfiguration: Sendable, Equatable {
    package init() {}

    /// Export spans. `tracing.enabled`, default false.
    package var enabled = false
    /// The collector's OTLP/HTTP traces URL. `tracing.endpoint`, default `http://127.0.0.1:4318/v1/traces`.
    package var endpoint = "http://127.0.0.1:4318/v1/traces"
    /// The share of new traces kept (a request that continues a sampled `traceparent` is kept).
    /// `tracing.sampleRatio`, default 1.
    var sampleRatio = 1.0
    /// Send `traceparent` to origins, S3 and webhook receivers. `tracing.propagate`, default false.
    var propagate = false
    /// How long spans wait to be sent in a batch. `tracing.batchDelaySeconds`, default 5.
    var batchDelaySeconds = 5.0
}

extension TracingConfiguration {
    /// Reads `section` (`tracing`); a key not set keeps its default.
    package init(_ section: ConfigSection) {
        self.init()
        let reader = section.reader
        self.enabled = reader.bool(forKey: "enabled", default: self.enabled)
        self.endpoint = reader.string(forKey: "endpoint", default: self.endpoint)
        section.check(
            "endpoint", self.endpoint.hasPrefix("http://") || self.endpoint.hasPrefix("https://"),
            "an http:// or https:// URL")
        self.sampleRatio = reader.double(forKey: "sampleRatio", default: self.sampleRatio)
        section.check("sampleRatio", (0...1).contains(self.sampleRatio), "0 to 1")
        self.propagate = reader.bool(forKey: "propagate", default: self.propagate)
        self.batchDelaySeconds = reader.double(forKey: "batchDelaySeconds", default: self.batchDelaySeconds)
        section.check("batchDelaySeconds", (0.01...60).contains(self.batchDelaySeconds), "0.01 to 60")
    }
}

/// Starts the span exporter (swift-otel's tracing backend: W3C trace context, a batch span processor, OTLP/HTTP
/// protobuf) and makes it the process's tracer. Once per process: `serve` calls it before building the application.
package enum TraceExport {
    /// - Returns: the exporter's service, to run in the server's service group (shut down after the application,
    ///   so the last spans are sent).
    package static func bootstrap(_ configuration: TracingConfiguration, logger: Logger) throws -> any Service {
        var otel = OTel.Configuration.default
        otel.serviceName = "transcode-server"
        otel.diagnosticLogger = .custom(logger)
        otel.propagators = [.traceContext]
        otel.metrics.enabled = false
        otel.logs.enabled = false
        otel.traces.exporter = .otlp
        otel.traces.otlpExporter.protocol = .httpProtobuf
        otel.traces.otlpExporter.endpoint = configuration.endpoint
        otel.traces.batchSpanProcessor.scheduleDelay = .milliseconds(Int64(configuration.batchDelaySeconds * 1000))
        if let sampler = OTel.Configuration.TracesConfiguration.SamplerConfiguration.parentBasedTraceIDRatio(
            ratio: configuration.sampleRatio)
        {
            otel.traces.sampler = sampler
        }
        let backend = try OTel.makeTracingBackend(configuration: otel)
        InstrumentationSystem.bootstrap(backend.factory)
        Traces.turnOn(propagating: configuration.propagate)
        return backend.service
    }
}
