import Foundation
import Testing

@testable import Transcoder

/// A job that starts alone encodes with x264 frame threads (`encoderThreads`), and a canvas over half a
/// megapixel with the memory bound (two references, a shared lookahead, no synchronous lookahead). Checked in
/// Chromium like the single-threaded output: its `<video>` plays the GIF's length, seeking to each of our
/// pictures' start shows that picture (`requestVideoFrameCallback`'s `mediaTime`), and the pictures match
/// Chromium's own decoding of the GIF (WebCodecs `ImageDecoder`) as closely as the one-thread encode's do.
@Suite struct ThreadedEncodeTests {
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

    @Test func frameThreadsPlayAndLookLikeTheGIFInChromium() throws {
        let bytes = try Self.gif()
        try withTemporaryDirectory { directory in
            let source = directory + "/" + Self.name
            try Data(bytes).write(to: URL(fileURLWithPath: source))
            let single = try Transcoder(encoderThreads: 1).convert(bytes, directory: directory, name: "one")
            let threaded = try Transcoder(encoderThreads: 2).convert(bytes, directory: directory, name: "two")
            #expect(threaded.durationMs == single.durationMs)
            let one = try MP4Probe(path: directory + "/one.mp4")
            let two = try MP4Probe(path: directory + "/two.mp4")
            #expect(two.ptsMilliseconds == one.ptsMilliseconds, "frame threads must not move a picture")

            // Chromium's <video>: duration, and each picture shown from its own start when seeked there.
            let starts = two.ptsMilliseconds.map { Double($0) / 1000 }
            let playback = try #require(
                try ChromiumOracle.play([directory + "/two.mp4"], rate: 1, probes: [directory + "/two.mp4": starts])
                    .first)
            #expect(playback.error == nil, "\(playback.error ?? "")")
            let duration = try #require(playback.duration)
            #expect(abs(duration * 1000 - Double(threaded.durationMs)) <= 1, "video.duration \(duration) s")
            let shown = (playback.probes ?? []).map { (($0.mediaTime ?? -1) * 1000).rounded() }
            #expect(shown == two.ptsMilliseconds.map(Double.init), "seeks showed \(shown)")

            // Pixels against Chromium's ImageDecoder, frame by frame, for both encodes.
            let chromiumDirectory = directory + "/chromium"
            try FileManager.default.createDirectory(atPath: chromiumDirectory, withIntermediateDirectories: true)
            try ChromiumOracle.decode([source], background: 0xFFFFFF, into: chromiumDirectory)
            let chromium = try ChromiumOracle.decoding(of: Self.name, in: chromiumDirectory)
            #expect(chromium.width == threaded.sourceWidth && chromium.height == threaded.sourceHeight)
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
            let singlePSNR = try meanPSNR(one)
            let threadedPSNR = try meanPSNR(two)
            print(
                "chromium-reference \(Self.name) threads=2 psnr=\(String(format: "%.2f", threadedPSNR)) "
                    + "threads=1 psnr=\(String(format: "%.2f", singlePSNR))")
            #expect(threadedPSNR >= 20)
            #expect(threadedPSNR >= singlePSNR - 0.5, "two threads \(threadedPSNR) dB, one \(singlePSNR) dB")
        }
    }
}
