import AsyncHTTPClient
import Foundation
import NIOCore
import TestSupport
import Testing

@testable import TranscodeCore
@testable import TranscodeHTTP
@testable import TranscodeServer

/// OpenTelemetry traces (issue 55): the debug binary with `tracing.enabled` exports to an OTLP/HTTP receiver the
/// test starts (scripts/otlp_receiver.py, which decodes each export with PyPI `opentelemetry-proto`); each cold
/// request continuing a `traceparent` gives one complete trace (every span's parent in it, the server span's the
/// caller's), with the queue wait, the download, the conversion's steps and the storage; the origin gets the
/// trace's `traceparent` only with `tracing.propagate`.
@Suite(.tags(.integration, .childProcess), .timeLimit(.minutes(20))) struct TracingTests {
    struct Span: Decodable {
        let trace: String
        let span: String
        let parent: String
        let name: String
        /// The linked spans, `trace:span`.
        let links: [String]
    }

    /// The receiver: its port, and the spans and origin requests it has written so far.
    struct Receiver {
        let process: ChildProcess
        let port: Int
        let spansFile: String

        var spans: [Span] {
            let text = (try? String(contentsOfFile: self.spansFile, encoding: .utf8)) ?? ""
            return text.split(separator: "\n").compactMap { try? JSONDecoder().decode(Span.self, from: Data($0.utf8)) }
        }

        var originTraceparents: [String] {
            let text = (try? String(contentsOfFile: self.spansFile + ".origin", encoding: .utf8)) ?? ""
            return text.split(separator: "\n").map(String.init)
        }
    }

    static func withReceiver(_ body: (Receiver) async throws -> Void) async throws {
        try requireCorpus()
        let script = ConfigurationTests.repositoryRoot.appendingPathComponent("scripts/otlp_receiver.py").path
        try await withTemporaryDirectory { directory in
            let process = try ChildProcess(
                "/usr/bin/python3",
                [script, directory + "/spans.jsonl", corpusDirectory + "/cartoon_dancing_banana.gif"],
                standardOutput: .file(directory + "/port"), standardError: .file(directory + "/receiver.log"))
            defer {
                process.send(SIGKILL)
                _ = process.waitUntilExit()
            }
            var port: Int?
            for _ in 0..<200 where port == nil {
                port = (try? String(contentsOfFile: directory + "/port", encoding: .utf8))
                    .flatMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
                if port == nil {
                    let log = (try? String(contentsOfFile: directory + "/receiver.log", encoding: .utf8)) ?? ""
                    try #require(process.isRunning, "the receiver ended: \(log)")
                    try await Task.sleep(for: .milliseconds(50))
                }
            }
            try await body(Receiver(process: process, port: try #require(port), spansFile: directory + "/spans.jsonl"))
        }
    }

    static func post(_ port: Int, url: String, traceparent: String?) async throws -> Int {
        var request = HTTPClientRequest(url: "http://127.0.0.1:\(port)/transcode")
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        if let traceparent { request.headers.add(name: "traceparent", value: traceparent) }
        request.body = .bytes(ByteBuffer(string: #"{"url": "\#(url)"}"#))
        let client = HTTPClient(eventLoopGroupProvider: .singleton)
        do {
            let response = try await client.execute(request, timeout: .seconds(120))
            _ = try await response.body.collect(upTo: 1 << 20)
            try await client.shutdown()
            return Int(response.status.code)
        } catch {
            try? await client.shutdown()
            throw error
        }
    }

    /// The exemplars of the OpenMetrics exposition's `_bucket` lines: the histogram's name, the trace and span ids.
    static func exemplars(_ port: Int) async throws -> [(metric: String, route: String?, trace: String, span: String)] {
        var request = HTTPClientRequest(url: "http://127.0.0.1:\(port)/metrics")
        request.headers.add(name: "Accept", value: "application/openmetrics-text; version=1.0.0")
        let client = HTTPClient(eventLoopGroupProvider: .singleton)
        let body: ByteBuffer
        do {
            body = try await client.execute(request, timeout: .seconds(60)).body.collect(upTo: 16 << 20)
            try await client.shutdown()
        } catch {
            try? await client.shutdown()
            throw error
        }
        let pattern =
            #/^(\w+)_bucket\{(?:route="([^"]*)",)?le=[^}]*\} \d+ # \{trace_id="([0-9a-f]{32})",span_id="([0-9a-f]{16})"\} /#
        return String(buffer: body).split(separator: "\n").compactMap { line in
            (try? pattern.firstMatch(in: line)).map {
                (String($0.1), $0.2.map(String.init), String($0.3), String($0.4))
            }
        }
    }

    static let token = "tracing-test-bearer-token-0123"

    static func hex(_ count: Int) -> String {
        (0..<count).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
    }

    @Test func coldRequestsGiveCompleteTracesAndOriginsTheirTraceparent() async throws {
        try await Self.withReceiver { receiver in
            try await OperationsTests.withServingBinary(arguments: [
                "--download-allow-loopback", "--tracing-enabled", "--tracing-propagate",
                "--tracing-endpoint", "http://127.0.0.1:\(receiver.port)/v1/traces",
                "--tracing-batch-delay-seconds", "0.2",
            ]) { _, client, port, _ in
                var callers: [String: String] = [:]
                for n in 0..<10 {
                    let (trace, parent) = (Self.hex(16), Self.hex(8))
                    callers[trace] = parent
                    let status = try await Self.post(
                        port, url: "http://127.0.0.1:\(receiver.port)/gif/\(n)", traceparent: "00-\(trace)-\(parent)-01"
                    )
                    #expect(status == 200)
                }
                // The traces arrive within a few batch delays; the server span ends last (after the answer), so it
                // may come in a later export than its children: each trace is waited for until it has both.
                var spans: [Span] = []
                for _ in 0..<600 {
                    spans = receiver.spans
                    let byTrace = Dictionary(grouping: spans, by: \.trace)
                    let arrived = callers.allSatisfy { trace, parent in
                        let spans = byTrace[trace] ?? []
                        return spans.contains { $0.name == "storage.publish" } && spans.contains { $0.parent == parent }
                    }
                    if arrived { break }
                    try await Task.sleep(for: .milliseconds(100))
                }
                let byTrace = Dictionary(grouping: spans, by: \.trace)
                for (trace, parent) in callers {
                    let trace = byTrace[trace] ?? []
                    let names = Set(trace.map(\.name))
                    #expect(trace.count >= 6, "\(trace.map(\.name))")
                    for name in [
                        "transcode.download", "transcode.convert", "transcode.queue_wait", "decode", "encode.attempt",
                        "store.commit", "storage.publish",
                    ] {
                        #expect(names.contains(name), "\(name) missing from \(names.sorted())")
                    }
                    // Every parent link is intact: to a span of the trace, or (the server span) to the caller's.
                    let ids = Set(trace.map(\.span))
                    let roots = trace.filter { !ids.contains($0.parent) }
                    #expect(roots.count == 1 && roots.first?.parent == parent, "\(roots.map(\.name))")
                    #expect(roots.first?.name.contains("transcode") == true, "\(roots.map(\.name))")
                }
                // Each download carried its trace onward.
                let carried = Set(receiver.originTraceparents.compactMap { $0.split(separator: "-").dropFirst().first })
                #expect(Set(callers.keys).isSubset(of: Set(carried.map(String.init))), "\(receiver.originTraceparents)")
                // The duration histograms carry these traces as exemplars, each naming a span the receiver got (the
                // readiness polls' traces are on their own route's buckets).
                let exemplars = try await Self.exemplars(port).filter { $0.route == nil || $0.route == "/transcode" }
                let spanIDs = Set(spans.map(\.span))
                for metric in ["transcode_request_duration_seconds", "transcode_conversion_duration_seconds"] {
                    let found = exemplars.filter { $0.metric == metric }
                    #expect(!found.isEmpty, "no exemplar on \(metric): \(exemplars)")
                    for exemplar in found {
                        #expect(callers[exemplar.trace] != nil && spanIDs.contains(exemplar.span), "\(exemplar)")
                    }
                }
                _ = client
            }
        }
    }

    /// Without `tracing.propagate` the origin gets no `traceparent`; a request without one starts a trace of its
    /// own (the server span its root).
    @Test func withoutPropagationOriginsSeeNoTrace() async throws {
        try await Self.withReceiver { receiver in
            try await OperationsTests.withServingBinary(arguments: [
                "--download-allow-loopback", "--tracing-enabled",
                "--tracing-endpoint", "http://127.0.0.1:\(receiver.port)/v1/traces",
                "--tracing-batch-delay-seconds", "0.2",
            ]) { _, _, port, _ in
                let status = try await Self.post(port, url: "http://127.0.0.1:\(receiver.port)/gif/1", traceparent: nil)
                #expect(status == 200)
                var spans: [Span] = []
                // Until the conversion's spans and its server span (the last to end) have come.
                for _ in 0..<600
                where !(spans.contains { $0.name == "storage.publish" } && spans.contains { $0.name == "/transcode" }) {
                    spans = receiver.spans
                    try await Task.sleep(for: .milliseconds(100))
                }
                // The conversion's trace (the readiness probes have traces of their own): one root, the server span.
                let trace = spans.first { $0.name == "storage.publish" }?.trace
                let conversion = spans.filter { $0.trace == trace }
                #expect(conversion.count >= 6, "\(conversion.map(\.name))")
                #expect(conversion.filter { $0.parent.isEmpty }.map(\.name) == ["/transcode"], "\(conversion)")
                #expect(receiver.originTraceparents == ["-"])
            }
        }
    }

    /// A fleet batch (`queue.kind: postgres`) with `tracing.propagate`: each item is one trace, from its `batch.enqueue`
    /// span when `POST /v1/batches` queued it to the `batch.item` span of the node that claimed it, with that item's
    /// download, conversion and storage below, and to its batch's webhook: a `batch.webhook` span in each item's trace,
    /// linked to the delivery's own `webhook.deliver`.
    @Test(.tags(.database)) func aFleetBatchItemIsOneTraceFromItsEnqueue() async throws {
        try await withTemporaryDirectory { directory in
            let postgres = try await PostgresServer(directory: directory + "/postgres")
            defer { postgres.stop() }
            try await Self.withReceiver { receiver in
                try await OperationsTests.withServingBinary(arguments: [
                    "--download-allow-loopback", "--tracing-enabled", "--tracing-propagate",
                    "--tracing-endpoint", "http://127.0.0.1:\(receiver.port)/v1/traces",
                    "--tracing-batch-delay-seconds", "0.2", "--queue-kind", "postgres",
                    "--queue-url", "postgres://\(PostgresServer.user)@127.0.0.1:\(postgres.port)/postgres",
                    "--auth-tokens", Self.token, "--webhooks-secrets", WebhookTests.secret,
                ]) { process, client, _, serverDirectory in
                    let urls = (0..<3).map { "\"http://127.0.0.1:\(receiver.port)/gif/batch-\($0)\"" }
                    let callback = "http://127.0.0.1:\(receiver.port)/hook"
                    let auth = [("Authorization", "Bearer \(Self.token)")]
                    let (status, body) = try await client.post(
                        "/v1/batches", contentType: "application/json",
                        body: Array(
                            #"{"output": "mp4", "callbackURL": "\#(callback)", "urls": [\#(urls.joined(separator: ", "))]}"#
                                .utf8), headers: auth)
                    #expect(status == 202, "\(String(decoding: body, as: UTF8.self))")
                    let id = try #require(
                        (try JSONSerialization.jsonObject(with: Data(body)) as? [String: Any])?["id"] as? String)
                    var complete = false
                    for _ in 0..<600 where !complete {
                        try OperationsTests.requireRunning(process, serverDirectory)
                        let (_, status) = try await client.fetch("/v1/batches/\(id)", headers: auth)
                        complete =
                            (try? JSONSerialization.jsonObject(with: Data(status)) as? [String: Any])?["complete"]
                            as? Bool ?? false
                        if !complete { try await Task.sleep(for: .milliseconds(100)) }
                    }
                    #expect(complete)
                    var items: [[Span]] = []
                    for _ in 0..<600 {
                        let byTrace = Dictionary(grouping: receiver.spans, by: \.trace)
                        // The item's own span ends last (after its job's end is recorded), so it may come in a later
                        // export than its children: waited for too.
                        items = byTrace.values.filter { trace in
                            ["batch.enqueue", "batch.item", "storage.publish", "batch.webhook"].allSatisfy { name in
                                trace.contains { $0.name == name }
                            }
                        }
                        if items.count >= 3 { break }
                        try await Task.sleep(for: .milliseconds(100))
                    }
                    #expect(items.count == 3, "\(receiver.spans.map(\.name))")
                    for trace in items {
                        let ids = Set(trace.map(\.span))
                        let roots = trace.filter { !ids.contains($0.parent) }
                        #expect(roots.map(\.name) == ["batch.enqueue"], "\(trace.map(\.name))")
                        let enqueue = trace.first { $0.name == "batch.enqueue" }
                        let item = trace.first { $0.name == "batch.item" }
                        #expect(item?.parent == enqueue?.span, "\(trace.map(\.name))")
                        for name in ["transcode.download", "transcode.convert", "encode.attempt", "storage.publish"] {
                            #expect(trace.contains { $0.name == name }, "\(name) missing: \(trace.map(\.name))")
                        }
                        // The batch's one delivery ends each item's trace, linked to the delivery's span.
                        let webhook = trace.first { $0.name == "batch.webhook" }
                        #expect(webhook?.parent == enqueue?.span, "\(trace.map(\.name))")
                        let delivery = receiver.spans.first { $0.name == "webhook.deliver" }
                        #expect(
                            delivery.map { webhook?.links == ["\($0.trace):\($0.span)"] } == true,
                            "\(String(describing: webhook)) \(String(describing: delivery))")
                    }
                    let hooks = try String(contentsOfFile: receiver.spansFile + ".hook", encoding: .utf8)
                    #expect(hooks.split(separator: "\n").count == 1, "\(hooks)")
                }
            }
        }
    }
}
