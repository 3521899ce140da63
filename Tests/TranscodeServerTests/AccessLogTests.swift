import Foundation
import Logging
import NIOHTTP1
import Synchronization
import TestSupport
import Testing

@testable import TranscodeCore
@testable import TranscodeHTTP
@testable import TranscodeServer

/// Every request leaves one `info` line with its route template, status and request id, failures too, and
/// the request id goes back to the client.
@Suite(.tags(.integration), .timeLimit(.minutes(10))) struct AccessLogTests {
    /// Keeps every entry logged through it.
    final class Recorder: Sendable {
        struct Entry: Sendable {
            var level: Logger.Level
            var message: String
            var metadata: [String: String]
        }
        let entries = Mutex<[Entry]>([])

        var logger: Logger {
            var logger = Logger(label: "test") { _ in Handler(recorder: self) }
            logger.logLevel = .info
            return logger
        }

        struct Handler: LogHandler {
            let recorder: Recorder
            var metadata: Logger.Metadata = [:]
            var logLevel: Logger.Level = .info
            subscript(metadataKey key: String) -> Logger.Metadata.Value? {
                get { self.metadata[key] }
                set { self.metadata[key] = newValue }
            }
            func log(event: LogEvent) {
                let merged = self.metadata.merging(event.metadata ?? [:]) { $1 }.mapValues { "\($0)" }
                self.recorder.entries.withLock {
                    $0.append(Entry(level: event.level, message: "\(event.message)", metadata: merged))
                }
            }
        }

        func requests(withID id: String) -> [Entry] {
            self.entries.withLock { $0.filter { $0.message == "request" && $0.metadata["request.id"] == id } }
        }
    }

    @Test func successesAndFailuresAreLoggedWithStatusRouteAndRequestID() async throws {
        let recorder = Recorder()
        try await withHarness(logger: recorder.logger, configure: { $0.log.level = .info }) { harness in
            let ok = try await harness.request(.GET, "/healthz", headers: [("X-Request-Id", "client-id.1:a_b")])
            #expect(ok.headers.first(name: "X-Request-Id") == "client-id.1:a_b")
            let missing = try await harness.request(
                .GET, "/media/\(String(repeating: "0", count: 64)).mp4", headers: [("X-Request-Id", "lookup-404")])
            #expect(missing.status == 404)
            #expect(missing.headers.first(name: "X-Error-Code") == "not-found")
            let refused = try await harness.request(
                .POST, "/transcode", headers: [("Content-Type", "image/gif"), ("X-Request-Id", "upload-422")],
                body: Array("not a gif at all".utf8))
            #expect(refused.status == 422)

            let line = try #require(recorder.requests(withID: "client-id.1:a_b").first)
            #expect(line.level == .info)
            #expect(line.metadata["http.method"] == "GET")
            #expect(line.metadata["http.route"] == "/healthz")
            #expect(line.metadata["http.status"] == "200")
            #expect(line.metadata["error.code"] == nil)
            #expect(line.metadata["http.ms"].flatMap(Int.init) != nil)
            // One id per line: the client's, not Hummingbird's beside it.
            #expect(line.metadata["hb.request.id"] == nil, "\(line.metadata)")

            let notFound = try #require(recorder.requests(withID: "lookup-404").first)
            #expect(notFound.metadata["http.route"] == "/media/{file}")
            #expect(notFound.metadata["http.status"] == "404")
            #expect(notFound.metadata["error.code"] == "not-found")

            let unprocessable = try #require(recorder.requests(withID: "upload-422").first)
            #expect(unprocessable.metadata["http.route"] == "/transcode")
            #expect(unprocessable.metadata["http.status"] == "422")
            #expect(unprocessable.metadata["error.code"] == "unsupported-format")
        }
    }

    /// A path the service has, asked with another method: 405 with `Allow`, not 404; an unknown path stays 404.
    @Test func aWrongMethodIs405WithAllow() async throws {
        try await withHarness { harness in
            for (method, path, allowed) in [
                (HTTPMethod.DELETE, "/healthz", "GET"), (.GET, "/transcode", "POST"),
                (.POST, "/media/\(String(repeating: "0", count: 64)).mp4", "GET, HEAD"),
                (.PUT, "/v1/rewrite", "GET, HEAD, POST"),
            ] {
                let reply = try await harness.request(method, path)
                #expect(reply.status == 405, "\(method) \(path): \(reply.text)")
                #expect(reply.errorCode == "method-not-allowed", "\(method) \(path)")
                #expect(reply.headers.first(name: "Allow") == allowed, "\(method) \(path)")
            }
            let unknown = try await harness.request(.DELETE, "/no-such-path")
            #expect(unknown.status == 404 && unknown.headers.first(name: "Allow") == nil)
        }
    }

    @Test(arguments: ["", "has space", String(repeating: "x", count: 129), "quote\"d"])
    func malformedRequestIDsAreReplaced(_ id: String) async throws {
        try await withHarness { harness in
            let reply = try await harness.request(.GET, "/healthz", headers: [("X-Request-Id", id)])
            let returned = try #require(reply.headers.first(name: "X-Request-Id"))
            #expect(returned != id && !returned.isEmpty)
        }
    }

    @Test func anIDIsGeneratedWhenNoneIsSent() async throws {
        try await withHarness { harness in
            let first = try await harness.request(.GET, "/healthz")
            let second = try await harness.request(.GET, "/healthz")
            let a = try #require(first.headers.first(name: "X-Request-Id"))
            let b = try #require(second.headers.first(name: "X-Request-Id"))
            #expect(a != b)
        }
    }
}

/// `log.format: json` writes one parseable object per line, metadata included.
@Suite(.tags(.unit), .timeLimit(.minutes(10))) struct JSONLogTests {
    @Test func linesAreJSONObjectsWithTheMetadata() throws {
        let lines = Mutex<[String]>([])
        var logger = Logger(label: "transcode-server") { label in
            JSONLogHandler(label: label, write: { line in lines.withLock { $0.append(line) } })
        }
        logger[metadataKey: "request.id"] = "abc"
        logger.info(
            "request",
            metadata: [
                "http.status": .stringConvertible(404), "http.route": "/media/{file}", "ok": .stringConvertible(false),
                "ratio": .stringConvertible(0.5), "list": ["a", "b"],
            ])
        logger.debug("not at info")
        let written = lines.withLock { $0 }
        #expect(written.count == 1)
        let line = try #require(written.first)
        #expect(line.hasSuffix("\n") && !line.dropLast().contains("\n"))
        let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        #expect(object["message"] as? String == "request")
        #expect(object["level"] as? String == "info")
        #expect(object["label"] as? String == "transcode-server")
        #expect(object["request.id"] as? String == "abc")
        #expect(object["http.route"] as? String == "/media/{file}")
        #expect((object["time"] as? String).map { $0.contains("T") && $0.hasSuffix("Z") } == true)
        #expect(object["error"] == nil)
        // Typed values: numbers and booleans unquoted, lists as arrays.
        #expect(line.contains(#""http.status":404"#) && line.contains(#""ok":false"#), "\(line)")
        #expect(line.contains(#""ratio":0.5"#) && line.contains(#""list":["a","b"]"#), "\(line)")

        logger.warning("upload failed", error: POSIXError(.ENOSPC))
        let failure = try #require(lines.withLock { $0.last })
        let failed = try #require(try JSONSerialization.jsonObject(with: Data(failure.utf8)) as? [String: String])
        #expect(failed["error"] == "\(POSIXError(.ENOSPC))")
    }

    @Test func theFormatIsChecked() async throws {
        let json = try await ServerConfiguration.load(
            filePath: nil, arguments: ["--log-format", "json"], environment: [:])
        #expect(json.log.format == "json")
        await #expect(throws: ConfigurationError.self) {
            _ = try await ServerConfiguration.load(filePath: nil, arguments: ["--log-format", "xml"], environment: [:])
        }
    }
}
