import Foundation
import TestSupport
import Testing

@testable import Transcoder

/// Jobs encode with x264 frame threads (two by default, `TranscodeOptions.threads`), and a canvas over half a
/// megapixel with the memory bound (two references, a shared lookahead, no synchronous lookahead). Checked in
/// Chromium like the single-threaded output: its `<video>` plays the GIF's length, seeking to each of our
/// pictures' start shows that picture (`requestVideoFrameCallback`'s `mediaTime`), and the pictures match
/// Chromium's own decoding of the GIF (WebCodecs `ImageDecoder`) as closely as the one-thread encode's do.
@Suite(.tags(.integration, .browser), .timeLimit(.minutes(20))) struct ThreadedEncodeTests {
    /// 800x720 (0.58 MP: over the memory bound's half megapixel), 12 frames of moving 40 px blocks with mixed
    /// delays: light enough not to slow the rest of the suite (a 1.36 MP corpus GIF here starved other tests'
    /// downloads past their deadline once).
    static func gif() throws -> [UInt8] {
        let (width, height) = (800, 720)
        var gif = GIFBuilder(width: width, height: height)
        gif.frames = (0..<12).map { frame in
            var pixels = [UInt8](repeating: 0, count: width * height)
            for y in 0..<height {
                for x in 0..<width { pixels[y * width + x] = UInt8((x / 40 + y / 40 + frame) % 8) }
            }
            return GIFBuilder.Frame(
                width: width, height: height, pixels: pixels, delay: [2, 5, 10, 20][frame % 4])
        }
        return try gif.build()
    }

    static let name = "blocks.gif"

    /// What the check saw: read on a dispatch thread, judged on the test's own task.
    struct Observed: Sendable {
        var singleDurationMs = 0
        var threadedDurationMs = 0
        var singlePTS: [Int64] = []
        var threadedPTS: [Int64] = []
        var playbackError: String?
        var videoDuration: Double?
        var shownMs: [Double] = []
        var chromiumSize: (Int?, Int?) = (nil, nil)
        var sourceSize = (0, 0)
        var singlePSNR = 0.0
        var threadedPSNR = 0.0
    }

    /// Async, its blocking work (two encodes) on a thread of its own and the Chromium runs awaited: a cooperative
    /// thread held for seconds slows every async test of the process.
    @Test func frameThreadsPlayAndLookLikeTheGIFInChromium() async throws {
        let seen = try await Self.observe()
        #expect(seen.threadedDurationMs == seen.singleDurationMs)
        #expect(seen.threadedPTS == seen.singlePTS, "frame threads must not move a picture")
        #expect(seen.playbackError == nil, "\(seen.playbackError ?? "")")
        let duration = try #require(seen.videoDuration)
        #expect(abs(duration * 1000 - Double(seen.threadedDurationMs)) <= 1, "video.duration \(duration) s")
        #expect(seen.shownMs == seen.threadedPTS.map(Double.init), "seeks showed \(seen.shownMs)")
        #expect(seen.chromiumSize.0 == seen.sourceSize.0 && seen.chromiumSize.1 == seen.sourceSize.1)
        print(
            "chromium-reference \(Self.name) threads=2 psnr=\(String(format: "%.2f", seen.threadedPSNR)) "
                + "threads=1 psnr=\(String(format: "%.2f", seen.singlePSNR))")
        #expect(seen.threadedPSNR >= 20)
        #expect(
            seen.threadedPSNR >= seen.singlePSNR - 0.5, "two threads \(seen.threadedPSNR) dB, one \(seen.singlePSNR) dB"
        )
    }

    /// Converts with one and two threads, plays the two-thread MP4 in Chromium (duration, a seek to each
    /// picture's start) and scores both against Chromium's ImageDecoder frames.
    static func observe() async throws -> Observed {
        let bytes = try Self.gif()
        return try await withTemporaryDirectory { directory in
            var seen = Observed()
            let source = directory + "/" + Self.name
            try Data(bytes).write(to: URL(fileURLWithPath: source))
            let (single, threaded) = try await onOwnThread {
                var options = TranscodeOptions()
                options.threads = 1
                let single = try Transcoder(options: options).convert(bytes, directory: directory, name: "one")
                options.threads = 2
                return (single, try Transcoder(options: options).convert(bytes, directory: directory, name: "two"))
            }
            seen.singleDurationMs = single.durationMs
            seen.threadedDurationMs = threaded.durationMs
            seen.sourceSize = (threaded.sourceWidth, threaded.sourceHeight)
            let one = try MP4Probe(path: directory + "/one.mp4")
            let two = try MP4Probe(path: directory + "/two.mp4")
            seen.singlePTS = one.ptsMilliseconds
            seen.threadedPTS = two.ptsMilliseconds

            let starts = two.ptsMilliseconds.map { Double($0) / 1000 }
            let playback = try await ChromiumOracle.play(
                [directory + "/two.mp4"], rate: 1, probes: [directory + "/two.mp4": starts]
            ).first
            seen.playbackError = playback == nil ? "no playback" : playback?.error
            seen.videoDuration = playback?.duration
            seen.shownMs = (playback?.probes ?? []).map { (($0.mediaTime ?? -1) * 1000).rounded() }

            let chromiumDirectory = directory + "/chromium"
            try FileManager.default.createDirectory(atPath: chromiumDirectory, withIntermediateDirectories: true)
            try await ChromiumOracle.decode([source], background: 0xFFFFFF, into: chromiumDirectory)
            let chromium = try ChromiumOracle.decoding(of: Self.name, in: chromiumDirectory)
            seen.chromiumSize = (chromium.width, chromium.height)
            func meanPSNR(_ video: MP4Probe) throws -> Double {
                var start = 0
                var values: [Double] = []
                for (index, delay) in chromium.playedMilliseconds.enumerated() {
                    defer { start += delay }
                    let expected = try ChromiumOracle.frame(
                        index, of: Self.name, in: chromiumDirectory, decoding: chromium)
                    guard let picture = video.ptsMilliseconds.lastIndex(where: { $0 <= Int64(start) }) else { continue }
                    let cropped = crop(
                        video.pictures[picture], width: video.width, to: threaded.sourceWidth, threaded.sourceHeight)
                    values.append(min(psnr(cropped, expected), 99))
                }
                return values.reduce(0, +) / Double(max(values.count, 1))
            }
            seen.singlePSNR = try meanPSNR(one)
            seen.threadedPSNR = try meanPSNR(two)
            return seen
        }
    }
}
