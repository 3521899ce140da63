import Foundation
import TestSupport
import Testing
import Transcoder

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

    /// Real `Accept` headers of `<img>` requests, and what each is answered for a transparent GIF whose WebP is
    /// smaller, for an opaque one, and for one nothing beats. (An object with an AVIF too, as `.avif` makes, is
    /// answered the same: `.auto` objects have none, see `ImageNegotiation.objectFormats`.)
    @Test(
        arguments: [
            ("Chromium 120", chromium, "webp", "webp", "source"),
            ("Firefox 128", firefox, "webp", "webp", "source"),
            ("Firefox 65", "image/webp,*/*", "webp", "webp", "source"),
            ("Safari 17", safari17, "webp", "webp", "source"),
            ("Safari 13 (no WebP; its <img> plays MP4)", safari13, "source", "mp4", "source"),
            ("curl", "*/*", "source", "source", "source"),
            ("no Accept", nil, "source", "source", "source"),
            ("a CDN that normalises to image/webp", "image/webp", "webp", "webp", "source"),
            ("WebP refused", "image/webp;q=0, image/*", "source", "source", "source"),
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
                var entry = ManifestEntry(role: format, format: format, bytes: smaller ? 400 : 1200, sha256: nil)
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

    /// The `.auto` route: WebP for a browser that names it, the MP4 for Safari 13 (opaque GIF), a redirect to
    /// the GIF for the rest; a GIF the service refuses is a redirect too, never cached; every answer varies by
    /// `Accept`; the object is converted once.
    @Test func theAutoRouteAnswersByAccept() async throws {
        try await withHarness(configure: RewriteTests.configure) { harness in
            let signer = try #require(URLSigner(hexKeys: [RewriteTests.key], hexSalts: [RewriteTests.salt]))
            func auto(_ path: String) -> (String, String) {
                let url = harness.originURL(path)
                return (signer.signedPath(SourcePath(sourceURL: url, fileExtension: SourcePath.negotiated).path), url)
            }
            let (banana, bananaURL) = auto("/corpus/cartoon_dancing_banana.gif")
            // The `.auto` object has the WebP, not the AVIF (`ImageNegotiation.objectFormats`): Chromium, which
            // names both, gets the WebP.
            let webp = try await harness.request(.GET, banana, headers: [("Accept", Self.chromium)])
            #expect(webp.status == 200, "\(webp.text)")
            #expect(webp.headers.first(name: "Content-Type") == "image/webp")
            #expect(webp.headers.first(name: "Vary") == "Accept")
            #expect(Array(webp.body[8..<12]) == Array("WEBP".utf8))
            let range = try await harness.request(
                .GET, banana, headers: [("Accept", Self.safari17), ("Range", "bytes=0-11")])
            #expect(range.status == 206)
            #expect(range.body == Array(webp.body.prefix(12)))
            // Transparent: Safari 13 and curl get the GIF itself.
            for accept in [Self.safari13, "*/*"] {
                let gif = try await harness.request(.GET, banana, headers: [("Accept", accept)])
                #expect(gif.status == 302)
                #expect(gif.headers.first(name: "Location") == bananaURL)
                #expect(gif.headers.first(name: "Vary") == "Accept")
                #expect(gif.headers.first(name: "Cache-Control") == "public, max-age=3600")
            }
            #expect(harness.services.transcodes.counters.transcodes == 1)

            // `.avif` asks for the AVIF: an object of its own (with its video and poster), made on the first request.
            let avifPath = signer.signedPath(SourcePath(sourceURL: bananaURL, fileExtension: "avif").path)
            let avif = try await harness.request(.GET, avifPath)
            #expect(avif.status == 200, "\(avif.text)")
            #expect(avif.headers.first(name: "Content-Type") == "image/avif")
            #expect(Array(avif.body[4..<12]) == Array("ftypavis".utf8))
            #expect(harness.services.transcodes.counters.transcodes == 2)

            // `.webm` the same way: VP9 with alpha for a <video>, which asks for byte ranges.
            let webmPath = signer.signedPath(SourcePath(sourceURL: bananaURL, fileExtension: "webm").path)
            let webm = try await harness.request(.GET, webmPath)
            #expect(webm.status == 200, "\(webm.text)")
            #expect(webm.headers.first(name: "Content-Type") == "video/webm")
            #expect(Array(webm.body.prefix(4)) == [0x1A, 0x45, 0xDF, 0xA3])
            let webmRange = try await harness.request(.GET, webmPath, headers: [("Range", "bytes=4-99")])
            #expect(webmRange.status == 206)
            #expect(webmRange.body == Array(webm.body[4..<100]))
            #expect(harness.services.transcodes.counters.transcodes == 3)

            // Opaque: Safari 13's <img> gets the MP4.
            let (hopper, _) = auto("/corpus/photo_hopper.gif")
            let mp4 = try await harness.request(.GET, hopper, headers: [("Accept", Self.safari13)])
            #expect(mp4.status == 200)
            #expect(mp4.headers.first(name: "Content-Type") == "video/mp4")

            // Refused (a canvas past the limits, which a browser still shows): the GIF, not a broken image.
            let (huge, hugeURL) = auto("/corpus/corrupt_huge_claim_12352x12418.gif")
            let refused = try await harness.request(.GET, huge, headers: [("Accept", Self.chromium)])
            #expect(refused.status == 302)
            #expect(refused.headers.first(name: "Location") == hugeURL)
            #expect(refused.headers.first(name: "X-Fallback") == "dimensions-too-large")
            #expect(refused.headers.first(name: "Cache-Control") == "no-store")
        }
    }

    /// `output=img` (the default): the elements stay; only GIF URLs change, each to its own `.auto` URL (every
    /// `srcset` candidate, so the browser's choice of size holds; a lazy-loading plugin's `data-src`; a
    /// `<picture>`'s GIF `<img>`, its WebP `<source>` left as it is). Put back, the original URLs give the input.
    @Test func imgRewriteChangesOnlyTheGIFURLs() async throws {
        try await withHarness(configure: RewriteTests.configure) { harness in
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
            #expect(harness.services.transcodes.counters.downloads == 0)

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
            options.rendition = options.rendition.withExtraFormats(ImageNegotiation.objectFormats.map(\.name))
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
