import Foundation
import TestSupport
import Testing

@testable import Transcoder

/// APNG and animated WebP, one rule per file written here, each checked against what the rule says (delays,
/// play count, frames) and against Chromium's own decoding of the same file (WebCodecs `ImageDecoder`):
/// frame count, delays, play count and every frame's pixels.
@Suite(.tags(.integration, .browser), .timeLimit(.minutes(20))) struct AnimatedFormatsTests {
    struct Case: Sendable, CustomTestStringConvertible {
        var name: String
        var bytes: [UInt8]
        /// Display times we must give each frame, milliseconds; nil when the file must fail.
        var milliseconds: [Int]?
        /// Browser plays; nil is forever.
        var playCount: Int?
        var failure: TranscodeError.Code? = nil
        var truncated = false
        var testDescription: String { self.name }
    }

    static let red: UInt32 = 0xFFFF_0000
    static let green: UInt32 = 0xFF00_FF00
    static let blue: UInt32 = 0xFF00_00FF
    static let yellow: UInt32 = 0xFFFF_FF00
    /// Half-transparent blue.
    static let glass: UInt32 = 0x8000_00FF

    static func full(_ color: UInt32, _ delay: Int = 10, _ denominator: Int = 100, dispose: UInt8 = 0, blend: UInt8 = 1)
        -> AnimationFrame
    {
        .filled(color, width: 32, height: 32, delay: delay, denominator: denominator, dispose: dispose, blend: blend)
    }

    static func square(
        _ color: UInt32, at left: Int, _ top: Int, size: Int = 12, delay: Int = 10, dispose: UInt8 = 0, blend: UInt8 = 1
    ) -> AnimationFrame {
        .filled(
            color, left: left, top: top, width: size, height: size, delay: delay, dispose: dispose, blend: blend)
    }

    static func apng(_ frames: [AnimationFrame], plays: Int = 0, edit: (inout APNGBuilder) -> Void = { _ in })
        -> [UInt8]
    {
        var builder = APNGBuilder(width: 32, height: 32, frames: frames, numPlays: plays)
        edit(&builder)
        return builder.build()
    }

    static func webp(_ frames: [AnimationFrame], loop: Int = 0, width: Int = 32, height: Int = 32) -> [UInt8] {
        (try? WebPBuilder(width: width, height: height, frames: frames, loopCount: loop).build()) ?? []
    }

    /// `bytes` cut 20 bytes into the last chunk of type `type`.
    static func cut(_ bytes: [UInt8], insideLast type: String) -> [UInt8] {
        let marker = Array(type.utf8)
        let start = (0...(bytes.count - marker.count)).last { Array(bytes[$0..<($0 + marker.count)]) == marker } ?? 0
        return Array(bytes.prefix(start + 20))
    }

    static let cases: [Case] = [
        // APNG timing: 0/100 and 1/0 (a denominator of 0 is 100, so 10 ms) play as 100 ms; 5/0 is 50 ms;
        // 1/3 s is 333 ms (whole milliseconds); 11 ms plays as written.
        Case(
            name: "apng-delays.png",
            bytes: apng([
                full(red, 0, 100), full(green, 1, 0), full(blue, 5, 0), full(yellow, 1, 3), full(red, 11, 1000),
            ]), milliseconds: [100, 100, 50, 333, 11], playCount: nil),
        Case(
            name: "apng-blend.png",
            bytes: apng([
                full(red), square(glass, at: 4, 4, blend: 1), square(glass, at: 16, 16, blend: 0),
            ]), milliseconds: [100, 100, 100], playCount: nil),
        // ffmpeg 5.1 takes a whole-canvas frame disposed to BACKGROUND for a key frame and would skip its blend.
        Case(
            name: "apng-blend-over-disposed-frame.png",
            bytes: apng([full(red), full(glass, dispose: 1, blend: 1), square(green, at: 8, 8)]),
            milliseconds: [100, 100, 100], playCount: nil),
        Case(
            name: "apng-dispose-background.png",
            bytes: apng([full(red), square(blue, at: 4, 4, dispose: 1), square(green, at: 18, 18)]),
            milliseconds: [100, 100, 100], playCount: nil),
        Case(
            name: "apng-dispose-previous.png",
            bytes: apng([full(red), square(blue, at: 4, 4, dispose: 2), square(green, at: 18, 18)]),
            milliseconds: [100, 100, 100], playCount: nil),
        // PREVIOUS on the first frame acts as BACKGROUND.
        Case(
            name: "apng-dispose-previous-first.png",
            bytes: apng([full(red, dispose: 2), square(green, at: 18, 18)]), milliseconds: [100, 100],
            playCount: nil),
        Case(
            name: "apng-plays-3.png", bytes: apng([full(red), full(blue)], plays: 3), milliseconds: [100, 100],
            playCount: 3),
        Case(
            name: "apng-plays-1.png", bytes: apng([full(red), full(blue)], plays: 1), milliseconds: [100, 100],
            playCount: 1),
        Case(
            name: "apng-odd-size.png",
            bytes: APNGBuilder(
                width: 33, height: 31,
                frames: [.filled(red, width: 33, height: 31), .filled(blue, left: 2, top: 2, width: 31, height: 29)]
            ).build(), milliseconds: [100, 100], playCount: nil),
        // The IDAT image without an fcTL is not part of the animation.
        Case(
            name: "apng-hidden-default-image.png",
            bytes: apng([full(red), full(blue)]) { $0.hiddenDefaultImage = full(yellow) }, milliseconds: [100, 100],
            playCount: nil),
        // A frame reaching out of the canvas ends the animation; Chromium shows the frames before it.
        Case(
            name: "apng-frame-outside-canvas.png",
            bytes: apng([full(red), square(blue, at: 4, 4), square(green, at: 24, 24)]), milliseconds: [100, 100],
            playCount: nil, truncated: true),
        // Cut inside the last frame's image data: the frames before it play.
        Case(
            name: "apng-truncated.png",
            bytes: cut(apng([full(red), full(blue), full(green)]), insideLast: "fdAT"), milliseconds: [100, 100],
            playCount: nil, truncated: true),
        Case(
            name: "apng-still.png", bytes: apng([full(red)]) { $0.still = true }, milliseconds: nil, playCount: nil,
            failure: .notAnimated),
        // WebP timing: 0 and 10 ms play as 100 ms, 11 ms as written.
        Case(
            name: "webp-delays.webp",
            bytes: webp([full(red, 0), full(green, 10), full(blue, 11), full(yellow, 250)]),
            milliseconds: [100, 100, 11, 250], playCount: nil),
        Case(
            name: "webp-blend.webp",
            bytes: webp([
                full(red, 100), square(glass, at: 4, 4, delay: 100, blend: 1),
                square(glass, at: 16, 16, delay: 100, blend: 0),
            ]),
            milliseconds: [100, 100, 100], playCount: nil),
        Case(
            name: "webp-dispose-background.webp",
            bytes: webp([
                full(red, 100), square(blue, at: 4, 4, delay: 100, dispose: 1), square(green, at: 18, 18, delay: 100),
            ]),
            milliseconds: [100, 100, 100], playCount: nil),
        Case(
            name: "webp-loop-2.webp", bytes: webp([full(red, 100), full(blue, 100)], loop: 2),
            milliseconds: [100, 100], playCount: 2),
        Case(
            name: "webp-odd-size.webp",
            bytes: webp(
                [
                    .filled(red, width: 33, height: 31, delay: 100),
                    .filled(blue, left: 2, top: 2, width: 31, height: 29, delay: 100),
                ],
                width: 33, height: 31), milliseconds: [100, 100], playCount: nil),
        // Unlike GIF and APNG, Chromium shows nothing of a WebP cut short (libwebp's demuxer refuses it).
        Case(
            name: "webp-truncated.webp",
            bytes: cut(webp([full(red, 100), full(blue, 100), full(green, 100)]), insideLast: "ANMF"),
            milliseconds: nil, playCount: nil, failure: .corrupt),
        Case(
            name: "webp-frame-outside-canvas.webp",
            bytes: webp([full(red, 100), square(blue, at: 24, 24, delay: 100)]), milliseconds: nil, playCount: nil,
            failure: .corrupt),
    ]

    @Test func chromiumDecodesWhatWeConvert() async throws {
        try await withTemporaryDirectory { directory in
            let chromiumDirectory = directory + "/chromium"
            try FileManager.default.createDirectory(atPath: chromiumDirectory, withIntermediateDirectories: true)
            var paths: [String] = []
            for testCase in Self.cases {
                let path = directory + "/" + testCase.name
                try Data(testCase.bytes).write(to: URL(fileURLWithPath: path))
                paths.append(path)
            }
            try await ChromiumOracle.decode(paths, background: 0xFFFFFF, into: chromiumDirectory)
            for testCase in Self.cases {
                try await self.check(testCase, directory: directory, chromiumDirectory: chromiumDirectory)
            }
        }
    }

    func check(_ testCase: Case, directory: String, chromiumDirectory: String) async throws {
        let chromium = try ChromiumOracle.decoding(of: testCase.name, in: chromiumDirectory)
        guard let milliseconds = testCase.milliseconds else {
            let code = try #require(testCase.failure)
            try await expectFailure(testCase.bytes, code)
            // Chromium shows no animation either: nothing, or a still image.
            #expect(
                chromium.error != nil || chromium.durationsMs.count <= 1,
                "\(testCase.name): Chromium decodes \(chromium.durationsMs.count) frames")
            return
        }
        let conversion = try await convert(testCase.bytes)
        let metadata = conversion.metadata
        #expect(metadata.sourceFormat == (testCase.name.hasSuffix(".webp") ? .webp : .apng), "\(testCase.name)")
        #expect(metadata.sourceFrameCount == milliseconds.count, "\(testCase.name)")
        #expect(metadata.durationMs == milliseconds.reduce(0, +), "\(testCase.name)")
        #expect(metadata.playCount == testCase.playCount, "\(testCase.name)")
        #expect(metadata.truncated == testCase.truncated, "\(testCase.name)")
        // Chromium stops at a frame it cannot decode, as we do (then `truncated`).
        #expect(
            chromium.error == nil || testCase.truncated,
            "\(testCase.name): Chromium's ImageDecoder: \(chromium.error ?? "")")
        #expect(
            chromium.playedMilliseconds == milliseconds, "\(testCase.name): Chromium \(chromium.playedMilliseconds)")
        #expect(chromium.repetitionCount.map { Int($0) + 1 } == testCase.playCount, "\(testCase.name): plays")

        let video = conversion.video
        let width = metadata.sourceWidth
        let height = metadata.sourceHeight
        var start = 0
        for (index, duration) in milliseconds.enumerated() {
            defer { start += duration }
            let expected = try ChromiumOracle.frame(index, of: testCase.name, in: chromiumDirectory, decoding: chromium)
            let shown = try #require(video.ptsMilliseconds.lastIndex { $0 <= Int64(start) })
            let picture = crop(video.pictures[shown], width: video.width, to: width, height)
            let quality = psnr(picture, expected)
            // A compositing mistake (a 12 px square in the wrong colour) costs far more than CRF 25 on sharp
            // edges (about 30 dB).
            #expect(quality > 25, "\(testCase.name) frame \(index): \(quality) dB against Chromium's frame")
        }
    }
}
