import Foundation
import Testing

@testable import TranscodeServer

@Suite struct OperationsTests {
    @Test func healthAndReadiness() async throws {
        try await withHarness { harness in
            let health = try await harness.request(.GET, "/healthz")
            #expect(health.status == 200 && health.text == "ok\n")
            let ready = try await harness.request(.GET, "/readyz")
            #expect(ready.status == 200)
            // A cache directory that cannot be written makes the service not ready.
            try FileManager.default.setAttributes(
                [.posixPermissions: 0o500], ofItemAtPath: harness.services.cache.temporaryDirectory)
            defer {
                try? FileManager.default.setAttributes(
                    [.posixPermissions: 0o755], ofItemAtPath: harness.services.cache.temporaryDirectory)
            }
            if getuid() != 0 {  // root writes anyway
                let notReady = try await harness.request(.GET, "/readyz")
                #expect(notReady.status == 503)
            }
        }
    }

    @Test func prometheusMetrics() async throws {
        try await withHarness { harness in
            let url = harness.originURL("/corpus/cartoon_hotdog.gif")
            let first = try await harness.transcode(url: url)
            let key = try #require(try first.json()["key"] as? String)
            _ = try await harness.transcode(url: url)
            _ = try await harness.transcode(url: harness.originURL("/html"))
            _ = try await harness.request(.GET, "/media/\(key).mp4", headers: [("Range", "bytes=0-99")])
            let metrics = try await harness.request(.GET, "/metrics")
            #expect(metrics.status == 200)
            #expect(metrics.headers.first(name: "Content-Type")?.hasPrefix("text/plain") == true)
            let text = metrics.text
            for line in [
                "cache_hits 1", "cache_misses 2", "transcode_count 1", "media_bytes_served 100",
                #"errors{code="not-a-gif"} 1"#, #"http_requests{route="/transcode",status="200"} 2"#,
                #"http_requests{route="/transcode",status="422"} 1"#, "transcode_queue_depth 0",
            ] {
                #expect(text.contains(line), "missing \(line) in\n\(text)")
            }
            #expect(text.contains("transcode_duration_bucket"))
            // Two downloads: the GIF and the HTML page.
            let html = "<html><body>not a gif</body></html>".utf8.count
            #expect(text.contains("download_bytes \(try corpusBytes("cartoon_hotdog.gif").count + html)"))
            #expect(text.contains("transcode_bytes_saved"))
            // Labels are bounded: no URL or key appears.
            #expect(!text.contains(key) && !text.contains("127.0.0.1"))
        }
    }

    /// SIGTERM: the running binary stops accepting, finishes the transcode in flight (its client gets
    /// the result), and exits 0.
    @Test func sigtermDrainsInFlightWorkAndExitsZero() async throws {
        let binary = ConfigurationTests.repositoryRoot.appendingPathComponent(".build/debug/transcode-server").path
        try #require(FileManager.default.isExecutableFile(atPath: binary), "build the package first: \(binary)")
        try await withTemporaryDirectory { directory in
            let port = Int.random(in: 20_000..<40_000)
            let process = Process()
            process.executableURL = URL(fileURLWithPath: binary)
            process.arguments = [
                "serve", "--port", "\(port)", "--cache-directory", directory + "/cache", "--log-level", "warning",
            ]
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            defer { if process.isRunning { process.terminate() } }

            let client = URLSessionlessClient(port: port)
            var up = false
            for _ in 0..<100 where !up {
                up = (try? await client.get("/healthz")) == 200
                if !up { try await Task.sleep(for: .milliseconds(100)) }
            }
            try #require(up, "the server did not start")

            let gif = try corpusBytes("screenrec_terminal_thefuck.gif")
            async let inFlight = client.post("/transcode", contentType: "image/gif", body: gif)
            try await Task.sleep(for: .milliseconds(300))
            kill(process.processIdentifier, SIGTERM)
            let (status, body) = try await inFlight
            #expect(status == 200, "\(String(decoding: body, as: UTF8.self))")
            for _ in 0..<200 where process.isRunning { try await Task.sleep(for: .milliseconds(50)) }
            #expect(!process.isRunning)
            #expect(process.terminationStatus == 0)
            #expect(process.terminationReason == .exit)
        }
    }
}
