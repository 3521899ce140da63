import Foundation
import TestSupport
import Testing

@testable import TranscodeCore
@testable import TranscodeHTTP
@testable import TranscodeServer

/// A rewritten page looks like the original page, in headless Chromium (`Browser/page_fidelity.py`): an article
/// with GIFs in the places a CMS puts them (over a gradient and a dark card, an odd size, a `srcset` with width
/// descriptors, a class-sized thumbnail in a flex row, a grid with `aspect-ratio` and `object-fit`, a link, a
/// `<picture>` with an animated WebP source, a figure, a `srcset` of one 2x candidate and no `src`, a `<picture>`
/// directing its art by `media`, a lazy-loading plugin's image (`data-src`) and a lazy image below the fold),
/// rewritten by
/// `POST /v1/rewrite` in its default output (and in `output=video`, each video paused at its start), loaded at a
/// phone's and a desktop's width, light and dark, animated images held on their first frame. Every image's box within 2 px, its pixels at least 30 dB (PSNR of 2x2
/// averages) against the original's, no new horizontal overflow, and nothing fetched before scrolling that the
/// original did not fetch.
@Suite(.tags(.integration, .browser, .heavy), .serialized, .timeLimit(.minutes(10))) struct PageFidelityTests {
    static let oracle = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("Browser/page_fidelity.py").path

    /// The article, its GIFs at `origin` (absolute URLs: the page is served from elsewhere).
    static func article(origin: String) -> String {
        let o = origin + "/corpus/"
        return """
            <!doctype html>
            <html><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
            <script>document.documentElement.dataset.scriptRan = "yes"</script>
            <script>
            // A lazy-loading plugin, as CMS themes carry one: `data-src` becomes `src` near the viewport.
            document.addEventListener("DOMContentLoaded", () => {
              const seen = new IntersectionObserver((entries) => {
                for (const entry of entries) {
                  if (!entry.isIntersecting) continue;
                  entry.target.src = entry.target.dataset.src;
                  seen.unobserve(entry.target);
                }
              }, { rootMargin: "200px" });
              document.querySelectorAll("img.lazyload").forEach((image) => seen.observe(image));
            });
            </script>
            <style>
            body { margin: 0; font: 16px/1.5 sans-serif; background: #fafaf7; color: #222 }
            main { max-width: 720px; margin: 0 auto; padding: 0 24px }
            article img { max-width: 100%; height: auto; border-radius: 8px; display: block; margin: 12px 0 }
            .hero { background: linear-gradient(135deg, #ff7a59, #5a4bff); padding: 12px }
            .card { background: #1d2230; padding: 16px; border-radius: 12px }
            .row { display: flex; gap: 8px; align-items: center }
            .row img.thumb { width: 120px; height: 90px; object-fit: cover; margin: 0 }
            .grid { display: grid; grid-template-columns: 1fr 1fr; gap: 8px }
            .grid img.ratio { aspect-ratio: 16 / 9; width: 100%; object-fit: contain; background: #000 }
            .spacer { height: 4000px }
            @media (prefers-color-scheme: dark) {
              body { background: #15171a; color: #eee }
              .card { background: #2a2d33 }
            }
            </style></head>
            <body><main><article>
            <h1>Twelve GIFs</h1>
            <div class="hero"><img src="\(o)cartoon_dancing_banana.gif" alt="A banana" width="365" height="360"></div>
            <div class="card"><img src="\(o)transp_flag_estonia.gif" alt="A flag on a card"></div>
            <figure><img src="\(o)cartoon_flag_delaware.gif" alt="278 x 183"><figcaption>An odd size</figcaption></figure>
            <img src="\(o)cartoon_hotdog.gif" srcset="\(o)cartoon_hotdog.gif 200w, \(o)cartoon_gifjs_logo.gif 600w" sizes="(max-width: 600px) 100vw, 600px" alt="srcset">
            <div class="row"><img class="thumb" src="\(o)photo_hopper.gif" alt="thumb"><p>A thumbnail sized by its class.</p></div>
            <div class="grid"><a href="\(o)loop_1.gif"><img src="\(o)loop_1.gif" alt="linked"></a><img class="ratio" src="\(o)cartoon_hotdog.gif" alt="ratio"></div>
            <picture><source srcset="\(o)notgif_webp_anim.gif" type="image/webp"><img src="\(o)cartoon_spinner_loading.gif" alt="picture"></picture>
            <p><img srcset="\(o)cartoon_hotdog.gif 2x" alt="a 2x candidate alone"></p>
            <picture><source media="(min-width: 800px)" srcset="\(o)cartoon_gifjs_logo.gif"><img src="\(o)photo_hopper.gif" alt="art direction"></picture>
            <div class="spacer"></div>
            <p><img class="lazyload" src="data:image/gif;base64,R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7" data-src="\(o)cartoon_dancing_banana.gif" width="365" height="360" alt="a lazy-loading plugin's"></p>
            <img src="\(o)cartoon_floppybuddy.gif" loading="lazy" alt="below the fold">
            </article></main></body></html>
            """
    }

    /// The engines, each with the narrowest width it lays out a phone's page at: MiniBrowser's window is at
    /// least 447 px wide (its toolbar).
    static let engines: [(name: String, phone: Int)] = [("chromium", 390), ("firefox", 390), ("webkitgtk", 447)]

    /// One engine at a time: three browsers beside three services on two cores were slow enough to time out.
    @Test(.serialized, arguments: engines.map(\.name))
    func aRewrittenArticleLooksLikeTheOriginal(engine: String) async throws {
        try await Self.rewriteAndCompare(["--engine", engine]) { runs in
            #expect(runs.count == 4)
            for page in runs {
                #expect(page["pageScriptRan"] as? Bool == true, "\(engine): the page's script did not run")
                try Self.check(page, engine: engine)
            }
        }
    }

    /// A cold first view: the article rewritten (lazy) and read at once, while its upgrades are still being made.
    /// Each `.auto` URL answers what exists (the GIF, or for WebKit, whose `<img>` names video, an opaque GIF's MP4
    /// made at once): every image shows, in its box, at its first frame, in light and dark.
    @Test(.serialized, arguments: engines.map(\.name))
    func aFirstViewLooksLikeTheOriginal(engine: String) async throws {
        try await Self.rewriteAndCompare([["--engine", engine]], query: "", settle: false) { runs in
            #expect(runs.count == 4)
            for page in runs {
                try Self.check(page, engine: engine + " (first view)")
            }
        }
    }

    /// The article rewritten with `output=video` (lazy, the mode a CMS that wants `<video>` elements uses): each GIF
    /// a `<video>` (a transparent one's WebM keeps its alpha, an odd size its size), its box and classes carried,
    /// compared with the original the same way, each video paused at its start.
    @Test(.serialized, arguments: engines.map(\.name))
    func aRewrittenArticleInVideoModeLooksLikeTheOriginal(engine: String) async throws {
        // One browser process per scheme and width: each within the 120 s a child process is given (a video is
        // held half a second for /player.js to settle, and every run starts its browser afresh). WebKitGTK took
        // 55-68 s for both widths of a scheme, under the heavy tier.
        let perRun = ["light", "dark"].flatMap { scheme in
            ["390", "1280"].map { ["--engine", engine, "--schemes", scheme, "--widths", $0] }
        }
        try await Self.rewriteAndCompare(perRun, query: "?output=video") { runs in
            #expect(runs.count == 4)
            for page in runs {
                #expect(page["pageScriptRan"] as? Bool == true, "\(engine): the page's script did not run")
                try Self.check(page, engine: engine + " (video)", output: .video)
            }
        }
    }

    /// The same pages with JavaScript off, in each engine (Chromium: the profile's JavaScript setting blocked;
    /// Firefox: `javascript.enabled` false; WebKitGTK: `enable-javascript-markup` false, scripts dropped as the
    /// page is parsed). The page's own script, which marks the document, does not run; WebDriver's still do. The
    /// rewritten `<img>` needs no script, so every GIF still shows, in its box, at its first frame. (Lazy images
    /// load at once without scripts, in both pages alike.)
    @Test(.serialized, arguments: engines.map(\.name))
    func withoutJavaScriptEveryGIFStillShows(engine: String) async throws {
        try await Self.rewriteAndCompare(["--engine", engine, "--schemes", "light", "--no-javascript"]) { runs in
            #expect(runs.count == 2)
            for page in runs {
                #expect(
                    page["pageScriptRan"] as? Bool == false, "\(engine): the page's script ran: JavaScript is not off")
                try Self.check(page, engine: engine + " (no JavaScript)", lazyLoads: false)
            }
        }
    }

    /// The article rewritten by `POST /v1/rewrite` (lazy, as a CMS publishes: its upgrades queued when it answers),
    /// read on a second view once the background work has settled, both pages compared by `page_fidelity.py` with
    /// `arguments`, its runs handed to `check`.
    static func rewriteAndCompare(
        _ arguments: [String], query: String = "",
        check: @escaping @Sendable ([[String: Any]]) throws -> Void
    ) async throws {
        try await Self.rewriteAndCompare([arguments], query: query, check: check)
    }

    /// The same, `page_fidelity.py` run once for each of `argumentSets`, one after another; their runs together.
    static func rewriteAndCompare(
        _ argumentSets: [[String]], query: String, settle: Bool = true,
        check: @escaping @Sendable ([[String: Any]]) throws -> Void
    ) async throws {
        try await withHarness(configure: NegotiatedImageTests.configure) { harness in
            let original = Self.article(origin: harness.originURL(""))
            let reply = try await harness.rewrite(original, query: query, timeout: .seconds(120))
            #expect(reply.status == 200, "\(reply.text)")
            if settle, !query.contains("eager") { try await NegotiatedImageTests.settle(harness) }
            #expect(reply.headers.first(name: "X-GIFs-Found") == "12")
            #expect(reply.text.contains("<video") == query.contains("output=video"))
            try await withTemporaryDirectory { directory in
                let before = directory + "/original.html"
                let after = directory + "/rewritten.html"
                try Data(original.utf8).write(to: URL(fileURLWithPath: before))
                try Data(reply.body).write(to: URL(fileURLWithPath: after))
                var runs: [[String: Any]] = []
                for arguments in argumentSets {
                    // Each run's time in the log, against its 120 s bound (the script's standard error, in a
                    // failure's message, says where a run that was ended stood).
                    let started = ContinuousClock.now
                    let run = try await runProcess(
                        "/usr/bin/python3", [Self.oracle, before, after] + arguments, timeout: .seconds(120),
                        heavy: true)
                    print(
                        "page_fidelity \(arguments.joined(separator: " ")): exit \(run.status) after "
                            + "\((ContinuousClock.now - started).formatted(.units(allowed: [.seconds], fractionalPart: .show(length: 1))))"
                    )
                    let output = "exit status \(run.status)\nstdout:\n\(run.stdout)\nstderr:\n\(run.stderr)"
                    let line = run.stdout.split(separator: "\n").last.map(String.init) ?? ""
                    let result = try #require(
                        (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any], "\(output)")
                    #expect(result["ok"] as? Bool == true, "\(output)")
                    runs += try #require(result["runs"] as? [[String: Any]], "\(output)")
                }
                try check(runs)
            }
        }
    }

    /// What the rewrite put in place of the GIFs.
    enum Output { case image, video }

    /// One engine's run at one width and scheme.
    static func check(_ page: [String: Any], engine: String, lazyLoads: Bool = true, output: Output = .image) throws {
        let name = "\(engine), \(page["width"] ?? "?") px, \(page["scheme"] ?? "?")"
        let originalPage = try #require(page["original"] as? [String: Any])
        let rewrittenPage = try #require(page["rewritten"] as? [String: Any])
        let phone = Self.engines.first { engine.hasPrefix($0.name) }?.phone ?? 390
        let width = page["width"] as? Int ?? 0
        #expect(rewrittenPage["viewport"] as? Int == (width < 500 ? phone : width), "\(name): \(rewrittenPage)")
        #expect(
            (rewrittenPage["overflow"] as? Double ?? 0) <= (originalPage["overflow"] as? Double ?? 0),
            "\(name): new horizontal overflow")
        let images = try #require(page["images"] as? [[String: Any]])
        #expect(images.count == 12, "\(name)")
        for image in images {
            let label = "\(name), image \(image["index"] ?? "?") (\(image["originalSrc"] ?? ""))"
            #expect(image["loaded"] as? Bool == true, "\(label): not loaded")
            #expect((image["boxDelta"] as? Double ?? 99) <= 2, "\(label): \(image)")
            if page["frozen"] as? Bool == true {
                // Firefox at a phone's width is the page zoomed by 60/46 (`page_fidelity.py`): it scales this video
                // (the MP4 of an opaque GIF, letterboxed in a 16:9 box) with a coarser filter than its images,
                // 29.69 dB against the GIF's 30 (Chromium: 41.8). A known gap, recorded each run.
                let zoomedVideo =
                    output == .video && engine.hasPrefix("firefox") && (page["width"] as? Int ?? 0) < 500
                    && image["index"] as? Int == 6
                withKnownIssue("Firefox's zoomed video scaling", isIntermittent: false) {
                    #expect((image["psnr"] as? Double ?? 0) >= 30, "\(label): \(image)")
                } when: {
                    zoomedVideo
                }
            }
            // Every GIF is shown through the service; the <picture> (index 7) shows its WebP source.
            let shown = image["rewrittenSrc"] as? String ?? ""
            switch output {
            case .image:
                // Without scripts the lazy-loading plugin's image (index 10) stays on its placeholder, in both pages.
                let placeholder = image["index"] as? Int == 10 && page["pageScriptRan"] as? Bool == false
                let expected = image["index"] as? Int == 7 ? "notgif_webp_anim.gif" : ".auto"
                #expect(placeholder ? shown.hasPrefix("data:image/gif") : shown.hasSuffix(expected), "\(label)")
            case .video:
                // Videos where a video shows the GIF as it is: with its transparency (a WebM: the hero, the card, the
                // srcset's largest), or opaque (the MP4). Images where none does: a transparent GIF whose WebM did not
                // reach the quality floor (put back by /player.js: the GIF itself), and the <picture>, whose WebP
                // source the browser shows.
                let index = image["index"] as? Int ?? -1
                let expected: (tag: String, ending: String) =
                    switch index {
                    case 0, 1, 3, 10: ("video", ".webm")
                    case 4, 5, 6, 8: ("video", ".mp4")
                    case 7: ("img", "notgif_webp_anim.gif")
                    // Art direction stays a <picture> (one video cannot be both crops), its GIFs `.auto` images.
                    case 9: ("img", ".auto")
                    default: ("img", image["originalSrc"] as? String ?? "?")
                    }
                #expect(image["rewrittenTag"] as? String == expected.tag, "\(label): \(image)")
                #expect(shown.hasSuffix(expected.ending), "\(label): \(image)")
            }
        }
        // The lazy image below the fold (the last) was fetched by neither page before it was scrolled to. With
        // scripts off, browsers load lazy images at once (the HTML standard: lazy loading would let a page without
        // scripts track scrolling): then both pages fetch it, the same way.
        let lazy = try #require(images.last)
        var early: [Bool] = []
        for (which, side) in [("originalSrc", originalPage), ("rewrittenSrc", rewrittenPage)] {
            let fetched = side["fetchedBeforeScroll"] as? [String] ?? []
            early.append(fetched.contains(lazy[which] as? String ?? "?"))
            if lazyLoads {
                #expect(!early.last!, "\(name): \(which) fetched early: \(fetched)")
            }
        }
        #expect(early[0] == early[1], "\(name): the lazy image fetched early by one page only")
        print("page \(name): " + images.map { "\($0["psnr"] ?? "-")" }.joined(separator: " "))
        if let first = page["firstLook"] as? [Any] {
            // `page_fidelity.py` looked again in a fresh browser: what the first look read.
            print("page \(name), first look: " + first.map { "\($0)" }.joined(separator: " "))
        }
    }
}
