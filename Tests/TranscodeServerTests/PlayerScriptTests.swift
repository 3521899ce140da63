import Foundation
import TestSupport
import Testing

@testable import TranscodeCore
@testable import TranscodeHTTP
@testable import TranscodeServer

/// The `html` snippet plays a GIF as many times as a browser plays the GIF, checked in headless Chromium on a
/// page of another origin whose Content-Security-Policy allows scripts from the service only: a loop count of
/// 2 plays 3 times and stops on the last frame, no loop block plays once, loop count 0 loops on.
@Suite(.tags(.integration, .browser, .wallClock), .timeLimit(.minutes(20))) struct PlayerScriptTests {
    struct Observed: Decodable, Sendable {
        var plays: Int
        var ended: Bool
        var paused: Bool
        var currentTime: Double
        var duration: Double
        var lastMediaTime: Double?
        var cspViolations: [String]
        /// The picture's size as Chromium decoded it.
        var videoWidth: Int?
        var videoHeight: Int?
        var currentSrc: String?
    }

    /// Three 200 ms frames: 600 ms a play.
    /// - Parameter transparent: the first frame is all transparent (palette index 0).
    static func gif(loopCount: Int?, transparent: Bool = false) -> [UInt8] {
        TinyGIF(
            width: 16, height: 16, loopCount: loopCount,
            frames: [(transparent ? 0 : 1, 20), (2, 20), (3, 20)], transparentIndex: transparent ? 0 : nil
        ).bytes
    }

    static let oracle = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("TranscoderTests/Browser/chromium_oracle.py").path

    /// Converts the GIF, puts its snippet on a page and hands what Chromium played to `check`.
    /// - Parameter formats: the upload's `?formats=` (then the GIF's first frame is transparent: a WebM is made only
    ///   of a source with transparency).
    func play(
        loopCount: Int?, timeout: Int, formats: String? = nil,
        check: @escaping @Sendable (_ html: String, _ observed: Observed) -> Void
    ) async throws {
        // A 16x16 WebM (its container alone is some 300 bytes) is not smaller than a 543-byte GIF: the size bound is
        // raised so that the snippet lists it.
        try await withHarness(configure: { if formats != nil { $0.transcode.options.maxSizeRatio = 4 } }) { harness in
            let reply = try await harness.request(
                .POST, "/transcode" + (formats.map { "?formats=" + $0 } ?? ""),
                headers: [("Content-Type", "image/gif")],
                body: Self.gif(loopCount: loopCount, transparent: formats != nil))
            #expect(reply.status == 200, "\(reply.text)")
            let html = try #require(try reply.json()["html"] as? String)
            let run = try await runBrowserScript(
                Self.oracle,
                [
                    "snippet", "--app", "http://127.0.0.1:\(harness.appPort)", "--html", html, "--timeout",
                    String(timeout),
                ],
                timeout: .seconds(Int64(timeout) + 60))
            let observed = try #require(
                try? JSONDecoder().decode(Observed.self, from: Data(run.line.utf8)), "\(run.output)")
            #expect(observed.cspViolations.isEmpty, "\(run.output)")
            check(html, observed)
        }
    }

    @Test func loopCountTwoPlaysThreeTimesAndStopsOnTheLastFrame() async throws {
        try await self.play(loopCount: 2, timeout: 30) { html, observed in
            #expect(html.contains("data-play-count=\"3\""))
            #expect(observed.plays == 3, "\(observed)")
            #expect(observed.ended && observed.paused, "\(observed)")
            #expect(abs(observed.currentTime - observed.duration) < 0.001, "\(observed)")
            #expect(abs(observed.duration - 0.6) < 0.001, "\(observed)")
            // The picture left on screen is the last frame (it starts at 400 ms).
            #expect(observed.lastMediaTime.map { abs($0 - 0.4) < 0.001 } == true, "\(observed)")
        }
    }

    /// With a WebM (`?formats=webm`, a GIF whose first frame is transparent) the snippet lists it first, with its
    /// `codecs` parameter, then the MP4: Chromium plays the WebM, the GIF's three times, and stops on its last frame.
    @Test func theWebMIsPlayedFirstAndCountsTheSame() async throws {
        try await self.play(loopCount: 2, timeout: 30, formats: "webm") { html, observed in
            // Both listed, the WebM first (nil, either missing, fails the expectation).
            let webm = html.range(of: "type='video/webm; codecs=\"vp09.00.")
            let mp4 = html.range(of: "type='video/mp4; codecs=\"avc1.64")
            #expect(webm.map { w in mp4.map { w.lowerBound < $0.lowerBound } ?? false } == true, "\(html)")
            #expect(observed.currentSrc?.hasSuffix(".webm") == true, "\(observed)")
            #expect(observed.plays == 3, "\(observed)")
            #expect(observed.ended && observed.paused, "\(observed)")
            #expect(abs(observed.duration - 0.6) < 0.001, "\(observed)")
            #expect(observed.lastMediaTime.map { abs($0 - 0.4) < 0.001 } == true, "\(observed)")
        }
    }

    /// With the still WebP poster as well (`?formats=webm,poster.webp`), the snippet's `poster` is it, not the
    /// flattened JPEG; Chromium plays the WebM the same way.
    @Test func theWebMsPosterIsTheStillWebP() async throws {
        try await self.play(loopCount: 2, timeout: 30, formats: "webm,poster.webp") { html, observed in
            #expect(html.contains(".poster.webp\" ") && html.contains(" poster=\""), "\(html)")
            #expect(!html.contains(".jpg"), "\(html)")
            #expect(observed.currentSrc?.hasSuffix(".webm") == true, "\(observed)")
            #expect(observed.plays == 3, "\(observed)")
        }
    }

    @Test func noLoopBlockPlaysOnce() async throws {
        try await self.play(loopCount: nil, timeout: 30) { html, observed in
            #expect(!html.contains("loop") && !html.contains("<script"))
            #expect(observed.plays == 1, "\(observed)")
            #expect(observed.ended, "\(observed)")
        }
    }

    @Test func loopCountZeroLoopsOn() async throws {
        // 20 s, loading the page included: in one full `make test` a 6 s watch ended 0.4 s into the first play
        // (Chromium had taken the rest to load the page under the suite's load).
        try await self.play(loopCount: 0, timeout: 20) { html, observed in
            #expect(html.contains(" loop "))
            // Past its first end (600 ms) and still going. Not a count per second: under load (two fuzzers and
            // the suite beside it) Chromium took most of the watch to load the page.
            #expect(observed.plays >= 2, "\(observed)")
            #expect(!observed.ended, "\(observed)")
        }
    }
}
