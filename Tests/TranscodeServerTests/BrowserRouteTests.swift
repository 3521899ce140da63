import Foundation
import TestSupport
import Testing
import Transcoder

@testable import TranscodeCore
@testable import TranscodeHTTP
@testable import TranscodeServer

/// What Chromium makes of the routes' answers: rewritten pages played with `/player.js`, the signed route's video,
/// and the documented JavaScript signer. In the system tier, where browsers do not share the two cores with every
/// other test: in tier 1 a loaded machine kept a renderer past its bound.
@Suite(.tags(.integration, .browser), .timeLimit(.minutes(20))) struct BrowserRouteTests {
    /// A rewritten `<img loading="lazy">` in Chromium: nothing loaded below the fold, played in view (through
    /// the signed GET route, converting on that first view), paused out of view.
    @Test(.tags(.wallClock)) func aLazyVideoPlaysWhenInView() async throws {
        try await withHarness(configure: RewriteTests.configure) { harness in
            let document = #"<img src="/corpus/cartoon_hotdog.gif" loading="lazy" alt="hotdog">"#
            let reply = try await harness.rewrite(document, query: "?output=video&base=" + harness.originURL("/"))
            let snippet = try #require(try RewriteTests.videos(in: reply.text).first)
            // No poster until it is near: its GET would convert the GIF at page load.
            #expect(!snippet.contains(" poster=") && snippet.contains(" data-gif2mp4-poster="), "\(snippet)")
            let run = try await runBrowserScript(
                PlayerScriptTests.oracle,
                ["lazy", "--app", "http://127.0.0.1:\(harness.appPort)", "--html", snippet, "--timeout", "30"],
                timeout: .seconds(120))
            #expect(run.result["ok"] as? Bool == true, "\(run.output)")
            let before = run.result["beforeScroll"] as? [String: Any]
            #expect(before?["paused"] as? Bool == true, "\(run.output)")
            #expect(before?["readyState"] as? Int == 0, "\(run.output)")
            #expect(before?["autoplay"] as? Bool == false, "\(run.output)")
            #expect(before?["poster"] is NSNull, "\(run.output)")
            #expect(((run.result["inView"] as? [String: Any])?["poster"] as? String)?.hasSuffix(".jpg") == true)
            #expect((run.result["inView"] as? [String: Any])?["paused"] as? Bool == false, "\(run.output)")
            #expect((run.result["afterScroll"] as? [String: Any])?["paused"] as? Bool == true, "\(run.output)")
        }
    }

    /// A transparent GIF in `output=video`: its object has the WebM with alpha, listed first with its `codecs`
    /// (`mode=eager`: known), and Chromium plays it, so the page shows through.
    @Test func aTransparentGIFsVideoIsTheWebMWithAlpha() async throws {
        try await withHarness(configure: RewriteTests.configure) { harness in
            let document = #"<img src="/corpus/cartoon_dancing_banana.gif" alt="banana">"#
            let reply = try await harness.rewrite(
                document, query: "?output=video&mode=eager&base=" + harness.originURL("/"))
            let video = try #require(try RewriteTests.videos(in: reply.text).first, "\(reply.text)")
            let webm = try #require(video.range(of: "type='video/webm; codecs=\"vp09.00."), "\(video)")
            let mp4 = try #require(video.range(of: "type='video/mp4; codecs=\"avc1."), "\(video)")
            #expect(webm.lowerBound < mp4.lowerBound)
            // Its poster is the still WebP that keeps the transparency: the flattened JPEG would be an opaque box
            // until the WebM's first picture.
            #expect(video.contains(".poster.webp\" ") && !video.contains(".jpg"), "\(video)")
            let run = try await Self.elements(
                video, in: harness,
                until: "document.querySelector('video').readyState >= 2")
            #expect(run.result["until"] as? Bool == true, "\(run.output)")
            let elements = try #require(run.result["elements"] as? [[String: Any]], "\(run.output)")
            #expect((elements.first?["currentSrc"] as? String)?.hasSuffix(".webm") == true, "\(run.output)")
            #expect(harness.services.transcodes.counters.transcodes == 1)
        }
    }

    /// Rewritten before they were converted (`mode=lazy`), a transparent GIF and an opaque one: in Chromium the
    /// transparent one plays its WebM and `/player.js` swaps the flattened JPEG poster for the still WebP that keeps
    /// the transparency (`poster.webp`); the opaque one plays the MP4 and keeps the JPEG. Rewritten again once both
    /// are converted, the transparent one's `poster` is the still WebP from the start, and no JPEG is named.
    @Test func aWebMsPosterKeepsTheTransparency() async throws {
        try await withHarness(configure: RewriteTests.configure) { harness in
            let document = """
                <img src="/corpus/cartoon_dancing_banana.gif" alt="banana">
                <img src="/corpus/cartoon_hotdog.gif" alt="hotdog">
                """
            let reply = try await harness.rewrite(document, query: "?output=video&base=" + harness.originURL("/"))
            let videos = try RewriteTests.videos(in: reply.text)
            #expect(videos.count == 2 && videos.allSatisfy { $0.contains(" poster=") }, "\(reply.text)")
            #expect(videos.allSatisfy { $0.contains(" data-gif2mp4-alpha-poster=") }, "\(reply.text)")
            let run = try await Self.elements(
                videos.joined(), in: harness,
                until: "[...document.querySelectorAll('video')].every((video) => video.readyState >= 2)", timeout: 60)
            #expect(run.result["ok"] as? Bool == true, "\(run.output)")
            #expect(run.result["until"] as? Bool == true, "\(run.output)")
            let elements = try #require(run.result["elements"] as? [[String: Any]], "\(run.output)")
            try #require(elements.count == 2, "\(run.output)")
            let attributes = elements.map { $0["attributes"] as? [String: Any] ?? [:] }
            #expect((elements[0]["currentSrc"] as? String)?.hasSuffix(".webm") == true, "\(run.output)")
            let alphaPoster = try #require(attributes[0]["poster"] as? String, "\(run.output)")
            #expect(alphaPoster.hasSuffix(".poster.webp"), "\(run.output)")
            #expect((elements[1]["currentSrc"] as? String)?.hasSuffix(".mp4") == true, "\(run.output)")
            #expect((attributes[1]["poster"] as? String)?.hasSuffix(".jpg") == true, "\(run.output)")

            // The still WebP is served: one picture with an alpha channel. Lossy: VP8X with its alpha flag and not its
            // animation flag; lossless: a simple VP8L file whose header says alpha is used (the bit after its two
            // 14-bit sizes).
            let path = try #require(URLComponents(string: alphaPoster)?.percentEncodedPath)
            let poster = try await harness.request(.GET, path)
            #expect(poster.status == 200 && poster.headers.first(name: "Content-Type") == "image/webp")
            let bytes = poster.body
            try #require(bytes.count > 30, "\(bytes)")
            switch String(decoding: bytes[12..<16], as: UTF8.self) {
            case "VP8X": #expect(bytes[20] & 0x10 != 0 && bytes[20] & 0x02 == 0, "flags \(bytes[20]): alpha, still")
            case "VP8L": #expect((bytes[24] >> 4) & 1 == 1, "a lossless still without alpha: \(bytes.prefix(30))")
            default: Issue.record("not a still with alpha: \(bytes.prefix(16))")
            }

            // Known now: the transparent GIF's poster is the still WebP, the opaque one's the JPEG.
            let again = try RewriteTests.videos(
                in: try await harness.rewrite(document, query: "?output=video&base=" + harness.originURL("/")).text)
            try #require(again.count == 2, "\(again)")
            #expect(again[0].contains(" poster=\"") && again[0].contains(".poster.webp\""), "\(again[0])")
            #expect(!again[0].contains(".jpg"), "\(again[0])")
            #expect(again[1].contains(".jpg\"") && !again[1].contains("alpha-poster"), "\(again[1])")
        }
    }

    /// A GIF larger than the service's box (here 100 x 100), rewritten before it was converted, in an `<img>` without
    /// `width` and `height`: the browser lays the image out at the GIF's own size, 200 x 150, and so is the video in
    /// Chromium, though its MP4 is 100 x 75: `/player.js` takes the GIF's size from its manifest.
    @Test func aScaledVideoHasTheGIFsOwnSize() async throws {
        let configure: @Sendable (inout ServerConfiguration) -> Void = {
            RewriteTests.configure(&$0)
            $0.transcode.options.maxOutputWidth = 100
            $0.transcode.options.maxOutputHeight = 100
        }
        try await withHarness(configure: configure) { harness in
            let document = #"<img src="/corpus/cartoon_hotdog.gif" alt="hotdog">"#
            let reply = try await harness.rewrite(document, query: "?output=video&base=" + harness.originURL("/"))
            let videos = try RewriteTests.videos(in: reply.text)
            try #require(videos.count == 1 && videos[0].contains("data-gif2mp4-manifest="), "\(reply.text)")
            let run = try await Self.elements(
                videos.joined(), in: harness,
                until: "((video) => video && video.readyState >= 2 && video.getBoundingClientRect().width === 200)"
                    + "(document.querySelector('video'))")
            #expect(run.result["ok"] as? Bool == true, "\(run.output)")
            let elements = try #require(run.result["elements"] as? [[String: Any]], "\(run.output)")
            try #require(elements.count == 1, "\(run.output)")
            #expect((elements[0]["currentSrc"] as? String)?.hasSuffix(".mp4") == true, "\(run.output)")
            let rect = try #require(elements[0]["rect"] as? [Double], "\(run.output)")
            #expect(rect.count == 4 && rect[2] == 200 && rect[3] == 150, "\(rect)")
        }
    }

    /// A page whose Content-Security-Policy refuses `data:` images: `/player.js`'s stand-in SVGs are refused in its
    /// first measurements (two reports here: at once, and when the video's metadata came in), the box then comes from
    /// the image's width and height, and measuring again as the window is resized three times adds no report (it
    /// added one each time before).
    @Test func aRefusedStandInIsReportedOnceNotOnEveryResize() async throws {
        try await withHarness(configure: RewriteTests.configure) { harness in
            let document = #"<img src="/corpus/cartoon_hotdog.gif" width="200" height="150" alt="hotdog">"#
            let reply = try await harness.rewrite(document, query: "?output=video&base=" + harness.originURL("/"))
            let videos = try RewriteTests.videos(in: reply.text)
            try #require(videos.count == 1, "\(reply.text)")
            let run = try await Self.elements(
                videos.joined(), in: harness,
                until:
                    "((video) => video && video.readyState >= 2 && video.style.getPropertyValue('width') === '200px')"
                    + "(document.querySelector('video'))",
                options: ["--no-data-images", "--resize", "500,700,900"])
            #expect(run.result["until"] as? Bool == true, "\(run.output)")
            let before = try #require(run.result["cspViolationsBeforeResize"] as? Int, "\(run.output)")
            let after = try #require(run.result["cspViolations"] as? [String], "\(run.output)")
            #expect(before >= 1, "the stand-in was not refused: \(run.output)")
            #expect(after.count == before, "\(after)")
            #expect(after.allSatisfy { $0.hasPrefix("img-src") }, "\(after)")
            let rect = try #require((run.result["elements"] as? [[String: Any]])?.first?["rect"] as? [Double])
            #expect(rect.count == 4 && rect[2] == 200 && rect[3] == 150, "\(rect)")
        }
    }

    /// A GIF the service refuses (a canvas past the limits, which a browser still shows), rewritten before it was
    /// ever converted: the video's source fails and `/player.js` puts the `<img>` back, with its box and classes,
    /// in Chromium. A GIF that converts keeps its video.
    @Test func aRefusedGIFComesBackAsItsImage() async throws {
        try await withHarness(configure: RewriteTests.configure) { harness in
            let document = """
                <img src="/corpus/corrupt_huge_claim_12352x12418.gif" class="hero wide" alt="huge" width="300" height="200">
                <img src="/corpus/cartoon_hotdog.gif" class="thumb" alt="hotdog">
                """
            let reply = try await harness.rewrite(document, query: "?output=video&base=" + harness.originURL("/"))
            let videos = try RewriteTests.videos(in: reply.text)
            #expect(videos.count == 2 && videos.allSatisfy { $0.contains("data-gif2mp4-src=") }, "\(reply.text)")
            let run = try await Self.elements(
                videos.joined(), in: harness,
                until: "document.querySelectorAll('img').length > 0 && document.querySelector('video').readyState >= 2")
            #expect(run.result["ok"] as? Bool == true, "\(run.output)")
            #expect(run.result["until"] as? Bool == true, "\(run.output)")
            let elements = try #require(run.result["elements"] as? [[String: Any]], "\(run.output)")
            let tags = elements.compactMap { $0["tag"] as? String }
            #expect(tags == ["img", "video"], "\(run.output)")
            let image = try #require(elements.first?["attributes"] as? [String: String])
            #expect(image["src"] == "/corpus/corrupt_huge_claim_12352x12418.gif", "\(image)")
            #expect(image["class"] == "hero wide" && image["alt"] == "huge", "\(image)")
            #expect(image["width"] == "300" && image["height"] == "200", "\(image)")
        }
    }

    /// A `<video src>` pointed straight at the route, on a page of another origin: Chromium plays it to the
    /// end (the first request converts the GIF while the browser waits).
    /// The route's video, and a rendition of it (`w:100`), play once in Chromium at their sizes and the GIF's time.
    @Test(.tags(.wallClock)) func playsInChromium() async throws {
        try await SourceRouteTests().withSigningHarness { harness in
            harness.origin.setVersion("once.gif", "cartoon_hotdog.gif")
            let url = harness.originURL("/corpus/cartoon_hotdog.gif")
            let app = "http://127.0.0.1:\(harness.appPort)"
            for (width, expected) in [(nil, [200, 150]), (100, [100, 76])] as [(Int?, [Int])] {
                let path = SourceRouteTests.signer.signedPath(
                    SourcePath(sourceURL: url, width: width, fileExtension: "mp4").path)
                let html = "<video autoplay muted playsinline src=\"\(app)\(path)\"></video>"
                let run = try await runBrowserScript(
                    PlayerScriptTests.oracle, ["snippet", "--app", app, "--html", html, "--timeout", "60"],
                    timeout: .seconds(120))
                let observed = try #require(
                    try? JSONDecoder().decode(PlayerScriptTests.Observed.self, from: Data(run.line.utf8)),
                    "\(run.output)")
                #expect(run.status == 0, "\(run.output)")
                #expect(observed.plays == 1 && observed.ended, "\(run.output)")
                #expect([observed.videoWidth ?? 0, observed.videoHeight ?? 0] == expected, "\(run.output)")
                let metadata = try await harness.request(
                    .GET,
                    SourceRouteTests.signer.signedPath(
                        SourcePath(sourceURL: url, width: width, fileExtension: "json").path))
                let durationMs = try #require(try metadata.json()["durationMs"] as? Int)
                #expect(
                    abs(observed.duration - Double(durationMs) / 1000) < 0.002, "\(observed) vs \(durationMs) ms")
            }
            #expect(harness.services.transcodes.counters.transcodes == 2)
        }
    }

    /// The JavaScript signer of docs/api.md (WebCrypto), run in headless Chromium, gives the server's URLs.
    @Test func readmeJavaScriptSignerAgrees() async throws {
        let readme = try PackagingTests.read("docs/api.md")
        let start = try #require(readme.range(of: "```js\n"), "docs/api.md has no ```js block")
        let end = try #require(readme.range(of: "```", range: start.upperBound..<readme.endIndex))
        let key = String(repeating: "3c", count: 32), salt = "73616c7479"
        let signer = try #require(URLSigner(hexKeys: [key], hexSalts: [salt]))
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("Browser/sign_url_check.py").path
        try await withHarness { harness in
            try await withTemporaryDirectory { directory in
                let code = directory + "/sign.js"
                try String(readme[start.upperBound..<end.lowerBound]).write(
                    toFile: code, atomically: true, encoding: .utf8)
                for (source, fileExtension, background) in [
                    ("https://example.com/cats/dancing.gif", "mp4", nil),
                    ("https://例え.jp/ü.gif?w=1&h=2", "jpg", "000000"),
                ] {
                    let run = try await runBrowserScript(
                        script,
                        ["http://127.0.0.1:\(harness.appPort)/healthz", code, key, salt, source, fileExtension]
                            + (background.map { [$0] } ?? []),
                        timeout: .seconds(90))
                    #expect(run.status == 0, "\(run.output)")
                    let expected = signer.signedPath(
                        SourcePath(
                            sourceURL: source, background: background.flatMap { RGBColor(hex: $0) },
                            fileExtension: fileExtension
                        ).path)
                    #expect(run.result["url"] as? String == expected, "\(run.output)")
                }
            }
        }
    }

    /// The `<img>` and `<video>` elements of `html` on a page of another origin in Chromium once the JavaScript
    /// expression `until` holds (`chromium_oracle.py elements`; `options`, its further options).
    static func elements(
        _ html: String, in harness: Harness, until: String, timeout: Int = 30, options: [String] = []
    ) async throws -> (status: Int32, result: [String: Any], line: String, output: String) {
        try await runBrowserScript(
            PlayerScriptTests.oracle,
            [
                "elements", "--app", "http://127.0.0.1:\(harness.appPort)", "--html", html, "--until", until,
                "--timeout", String(timeout),
            ] + options,
            timeout: .seconds(timeout + 60))
    }
}
