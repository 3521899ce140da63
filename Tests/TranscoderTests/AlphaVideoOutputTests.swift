import Foundation
import TestSupport
import Testing

@testable import Transcoder

/// The VP9 WebM with alpha (`extraFormats: ["webm"]`) as Chromium's `<video>` plays it, against Chromium's own
/// decoding of the source (`ImageDecoder`): `video.duration` is the source's length; every frame presented while
/// playing (`requestVideoFrameCallback`) starts where a source frame does; and paused at each source frame's start,
/// the picture drawn over black and over white (a canvas, as a page composites it) reads at least 35 dB (PSNR of
/// 2x2 means, as every 4:2:0 video here is judged) against the source's frame over the same colour, with the
/// transparency (told by where the two differ) the same in 99.9% of the pixels. The WebM keeps the source's size,
/// odd ones included. A source whose colour edges 4:2:0 cannot keep at the floor gets none, and so does an opaque
/// one of even size (the MP4 shows it as well); their manifests list none.
@Suite(.tags(.integration, .browser), .timeLimit(.minutes(20))) struct AlphaVideoOutputTests {
    struct Case: Sendable, CustomTestStringConvertible {
        var name: String
        var testDescription: String { self.name }
    }

    static let cases: [Case] = [
        // 365 x 360 (an odd width), transparent, disposal to background, 10 cs.
        Case(name: "cartoon_dancing_banana.gif"),
        // A 3 cs 3D render, 200 x 150, opaque: no WebM (the MP4 is its video).
        Case(name: "cartoon_hotdog.gif"),
        // Delays from 5 cs to 5 s, transparent, 600 x 288.
        Case(name: "cartoon_gifjs_logo.gif"),
        // Written here: 65 x 33, a transparent hole that moves, delays 0, 2, 5 and 100 cs.
        Case(name: "odd-transparent"),
        // The same without transparency: a WebM for its odd size (the MP4 is padded to 66 x 34).
        Case(name: "odd-opaque"),
        // A flag's red on blue: 33.4 dB at CRF 32, under the floor: no WebM.
        Case(name: "cartoon_flag_delaware.gif"),
    ]

    /// The GIF written here: a 65 x 33 blue field with a 17 x 17 transparent hole that moves right, then a red band.
    /// Colours a photograph or a drawing has, not the primaries: Chromium draws any video's pure blue (0000FF) as
    /// 0000ED-0000F3, the MP4's and an opaque VP9's alike (29 dB on a small picture, whatever the encoder did).
    static func oddTransparent(transparent: Bool = true) throws -> [UInt8] {
        let (width, height) = (65, 33)
        var gif = GIFBuilder(width: width, height: height)
        gif.palette = [0x000000, 0xFFFFFF, 0xC8503C, 0x3C9650, 0x4070B0, 0xE0C040, 0x40B0C0, 0xA050A0]
        gif.frames = [(0, 0), (16, 2), (32, 5), (48, 100)].map { left, delay in
            var pixels = [UInt8](repeating: 4, count: width * height)
            for y in 8..<25 {
                for x in left..<min(width, left + 17) { pixels[y * width + x] = 0 }
            }
            if left == 48 { for index in 0..<(width * 8) { pixels[index] = 2 } }
            return GIFBuilder.Frame(
                width: width, height: height, pixels: pixels, delay: delay, transparentIndex: transparent ? 0 : nil)
        }
        return try gif.build()
    }

    @Test(arguments: cases)
    func chromiumShowsTheSourceOverAnyBackground(_ test: Case) async throws {
        let source =
            test.name.hasPrefix("odd-")
            ? try Self.oddTransparent(transparent: test.name == "odd-transparent")
            : try [UInt8](Data(contentsOf: URL(fileURLWithPath: CorpusTests.corpusDirectory + "/" + test.name)))
        var options = TranscodeOptions()
        options.rendition = options.rendition.withExtraFormats([.webm])
        try await withTemporaryDirectory { directory in
            let metadata = try await convertFiles(source, options: options, directory: directory, name: "out")
            let webmPath = directory + "/out.webm"
            guard let entry = metadata.otherArtifacts.first(where: { $0.format == "webm" }) else {
                #expect(
                    test.name == "cartoon_flag_delaware.gif"
                        || (test.name == "cartoon_hotdog.gif" && !metadata.hasTransparency),
                    "no WebM made")
                #expect(!FileManager.default.fileExists(atPath: webmPath))
                return
            }
            let webm = try [UInt8](Data(contentsOf: URL(fileURLWithPath: webmPath)))
            #expect(entry.bytes == webm.count)
            #expect(entry.sha256 == (try ContentHash.sha256(webm)))
            #expect((webm.count < source.count) == (entry.recommendation == nil))
            #expect(entry.codecs?.hasPrefix("vp09.00.") == true && entry.codecs?.hasSuffix(".08") == true)
            let sourcePath = directory + "/source.gif"
            try Data(source).write(to: URL(fileURLWithPath: sourcePath))

            var readings: [UInt32: (decoding: ChromiumOracle.Decoding, dir: String)] = [:]
            for background: UInt32 in [0x000000, 0xFFFFFF] {
                let out = directory + "/over-\(background)"
                try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: true)
                try await ChromiumOracle.decode([sourcePath], background: background, into: out)
                readings[background] = (try ChromiumOracle.decoding(of: sourcePath, in: out), out)
            }
            let gif = try #require(readings[0x000000]?.decoding)
            try #require(gif.error == nil, "\(gif.error ?? "")")
            let (width, height) = (try #require(gif.width), try #require(gif.height))
            #expect(entry.width == width && entry.height == height, "the WebM is not the source's size")
            let starts = gif.playedMilliseconds.reduce(into: [0]) { $0.append($0.last! + $1) }

            let pixels = directory + "/probes"
            let playback = try #require(
                try await ChromiumOracle.play(
                    [webmPath], rate: 1, probes: [webmPath: starts.dropLast().map { Double($0) / 1000 }],
                    pixels: pixels
                ).first)
            #expect(playback.error == nil, "\(playback.error ?? "")")
            let duration = try #require(playback.duration)
            #expect(abs(duration * 1000 - Double(starts.last!)) <= 1, "video.duration \(duration) s")
            let presented = (playback.mediaTimes ?? []).map { Int(($0 * 1000).rounded()) }
            #expect(presented.allSatisfy(starts.contains), "frames presented at \(presented) ms; starts \(starts)")

            var total = (black: 0.0, white: 0.0)
            var worst = Double.infinity
            var disagreeing = 0
            var counted = 0
            for index in 0..<(starts.count - 1) {
                var pictures: [Bool: (source: [UInt32], video: [UInt32])] = [:]
                for overWhite in [false, true] {
                    let reading = try #require(readings[overWhite ? 0xFFFFFF : 0x000000])
                    pictures[overWhite] = (
                        try ChromiumOracle.frame(index, of: sourcePath, in: reading.dir, decoding: reading.decoding),
                        try ChromiumOracle.probePicture(
                            index, of: webmPath, overWhite: overWhite, in: pixels, width: width, height: height)
                    )
                }
                let (black, white) = (pictures[false]!, pictures[true]!)
                func psnr2x2(_ a: [UInt32], _ b: [UInt32]) -> Double {
                    min(
                        60,
                        psnr(
                            averaging2x2(a, width: width, height: height),
                            averaging2x2(b, width: width, height: height)))
                }
                let reading = (black: psnr2x2(black.source, black.video), white: psnr2x2(white.source, white.video))
                total = (total.black + reading.black, total.white + reading.white)
                worst = min(worst, reading.black, reading.white)
                disagreeing += transparencyDisagreements(
                    expected: (white.source, black.source), actual: (white.video, black.video), tolerance: 32)
                counted += width * height
            }
            let frames = Double(starts.count - 1)
            let mean = (black: total.black / frames, white: total.white / frames)
            print(
                "webm \(test.name): \(webm.count) bytes (ours \(entry.psnr ?? 0) dB), source \(source.count), mp4 \(metadata.mp4Bytes); PSNR 2x2 over black \(mean.black), over white \(mean.white), worst frame \(worst); transparency differs in \(disagreeing) of \(counted)"
            )
            #expect(mean.black >= 35, "PSNR over black: \(mean.black) dB on average")
            #expect(mean.white >= 35, "PSNR over white: \(mean.white) dB on average")
            #expect(
                Double(disagreeing) <= 0.001 * Double(counted),
                "\(disagreeing) of \(counted) pixels' transparency differs")
        }
    }
}
