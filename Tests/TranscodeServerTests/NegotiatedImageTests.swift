import Foundation
import TestSupport
import Testing
import Transcoder

@testable import TranscodeCore
@testable import TranscodeHTTP
@testable import TranscodeServer

/// The `<img>` a rewritten page keeps: `POST /v1/rewrite` (default `output=img`) changes only the GIF URLs of
/// `src`, `srcset`, `data-src` and `data-srcset`, to signed `.auto` URLs, and `.auto` answers by `Accept` the
/// smallest file that browser's `<img>` shows, or a redirect to the GIF.
@Suite(.tags(.integration), .timeLimit(.minutes(10))) struct NegotiatedImageTests {
    static let chromium = "image/avif,image/webp,image/apng,image/svg+xml,image/*,*/*;q=0.8"
    static let firefox = "image/avif,image/webp,image/png,image/svg+xml,image/*;q=0.8,*/*;q=0.5"
    static let safari17 =
        "image/webp,image/avif,image/jxl,image/heic,image/heic-sequence,video/*;q=0.8,image/png,image/svg+xml,image/*;q=0.8,*/*;q=0.5"
    static let safari13 = "image/png,image/svg+xml,image/*;q=0.8,video/*;q=0.8,*/*;q=0.5"

    /// `RewriteTests.configure` with format upgrades queued (the harness queues none by default).
    static func configure(_ configuration: inout ServerConfiguration) {
        RewriteTests.configure(&configuration)
        configuration.transcode.upgradeQueueLength = 64
    }

    static let safari15 = "image/webp,image/png,image/svg+xml,image/*;q=0.8,video/*;q=0.8,*/*;q=0.5"

    /// Real `Accept` headers of `<img>` requests, and what each is answered for a transparent GIF whose WebP and AVIF
    /// are smaller, for an opaque one, and for one nothing beats: the AVIF where named, then the MP4 where video is
    /// named and the GIF is opaque, then the WebP, then the GIF.
    @Test(
        arguments: [
            ("Chromium 120", chromium, "avif", "avif", "source"),
            ("Firefox 128", firefox, "avif", "avif", "source"),
            ("Firefox 65", "image/webp,*/*", "webp", "webp", "source"),
            // Read from the engines the page tests run (Debian 12, 2026): Chromium 156, Firefox ESR 153, WebKitGTK 2.50.
            (
                "Chromium 156", "image/jxl,image/avif,image/webp,image/apng,image/svg+xml,image/*,*/*;q=0.8", "avif",
                "avif", "source"
            ),
            (
                "WebKitGTK 2.50",
                "image/webp,image/avif,video/*;q=0.8,image/png,image/svg+xml,image/*;q=0.8,*/*;q=0.5", "avif", "avif",
                "source"
            ),
            ("Safari 17", safari17, "avif", "avif", "source"),
            ("Safari 15 (WebP, no AVIF; its <img> plays MP4)", safari15, "webp", "mp4", "source"),
            ("Safari 13 (no WebP; its <img> plays MP4)", safari13, "source", "mp4", "source"),
            ("curl", "*/*", "source", "source", "source"),
            ("no Accept", nil, "source", "source", "source"),
            ("a CDN that normalises to image/webp", "image/webp", "webp", "webp", "source"),
            ("a CDN that normalises to image/avif", "image/avif", "avif", "avif", "source"),
            ("WebP refused", "image/webp;q=0, image/*", "source", "source", "source"),
            ("AVIF refused", "image/avif;q=0, image/webp", "webp", "webp", "source"),
            ("upper case, spaces", " IMAGE/WEBP ; q=0.9 ", "webp", "webp", "source"),
        ] as [(String, String?, String, String, String)])
    func acceptTable(client: String, accept: String?, transparent: String, opaque: String, nothingBetter: String) {
        func metadata(transparency: Bool, smaller: Bool) -> TranscodeMetadata {
            var metadata = TranscodeMetadata(
                sourceFormat: .gif, sourceWidth: 10, sourceHeight: 10, outputWidth: 10, outputHeight: 10,
                sourceFrameCount: 2, encodedFrameCount: 2, durationMs: 200, loopCount: 0, playCount: nil,
                loopsForever: true, hasTransparency: transparency, truncated: false, background: .white,
                sourceBytes: 1000, mp4Bytes: smaller ? 500 : 2000, posterBytes: 100,
                recommendation: smaller ? .video : .keepGIF)
            for format in ["webp", "avif"] {
                var entry = ManifestEntry(
                    role: ObjectRole(rawValue: format), format: format, bytes: smaller ? 400 : 1200, sha256: nil)
                if !smaller { entry.recommendation = .keepGIF }
                metadata.otherArtifacts.append(entry)
            }
            return metadata
        }
        func name(_ choice: ImageNegotiation.Choice) -> String {
            switch choice {
            case .source: "source"
            case .file(let format): format.name
            }
        }
        let cases = [
            (metadata(transparency: true, smaller: true), transparent),
            (metadata(transparency: false, smaller: true), opaque),
            (metadata(transparency: false, smaller: false), nothingBetter),
        ]
        for (metadata, expected) in cases {
            #expect(name(ImageNegotiation.choose(accept: accept, metadata: metadata)) == expected, "\(client)")
        }
    }

    /// `srcset` as the HTML standard parses it: a comma inside a URL belongs to it, commas ending a URL end the
    /// candidate, descriptors run to a comma outside parentheses.
    @Test(arguments: [
        ("/a.gif 1x, /b.gif 2x", ["/a.gif", "/b.gif"]),
        ("/upload/w_400,c_fill/cat.gif 400w, /small.gif 200w", ["/upload/w_400,c_fill/cat.gif", "/small.gif"]),
        ("/a.gif,/b.gif", ["/a.gif,/b.gif"]),
        ("/a.gif, /b.gif", ["/a.gif", "/b.gif"]),
        ("/a.gif,, /b.gif 2x,", ["/a.gif", "/b.gif"]),
        (" /x.gif (junk, more) 2x , /y.gif", ["/x.gif", "/y.gif"]),
        ("", []),
    ])
    func srcsetParsing(srcset: String, urls: [String]) {
        #expect(HTMLGIFScanner.srcsetCandidates(srcset).map { String(srcset[$0.url]) } == urls)
    }

    /// Waits until the pool has no job (the `.auto` upgrades queued by the requests before have ended).
    static func settle(_ harness: Harness) async throws {
        let deadline = ContinuousClock.now + .seconds(300)
        while harness.services.transcodes.pool.load > 0 {
            guard ContinuousClock.now < deadline else { throw CancellationError() }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    /// The `.auto` route. A first view waits for no expensive encode: Chromium is sent to the GIF (`upgrading`, a
    /// short max-age) while the AVIF and WebP are made at upgrade priority; Safari 13's `<img>`, which plays video,
    /// gets the MP4 of an opaque GIF made at once. Once made, each client gets the smallest file it shows, for the
    /// full max-age and `immutable`: the AVIF where named, the WebP where only it is, the GIF for the rest
    /// (`not-accepted`). A GIF the service refuses is a redirect too, with the refusal's code, never cached. Every
    /// answer varies by `Accept`, and every redirect to the GIF is counted by its reason.
    @Test(.tags(.heavy)) func theAutoRouteAnswersByAccept() async throws {
        try await withHarness(configure: Self.configure) { harness in
            let signer = try #require(URLSigner(hexKeys: [RewriteTests.key], hexSalts: [RewriteTests.salt]))
            func auto(_ path: String) -> (String, String) {
                let url = harness.originURL(path)
                return (signer.signedPath(SourcePath(sourceURL: url, fileExtension: SourcePath.negotiated).path), url)
            }
            let (banana, bananaURL) = auto("/corpus/cartoon_dancing_banana.gif")
            let first = try await harness.request(.GET, banana, headers: [("Accept", Self.chromium)])
            #expect(first.status == 302)
            #expect(first.headers.first(name: "Location") == bananaURL)
            #expect(first.headers.first(name: "X-Fallback") == "upgrading")
            #expect(first.headers.first(name: "Cache-Control") == "public, max-age=60")
            #expect(first.headers.first(name: "Vary") == "Accept")
            try await Self.settle(harness)

            let avif = try await harness.request(.GET, banana, headers: [("Accept", Self.chromium)])
            #expect(avif.status == 200, "\(avif.text)")
            #expect(avif.headers.first(name: "Content-Type") == "image/avif")
            #expect(avif.headers.first(name: "Cache-Control") == "public, max-age=3600, immutable")
            #expect(avif.headers.first(name: "Vary") == "Accept")
            #expect(Array(avif.body[4..<12]) == Array("ftypavis".utf8))
            let safari17 = try await harness.request(.GET, banana, headers: [("Accept", Self.safari17)])
            #expect(safari17.headers.first(name: "Content-Type") == "image/avif")
            let webp = try await harness.request(.GET, banana, headers: [("Accept", "image/webp,*/*")])
            #expect(webp.status == 200, "\(webp.text)")
            #expect(webp.headers.first(name: "Content-Type") == "image/webp")
            #expect(Array(webp.body[8..<12]) == Array("WEBP".utf8))
            #expect(avif.body.count < webp.body.count)
            let range = try await harness.request(
                .GET, banana, headers: [("Accept", "image/webp,*/*"), ("Range", "bytes=0-11")])
            #expect(range.status == 206)
            #expect(range.body == Array(webp.body.prefix(12)))
            // Transparent: Safari 13 and curl get the GIF itself, for good.
            for accept in [Self.safari13, "*/*"] {
                let gif = try await harness.request(.GET, banana, headers: [("Accept", accept)])
                #expect(gif.status == 302)
                #expect(gif.headers.first(name: "Location") == bananaURL)
                #expect(gif.headers.first(name: "Vary") == "Accept")
                #expect(gif.headers.first(name: "X-Fallback") == "not-accepted")
                #expect(gif.headers.first(name: "Cache-Control") == "public, max-age=3600, immutable")
            }
            #expect(harness.services.transcodes.counters.transcodes == 1)
            #expect(harness.services.transcodes.pool.startedByPriority[.upgrade] == 1)

            // `.webm` asks for VP9 with alpha for a <video>: an object of its own, made on the first request.
            let webmPath = signer.signedPath(SourcePath(sourceURL: bananaURL, fileExtension: "webm").path)
            let webm = try await harness.request(.GET, webmPath)
            #expect(webm.status == 200, "\(webm.text)")
            #expect(webm.headers.first(name: "Content-Type") == "video/webm")
            #expect(Array(webm.body.prefix(4)) == [0x1A, 0x45, 0xDF, 0xA3])
            #expect(harness.services.transcodes.counters.transcodes == 2)

            // Opaque: Safari 13's <img> gets the MP4 at once on a first view (interim), the upgrade queued behind it.
            let (hopper, _) = auto("/corpus/photo_hopper.gif")
            let mp4 = try await harness.request(.GET, hopper, headers: [("Accept", Self.safari13)])
            #expect(mp4.status == 200)
            #expect(mp4.headers.first(name: "Content-Type") == "video/mp4")
            #expect(mp4.headers.first(name: "Cache-Control") == "public, max-age=60")
            try await Self.settle(harness)
            let settled = try await harness.request(.GET, hopper, headers: [("Accept", Self.safari13)])
            #expect(settled.headers.first(name: "Content-Type") == "video/mp4")
            #expect(settled.headers.first(name: "Cache-Control") == "public, max-age=3600, immutable")

            // Refused (a canvas past the limits, which a browser still shows): the GIF, not a broken image; once the
            // upgrade failed, its code, never cached, and no download again.
            let (huge, hugeURL) = auto("/corpus/corrupt_huge_claim_12352x12418.gif")
            _ = try await harness.request(.GET, huge, headers: [("Accept", Self.chromium)])
            try await Self.settle(harness)
            let downloads = harness.services.transcodes.counters.downloads
            let refused = try await harness.request(.GET, huge, headers: [("Accept", Self.chromium)])
            #expect(refused.status == 302)
            #expect(refused.headers.first(name: "Location") == hugeURL)
            #expect(refused.headers.first(name: "X-Fallback") == "dimensions-too-large")
            #expect(refused.headers.first(name: "Cache-Control") == "no-store")
            #expect(harness.services.transcodes.counters.downloads == downloads)

            let fallbacks = harness.services.transcodes.counters.autoFallbacks
            #expect(fallbacks["upgrading"] == 2)
            #expect(fallbacks["not-accepted"] == 2)
            #expect(fallbacks["dimensions-too-large"] == 1)
            let metrics = try await harness.request(.GET, "/metrics")
            #expect(metrics.text.contains(#"transcode_auto_fallbacks_total{reason="not-accepted"} 2"#))
        }
    }

    /// `output=img` (the default): the elements stay; only GIF URLs change, each to its own `.auto` URL (every
    /// `srcset` candidate, so the browser's choice of size holds; a lazy-loading plugin's `data-src`; a
    /// `<picture>`'s GIF `<img>`, its WebP `<source>` left as it is). Put back, the original URLs give the input.
    @Test(.tags(.heavy)) func imgRewriteChangesOnlyTheGIFURLs() async throws {
        try await withHarness(configure: Self.configure) { harness in
            let document = """
                <!doctype html><html><head><style>article img { max-width: 100%; border-radius: 8px }</style></head>
                <body><article>
                <img src="/corpus/cartoon_dancing_banana.gif" class="hero" loading="lazy" alt="banana" width="365" height="360">
                <img src="/c/photo.jpg" srcset="/corpus/cartoon_hotdog.gif 500w, /corpus/loop_1.gif 150w" sizes="50vw">
                <img src="data:image/gif;base64,R0lGODlhAQABAAAAACw=" data-src="/corpus/cartoon_hotdog.gif" class="lazyload">
                <picture><source srcset="/f/anim.webp" type="image/webp"><img src="/corpus/loop_1.gif" alt="p"></picture>
                <a href="/corpus/cartoon_hotdog.gif"><IMG SRC=/corpus/loop_1.gif></a>
                <img srcset="/corpus/w_400,c_fill/loop_1.gif 400w,  /c/still.png 200w" sizes="100vw">
                <img src="/d/still.png">
                </article></body></html>
                """
            let base = harness.originURL("/")
            let reply = try await harness.rewrite(document, query: "?base=" + base)
            #expect(reply.status == 200, "\(reply.text)")
            #expect(reply.headers.first(name: "X-GIFs-Found") == "6")
            #expect(reply.headers.first(name: "X-GIFs-Rewritten") == "6")
            #expect(!reply.text.contains("<video"))
            // What the page will ask for is prepared behind readers: each GIF's `.auto` object queued as an upgrade
            // when the rewrite answered (the three the origin has are converted; the crop it has not is a 404).
            try await Self.settle(harness)
            #expect(harness.services.transcodes.pool.startedByPriority[.upgrade] == 3)
            #expect(harness.services.transcodes.pool.startedByPriority[.interactive] == nil)

            // Each .auto URL back to its GIF's (quoted: the rewrite quotes the values it writes).
            let signer = try #require(URLSigner(hexKeys: [RewriteTests.key], hexSalts: [RewriteTests.salt]))
            let origin = "http://127.0.0.1:\(harness.appPort)"
            var restored = reply.text
            for path in [
                "/corpus/cartoon_dancing_banana.gif", "/corpus/cartoon_hotdog.gif", "/corpus/loop_1.gif",
                "/corpus/w_400,c_fill/loop_1.gif",
            ] {
                let auto = signer.signedPath(
                    SourcePath(sourceURL: harness.originURL(path), fileExtension: SourcePath.negotiated).path)
                #expect(restored.contains(origin + auto), "\(path)")
                restored = restored.replacingOccurrences(of: origin + auto, with: path)
            }
            let expected = document.replacingOccurrences(
                of: "<IMG SRC=/corpus/loop_1.gif>", with: "<IMG SRC=\"/corpus/loop_1.gif\">")
            #expect(restored == expected)
            // The WebP <source>, the link, the still image and the placeholder are the input's.
            #expect(reply.text.contains(#"<source srcset="/f/anim.webp" type="image/webp">"#))
            #expect(reply.text.contains(#"<a href="/corpus/cartoon_hotdog.gif">"#))
            #expect(reply.text.contains(#"src="data:image/gif;base64,R0lGODlhAQABAAAAACw=""#))

            // Eager: converted first; a GIF nothing beats (3x1, 95 bytes) and a missing one stay as they are.
            let eager = """
                <img src="/corpus/cartoon_dancing_banana.gif"><img src="/corpus/odd_3x1_anim.gif"><img src="/corpus/none.gif">
                """
            let converted = try await harness.rewrite(eager, query: "?mode=eager&base=" + base)
            #expect(converted.headers.first(name: "X-GIFs-Rewritten") == "1", "\(converted.text)")
            #expect(converted.text.contains(#"<img src="/corpus/odd_3x1_anim.gif"><img src="/corpus/none.gif">"#))
            // The 3x1 GIF (95 bytes) was converted, and is left because nothing beats it (not because it failed).
            var options = harness.services.transcodes.defaultOptions
            options.rendition = options.rendition.withExtraFormats(ImageNegotiation.objectFormats)
            let tiny = try #require(
                try harness.services.transcodes.cachedMetadata(
                    url: URL(string: harness.originURL("/corpus/odd_3x1_anim.gif"))!, options: options))
            #expect(!ImageNegotiation.beatsTheSource(tiny))
            #expect(!tiny.otherArtifacts.isEmpty && tiny.otherArtifacts.allSatisfy { $0.recommendation == .keepGIF })
            let bad = try await harness.rewrite(eager, query: "?output=picture")
            #expect(bad.status == 400)
        }
    }
}
