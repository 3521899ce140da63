import Foundation
import TestSupport
import Testing

@testable import TranscodeCore
@testable import TranscodeHTTP
@testable import TranscodeServer

@Suite(.tags(.integration), .timeLimit(.minutes(20))) struct DemoPageTests {
    /// The elements the page's script and the browser check rely on.
    static let elementIDs = [
        "url", "convert", "file", "status", "result", "gif", "video", "gif-size", "mp4-size", "saved", "snippet",
        "copy", "error", "sample", "background",
    ]

    @Test func servesTheSelfContainedPage() async throws {
        try await withHarness { harness in
            let reply = try await harness.request(.GET, "/")
            #expect(reply.status == 200)
            #expect(reply.headers.first(name: "Content-Type") == "text/html; charset=utf-8")
            #expect(reply.headers.first(name: "Cache-Control") == "no-cache")
            #expect(reply.headers.first(name: "X-Content-Type-Options") == "nosniff")

            let html = reply.text
            #expect(html.hasPrefix("<!doctype html>"))
            for id in Self.elementIDs {
                #expect(html.contains("id=\"\(id)\""), "no element #\(id)")
            }
            #expect(
                html.contains("<input id=\"file\" type=\"file\" accept=\"image/gif,image/png,image/apng,image/webp\">"))
            #expect(html.contains("<label for=\"url\">"))
            // Self-contained: nothing is fetched from elsewhere (the icon is the service's own).
            #expect(html.contains("<link rel=\"icon\" href=\"/favicon.ico\">"))
            #expect(html.components(separatedBy: "<link").count == 2)
            #expect(!html.contains("src=\"http"))

            let policy = try #require(reply.headers.first(name: "Content-Security-Policy"))
            #expect(!policy.contains("unsafe"), "\(policy)")
            var directives: [String: [String]] = [:]
            for directive in policy.split(separator: ";") {
                let words = directive.split(separator: " ").map(String.init)
                if let name = words.first { directives[name] = Array(words.dropFirst()) }
            }
            #expect(directives["default-src"] == ["'none'"])
            #expect(directives["img-src"] == ["'self'", "blob:", "http:", "https:"])
            #expect(directives["media-src"] == ["'self'", "blob:"])
            #expect(directives["connect-src"] == ["'self'"])
            #expect(directives["frame-ancestors"] == ["'none'"])
            // The inline script and style are allowed by the hashes of exactly the text served (the browser
            // test proves the hashes are computed the way browsers compute them).
            let script = try #require(Self.text(of: "script", in: html))
            let style = try #require(Self.text(of: "style", in: html))
            // 'self' for /player.js, which plays finite loop counts as the snippet does.
            #expect(directives["script-src"] == ["'self'", DemoPage.sourceHash(script)])
            #expect(html.contains("<script src=\"/player.js\" defer></script>"))
            #expect(directives["style-src"] == [DemoPage.sourceHash(style)])
        }
    }

    /// The sample GIF and the icon are served, as the page asks for them.
    @Test func servesTheSampleAndTheIcon() async throws {
        try await withHarness { harness in
            let sample = try await harness.request(.GET, "/demo/sample.gif")
            #expect(sample.status == 200 && sample.headers.first(name: "Content-Type") == "image/gif")
            #expect(Array(sample.body.prefix(6)) == Array("GIF89a".utf8))
            let icon = try await harness.request(.GET, "/favicon.ico")
            #expect(icon.status == 200 && icon.headers.first(name: "Content-Type") == "image/x-icon")
            #expect(Array(icon.body.prefix(4)) == [0, 0, 1, 0])
        }
    }

    /// Dark mode, the background picker and the built-in sample, in headless Chromium (`demo_page_check.py
    /// PAGE sample`): the picker starts at the dark page's colour; a transparent corner of the converted sample
    /// is the colour picked; the icon loads.
    @Test(.tags(.browser, .wallClock)) func theSampleOverAChosenBackgroundInDarkMode() async throws {
        try await withHarness { harness in
            let run = try await runBrowserScript(
                Self.checker, ["http://127.0.0.1:\(harness.appPort)/", "sample"], timeout: .seconds(120))
            #expect(run.status == 0, "\(run.output)")
            #expect(run.result["ok"] as? Bool == true, "\(run.output)")
        }
    }

    static let checker = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("Browser/demo_page_check.py").path

    /// Converts the banana in headless Chromium through the page and checks the MP4 (H.264) really plays:
    /// `readyState` 4 and a moving `currentTime`. Needs Debian's chromium, chromium-driver and
    /// python3-selenium; without them the test fails, it does not skip. The browser script bounds each of its
    /// waits and is terminated after 120 s.
    @Test(.tags(.browser, .wallClock)) func convertsAndPlaysInChromium() async throws {
        try await withHarness { harness in
            let run = try await runBrowserScript(
                Self.checker,
                ["http://127.0.0.1:\(harness.appPort)/", harness.originURL("/corpus/cartoon_dancing_banana.gif")],
                timeout: .seconds(120))
            #expect(run.status == 0, "\(run.output)")
            #expect(run.result["ok"] as? Bool == true, "\(run.output)")
            #expect(run.result["readyState"] as? Int == 4, "\(run.output)")
        }
    }

    /// The demo page plays a GIF with a loop count as many times as a browser plays the GIF, through
    /// `/player.js`: `loop_once_libgd.gif` (loop count 1, two 500 ms frames) plays twice, then stays on its
    /// last frame.
    @Test(.tags(.browser, .wallClock)) func playsAFiniteLoopCountInChromium() async throws {
        try await withHarness { harness in
            let run = try await runBrowserScript(
                Self.checker,
                ["http://127.0.0.1:\(harness.appPort)/", harness.originURL("/corpus/loop_once_libgd.gif"), "2"],
                timeout: .seconds(120))
            #expect(run.status == 0, "\(run.output)")
            #expect(run.result["ok"] as? Bool == true, "\(run.output)")
            #expect(run.result["plays"] as? Int == 2, "\(run.output)")
        }
    }

    /// The text between the first `<tag>` and `</tag>`.
    static func text(of tag: String, in html: String) -> String? {
        guard let open = html.range(of: "<\(tag)>"),
            let close = html.range(of: "</\(tag)>", range: open.upperBound..<html.endIndex)
        else { return nil }
        return String(html[open.upperBound..<close.lowerBound])
    }
}
