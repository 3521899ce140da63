import AsyncHTTPClient
import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import NIOHTTP1
import TestSupport
import Testing

@testable import TranscodeCore
@testable import TranscodeHTTP
@testable import TranscodeServer

/// A response as a test sees it.
struct Reply: Sendable {
    let status: Int
    let headers: HTTPHeaders
    let body: [UInt8]

    var text: String { String(decoding: self.body, as: UTF8.self) }
    func json() throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(self.body)) as? [String: Any])
    }
    var errorCode: String? {
        ((try? JSONSerialization.jsonObject(with: Data(self.body))) as? [String: Any])
            .flatMap { $0["error"] as? [String: Any] }?["code"] as? String
    }
}

/// The real application (built with `buildApplication`) on port 0 against a temporary cache, next to a
/// local origin, with an HTTP client that can send many requests at once.
struct Harness: Sendable {
    let origin: Origin
    let originPort: Int
    let appPort: Int
    let services: AppServices
    let client: HTTPClient

    /// The node's own batches (`batch` on the embedded default).
    var localBatches: BatchRunner { self.services.batches as! BatchRunner }

    func originURL(_ path: String, host: String = "127.0.0.1") -> String { "http://\(host):\(self.originPort)\(path)" }

    func request(
        _ method: HTTPMethod, _ path: String, headers: [(String, String)] = [], body: [UInt8]? = nil,
        timeout: TimeAmount = .seconds(60)
    ) async throws -> Reply {
        var request = HTTPClientRequest(url: "http://127.0.0.1:\(self.appPort)\(path)")
        request.method = method
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let body { request.body = .bytes(ByteBuffer(bytes: body)) }
        let response = try await self.client.execute(request, timeout: timeout)
        let bytes = try await response.body.collect(upTo: 100 * 1024 * 1024)
        return Reply(status: Int(response.status.code), headers: response.headers, body: Array(bytes.readableBytesView))
    }

    /// `POST /v1/rewrite` of an HTML document; `query` starts with `?` when given.
    func rewrite(_ html: String, query: String = "", timeout: TimeAmount = .seconds(60)) async throws -> Reply {
        try await self.request(
            .POST, "/v1/rewrite" + query, headers: [("Content-Type", "text/html")], body: Array(html.utf8),
            timeout: timeout)
    }

    /// `POST /transcode` with a JSON body.
    func transcode(url: String, background: String? = nil, headers: [(String, String)] = []) async throws -> Reply {
        var object: [String: String] = ["url": url]
        if let background { object["background"] = background }
        let body = try JSONSerialization.data(withJSONObject: object)
        return try await self.request(
            .POST, "/transcode", headers: [("Content-Type", "application/json")] + headers, body: Array(body))
    }

    /// Starts a job whose download takes a second (the origin's `/delayed/1000/cartoon_hotdog.gif`) and
    /// returns once the origin has been asked for it: with one worker and no queue, nothing else is admitted
    /// until the returned task ends.
    func startSlowJob() async throws -> Task<Reply, any Error> {
        let path = "/delayed/1000/cartoon_hotdog.gif"
        let slow = Task { try await self.transcode(url: self.originURL(path)) }
        for _ in 0..<100 where self.origin.count(path) == 0 {
            try await Task.sleep(for: .milliseconds(20))
        }
        return slow
    }

    /// `POST /transcode` with the animation as the body.
    func upload(_ gif: [UInt8], contentType: String = "image/gif", headers: [(String, String)] = []) async throws
        -> Reply
    {
        try await self.request(.POST, "/transcode", headers: [("Content-Type", contentType)] + headers, body: gif)
    }
}

/// Runs an origin and the application, calls `body`, and stops both.
/// - Parameters:
///   - cacheDirectory: reuse a cache (restart tests); a temporary one otherwise.
///   - origin: reuse an origin's counters across restarts.
func withHarness(
    cacheDirectory: String? = nil, origin: Origin = Origin(), logger: Logger? = nil,
    sharedStore: (any ResultStore)? = nil, jobs: (@Sendable (any TranscodeJobs) -> any TranscodeJobs)? = nil,
    configure: (inout ServerConfiguration) -> Void = { _ in }, _ body: @Sendable (Harness) async throws -> Void
) async throws {
    try await withTemporaryDirectory { temporary in
        var configuration = ServerConfiguration()
        configuration.host = "127.0.0.1"
        configuration.port = 0
        configuration.cache.directory = cacheDirectory ?? temporary + "/cache"
        configuration.download.allowLoopback = true
        // Generous: under the whole suite the origin (a Hummingbird app on the same starved cooperative pool)
        // once took longer than 10 s to serve a 1 MB GIF. Tests of the deadline set their own.
        configuration.download.timeoutSeconds = 60
        configuration.transcode.workers = 2
        // A POST answered 200 once its conversion ends, however loaded the machine: beside two busy loops a full tier 1
        // took longer than the default 30 s on one GIF, and DedupeTests got 202 for 200. Tests of the 202 path set
        // their own (JobTests: 0.1 s).
        configuration.transcode.syncWaitSeconds = 300
        // Format upgrades only where a test asks for them (`NegotiatedImageTests.configure`): a lazy rewrite queues its
        // GIFs' AVIFs, tens of CPU-seconds each in a debug build, and the rewrite tests' upgrades left the whole tier
        // so short of CPU that other tests' POSTs outlasted their wait (202 for 200).
        configuration.transcode.upgradeQueueLength = 0
        configuration.log.level = .warning
        configure(&configuration)
        // The client lets idle connections go well before the server closes them (tests shorten its idle
        // deadline to 0.5-3 s): a request sent on a connection the server is closing at that moment fails with
        // `remoteConnectionClosed`, which a full run, the machine busy, once hit. A connection kept alive is closed
        // at the head deadline too (the next head must come within it of the last answer's end): the client let one
        // idle 1.5 s where the server closed it at 1 s, and a full tier-1 run hit that (`aSlowReaderGetsTheWholeFile`).
        let serverIdle = min(configuration.http.idleTimeoutSeconds, configuration.http.headerTimeoutSeconds)
        let idleMilliseconds = Int64(min(5, serverIdle / 2) * 1000)
        let (application, services) = try buildApplication(
            configuration: configuration, logger: logger, sharedStore: sharedStore, jobs: jobs)
        let originApplication = Application(
            router: origin.router(), configuration: .init(address: .hostname("127.0.0.1", port: 0)))
        // The body's error is carried out of both live tests, not thrown through them: HummingbirdTesting cancels
        // its server's task group when the test throws, and a connection accepted but not yet handled is then
        // dropped with its writer unfinished, which NIO answers with a fatal error (one failed browser test
        // took the whole system tier's process down). Returned, the servers shut down gracefully.
        let failure: (any Error)? = try await originApplication.test(.live) { originClient in
            try await application.test(.live) { appClient in
                var clientConfiguration = HTTPClient.Configuration()
                clientConfiguration.connectionPool = .init(
                    idleTimeout: .milliseconds(idleMilliseconds), concurrentHTTP1ConnectionsPerHostSoftLimit: 64)
                clientConfiguration.redirectConfiguration = .disallow
                let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: clientConfiguration)
                let harness = Harness(
                    origin: origin, originPort: try #require(originClient.port), appPort: try #require(appClient.port),
                    services: services, client: client)
                do {
                    try await body(harness)
                } catch {
                    try? await client.shutdown()
                    return error
                }
                try await client.shutdown()
                return nil
            }
        }
        if let failure { throw failure }
    }
}
