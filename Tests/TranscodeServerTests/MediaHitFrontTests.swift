import Foundation
import HTTPTypes
import Logging
import NIOCore
import NIOEmbedded
import NIOHTTP1
import NIOHTTPTypes
import NIOHTTPTypesHTTP1
import TestSupport
import Testing

@testable import TranscodeCore
@testable import TranscodeHTTP
@testable import TranscodeServer

/// `MediaHitFront` reads request heads from bytes and frames the stream for the decoder behind it: what it
/// reads, what it leaves alone, and that a request hidden in a body is never taken for one.
@Suite(.tags(.integration), .timeLimit(.minutes(10))) struct MediaHitFrontTests {
    static func head(_ text: String) -> RawRequestHead? {
        Array(text.utf8).withUnsafeBytes { RawRequestHead($0) }
    }

    @Test func readsTheFieldsAHitNeeds() throws {
        let head = try #require(
            Self.head(
                "GET /media/a.mp4?t=1 HTTP/1.1\r\nHost: x\r\nrange:  bytes=0-1 \r\nIF-NONE-MATCH:\t\"a\"\r\n"
                    + "Origin: https://o.example\r\nX-Request-Id: abc\r\nUser-Agent: test/1\r\nRange: bytes=4-5\r\n\r\n"
            ))
        #expect(head.method == .get)
        #expect(head.target == "/media/a.mp4?t=1")
        #expect(head.mayBeAnswered)
        #expect(head.bodyLength == 0)
        #expect(head.fields.range == "bytes=0-1, bytes=4-5")
        #expect(head.fields.ifNoneMatch == "\"a\"")
        #expect(head.fields.origin == "https://o.example")
        #expect(head.fields.requestID == "abc")
        // The same as read from the fields the HTTP codec decodes (User-Agent and Host are not read).
        let decoded: HTTPFields = [
            HTTPField.Name("Host")!: "x", .range: "bytes=0-1", .ifNoneMatch: "\"a\"", .origin: "https://o.example",
            HTTPField.Name("X-Request-Id")!: "abc", .userAgent: "test/1", .range: "bytes=4-5",
        ]
        #expect(head.fields == HitFields(decoded))
        #expect(Self.head("HEAD /media/a.mp4 HTTP/1.1\r\n\r\n")?.method == .head)
    }

    /// Every field a hit reads, including an empty one, as from the fields the HTTP codec decodes.
    @Test func readsEveryFieldAsTheCodecDoes() throws {
        let head = try #require(
            Self.head(
                "POST /transcode HTTP/1.1\r\nIf-Range: \"e\"\r\nconnection: keep-alive\r\n"
                    + "Content-Type: application/json\r\nAuthorization: Bearer t\r\nOrigin:\r\n"
                    + "Connection: Upgrade\r\nContent-Length: 2\r\n\r\n"))
        let decoded: HTTPFields = [
            .ifRange: "\"e\"", .connection: "keep-alive", .contentType: "application/json",
            .authorization: "Bearer t", .origin: "", .connection: "Upgrade", .contentLength: "2",
        ]
        #expect(head.fields == HitFields(decoded))
        #expect(head.fields.connection == "keep-alive, Upgrade")
        #expect(head.fields.origin == "")
    }

    /// `close` is a token of `Connection`, as the codec reads it: not any value containing it.
    @Test func closeIsAToken() {
        func closes(_ value: String) -> Bool {
            var fields = HitFields()
            fields.connection = value
            return fields.asksToClose
        }
        #expect(closes("close"))
        #expect(closes("Keep-Alive, CLOSE "))
        #expect(closes("x,\tclose"))
        #expect(!closes("notclose"))
        #expect(!closes("close-ish"))
        #expect(!closes("keep-alive"))
    }

    @Test func framesBodiesByContentLength() {
        let post = Self.head("POST /transcode HTTP/1.1\r\nHost: x\r\nContent-Length: 42\r\n\r\n")
        #expect(post?.bodyLength == 42)
        #expect(post?.mayBeAnswered == false)
        // A GET with a body, HTTP/1.0 and other methods are framed here but answered behind the codec.
        #expect(Self.head("GET /media/a.mp4 HTTP/1.1\r\nContent-Length: 0\r\n\r\n")?.mayBeAnswered == false)
        #expect(Self.head("GET /media/a.mp4 HTTP/1.0\r\n\r\n")?.mayBeAnswered == false)
        #expect(Self.head("DELETE /v1/objects/a HTTP/1.1\r\n\r\n")?.mayBeAnswered == false)
        #expect(Self.head("DELETE /v1/objects/a HTTP/1.1\r\n\r\n")?.bodyLength == 0)
    }

    /// Framing this handler cannot be sure of: the rest of the connection goes to the decoder.
    @Test func leavesUncertainFramingToTheDecoder() {
        let unknown = [
            "POST /transcode HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST /transcode HTTP/1.1\r\nContent-Length: 4\r\nContent-Length: 4\r\n\r\n",
            "POST /transcode HTTP/1.1\r\nContent-Length: 4, 4\r\n\r\n",
            "POST /transcode HTTP/1.1\r\nContent-Length: +4\r\n\r\n",
            "GET /media/a.mp4 HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n",
            "CONNECT 127.0.0.1:80 HTTP/1.1\r\n\r\n",
        ]
        for text in unknown { #expect(Self.head(text)?.bodyLength == nil, "\(text)") }
        let unread = [
            "GET /media/a.mp4 HTTP/1.1\nHost: x\r\n\r\n",  // bare LF
            "GET /media/a.mp4 HTTP/1.1\r\nHost: x\ry\r\n\r\n",  // bare CR
            "GET /media/a.mp4 HTTP/1.1\r\nX-A: a\r\n b\r\n\r\n",  // obs-fold
            "GET /media/a.mp4 HTTP/1.1\r\nX-A: caf\u{e9}\r\n\r\n",  // non-ASCII
            "GET /media/a.mp4 HTTP/1.1\r\nX-A : a\r\n\r\n",  // space before the colon
            "GET  /media/a.mp4 HTTP/1.1\r\n\r\n",
            "GET /media/a.mp4 HTTP/2.0\r\n\r\n",
            "\r\nGET /media/a.mp4 HTTP/1.1\r\n\r\n",
        ]
        for text in unread { #expect(Self.head(text) == nil, "\(text)") }
    }

    @Test func findsTheEndOfAHeadAcrossReads() {
        var buffer = ByteBufferAllocator().buffer(string: "GET / HTTP/1.1\r\nHost: x\r\n\r")
        #expect(RequestFraming.headEnd(buffer, from: 0) == .notYet)
        buffer.writeString("\nGET")
        #expect(RequestFraming.headEnd(buffer, from: 26) == .at(27))
        for unreadable in [
            "GET / HTTP/1.1\nHost", "GET / HTTP/1.1\r\nX: \r", "GET / HTTP/1.1\r\nX: caf\u{e9}", "GET /\0",
        ] {
            let buffer = ByteBufferAllocator().buffer(string: unreadable + "x")
            #expect(RequestFraming.headEnd(buffer, from: 0) == .unreadable, "\(unreadable.debugDescription)")
        }
    }

    /// Pipelined in one write: a hit, a POST whose body is the text of another request, a hit that asks to
    /// close. The text in the body is a body: three answers, in order, and none to the request in the body.
    @Test func aRequestInABodyIsNotARequest() async throws {
        try await MediaHitHandlerTests.withWarmObject { harness, key in
            let hidden = "GET /media/\(key).jpg HTTP/1.1\r\nHost: x\r\nX-Request-Id: hidden\r\n\r\n"
            let requests =
                "GET /media/\(key).jpg HTTP/1.1\r\nHost: x\r\nX-Request-Id: first\r\n\r\n"
                + "POST /transcode HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Request-Id: post\r\n"
                + "Content-Length: \(hidden.utf8.count)\r\n\r\n\(hidden)"
                + "GET /media/\(key).jpg HTTP/1.1\r\nHost: x\r\nX-Request-Id: last\r\nConnection: close\r\n\r\n"
            let (answers, closed) = try await MediaHitHandlerTests.exchange(
                port: harness.appPort, requests, bodiless: [false, false, false, false], awaitingClose: true)
            #expect(answers.map { $0.header("X-Request-Id") } == ["first", "post", "last"])
            #expect(answers.map(\.status) == [200, 400, 200])
            #expect(answers.last?.header("Content-Type") == "image/jpeg")
            #expect(closed)
        }
    }

    /// `http.answerAhead: false` sets the front aside: hits are still answered from memory, the same bytes, by
    /// the handler behind the decoder, and none ahead of it (what `scripts/bench-hits-ab --new-env` compares).
    @Test func withoutTheFrontHitsAreAnsweredBehindTheDecoder() async throws {
        try await withHarness(configure: { $0.http.answerAhead = false }) { harness in
            let reply = try await harness.transcode(url: harness.originURL("/corpus/cartoon_hotdog.gif"))
            let key = try #require(ObjectKey(try reply.json()["key"] as? String ?? ""))
            let routed = try await harness.request(.GET, "/media/\(key).jpg")
            #expect(routed.status == 200)
            let memory = try await MediaHitHandlerTests.memoryAnswers(harness)
            let ahead = try await MediaHitHandlerTests.answersAhead(harness)
            let (answers, _) = try await MediaHitHandlerTests.exchange(
                port: harness.appPort, "GET /media/\(key).jpg HTTP/1.1\r\nHost: x\r\n\r\n", bodiless: [false])
            #expect(answers.first?.status == 200)
            #expect(answers.first?.body == routed.body)
            #expect(try await MediaHitHandlerTests.memoryAnswers(harness) == memory + 1)
            #expect(try await MediaHitHandlerTests.answersAhead(harness) == ahead)
            #expect(ahead == 0)
        }
    }

    /// A head the decoder rejects (an unknown method; a request after an HTTP/1.0 one, which ends the
    /// connection) is answered with its error, which no hit behind it may overtake: none is answered ahead.
    @Test func aRejectedHeadIsNotOvertaken() async throws {
        try await MediaHitHandlerTests.withWarmObject { harness, key in
            let hit = "GET /media/\(key).jpg HTTP/1.1\r\nHost: x\r\n\r\n"
            let ahead = try await MediaHitHandlerTests.answersAhead(harness)
            let (rejected, closed) = try await MediaHitHandlerTests.exchange(
                port: harness.appPort, "FOO /media/\(key).jpg HTTP/1.1\r\nHost: x\r\n\r\n" + hit,
                bodiless: [false, false], awaitingClose: true)
            #expect(rejected.first?.status == 400, "\(rejected.map(\.status))")
            #expect(rejected.count == 1 && closed)
            let (old, _) = try await MediaHitHandlerTests.exchange(
                port: harness.appPort, "GET /media/\(key).jpg HTTP/1.0\r\n\r\n" + hit, bodiless: [false, false],
                awaitingClose: true)
            // The decoder's error for what follows, as without this handler.
            #expect(old.map(\.status) == [200, 400])
            #expect(try await MediaHitHandlerTests.answersAhead(harness) == ahead)
        }
    }

    /// A head the decoder refuses (a folded field, a NUL in a field, an unknown method) gets the service's JSON
    /// `bad-request`, never cached, after the hit before it, and the connection closes (issue 56: Hummingbird's bare
    /// 400 had no `Cache-Control`).
    @Test func aHeadTheDecoderRefusesGetsItsErrorInJSON() async throws {
        try await MediaHitHandlerTests.withWarmObject { harness, key in
            let hit = "GET /media/\(key).jpg HTTP/1.1\r\nHost: x\r\n\r\n"
            for refused in [
                "GET /media/\(key).jpg HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n",
                "GET /media/\(key).jpg HTTP/1.1\r\nHost: x\r\nX-A: a\u{0}b\r\n\r\n",
                "FOO /media/\(key).jpg HTTP/1.1\r\nHost: x\r\n\r\n",
            ] {
                let (answers, closed) = try await MediaHitHandlerTests.exchange(
                    port: harness.appPort, hit + refused, bodiless: [false, false], awaitingClose: true)
                #expect(answers.map(\.status) == [200, 400], "\(refused.debugDescription)")
                #expect(closed)
                let error = try #require(answers.last)
                #expect(error.header("Cache-Control") == "no-store", "\(refused.debugDescription)")
                #expect(error.header("X-Error-Code") == "bad-request")
                #expect(error.header("Content-Type") == "application/json; charset=utf-8")
                #expect(String(decoding: error.body, as: UTF8.self).contains(#""code":"bad-request""#))
                #expect(answers.first?.header("Content-Type") == "image/jpeg")
            }
            #expect(try await harness.request(.GET, "/media/\(key).jpg").status == 200)
        }
    }

    /// A head over the bound, on a live server: a hit first, then a request line (or a field) too long gets its
    /// JSON error, never cached, and the connection closes; the server goes on serving. Past 80 KB the decoder
    /// alone would have answered a bare 400.
    @Test func aHeadTooLongGetsItsErrorInJSON() async throws {
        try await MediaHitHandlerTests.withWarmObject { harness, key in
            let hit = "GET /media/\(key).jpg HTTP/1.1\r\nHost: x\r\n\r\n"
            let long = String(repeating: "a", count: 90 * 1024)
            for (request, status, code) in [
                ("GET /v1/\(long).mp4 HTTP/1.1\r\nHost: x\r\n\r\n", 414, "uri-too-long"),
                ("GET /media/\(key).jpg HTTP/1.1\r\nHost: x\r\nCookie: \(long)\r\n\r\n", 431, "header-too-large"),
            ] {
                let (answers, closed) = try await MediaHitHandlerTests.exchange(
                    port: harness.appPort, hit + request, bodiless: [false, false], awaitingClose: true)
                #expect(answers.map(\.status) == [200, status])
                #expect(answers.last?.header("X-Error-Code") == code)
                #expect(answers.last?.header("Cache-Control") == "no-store")
                #expect(answers.last?.header("Content-Type") == "application/json; charset=utf-8")
                #expect(closed)
            }
            let (after, _) = try await MediaHitHandlerTests.exchange(
                port: harness.appPort, "GET /media/\(key).jpg HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                bodiless: [false], awaitingClose: true)
            #expect(after.map(\.status) == [200])
        }
    }

    /// After a chunked body (not framed here) the rest of the connection goes through the codec: a request
    /// in the chunks is a body, and the hit after it is answered, behind the codec.
    @Test func afterAChunkedBodyTheCodecFrames() async throws {
        try await MediaHitHandlerTests.withWarmObject { harness, key in
            let hidden = "GET /media/\(key).json HTTP/1.1\r\nHost: x\r\n\r\n"
            let chunk = String(hidden.utf8.count, radix: 16)
            let post =
                "POST /transcode HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + "Transfer-Encoding: chunked\r\n\r\n\(chunk)\r\n\(hidden)\r\n0\r\n\r\n"
            let ahead = try await MediaHitHandlerTests.answersAhead(harness)
            let memory = try await MediaHitHandlerTests.memoryAnswers(harness)
            let socket = try RawSocket(port: harness.appPort)
            /// What arrives within 10 s, until it holds `end`.
            func receive(until end: String) async throws -> String {
                var text = ""
                let started = ContinuousClock.now
                while !text.contains(end), ContinuousClock.now - started < .seconds(10) {
                    try await Task.sleep(for: .milliseconds(20))
                    text += UploadTests.received(socket)
                }
                return text
            }
            #expect(socket.send(Array(post.utf8)))
            let first = try await receive(until: "}}")
            #expect(first.hasPrefix("HTTP/1.1 400"), "\(first)")
            // Sent once the router has answered, so that the handler behind the codec may answer it.
            #expect(socket.send(Array("GET /media/\(key).jpg HTTP/1.1\r\nHost: x\r\n\r\n".utf8)))
            let second = try await receive(until: "\r\n\r\n")
            #expect(second.hasPrefix("HTTP/1.1 200"), "\(second)")
            #expect(second.contains("image/jpeg"))
            #expect(!second.contains("application/json"))
            #expect(try await MediaHitHandlerTests.answersAhead(harness) == ahead)
            #expect(try await MediaHitHandlerTests.memoryAnswers(harness) == memory + 1)
        }
    }

    /// A cache-hit `POST /transcode` with a body the route answered before is answered ahead of the codec: the
    /// route's answer (but `Date` and `X-Request-Id`), its log line, a cache hit counted. What only the route
    /// may decide goes to it: a missing or wrong token, a page's request (CORS), another body, a taken-down
    /// URL.
    @Test func aTranscodeHitIsTheRoutesAnswer() async throws {
        let recorder = AccessLogTests.Recorder()
        let token = "front-token-0123456789"
        try await withHarness(
            logger: recorder.logger,
            configure: {
                $0.log.level = .info
                $0.authTokens = [token]
            }
        ) { harness in
            let url = harness.originURL("/corpus/cartoon_hotdog.gif")
            let body = "{\"url\": \"\(url)\"}"
            func post(_ extra: String = "", body: String = body, id: String) -> String {
                "POST /transcode HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    + "Authorization: Bearer \(token)\r\nX-Request-Id: \(id)\r\n\(extra)"
                    + "Content-Length: \(body.utf8.count)\r\n\r\n\(body)"
            }
            func answer(_ request: String) async throws -> MediaHitHandlerTests.RawResponse {
                try #require(
                    try await MediaHitHandlerTests.exchange(port: harness.appPort, request, bodiless: [false]).answers
                        .first)
            }
            #expect(try await answer(post(id: "first")).header("X-Cache") == "miss")
            let ahead = try await MediaHitHandlerTests.answersAhead(harness)
            let hits = try await MediaHitHandlerTests.cacheHits(harness)
            // The field of non-ASCII bytes makes the front leave the connection to the codec, and the router.
            // The route's first hit also remembers the URL's destination as allowed, which the front asks.
            let router = try await answer(post("X-Pad: caf\u{e9}\r\n", id: "router"))
            let served = try await MediaHitHandlerTests.counter(harness, "transcode_served_bytes_total")
            let memory = try await answer(post(id: "memory"))
            // JSON, not media: as on the route, not counted in served_bytes.
            #expect(try await MediaHitHandlerTests.counter(harness, "transcode_served_bytes_total") == served)
            #expect(try await MediaHitHandlerTests.answersAhead(harness) == ahead + 1)
            #expect(try await MediaHitHandlerTests.cacheHits(harness) == hits + 2)
            #expect(memory.status == 200 && router.status == 200)
            #expect(memory.header("X-Cache") == "hit")
            #expect(MediaHitHandlerTests.comparable(memory) == MediaHitHandlerTests.comparable(router))
            #expect(memory.body == router.body)
            #expect(memory.header("X-Request-Id") == "memory")
            let line = try #require(recorder.requests(withID: "memory").first)
            let routerLine = try #require(recorder.requests(withID: "router").first)
            for field in ["http.route", "http.status", "http.method", "http.bytes"] {
                #expect(line.metadata[field] == routerLine.metadata[field], "\(field)")
            }

            // Left to the route.
            let wrongToken = try await answer(post(id: "wrong").replacingOccurrences(of: token, with: "nope"))
            #expect(wrongToken.status == 401)
            let fromPage = try await answer(post("Origin: https://pages.example\r\n", id: "page"))
            #expect(fromPage.status == 200)
            let other = try await answer(post(body: "{\"url\": \"\(url)\" }", id: "other"))
            #expect(other.status == 200 && other.header("X-Cache") == "hit")
            #expect(try await MediaHitHandlerTests.answersAhead(harness) == ahead + 1)
            // That other body is now known too.
            _ = try await answer(post(body: "{\"url\": \"\(url)\" }", id: "other-again"))
            #expect(try await MediaHitHandlerTests.answersAhead(harness) == ahead + 2)
            // A body sent after its head: answered right whichever way (when the server is busy, both pieces
            // may come in one read and be answered ahead; else the route answers).
            let socket = try RawSocket(port: harness.appPort)
            let split = post(id: "split")
            let cut = split.utf8.count - 5
            #expect(socket.send(Array(split.utf8.prefix(cut))))
            try await Task.sleep(for: .milliseconds(100))
            #expect(socket.send(Array(split.utf8.dropFirst(cut))))
            var text = ""
            for _ in 0..<100 where !text.contains("}") {
                try await Task.sleep(for: .milliseconds(20))
                text += UploadTests.received(socket)
            }
            #expect(text.hasPrefix("HTTP/1.1 200") && text.contains("X-Cache: hit"), "\(text)")
            let beforeTakedown = try await MediaHitHandlerTests.answersAhead(harness)

            let encoded = url.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
            let takedown = try await harness.request(
                .DELETE, "/v1/sources?url=\(encoded)&takedown=true&reason=test",
                headers: [("Authorization", "Bearer \(token)")])
            #expect(takedown.status == 200)
            #expect(try await answer(post(id: "gone")).status == 451)
            #expect(try await MediaHitHandlerTests.answersAhead(harness) == beforeTakedown)
        }
    }

    /// A head that arrives in pieces is answered ahead once whole; a connection kept busy by such answers for
    /// two and a half times its deadlines is neither cut off at the head deadline nor closed as idle.
    @Test(.tags(.wallClock)) func aBusyConnectionIsNotCutOff() async throws {
        try await withHarness(configure: {
            $0.http.headerTimeoutSeconds = 2
            $0.http.idleTimeoutSeconds = 2
        }) { harness in
            let reply = try await harness.transcode(url: harness.originURL("/corpus/cartoon_hotdog.gif"))
            let key = try #require(ObjectKey(try reply.json()["key"] as? String ?? ""))
            #expect(try await harness.request(.GET, "/media/\(key).json").status == 200)
            let ahead = try await MediaHitHandlerTests.answersAhead(harness)
            let socket = try RawSocket(port: harness.appPort)
            let request = Array("GET /media/\(key).json HTTP/1.1\r\nHost: x\r\n\r\n".utf8)
            let started = ContinuousClock.now
            // Each request in two pieces 50 ms apart, on the one connection. On a thread of its own: the
            // cooperative pool's two threads, busy with other suites, delayed sleeps past the deadlines.
            let (sent, answered) = await withCheckedContinuation { continuation in
                Thread.detachNewThread {
                    var sent = 0
                    // All of it, counted at the end: a status line may be cut between two reads.
                    var received = ""
                    func answered() -> Int { received.components(separatedBy: "HTTP/1.1 200").count - 1 }
                    while ContinuousClock.now - started < .seconds(5) {
                        guard socket.send(Array(request[..<20])) else { break }
                        usleep(50_000)
                        guard socket.send(Array(request[20...])) else { break }
                        sent += 1
                        usleep(50_000)
                        received += UploadTests.received(socket)
                    }
                    // The last answers, however busy the machine (a full run delayed one past 100 ms).
                    let waited = ContinuousClock.now
                    while answered() < sent, ContinuousClock.now - waited < .seconds(1) {
                        usleep(20_000)
                        received += UploadTests.received(socket)
                    }
                    continuation.resume(returning: (sent, answered()))
                }
            }
            #expect(ContinuousClock.now - started >= .seconds(5), "the connection was closed while busy")
            #expect(answered == sent)
            #expect(try await MediaHitHandlerTests.answersAhead(harness) == ahead + sent)
            // Then idle: closed.
            try await Task.sleep(for: .milliseconds(4000))
            #expect(socket.peerClosed())
        }
    }

    /// A large file sent from the file (sendfile) to a client that reads nothing for longer than the head
    /// deadline (but not the sending one): the wait for the next head starts once the file has been sent (the
    /// kernel buffers only part of it for a narrow connection), so the connection is not cut off mid-file.
    @Test(.tags(.wallClock)) func aSlowReaderGetsTheWholeFile() async throws {
        try await MediaHitHandlerTests.withLargeFileKept(configure: {
            $0.http.headerTimeoutSeconds = 1
            $0.http.idleTimeoutSeconds = 3
        }) { harness, key, file in
            let fromFile = try await MediaHitHandlerTests.counter(harness, "transcode_media_file_answers_total")
            let socket = try RawSocket(port: harness.appPort, narrow: true)
            let started = ContinuousClock.now
            // On a thread of its own (see above).
            let received = await withCheckedContinuation { continuation in
                Thread.detachNewThread {
                    _ = socket.send(Array("GET /media/\(key).mp4 HTTP/1.1\r\nHost: x\r\n\r\n".utf8))
                    usleep(1_500_000)
                    var received: [UInt8] = []
                    var chunk = [UInt8](repeating: 0, count: 65536)
                    // Up to the close: the idle timeout's, after the answer.
                    while ContinuousClock.now - started < .seconds(20) {
                        let count = recv(socket.descriptor, &chunk, chunk.count, 0)
                        guard count > 0 else { break }
                        received += chunk[..<count]
                    }
                    continuation.resume(returning: received)
                }
            }
            let elapsed = ContinuousClock.now - started
            #expect(elapsed > .seconds(2), "closed after the answer, when idle")
            let separator = Array("\r\n\r\n".utf8)
            let end = try #require(received.firstRange(of: separator))
            let body = Array(received[end.upperBound...])
            #expect(body.count == file.count)
            // Compared as one Bool: a failure prints no megabyte of bytes.
            let same = body == file
            #expect(same)
            #expect(
                try await MediaHitHandlerTests.counter(harness, "transcode_media_file_answers_total") == fromFile + 1)
        }
    }

    /// An object whose file is being sent ahead of the codec is pinned: a store that takes the cache over
    /// `cache.maxBytes` meanwhile evicts nothing (the object sent is the only other, and older than the one
    /// stored), and the client still gets the whole file.
    @Test func anObjectBeingSentIsNotEvicted() async throws {
        // photo_cats_4frames.gif's object is about 345 KB; the same GIF over black, the second object, as much.
        try await MediaHitHandlerTests.withLargeFileKept(configure: {
            $0.cache.maxBytes = 500_000
            $0.http.idleTimeoutSeconds = 30
        }) { harness, key, file in
            let cache = harness.services.cache
            try #require(
                cache.objects.usage.objects == 1 && cache.objects.usage.bytes < 500_000, "\(cache.objects.usage)")
            let fromFile = try await MediaHitHandlerTests.counter(harness, "transcode_media_file_answers_total")
            let socket = try RawSocket(port: harness.appPort, narrow: true)
            _ = socket.send(Array("GET /media/\(key).mp4 HTTP/1.1\r\nHost: x\r\n\r\n".utf8))
            // The head is written (and the object pinned) before the counter moves; the narrow connection then
            // holds most of the file back until it is read.
            var started = false
            for _ in 0..<100 where !started {
                let answers = try await MediaHitHandlerTests.counter(harness, "transcode_media_file_answers_total")
                started = answers == fromFile + 1
                if !started { try await Task.sleep(for: .milliseconds(50)) }
            }
            try #require(started)

            let other = try await harness.transcode(
                url: harness.originURL("/corpus/photo_cats_4frames.gif"), background: "#000000")
            #expect(other.status == 200)
            #expect(cache.objects.usage.objects == 2 && cache.objects.usage.bytes > 500_000, "\(cache.objects.usage)")
            #expect(cache.objects.usage.evictions == 0)
            #expect(FileManager.default.fileExists(atPath: cache.objects.objectPath(key, "mp4")))

            let received = await withCheckedContinuation { continuation in
                Thread.detachNewThread {
                    // recv waits at most 5 s at a time: a stalled send fails the test instead of holding it.
                    var timeout = timeval(tv_sec: 5, tv_usec: 0)
                    setsockopt(
                        socket.descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
                    var received: [UInt8] = []
                    var chunk = [UInt8](repeating: 0, count: 65536)
                    let started = ContinuousClock.now
                    let separator = Array("\r\n\r\n".utf8)
                    // Up to the file's last byte: the connection itself stays open.
                    while ContinuousClock.now - started < .seconds(20) {
                        if let end = received.firstRange(of: separator), received.count - end.upperBound >= file.count {
                            break
                        }
                        let count = recv(socket.descriptor, &chunk, chunk.count, 0)
                        guard count > 0 else { break }
                        received += chunk[..<count]
                    }
                    continuation.resume(returning: received)
                }
            }
            let end = try #require(received.firstRange(of: Array("\r\n\r\n".utf8)))
            let same = Array(received[end.upperBound...]) == file
            #expect(same)
        }
    }

    /// A client that asks for a large file and never reads it is cut off once `idleTimeout` passes without any
    /// of the answer's writes completing, whether the file goes out ahead of the codec (sendfile) or from the
    /// route behind it (a field of non-ASCII bytes sends the request that way): it holds neither the
    /// connection nor the file for ever. It asks for the file 20 times, pipelined (6 MB): more than the kernels can
    /// hold for it (the server's send buffer grows to 4 MB, `tcp_wmem`), so the answers stall whatever the buffers
    /// (one answer of 309 KB sometimes fit in them whole, and then nothing was stalled). The client reads only
    /// once the server's end has left ESTABLISHED (or 30 s passed): what it gets then is what the kernels held.
    @Test(.tags(.wallClock)) func aClientThatNeverReadsIsCutOff() async throws {
        try await MediaHitHandlerTests.withLargeFileKept(configure: {
            $0.http.headerTimeoutSeconds = 10
            $0.http.idleTimeoutSeconds = 1
        }) { harness, key, file in
            let requests = 20
            let size = file.count * requests
            let port = harness.appPort
            let fromFile = try await MediaHitHandlerTests.counter(harness, "transcode_media_file_answers_total")
            for extra in ["", "X-Pad: caf\u{e9}\r\n"] {
                let socket = try RawSocket(port: harness.appPort, narrow: true)
                let started = ContinuousClock.now
                let request = "GET /media/\(key).mp4 HTTP/1.1\r\nHost: x\r\n\(extra)\r\n"
                let established = socket.serverSideEstablished(port: port)
                #expect(established, "the server's end of the connection is not in /proc/net/tcp")
                let (received, closed) = await withCheckedContinuation { continuation in
                    Thread.detachNewThread {
                        _ = socket.send(Array(String(repeating: request, count: requests).utf8))
                        // Until the server has closed its end, however long a loaded machine takes to fill the
                        // buffers and then wait out the timeout (a fixed 3 s was too short once in CI).
                        let deadline = ContinuousClock.now + .seconds(30)
                        while socket.serverSideEstablished(port: port), ContinuousClock.now < deadline {
                            usleep(100_000)
                        }
                        // Then whatever the kernels hold, and the end of the connection if it came.
                        var timeout = timeval(tv_sec: 5, tv_usec: 0)
                        setsockopt(
                            socket.descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
                        var received = 0
                        var chunk = [UInt8](repeating: 0, count: 65536)
                        while true {
                            let count = recv(socket.descriptor, &chunk, chunk.count, 0)
                            if count > 0 {
                                received += count
                                continue
                            }
                            continuation.resume(returning: (received, count == 0 || errno == ECONNRESET))
                            return
                        }
                    }
                }
                let way = extra.isEmpty ? "ahead" : "behind"
                #expect(closed, "\(way): still open after \(ContinuousClock.now - started)")
                #expect(received < size, "\(way): \(received) of \(size) bytes")
            }
            // The first answer went out from the file ahead of the codec (one at a time: the others by the route).
            #expect(
                try await MediaHitHandlerTests.counter(harness, "transcode_media_file_answers_total") >= fromFile + 1)
            // Still serving.
            #expect(try await harness.request(.GET, "/media/\(key).mp4").status == 200)
        }
    }

    /// Pipelined ranges past a kept head, all in one read: one file answer ahead of the codec at a time (each
    /// would open the file: a connection holds one descriptor at most), the others by the route, all in order
    /// and the file's bytes. A lone file answer with `Connection: close` ends the connection once sent.
    @Test func oneFileAnswerAtATime() async throws {
        try await MediaHitHandlerTests.withLargeFileKept { harness, key, file in
            let head = HitMemory.headLength
            let fromFile = try await MediaHitHandlerTests.counter(harness, "transcode_media_file_answers_total")
            let ranges = (0..<20).map { (head + $0 * 1000)...(head + $0 * 1000 + 99) }
            let requests = ranges.map {
                "GET /media/\(key).mp4 HTTP/1.1\r\nHost: x\r\nRange: bytes=\($0.lowerBound)-\($0.upperBound)\r\n\r\n"
            }
            let (answers, _) = try await MediaHitHandlerTests.exchange(
                port: harness.appPort, requests.joined(), bodiless: Array(repeating: false, count: ranges.count))
            #expect(answers.map(\.status) == Array(repeating: 206, count: ranges.count))
            #expect(answers.map(\.body) == ranges.map { Array(file[$0]) })
            #expect(
                try await MediaHitHandlerTests.counter(harness, "transcode_media_file_answers_total") == fromFile + 1)

            let (closing, closed) = try await MediaHitHandlerTests.exchange(
                port: harness.appPort,
                "GET /media/\(key).mp4 HTTP/1.1\r\nHost: x\r\nRange: bytes=\(head)-\r\nConnection: close\r\n\r\n",
                bodiless: [false], awaitingClose: true)
            #expect(closing.first?.status == 206 && closing.first?.header("Connection") == "close")
            let same = closing.first?.body == Array(file[head...])
            #expect(same)
            #expect(closed)
            #expect(
                try await MediaHitHandlerTests.counter(harness, "transcode_media_file_answers_total") == fromFile + 2)
        }
    }

    /// A large file asked for whole, with no range before it (curl, a CDN filling its cache), is read by the
    /// route once, which keeps its head; the next request is answered ahead of the codec from the file
    /// (sendfile), the same bytes. Before, such a file came to the route every time, read in chunks.
    @Test func aWholeLargeFileIsSentFromTheFileAfterItsFirstRead() async throws {
        try await withHarness { harness in
            let reply = try await harness.transcode(url: harness.originURL("/corpus/photo_cats_4frames.gif"))
            let key = try #require(ObjectKey(try reply.json()["key"] as? String ?? ""))
            let file = [UInt8](
                try Data(contentsOf: URL(fileURLWithPath: harness.services.cache.objects.objectPath(key, "mp4"))))
            try #require(file.count > HitMemory.smallFileLimit)
            let fromFile = try await MediaHitHandlerTests.counter(harness, "transcode_media_file_answers_total")
            for expected in [fromFile, fromFile + 1] {
                let (answers, _) = try await MediaHitHandlerTests.exchange(
                    port: harness.appPort, "GET /media/\(key).mp4 HTTP/1.1\r\nHost: x\r\n\r\n", bodiless: [false])
                #expect(answers.first?.status == 200)
                let same = answers.first?.body == file
                #expect(same)
                #expect(
                    try await MediaHitHandlerTests.counter(harness, "transcode_media_file_answers_total") == expected)
            }
        }
    }
}

/// The sending deadline's parts: a large body written through `ConnectionTimeoutHandler` goes out as parts of
/// at most `MediaHitFront.filePartBytes`, in order, the same bytes, the caller's promise on the last.
@Suite(.tags(.unit), .timeLimit(.minutes(10))) struct SendingPartsTests {
    @Test func aLargeBodyGoesInParts() throws {
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandler(
            ConnectionTimeoutHandler(headTimeout: .seconds(60), idleTimeout: .seconds(60)))
        let bytes = (0..<(2 * MediaHitFront.filePartBytes + 1000)).map { UInt8(truncatingIfNeeded: $0 * 7) }
        let promise = channel.eventLoop.makePromise(of: Void.self)
        channel.write(HTTPResponsePart.body(ByteBuffer(bytes: bytes)), promise: promise)
        channel.flush()
        var parts: [Int] = []
        var received: [UInt8] = []
        while let part = try channel.readOutbound(as: HTTPResponsePart.self) {
            guard case .body(let buffer) = part else { continue }
            parts.append(buffer.readableBytes)
            received += buffer.readableBytesView
        }
        #expect(parts == [MediaHitFront.filePartBytes, MediaHitFront.filePartBytes, 1000])
        let same = received == bytes
        #expect(same)
        try promise.futureResult.wait()
        _ = try channel.finish()
    }
}

/// The front against NIO's decoder alone: random streams of well-formed, odd and malformed requests, cut into
/// random reads, decode to the same request parts (and the same error, at the same place) with the front
/// before the decoder as without it. No object is in the cache, so the front answers nothing and passes
/// every request on: what is compared is its framing.
@Suite(.tags(.unit), .timeLimit(.minutes(10))) struct MediaHitFrontFramingTests {
    /// What comes out of the decoder, as text.
    final class Collector: ChannelInboundHandler, @unchecked Sendable {
        typealias InboundIn = HTTPRequestPart
        var parts: [String] = []

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            switch self.unwrapInboundIn(data) {
            case .head(let head):
                let fields = head.headerFields.map { "\($0.name.rawName)=\($0.value)" }.joined(separator: ",")
                self.parts.append("head \(head.method) \(head.path ?? "-") \(fields)")
            case .body(let body): self.parts.append("body \(String(buffer: body))")
            case .end: self.parts.append("end")
            }
        }

        func errorCaught(context: ChannelHandlerContext, error: Error) {
            self.parts.append("error")
        }
    }

    /// A channel with the server's HTTP/1 handlers, with or without the front; what it decodes goes to the
    /// returned collector.
    static func channel(front: Bool, cache: DiskCache) throws -> (EmbeddedChannel, Collector) {
        let channel = EmbeddedChannel()
        let pipeline = channel.pipeline.syncOperations
        var limits = NIOHTTPDecoderLimitConfiguration()
        (limits.maxHeaderFieldSize, limits.maxHeaderListSize, limits.maxHeaderFieldCount) = (80 * 1024, 80 * 1024, 1000)
        try pipeline.configureHTTPServerPipeline(
            withPipeliningAssistance: false, withErrorHandling: false, withOutboundHeaderValidation: false,
            withEncoderConfiguration: .init(), withDecoderLimitConfiguration: limits)
        try pipeline.addHandler(HTTP1ToHTTPServerCodec(secure: false))
        let timeouts = ConnectionTimeoutHandler(headTimeout: .seconds(60), idleTimeout: .seconds(60))
        try pipeline.addHandler(timeouts)
        let hits = MediaHitHandler(
            source: .init(
                results: ReadThroughResults(local: cache, shared: nil), metrics: ServiceMetrics(),
                logger: Logger(label: "test"),
                cacheControl: "public"))
        try pipeline.addHandler(hits)
        let collector = Collector()
        try pipeline.addHandler(collector)
        if front { try pipeline.addHandler(MediaHitFront(hits: hits, timeouts: timeouts), position: .first) }
        return (channel, collector)
    }

    /// One request of a random kind: plain and odd heads, bodies by Content-Length and chunked, and the
    /// malformed framings the front must leave to the decoder.
    static func request(_ random: inout some RandomNumberGenerator) -> String {
        let key = String(repeating: "ab", count: 32)
        let path = ["/media/\(key).mp4", "/media/\(key).json?t=1", "/healthz", "/v1/x/y/z.mp4", "*"].randomElement(
            using: &random)!
        let body = ["", "x", "GET /media/\(key).mp4 HTTP/1.1\r\n\r\n", "{\"url\": \"http://a/b.gif\"}"]
            .randomElement(using: &random)!
        switch Int.random(in: 0..<22, using: &random) {
        case 0: return "GET \(path) HTTP/1.1\r\nHost: x\r\n\r\n"
        case 1: return "HEAD \(path) HTTP/1.1\r\nHost: x\r\nRange: bytes=0-1\r\n\r\n"
        case 2: return "POST /transcode HTTP/1.1\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)"
        case 3: return "GET \(path) HTTP/1.1\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)"
        case 4:
            let chunk = body.isEmpty ? "" : "\(String(body.utf8.count, radix: 16))\r\n\(body)\r\n"
            return "POST /transcode HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n\(chunk)0\r\n\r\n"
        case 5: return "GET \(path) HTTP/1.0\r\n\r\n"
        case 6: return "GET \(path) HTTP/1.1\r\nConnection: close\r\n\r\n"
        case 7: return "GET \(path) HTTP/1.1\nHost: x\n\n"
        case 8: return "GET \(path) HTTP/1.1\r\nX-A: a\r\n b\r\n\r\n"
        case 9: return "FOO \(path) HTTP/1.1\r\n\r\n"
        case 10: return "POST /transcode HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx"
        case 11: return "POST /transcode HTTP/1.1\r\nContent-Length: \(body.utf8.count)\t\r\n\r\n\(body)"
        case 12: return "\r\nGET \(path) HTTP/1.1\r\n\r\n"
        case 13: return "GET \(path) HTTP/1.1\r\nX-Pad: caf\u{e9}\r\n\r\n"
        case 14: return "GET \(path) HTTP/1.1\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n"
        case 15: return "POST /transcode HTTP/1.1\r\nContent-Length: 00\(body.utf8.count)\r\n\r\n\(body)"
        case 16: return "GET \(path) HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n"
        case 17: return "GET \(path) HTTP/1.1\r\nX-Long: \(String(repeating: "v", count: 17_000))\r\n\r\n"
        case 18: return "DELETE \(path) HTTP/1.1\r\n\r\n"
        case 19: return "GET \(path) HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
        case 20: return "GET \(path) HTTP/1.1\r\nX-A:\r\n\r\n"
        default: return "GET \(path) HTTP/1.1\r\n\r\n"
        }
    }

    /// The parts each pipeline decodes from `stream`, fed in reads cut at `cuts`.
    static func decode(_ stream: [UInt8], cuts: [Int], front: Bool, cache: DiskCache) throws -> [String] {
        let (channel, collector) = try Self.channel(front: front, cache: cache)
        var start = 0
        for cut in cuts + [stream.count] where cut > start {
            do {
                try channel.writeInbound(channel.allocator.buffer(bytes: stream[start..<cut]))
            } catch {
                collector.parts.append("error")
                break
            }
            start = cut
        }
        // The end of the stream: the decoder sees what is left (an unfinished head is its error).
        do {
            _ = try channel.finish()
        } catch {
            collector.parts.append("error")
        }
        // Up to the first error: what follows it is not read by a server, which closes the connection.
        if let error = collector.parts.firstIndex(of: "error") { return Array(collector.parts[...error]) }
        return collector.parts
    }

    @Test func decodesTheSameRequestsAsTheDecoderAlone() async throws {
        try await withTemporaryDirectory { directory in
            let cache = try DiskCache(root: directory, maxBytes: 1 << 20)
            var random = SystemRandomNumberGenerator()
            var seed = UInt64.random(in: 0...UInt64.max, using: &random)
            var generator = SplitMix64(seed: seed)
            for round in 0..<1500 {
                seed = generator.next()
                var one = SplitMix64(seed: seed)
                var stream = Array(
                    (0..<Int.random(in: 1...6, using: &one)).map { _ in Self.request(&one) }.joined().utf8)
                // Sometimes the connection ends inside a request.
                if Bool.random(using: &one) {
                    stream.removeLast(Int.random(in: 0...min(40, stream.count - 1), using: &one))
                }
                let cuts = (0..<Int.random(in: 0...4, using: &one)).map { _ in
                    Int.random(in: 0...stream.count, using: &one)
                }
                .sorted()
                let alone = try Self.decode(stream, cuts: cuts, front: false, cache: cache)
                let fronted = try Self.decode(stream, cuts: cuts, front: true, cache: cache)
                #expect(
                    fronted == alone,
                    "round \(round), seed \(seed): \(String(decoding: stream, as: UTF8.self).debugDescription) cut at \(cuts)"
                )
                if fronted != alone { return }
            }
        }
    }
}

/// A small seeded generator (SplitMix64), so that a failing round can be replayed from its seed.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { self.state = seed }
    mutating func next() -> UInt64 {
        self.state &+= 0x9E37_79B9_7F4A_7C15
        var z = self.state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
