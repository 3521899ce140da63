import Foundation
import TestSupport
import Testing

@testable import TranscodeCore
@testable import TranscodeHTTP
@testable import TranscodeServer

@Suite(.tags(.integration), .timeLimit(.minutes(10))) struct TranscodeEndpointTests {
    @Test func convertsAURLAndAnswersWithURLsMetadataAndHTML() async throws {
        try await withHarness { harness in
            let reply = try await harness.transcode(url: harness.originURL("/corpus/cartoon_dancing_banana.gif"))
            #expect(reply.status == 200, "\(reply.text)")
            let json = try reply.json()
            let key = try #require(json["key"] as? String)
            #expect(ObjectKey(key) != nil)
            #expect(json["mp4"] as? String == "/media/\(key).mp4")
            #expect(json["poster"] as? String == "/media/\(key).jpg")
            #expect(json["metadata"] as? String == "/media/\(key).json")
            #expect(json["sourceFormat"] as? String == "gif")
            #expect(json["sourceFrameCount"] as? Int == 8)
            // The old name, kept for one release.
            #expect(json["gifFrameCount"] as? Int == 8)
            #expect(json["sourceWidth"] as? Int == 365)
            #expect(json["outputWidth"] as? Int == 366)
            #expect(json["loopsForever"] as? Bool == true)
            let html = try #require(json["html"] as? String)
            #expect(html.hasPrefix("<video autoplay muted playsinline loop poster=\"/media/\(key).jpg\""))
            #expect(html.contains("width=\"365\" height=\"360\""))
            // The MP4's type names its codecs (the SPS's profile, constraints and level: High, 00, some level).
            #expect(html.contains("<source src=\"/media/\(key).mp4\" type='video/mp4; codecs=\"avc1.6400"))
            #expect(!html.contains("webm"))
            #expect(reply.headers.first(name: "X-Cache") == "miss")

            let video = try await harness.request(.GET, "/media/\(key).mp4")
            #expect(video.status == 200)
            #expect(video.body.count == json["mp4Bytes"] as? Int)
            #expect(Array(video.body[4..<8]) == Array("ftyp".utf8))

            // A second request is a cache hit with the same answer and no new download.
            let again = try await harness.transcode(url: harness.originURL("/corpus/cartoon_dancing_banana.gif"))
            #expect(again.status == 200)
            #expect(again.headers.first(name: "X-Cache") == "hit")
            #expect(try again.json()["key"] as? String == key)
            #expect(harness.origin.count("/corpus/cartoon_dancing_banana.gif") == 1)
        }
    }

    /// A keep-gif result (no video under the size bound at the quality floor) of a GIF named by its URL gets the
    /// GIF's own `<img>` as its snippet, on the route and on the fast path's repeat; an upload, which has no URL
    /// for the GIF, keeps the video's.
    @Test func aKeepGIFResultsSnippetIsTheGIFsImage() async throws {
        // A bound no video can meet: every GIF is keep-gif (the guard gives up after its attempts).
        try await withHarness(configure: {
            $0.transcode.options.maxSizeRatio = 0.001
            $0.transcode.options.maxExtraAttempts = 1
        }) { harness in
            let url = harness.originURL("/corpus/loop_1.gif") + "?a=1&b=\"2\""
            for attempt in ["miss", "hit"] {
                let reply = try await harness.transcode(url: url)
                #expect(reply.status == 200, "\(reply.text)")
                let json = try reply.json()
                #expect(json["recommendation"] as? String == "keep-gif", "\(attempt)")
                let width = try #require(json["sourceWidth"] as? Int)
                let height = try #require(json["sourceHeight"] as? Int)
                let escaped = url.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(
                    of: "\"", with: "&quot;")
                #expect(
                    json["html"] as? String == "<img src=\"\(escaped)\" width=\"\(width)\" height=\"\(height)\">",
                    "\(attempt)")
                #expect(reply.headers.first(name: "X-Cache") == attempt)
            }
            let upload = try await harness.upload(try corpusBytes("loop_1.gif"))
            #expect(try upload.json()["recommendation"] as? String == "keep-gif")
            #expect((try upload.json()["html"] as? String)?.hasPrefix("<video") == true)
        }
    }

    /// `?background` counts on a JSON request as on an upload, the body's field winning; any other query
    /// parameter is a 400 rather than ignored.
    @Test func theQueryBackgroundCountsForJSONToo() async throws {
        try await withHarness { harness in
            let body = try JSONSerialization.data(withJSONObject: ["url": harness.originURL("/corpus/loop_1.gif")])
            func post(_ query: String, _ body: Data) async throws -> Reply {
                try await harness.request(
                    .POST, "/transcode" + query, headers: [("Content-Type", "application/json")], body: Array(body))
            }
            let black = try await post("?background=%23000000", body)
            #expect(black.status == 200, "\(black.text)")
            #expect(try black.json()["background"] as? String == "#000000")
            // The same body without the query: the default background, never the kept answer of the query's.
            let plain = try await post("", body)
            #expect(try plain.json()["background"] as? String == "#ffffff")
            let again = try await post("", body)
            #expect(try again.json()["background"] as? String == "#ffffff")
            let both = try JSONSerialization.data(
                withJSONObject: ["url": harness.originURL("/corpus/loop_1.gif"), "background": "#ff0000"])
            #expect(try await post("?background=%23000000", both).json()["background"] as? String == "#ff0000")
            let unknown = try await post("?backgroud=%23000000", body)
            #expect(unknown.status == 400 && unknown.errorCode == "bad-request", "\(unknown.text)")
            #expect(unknown.text.contains("backgroud"))
        }
    }

    @Test func loopOnlyWhenTheGIFLoopsForever() async throws {
        try await withHarness { harness in
            let reply = try await harness.transcode(url: harness.originURL("/corpus/loop_1.gif"))
            let json = try reply.json()
            #expect(json["playCount"] as? Int == 2)
            let html = try #require(json["html"] as? String)
            #expect(!html.contains(" loop"))
            // Played twice by the service's script, which the snippet references.
            #expect(html.contains(" data-play-count=\"2\" "))
            #expect(html.hasSuffix("</video><script src=\"/player.js\" defer></script>"))

            let script = try await harness.request(.GET, "/player.js")
            #expect(script.status == 200)
            #expect(script.headers.first(name: "Content-Type") == "text/javascript; charset=utf-8")
            #expect(script.text.contains("data-play-count"))
            let etag = try #require(script.headers.first(name: "ETag"))
            let again = try await harness.request(.GET, "/player.js", headers: [("If-None-Match", etag)])
            #expect(again.status == 304)
        }
    }

    /// `playCount` is always in the JSON: `null` when the GIF loops forever (and `loopCount` `null` when it
    /// has no loop block); a GIF without a loop block plays once, with neither `loop` nor a script.
    @Test func playCountIsAlwaysPresent() async throws {
        try await withHarness { harness in
            let forever = try await harness.transcode(url: harness.originURL("/corpus/cartoon_dancing_banana.gif"))
            #expect(forever.text.contains("\"playCount\":null"), "\(forever.text)")
            let once = try await harness.transcode(url: harness.originURL("/corpus/cartoon_spam_text.gif"))
            #expect(once.text.contains("\"loopCount\":null"), "\(once.text)")
            let json = try once.json()
            #expect(json["playCount"] as? Int == 1)
            let html = try #require(json["html"] as? String)
            #expect(!html.contains(" loop") && !html.contains("data-play-count") && !html.contains("<script"))
        }
    }

    @Test func uploadedGIF() async throws {
        try await withHarness { harness in
            let gif = try corpusBytes("transp_flag_estonia.gif")
            let reply = try await harness.upload(gif)
            #expect(reply.status == 200, "\(reply.text)")
            let json = try reply.json()
            #expect(json["gifBytes"] as? Int == gif.count)
            #expect(json["hasTransparency"] as? Bool == true)
            let again = try await harness.upload(gif)
            #expect(again.headers.first(name: "X-Cache") == "hit")
        }
    }

    /// APNG and animated WebP bodies are taken under their own media types (and any of the accepted ones:
    /// the signature decides), by URL too.
    @Test(arguments: [
        ("apng_ball_20f.png", "image/png", "apng", 20), ("apng_red_blue_loop3.apng", "image/apng", "apng", 4),
        ("webp_anim_imagers.webp", "image/webp", "webp", 6), ("notgif_webp_anim.gif", "image/gif", "webp", 42),
    ])
    func uploadedAPNGAndWebP(name: String, contentType: String, format: String, frames: Int) async throws {
        try await withHarness { harness in
            let bytes = try corpusBytes(name)
            let reply = try await harness.upload(bytes, contentType: contentType)
            #expect(reply.status == 200, "\(reply.text)")
            let json = try reply.json()
            #expect(json["sourceFormat"] as? String == format)
            #expect(json["sourceFrameCount"] as? Int == frames)
            #expect(json["sourceBytes"] as? Int == bytes.count)
            #expect(json["gifBytes"] as? Int == bytes.count)
            let byURL = try await harness.transcode(url: harness.originURL("/corpus/" + name))
            #expect(byURL.status == 200, "\(byURL.text)")
            #expect(try byURL.json()["key"] as? String == json["key"] as? String)
        }
    }

    @Test func backgroundIsPartOfTheKey() async throws {
        try await withHarness { harness in
            let url = harness.originURL("/corpus/transp_flag_estonia.gif")
            let white = try await harness.transcode(url: url).json()
            let black = try await harness.transcode(url: url, background: "#000000").json()
            #expect(white["background"] as? String == "#ffffff")
            #expect(black["background"] as? String == "#000000")
            #expect(white["key"] as? String != black["key"] as? String)
            #expect(harness.services.transcodes.counters.transcodes == 2)
        }
    }

    @Test(arguments: [
        ("/html", 422, "unsupported-format"),
        ("/corpus/notgif_jpeg_photo.gif", 422, "unsupported-format"),
        ("/corpus/notgif_png_static.gif", 422, "not-animated"),
        ("/corpus/webp_static_photo.webp", 422, "not-animated"),
        ("/corpus/corrupt_truncated_575x800.gif", 422, "corrupt"),
        ("/corpus/odd_65535x1.gif", 422, "dimensions-too-large"),
        ("/status/404", 404, "origin-not-found"),
        ("/status/410", 404, "origin-not-found"),
        ("/status/500", 502, "origin-error"),
        ("/status/403", 502, "origin-refused"),
    ])
    func originAndInputErrors(path: String, status: Int, code: String) async throws {
        try await withHarness { harness in
            let reply = try await harness.transcode(url: harness.originURL(path))
            #expect(reply.status == status, "\(reply.text)")
            #expect(reply.errorCode == code)
            // Nothing partial is left in the cache, and the service still serves.
            let objects = try FileManager.default.subpathsOfDirectory(atPath: harness.services.cache.objects.directory)
            #expect(objects.allSatisfy { !$0.contains(".") }, "\(objects)")
            let temporary = try FileManager.default.contentsOfDirectory(
                atPath: harness.services.cache.objects.temporaryDirectory)
            #expect(temporary.isEmpty)
            let healthy = try await harness.transcode(url: harness.originURL("/corpus/loop_1.gif"))
            #expect(healthy.status == 200)
        }
    }

    @Test(arguments: [
        (#"{"url": "ftp://example.com/x.gif"}"#, "invalid-url"),
        (#"{"url": "file:///etc/passwd"}"#, "invalid-url"),
        (#"{"url": "not a url"}"#, "invalid-url"),
        (#"{"url": "http:///x.gif"}"#, "invalid-url"),
        (#"{"nope": 1}"#, "bad-request"),
        (#"{"url": "http://127.0.0.1/x.gif", "background": "blue"}"#, "bad-request"),
        ("not json", "bad-request"),
    ])
    func malformedRequests(body: String, code: String) async throws {
        try await withHarness { harness in
            let reply = try await harness.request(
                .POST, "/transcode", headers: [("Content-Type", "application/json")], body: Array(body.utf8))
            #expect(reply.status == 400, "\(reply.text)")
            #expect(reply.errorCode == code)
            #expect(harness.origin.total == 0)
        }
    }

    /// An option the service does not offer, or a misspelt one, is refused by name before any download.
    @Test(arguments: [
        (#"{"url": "http://127.0.0.1/x.gif", "crf": 18}"#, "crf"),
        (#"{"url": "http://127.0.0.1/x.gif", "width": 320}"#, "width"),
        (##"{"url": "http://127.0.0.1/x.gif", "backgound": "#000000"}"##, "backgound"),
    ])
    func unknownFieldsAreRefusedByName(body: String, field: String) async throws {
        try await withHarness { harness in
            let reply = try await harness.request(
                .POST, "/transcode", headers: [("Content-Type", "application/json")], body: Array(body.utf8))
            #expect(reply.status == 400, "\(reply.text)")
            #expect(reply.errorCode == "bad-request")
            #expect(reply.text.contains("unknown field \\\"\(field)\\\""), "\(reply.text)")
            #expect(harness.origin.total == 0)
            let upload = try await harness.request(
                .POST, "/transcode?\(field)=1", headers: [("Content-Type", "image/gif")],
                body: try corpusBytes("loop_1.gif"))
            #expect(upload.status == 400, "\(upload.text)")
            #expect(upload.text.contains("unknown query parameter"), "\(upload.text)")
        }
    }

    @Test func unsupportedContentType() async throws {
        try await withHarness { harness in
            let reply = try await harness.request(
                .POST, "/transcode", headers: [("Content-Type", "text/plain")], body: Array("x".utf8))
            #expect(reply.status == 415)
            #expect(reply.errorCode == "unsupported-media-type")
        }
    }

    @Test func uploadOverTheBodyLimit() async throws {
        try await withHarness(configure: { $0.http.maxBodyBytes = 10_000 }) { harness in
            let reply = try await harness.upload(try corpusBytes("cartoon_dancing_banana.gif"))
            #expect(reply.status == 413)
            #expect(reply.errorCode == "too-large")
        }
    }

    @Test func bearerTokensGuardTranscodeButNotMedia() async throws {
        try await withHarness(configure: { $0.authTokens = ["old-token", "new-token"] }) { harness in
            let url = harness.originURL("/corpus/loop_1.gif")
            let refused = try await harness.transcode(url: url)
            #expect(refused.status == 401)
            #expect(refused.headers.first(name: "WWW-Authenticate") == #"Bearer realm="transcode-server""#)
            #expect(try await harness.transcode(url: url, headers: [("Authorization", "Bearer wrong")]).status == 401)
            #expect(
                try await harness.transcode(url: url, headers: [("Authorization", "Bearer new-token")]).status == 200)
            let reply = try await harness.transcode(url: url, headers: [("Authorization", "Bearer old-token")])
            #expect(reply.status == 200)
            let key = try #require(try reply.json()["key"] as? String)
            #expect(try await harness.request(.GET, "/media/\(key).jpg").status == 200)
            #expect(harness.origin.count("/corpus/loop_1.gif") == 1)
        }
    }
}
