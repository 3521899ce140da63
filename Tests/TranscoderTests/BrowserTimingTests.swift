import Foundation
import Testing

@testable import Transcoder

/// The timing promise checked where it matters: Chromium plays the MP4s converted from GIFs written here.
/// Its `video.duration` must equal the sum of the browser-clamped delays; the frames it presents while playing
/// (`requestVideoFrameCallback`) must be the GIF's, at the GIF's start times, the last one included; and
/// seeking (paused) to each start time shows that frame, while 1 ms earlier shows the one before: every
/// frame starts exactly on time and lasts its whole delay, whatever frames a loaded machine drops in playback.
@Suite struct BrowserTimingTests {
    struct Case {
        var name: String
        /// (palette index, delay in centiseconds) per GIF frame.
        var frames: [(UInt8, Int)]
        /// Start times of the distinct pictures (identical consecutive frames merge), milliseconds.
        var starts: [Double]
        var totalMilliseconds: Double
    }

    static let cases = [
        Case(
            name: "long-last-delay", frames: [(2, 5), (3, 5), (4, 100)], starts: [0, 50, 100], totalMilliseconds: 1100),
        Case(
            name: "delays-0-1-2", frames: [(2, 0), (3, 1), (4, 2), (5, 2)], starts: [0, 100, 200, 220],
            totalMilliseconds: 240),
        Case(
            name: "mixed", frames: [(0, 0), (1, 1), (2, 2), (3, 3), (4, 7), (5, 10), (6, 50), (7, 150)],
            starts: [0, 100, 200, 220, 250, 320, 420, 920], totalMilliseconds: 2420),
        Case(name: "one-frame", frames: [(2, 30)], starts: [0], totalMilliseconds: 300),
        Case(name: "two-frames", frames: [(2, 20), (4, 40)], starts: [0, 200], totalMilliseconds: 600),
        Case(
            name: "identical-runs", frames: [(2, 10), (2, 20), (4, 30), (4, 5), (2, 10)], starts: [0, 300, 650],
            totalMilliseconds: 750),
    ]

    @Test func chromiumPlaysTheGIFTiming() throws {
        try withTemporaryDirectory { directory in
            var paths: [String] = []
            for testCase in Self.cases {
                var gif = GIFBuilder(width: 32, height: 32)
                gif.frames = testCase.frames.map { .filled($0.0, width: 32, height: 32, delay: $0.1) }
                let metadata = try Transcoder().convert(try gif.build(), directory: directory, name: testCase.name)
                #expect(Double(metadata.durationMs) == testCase.totalMilliseconds, "\(testCase.name)")
                paths.append(directory + "/" + testCase.name + ".mp4")
            }
            var probes: [String: [Double]] = [:]
            for (testCase, path) in zip(Self.cases, paths) {
                probes[path] =
                    testCase.starts.flatMap { start in start == 0 ? [0] : [start - 1, start] }
                    .map { $0 / 1000 } + [(testCase.totalMilliseconds - 1) / 1000]
            }
            // At normal speed, as a page plays it: at 0.25x Chromium skipped a short last frame after a long one
            // (a 100 ms frame after a 350 ms one) that it shows at 1x; the seeks check every frame exactly.
            let playbacks = try ChromiumOracle.play(paths, rate: 1, probes: probes)
            #expect(playbacks.count == Self.cases.count)
            for (testCase, playback) in zip(Self.cases, playbacks) {
                #expect(playback.error == nil, "\(testCase.name): \(playback.error ?? "")")
                let duration = try #require(playback.duration, "\(testCase.name): no duration")
                #expect(
                    abs(duration * 1000 - testCase.totalMilliseconds) <= 1,
                    "\(testCase.name): video.duration \(duration) s, the GIF plays \(testCase.totalMilliseconds) ms")
                // Played: only the GIF's frames at their start times, the last one included. (A loaded machine
                // may drop a short frame in playback; the seeks below check every frame exactly.)
                let presented = (playback.mediaTimes ?? []).map { ($0 * 1000).rounded() }
                #expect(
                    presented.allSatisfy(testCase.starts.contains),
                    "\(testCase.name): frames presented at \(presented) ms, the GIF's start at \(testCase.starts)")
                #expect(
                    presented.last == testCase.starts.last,
                    "\(testCase.name): frames presented at \(presented) ms, the GIF's start at \(testCase.starts)")
                // Seeked: each frame from its start, not a millisecond earlier, to the next one's start.
                let expected =
                    testCase.starts.enumerated().flatMap { index, start in
                        index == 0 ? [start] : [testCase.starts[index - 1], start]
                    } + [testCase.starts.last ?? 0]
                let shown = (playback.probes ?? []).map { ($0.mediaTime ?? -1) * 1000 }.map { $0.rounded() }
                #expect(shown == expected, "\(testCase.name): seeking to \(probes[paths[0]] ?? []) showed \(shown)")
                let ended = try #require(playback.endedCurrentTime, "\(testCase.name): never ended")
                #expect(abs(ended * 1000 - testCase.totalMilliseconds) <= 1, "\(testCase.name): ended at \(ended) s")
            }
        }
    }
}
