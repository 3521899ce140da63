import Foundation
import Logging
import TestSupport
import Testing

@testable import TranscodeCore
@testable import TranscodeHTTP
@testable import TranscodeServer

/// `/media` hits answered from memory on the event loop (`MediaHitHandler`) are the router's answers, in
/// request order, and see takedowns and files changed on disk at once.
@Suite(.tags(.integration), .timeLimit(.minutes(10))) struct MediaHitHandlerTests {
    /// One answer read off a raw connection.
    struct RawResponse {
        var status: Int
        var headers: [(name: String, value: String)]
        var body: [UInt8]

        func header(_ name: String) -> String? {
            self.headers.first { $0.name.lowercased() == name.lowercased() }?.value
        }
    }

    /// Sends `requests` in one write (pipelined) and reads `bodiless.count` answers; `bodiless[i]` says the
    /// i-th answers a HEAD (no body whatever its Content-Length). Stops early when the server closes; with
    /// `awaitingClose`, waits up to 2 s after the last answer to see whether it does.
    /// Runs on a dispatch thread: its blocking reads must not hold one of the cooperative pool's threads, which
    /// the router's answers need (two such reads at once stalled every router answer).
    static func exchange(port: Int, _ requests: String, bodiless: [Bool], awaitingClose: Bool = false) async throws
        -> (answers: [RawResponse], closed: Bool)
    {
        try await Self.exchange(port: port, Array(requests.utf8), bodiless: bodiless, awaitingClose: awaitingClose)
    }

    static func exchange(port: Int, _ requests: [UInt8], bodiless: [Bool], awaitingClose: Bool = false) async throws
        -> (answers: [RawResponse], closed: Bool)
    {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                continuation.resume(
                    with: Result {
                        try Self.blockingExchange(
                            port: port, requests, bodiless: bodiless, awaitingClose: awaitingClose)
                    })
            }
        }
    }

    private static func blockingExchange(port: Int, _ requests: [UInt8], bodiless: [Bool], awaitingClose: Bool) throws
        -> (answers: [RawResponse], closed: Bool)
    {
        let socket = try RawSocket(port: port)
        var timeout = timeval(tv_sec: 30, tv_usec: 0)
        setsockopt(socket.descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        #expect(socket.send(requests))
        var buffer: [UInt8] = []
        var answers: [RawResponse] = []
        var closed = false
        func receive() -> Bool {
            var chunk = [UInt8](repeating: 0, count: 65536)
            let count = recv(socket.descriptor, &chunk, chunk.count, 0)
            guard count > 0 else {
                closed = count == 0
                return false
            }
            buffer += chunk[0..<count]
            return true
        }
        let separator = Array("\r\n\r\n".utf8)
        while answers.count < bodiless.count {
            guard let end = buffer.firstRange(of: separator) else {
                if !receive() { break }
                continue
            }
            let lines = String(decoding: buffer[..<end.lowerBound], as: UTF8.self).components(separatedBy: "\r\n")
            let status = Int(lines[0].split(separator: " ")[1]) ?? 0
            let headers = lines.dropFirst().map { line in
                let colon = line.firstIndex(of: ":") ?? line.endIndex
                return (
                    String(line[..<colon]),
                    String(line[colon...].dropFirst()).trimmingCharacters(in: .whitespaces)
                )
            }
            let length =
                bodiless[answers.count]
                ? 0 : headers.first { $0.0.lowercased() == "content-length" }.flatMap { Int($0.1) } ?? 0
            while buffer.count < end.upperBound + length, receive() {}
            guard buffer.count >= end.upperBound + length else { break }
            answers.append(
                RawResponse(
                    status: status, headers: headers, body: Array(buffer[end.upperBound..<(end.upperBound + length)])))
            buffer.removeFirst(end.upperBound + length)
        }
        if awaitingClose, answers.count == bodiless.count, !closed {
            var byte: UInt8 = 0
            var short = timeval(tv_sec: 2, tv_usec: 0)
            setsockopt(socket.descriptor, SOL_SOCKET, SO_RCVTIMEO, &short, socklen_t(MemoryLayout<timeval>.size))
            closed = recv(socket.descriptor, &byte, 1, 0) == 0
        }
        return (answers, closed)
    }

    /// A request as the tests send it: method, path (with any query), extra header lines.
    typealias Probe = (method: String, path: String, headers: [String])

    /// Sends `probe` three times, on three connections one after the other: with a one-byte body (which both
    /// handlers leave to the router; request id `router-<id>`), then without (answered ahead of the HTTP codec
    /// by `MediaHitFront`; `memory-<id>`), then without but with a field of non-ASCII bytes (which the front
    /// leaves to the codec, and `MediaHitHandler` answers behind it; `behind-<id>`). Pipelined on one
    /// connection the later ones would wait for the router and be answered by it too.
    static func threeWays(_ harness: Harness, _ probe: Probe, id: String) async throws -> (
        router: RawResponse, memory: RawResponse, behind: RawResponse
    ) {
        let head =
            "\(probe.method) \(probe.path) HTTP/1.1\r\nHost: 127.0.0.1\r\n" + probe.headers.map { $0 + "\r\n" }.joined()
        let bodiless = [probe.method == "HEAD"]
        func answer(_ request: String) async throws -> RawResponse {
            try #require(try await Self.exchange(port: harness.appPort, request, bodiless: bodiless).answers.first)
        }
        let router = try await answer(head + "X-Request-Id: router-\(id)\r\nContent-Length: 1\r\n\r\nx")
        let memory = try await answer(head + "X-Request-Id: memory-\(id)\r\n\r\n")
        let behind = try await answer(head + "X-Pad: caf\u{e9}\r\nX-Request-Id: behind-\(id)\r\n\r\n")
        return (router, memory, behind)
    }

    /// An answer's headers but `Date` and `X-Request-Id`, comparable between the two ways.
    static func comparable(_ answer: RawResponse) -> [String] {
        answer.headers.filter { !["date", "x-request-id"].contains($0.name.lowercased()) }
            .map { "\($0.name.lowercased()): \($0.value)" }.sorted()
    }

    static func memoryAnswers(_ harness: Harness) async throws -> Int {
        try await Self.counter(harness, "transcode_media_memory_answers_total")
    }

    /// Of the memory answers, those written ahead of the HTTP codec (`MediaHitFront`).
    static func answersAhead(_ harness: Harness) async throws -> Int {
        try await Self.counter(harness, "transcode_media_answers_ahead_total")
    }

    static func counter(_ harness: Harness, _ name: String) async throws -> Int {
        let text = try await harness.request(.GET, "/metrics").text
        let line = text.split(separator: "\n").first { $0.hasPrefix(name + " ") }
        return Int(line?.split(separator: " ").last ?? "") ?? -1
    }

    /// Converts the corpus's cartoon_hotdog.gif and reads each of its files once (which keeps them in memory).
    static func withWarmObject(
        logger: Logger? = nil, _ body: @Sendable (Harness, ObjectKey) async throws -> Void
    ) async throws {
        try await withHarness(logger: logger, configure: { $0.log.level = .info }) { harness in
            let reply = try await harness.transcode(url: harness.originURL("/corpus/cartoon_hotdog.gif"))
            let key = try #require(ObjectKey(try reply.json()["key"] as? String ?? ""))
            for ext in ["mp4", "jpg", "json"] {
                #expect(try await harness.request(.GET, "/media/\(key).\(ext)").status == 200)
            }
            try await body(harness, key)
        }
    }

    /// Converts the corpus's photo_cats_4frames.gif, whose MP4 is larger than the small-file limit, and asks for
    /// its first two bytes (Safari's probe), which keeps the file's head in memory; `body` gets the key and the
    /// MP4's bytes.
    static func withLargeFileKept(
        configure: (inout ServerConfiguration) -> Void = { _ in },
        _ body: @Sendable (Harness, ObjectKey, [UInt8]) async throws -> Void
    ) async throws {
        try await withHarness(configure: configure) { harness in
            let reply = try await harness.transcode(url: harness.originURL("/corpus/photo_cats_4frames.gif"))
            let key = try #require(ObjectKey(try reply.json()["key"] as? String ?? ""))
            let file = [UInt8](
                try Data(contentsOf: URL(fileURLWithPath: harness.services.cache.objects.objectPath(key, "mp4"))))
            try #require(file.count > HitMemory.smallFileLimit)
            let probe = try await harness.request(.GET, "/media/\(key).mp4", headers: [("Range", "bytes=0-1")])
            try #require(probe.status == 206 && probe.body == Array(file[0...1]))
            try await body(harness, key, file)
        }
    }

    /// Each request is sent three ways (`threeWays`): to the router, and answered from memory ahead of the HTTP
    /// codec and behind it. The answers are the same but for `Date` and `X-Request-Id`.
    @Test func answersAreTheRoutersByteForByte() async throws {
        let recorder = AccessLogTests.Recorder()
        try await Self.withWarmObject(logger: recorder.logger) { harness, key in
            let digest = try #require(try harness.services.cache.objects.metadata(key)?.mp4Sha256)
            let etag = "\"\(key).mp4.\(digest.prefix(32))\""
            let cases: [Probe] = [
                ("GET", "/media/\(key).mp4", []),
                ("GET", "/media/\(key).jpg", []),
                ("GET", "/media/\(key).json", []),
                ("GET", "/media/\(key).mp4?t=1", []),
                ("GET", "/media/\(key).mp4", ["Range: bytes=4-11"]),
                ("GET", "/media/\(key).mp4", ["Range: bytes=-10"]),
                ("GET", "/media/\(key).mp4", ["Range: bytes=100-"]),
                ("GET", "/media/\(key).mp4", ["Range: bytes=99999999-"]),
                ("GET", "/media/\(key).mp4", ["Range: bytes=0-1,4-5"]),
                ("GET", "/media/\(key).mp4", ["If-None-Match: \(etag)"]),
                ("GET", "/media/\(key).mp4", ["If-None-Match: \"other\", W/\(etag)"]),
                ("GET", "/media/\(key).mp4", ["Range: bytes=0-1", "If-Range: \"other\""]),
                ("GET", "/media/\(key).mp4", ["Range: bytes=0-1", "If-Range: \(etag)"]),
                ("GET", "/media/\(key).mp4", ["Origin: https://pages.example", "Range: bytes=0-1"]),
                ("HEAD", "/media/\(key).mp4", []),
                ("HEAD", "/media/\(key).jpg", ["Range: bytes=0-9"]),
            ]
            let before = try await Self.memoryAnswers(harness)
            let aheadBefore = try await Self.answersAhead(harness)
            var viaMemory: [Int] = []
            var ahead: [Int] = []
            for (index, request) in cases.enumerated() {
                let (router, memory, behind) = try await Self.threeWays(harness, request, id: String(index))
                viaMemory.append(try await Self.memoryAnswers(harness) - before)
                ahead.append(try await Self.answersAhead(harness) - aheadBefore)
                for (way, answer) in [("memory", memory), ("behind", behind)] {
                    #expect(answer.status == router.status, "\(request)")
                    #expect(Self.comparable(answer) == Self.comparable(router), "\(request)")
                    #expect(answer.body == router.body, "\(request)")
                    #expect(answer.header("X-Request-Id") == "\(way)-\(index)")
                    #expect(answer.header("Date") != nil)
                    let line = try #require(recorder.requests(withID: "\(way)-\(index)").first)
                    #expect(line.metadata["http.route"] == "/media/{file}")
                    #expect(line.metadata["http.status"] == String(answer.status))
                    #expect(line.metadata["http.method"] == request.method)
                    #expect(line.metadata["http.bytes"] == String(answer.body.count))
                }
            }
            // Each request twice from memory (once ahead of the codec, once behind it), none of those with a body.
            #expect(viaMemory == (1...cases.count).map { 2 * $0 })
            #expect(ahead == Array(1...cases.count))
            // Spot checks, so that two wrong answers cannot agree.
            let (answers, _) = try await Self.exchange(
                port: harness.appPort,
                "GET /media/\(key).mp4 HTTP/1.1\r\nHost: x\r\nRange: bytes=4-11\r\nOrigin: https://a.example\r\n\r\n",
                bodiless: [false])
            let ranged = try #require(answers.first)
            #expect(ranged.status == 206)
            #expect(ranged.header("Content-Range")?.hasPrefix("bytes 4-11/") == true)
            #expect(
                ranged.body
                    == Array(
                        try Data(
                            contentsOf: URL(fileURLWithPath: harness.services.cache.objects.objectPath(key, "mp4")))[
                                4...11]))
            #expect(ranged.header("Access-Control-Allow-Origin") == "*")
            #expect(ranged.header("Access-Control-Expose-Headers")?.contains("Content-Range") == true)
        }
    }

    static func cacheHits(_ harness: Harness) async throws -> Int {
        let text = try await harness.request(.GET, "/metrics").text
        let line = text.split(separator: "\n").first { $0.hasPrefix("transcode_cache_hits_total ") }
        return Int(line?.split(separator: " ").last ?? "") ?? -1
    }

    /// Hits of the signed route whose link is fresh are answered from memory too: the route's answer (its
    /// `Cache-Control`, log line under `/v1/**`, a cache hit counted), and a takedown of the URL is obeyed by
    /// the very next request.
    @Test func signedRouteHitsAreTheRoutesToo() async throws {
        let recorder = AccessLogTests.Recorder()
        try await withHarness(
            logger: recorder.logger,
            configure: {
                $0.log.level = .info
                $0.signing.keys = [SourceRouteTests.key]
                $0.signing.salts = [SourceRouteTests.salt]
                $0.authTokens = [SourceRouteTests.token]
            }
        ) { harness in
            let url = harness.originURL("/corpus/cartoon_hotdog.gif")
            let video = SourceRouteTests.signed(url)
            let poster = SourceRouteTests.signed(url, "jpg")
            for path in [video, poster] {
                #expect(try await harness.request(.GET, path).status == 200)
            }
            let cases: [Probe] = [
                ("GET", video, []),
                ("GET", poster, []),
                ("GET", video + "?utm=1", []),
                ("GET", video, ["Range: bytes=10-19"]),
                ("GET", video, ["Origin: https://pages.example"]),
                ("HEAD", video, []),
            ]
            let before = try await Self.memoryAnswers(harness)
            let aheadBefore = try await Self.answersAhead(harness)
            let hitsBefore = try await Self.cacheHits(harness)
            for (index, request) in cases.enumerated() {
                let (router, memory, behind) = try await Self.threeWays(harness, request, id: "s\(index)")
                let routerLine = try #require(recorder.requests(withID: "router-s\(index)").first)
                for (way, answer) in [("memory", memory), ("behind", behind)] {
                    #expect(answer.status == router.status, "\(request)")
                    #expect(Self.comparable(answer) == Self.comparable(router), "\(request)")
                    #expect(answer.body == router.body, "\(request)")
                    #expect(answer.header("Cache-Control") == "public, max-age=3600")
                    let line = try #require(recorder.requests(withID: "\(way)-s\(index)").first)
                    #expect(line.metadata["http.route"] == routerLine.metadata["http.route"])
                    #expect(line.metadata["http.status"] == routerLine.metadata["http.status"])
                }
                #expect(try await Self.memoryAnswers(harness) == before + 2 * (index + 1), "\(request)")
                #expect(try await Self.answersAhead(harness) == aheadBefore + index + 1, "\(request)")
            }
            // Each request counted as a cache hit, however answered.
            #expect(try await Self.cacheHits(harness) == hitsBefore + 3 * cases.count)

            let encoded = url.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
            let takedown = try await harness.request(
                .DELETE, "/v1/sources?url=\(encoded)&takedown=true&reason=test",
                headers: [("Authorization", "Bearer \(SourceRouteTests.token)")])
            #expect(takedown.status == 200)
            let (answers, _) = try await Self.exchange(
                port: harness.appPort, "GET \(video) HTTP/1.1\r\nHost: x\r\n\r\n", bodiless: [false])
            #expect(answers.first?.status == 451)
        }
    }

    /// Of a file larger than the small-file limit only the head is kept: ranges inside it (players' first
    /// probe, the `moov`) and HEAD are answered from memory, the route's answer exactly; ranges past it and the
    /// whole file go to the route, and their bytes are the file's.
    @Test func aLargeFilesHeadIsAnsweredFromMemory() async throws {
        // The route reads the head once (Safari's probe) and keeps it.
        try await Self.withLargeFileKept { harness, key, file in
            let head = HitMemory.headLength
            let digest = try #require(try harness.services.cache.objects.metadata(key)?.mp4Sha256)

            let inside: [Probe] = [
                ("GET", "/media/\(key).mp4", ["Range: bytes=0-1"]),
                ("GET", "/media/\(key).mp4", ["Range: bytes=100-\(head - 1)"]),
                ("GET", "/media/\(key).mp4", ["If-None-Match: \"\(key).mp4.\(digest.prefix(32))\""]),
                ("HEAD", "/media/\(key).mp4", []),
            ]
            for (index, probe) in inside.enumerated() {
                let before = try await Self.memoryAnswers(harness)
                let (router, memory, behind) = try await Self.threeWays(harness, probe, id: "head\(index)")
                #expect(try await Self.memoryAnswers(harness) == before + 2, "\(probe)")
                for answer in [memory, behind] {
                    #expect(answer.status == router.status && answer.body == router.body, "\(probe)")
                    #expect(Self.comparable(answer) == Self.comparable(router), "\(probe)")
                }
            }
            let (inHead, _) = try await Self.exchange(
                port: harness.appPort,
                "GET /media/\(key).mp4 HTTP/1.1\r\nHost: x\r\nRange: bytes=100-\(head - 1)\r\n\r\n",
                bodiless: [false])
            #expect(inHead.first?.body == Array(file[100..<head]))

            // Past the head: ahead of the codec from the file (sendfile), the route's answer exactly; behind the
            // codec, by the route.
            let outside: [(range: String?, bytes: ArraySlice<UInt8>)] = [
                ("bytes=\(head - 10)-\(head + 10)", file[(head - 10)...(head + 10)]),
                ("bytes=\(file.count - 5)-", file[(file.count - 5)...]),
                ("bytes=\(head)-", file[head...]),
                (nil, file[...]),
            ]
            for (index, (range, bytes)) in outside.enumerated() {
                let before = try await Self.memoryAnswers(harness)
                let fromFile = try await Self.counter(harness, "transcode_media_file_answers_total")
                let probe: Probe = ("GET", "/media/\(key).mp4", range.map { ["Range: \($0)"] } ?? [])
                let (router, sent, behind) = try await Self.threeWays(harness, probe, id: "file\(index)")
                #expect(router.status == (range == nil ? 200 : 206))
                #expect(router.body == Array(bytes), "\(range ?? "whole")")
                for answer in [sent, behind] {
                    #expect(answer.status == router.status && answer.body == router.body, "\(probe)")
                    #expect(Self.comparable(answer) == Self.comparable(router), "\(probe)")
                }
                #expect(try await Self.memoryAnswers(harness) == before, "\(range ?? "whole")")
                #expect(
                    try await Self.counter(harness, "transcode_media_file_answers_total") == fromFile + 1,
                    "\(range ?? "whole")")
            }
            // Pipelined behind a file answer, and with `Connection: close` after it: in order, then closed.
            let (answers, closed) = try await Self.exchange(
                port: harness.appPort,
                "GET /media/\(key).mp4 HTTP/1.1\r\nHost: x\r\n\r\n"
                    + "GET /media/\(key).mp4 HTTP/1.1\r\nHost: x\r\nRange: bytes=0-1\r\n\r\n"
                    + "GET /media/\(key).mp4 HTTP/1.1\r\nHost: x\r\nRange: bytes=\(head)-\r\nConnection: close\r\n\r\n"
                    + "GET /media/\(key).mp4 HTTP/1.1\r\nHost: x\r\n\r\n",
                bodiless: [false, false, false, false], awaitingClose: true)
            #expect(answers.map(\.body) == [file, Array(file[0...1]), Array(file[head...])])
            #expect(closed)
        }
    }

    /// A large file's bytes are sent from a descriptor opened only while the file is the very one whose head was
    /// checked and kept: not once it was rewritten in place or replaced.
    @Test func fileAnswersSendTheFileChecked() async throws {
        try await Self.withLargeFileKept { harness, key, _ in
            let cache = harness.services.cache
            let path = cache.objects.objectPath(key, "mp4")
            let identity = try #require(cache.objects.memoryHit(key, fileExtension: "mp4")).file
            let descriptor = try #require(cache.objects.openUnchanged(key, fileExtension: "mp4", identity: identity))
            close(descriptor)
            // The same bytes written again in place: another change time, another file as far as a hit goes.
            let bytes = try Data(contentsOf: URL(fileURLWithPath: path))
            try bytes.write(to: URL(fileURLWithPath: path))
            #expect(cache.objects.openUnchanged(key, fileExtension: "mp4", identity: identity) == nil)
            #expect(cache.objects.memoryHit(key, fileExtension: "mp4") == nil)
        }
    }

    /// HTTP/1.1 answers in request order: a hit behind a request the router is still answering waits for it.
    @Test func pipelinedAnswersKeepRequestOrder() async throws {
        try await Self.withWarmObject { harness, key in
            let gif = TinyGIF(width: 96, height: 64, loopCount: 0, frames: (0..<40).map { (UInt8($0 % 4), 4) }).bytes
            let upload =
                Array(
                    "POST /transcode HTTP/1.1\r\nHost: x\r\nContent-Type: image/gif\r\nContent-Length: \(gif.count)\r\n\r\n"
                        .utf8) + gif
            let hit = Array("GET /media/\(key).json HTTP/1.1\r\nHost: x\r\n\r\n".utf8)
            let health = Array("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n".utf8)
            let before = try await Self.memoryAnswers(harness)
            let (answers, closed) = try await Self.exchange(
                port: harness.appPort, hit + upload + hit + health + hit + hit,
                bodiless: Array(repeating: false, count: 6),
                awaitingClose: true)
            try #require(answers.count == 6)
            #expect(!closed)
            let stored = try await harness.request(.GET, "/media/\(key).json").body
            #expect(answers[0].body == stored)
            let converted = try #require(
                try JSONSerialization.jsonObject(with: Data(answers[1].body)) as? [String: Any])
            #expect(converted["key"] as? String != nil, "the upload's answer must come second")
            #expect(converted["key"] as? String != key.rawValue)
            #expect(answers[2].body == stored)
            #expect(String(decoding: answers[3].body, as: UTF8.self).hasPrefix("ok"))
            #expect(answers[4].body == stored && answers[5].body == stored)
            // The first hit from memory; those behind the upload waited for the router (read while it was busy).
            #expect(try await Self.memoryAnswers(harness) - before >= 1)
        }
    }

    /// `Connection: close` ends the connection after the answer; a request pipelined behind it is not read.
    @Test func connectionCloseEndsTheConnection() async throws {
        try await Self.withWarmObject { harness, key in
            let before = try await Self.memoryAnswers(harness)
            let (answers, closed) = try await Self.exchange(
                port: harness.appPort,
                "GET /media/\(key).jpg HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                    + "GET /media/\(key).jpg HTTP/1.1\r\nHost: x\r\n\r\n",
                bodiless: [false, false], awaitingClose: true)
            #expect(answers.count == 1)
            #expect(answers.first?.status == 200)
            #expect(answers.first?.header("Connection") == "close")
            #expect(closed)
            // By the handler (the router closes on `Connection: close` too).
            #expect(try await Self.memoryAnswers(harness) == before + 1)
        }
    }

    /// Bytes kept in memory are answered only while the files on disk are the ones read: a takedown, files
    /// removed by another process (`cache purge` beside the server), or a link put in a file's place are seen
    /// by the very next request for that file (a hit checks the metadata and the file it serves, not the
    /// object's third file: a link in the poster's place is found by the next request for the poster).
    @Test func takedownsAndChangedFilesAreSeenAtOnce() async throws {
        try await Self.withWarmObject { harness, key in
            let cache = harness.services.cache
            func status(_ ext: String) async throws -> Int {
                let (answers, _) = try await Self.exchange(
                    port: harness.appPort, "GET /media/\(key).\(ext) HTTP/1.1\r\nHost: x\r\n\r\n", bodiless: [false])
                return answers.first?.status ?? 0
            }
            #expect(try await status("mp4") == 200)
            // A link to an identical copy in the poster's place: not followed, the object quarantined.
            let poster = cache.objects.objectPath(key, "jpg")
            let copy = harness.services.cache.root + "/poster-copy.jpg"
            try FileManager.default.copyItem(atPath: poster, toPath: copy)
            try FileManager.default.removeItem(atPath: poster)
            try FileManager.default.createSymbolicLink(atPath: poster, withDestinationPath: copy)
            #expect(try await status("jpg") == 404)
            #expect(try await status("mp4") == 404)
        }
        try await Self.withWarmObject { harness, key in
            let cache = harness.services.cache
            try cache.tombstones.bury([.object(key)], reason: "test")
            let (answers, _) = try await Self.exchange(
                port: harness.appPort, "GET /media/\(key).mp4 HTTP/1.1\r\nHost: x\r\n\r\n", bodiless: [false])
            #expect(answers.first?.status == 451)
        }
        try await Self.withWarmObject { harness, key in
            // What `cache purge` does from another process: the files go, the server is not told.
            for ext in ["json", "mp4", "jpg"] {
                try FileManager.default.removeItem(atPath: harness.services.cache.objects.objectPath(key, ext))
            }
            let (answers, _) = try await Self.exchange(
                port: harness.appPort, "GET /media/\(key).mp4 HTTP/1.1\r\nHost: x\r\n\r\n", bodiless: [false])
            #expect(answers.first?.status == 404)
        }
    }
}
