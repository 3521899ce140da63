import Foundation
import TestSupport
import Testing

@testable import Transcoder

/// The VP9 WebM with alpha (`extraFormats: ["webm"]`) on a page in Firefox ESR and in WebKitGTK, the engines
/// besides Chromium (`AlphaVideoOutputTests`) that play it: a `<video>` at its natural size on a body of one colour,
/// loaded and left paused on its first frame, screenshotted (`Browser/video_alpha_engines.py`). A screenshot, not
/// a canvas: WebKitGTK's `drawImage` of a video replaces what is under it instead of blending, and what a reader
/// sees is the page. Over magenta and over a teal, the video's box reads at least 30 dB (PSNR of 2x2 means, as
/// every 4:2:0 video here is judged) against Chromium's decoding of the GIF's first frame (`ImageDecoder`)
/// flattened over the same colour, and at least 99% of the pixels the GIF leaves fully transparent (the colour
/// exactly, over both) show the page's colour within 8 levels: the page shows through the transparent parts and
/// the opaque parts are right. The box is where the page put it, at the source's size, with the page's colour
/// around it, and `video.duration` is the source's length.
@Suite(.tags(.integration, .browser, .wallClock), .serialized, .timeLimit(.minutes(20))) struct AlphaVideoEnginesTests {
    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("Browser/video_alpha_engines.py").path

    struct Case: Sendable, CustomTestStringConvertible {
        var name: String
        var testDescription: String { self.name }
    }

    static let cases: [Case] = [
        // 365 x 360 (an odd width), transparent around the banana, 10 cs.
        Case(name: "cartoon_dancing_banana.gif"),
        // 600 x 288, transparent around the letters, delays from 5 cs to 5 s.
        Case(name: "cartoon_gifjs_logo.gif"),
    ]

    static let engines = ["firefox", "webkitgtk"]

    /// Body colours no pixel of either GIF is: magenta and a teal.
    static let pageColours: [UInt32] = [0xFF00FF, 0x00A0A0]

    /// What the script printed (its last line).
    struct Shown: Decodable {
        var ok: Bool
        var version: String?
        /// The video's box on the page, CSS pixels (device scale 1).
        var width: Int?
        var height: Int?
        /// `video.duration`, seconds.
        var duration: Double?
        /// The share of a 4-pixel ring around the box that is the page's colour.
        var ring: Double?
        var screenshots: Int?
        var error: String?
    }

    /// Shows the WebM at `webm` in `engine` on a body of `colour` (0xRRGGBB); its box's pixels, RGB, go to `out`.
    /// The script is ended (SIGTERM) after two minutes: its own waits are shorter.
    static func show(_ webm: String, engine: String, colour: UInt32, out: String) async throws -> (
        shown: Shown?, output: String
    ) {
        let arguments = [
            Self.script, "--engine", engine, "--page-colour", String(format: "%06X", colour), "--out", out, webm,
        ]
        let run = try await runProcess("/usr/bin/python3", arguments, timeout: .seconds(120), heavy: true)
        let line = run.stdout.split(separator: "\n").last.map(String.init) ?? ""
        return (
            try? JSONDecoder().decode(Shown.self, from: Data(line.utf8)),
            "\(engine): exit status \(run.status)\nstdout:\n\(run.stdout)\nstderr:\n\(run.stderr)"
        )
    }

    /// In one heavy-work slot throughout: its six browser sessions would otherwise each queue behind every other
    /// test's, and the case ended last in the tier (563 s of its 600).
    @Test(arguments: cases)
    func firefoxAndWebKitGTKShowThePageThroughTheVideo(_ test: Case) async throws {
        try await WorkSlots.heavy.withSlot { try await self.showThePageThroughTheVideo(test) }
    }

    func showThePageThroughTheVideo(_ test: Case) async throws {
        let sourcePath = CorpusTests.corpusDirectory + "/" + test.name
        let source = try [UInt8](Data(contentsOf: URL(fileURLWithPath: sourcePath)))
        var options = TranscodeOptions()
        options.rendition = options.rendition.withExtraFormats([.webm])
        try await withTemporaryDirectory { directory in
            let metadata = try await convertFiles(source, options: options, directory: directory, name: "out")
            let entry = try #require(metadata.otherArtifacts.first { $0.format == "webm" }, "no WebM made")
            let webmPath = directory + "/out.webm"

            // Chromium's first (and second) frame of the source, flattened over each page colour.
            var expected: [UInt32: (first: [UInt32], second: [UInt32]?)] = [:]
            var decodings: [ChromiumOracle.Decoding] = []
            for colour in Self.pageColours {
                let out = directory + "/over-" + String(format: "%06x", colour)
                try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: true)
                try await ChromiumOracle.decode([sourcePath], background: colour, into: out)
                let decoding = try ChromiumOracle.decoding(of: sourcePath, in: out)
                try #require(decoding.error == nil, "\(decoding.error ?? "")")
                expected[colour] = (
                    try ChromiumOracle.frame(0, of: sourcePath, in: out, decoding: decoding),
                    decoding.durationsMs.count > 1
                        ? try ChromiumOracle.frame(1, of: sourcePath, in: out, decoding: decoding) : nil
                )
                decodings.append(decoding)
            }
            let gif = decodings[0]
            let (width, height) = (try #require(gif.width), try #require(gif.height))
            #expect(entry.width == width && entry.height == height, "the WebM is not the source's size")
            let length = Double(gif.playedMilliseconds.reduce(0, +)) / 1000

            // Fully transparent in the first frame: exactly the page colour over both colours.
            let transparent = (0..<(width * height)).filter { pixel in
                Self.pageColours.allSatisfy { colour in
                    expected[colour]!.first[pixel] & 0xFF_FFFF == rgba(colour) & 0xFF_FFFF
                }
            }
            #expect(transparent.count >= width * height / 10, "only \(transparent.count) transparent pixels")

            for engine in Self.engines {
                for colour in Self.pageColours {
                    let label = "\(test.name), \(engine), over \(String(format: "%06X", colour))"
                    let out = directory + "/\(engine)-\(String(format: "%06x", colour)).rgb"
                    var (shown, output) = try await Self.show(webmPath, engine: engine, colour: colour, out: out)
                    if shown == nil {
                        // No answer at all (the driver killed at its deadline, once for WebKitGTK under the whole
                        // suite, before it printed anything): once more, a second run of the same page.
                        let first = output
                        (shown, output) = try await Self.show(webmPath, engine: engine, colour: colour, out: out)
                        output = "first run:\n\(first)\nsecond run:\n\(output)"
                    }
                    let result = try #require(shown, "\(label): no JSON\n\(output)")
                    try #require(result.ok, "\(label): \(result.error ?? "")\n\(output)")
                    try #require(result.width == width && result.height == height, "\(label): \(output)")
                    let bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: out)))
                    try #require(bytes.count == width * height * 3, "\(label): \(bytes.count) bytes")
                    let picture = (0..<(width * height)).map { pixel -> UInt32 in
                        let (red, green, blue) = (bytes[3 * pixel], bytes[3 * pixel + 1], bytes[3 * pixel + 2])
                        return 0xFF00_0000 | UInt32(blue) << 16 | UInt32(green) << 8 | UInt32(red)
                    }

                    func psnr2x2(_ reference: [UInt32]) -> Double {
                        min(
                            60,
                            psnr(
                                averaging2x2(reference, width: width, height: height),
                                averaging2x2(picture, width: width, height: height)))
                    }
                    let reading = psnr2x2(expected[colour]!.first)
                    let secondFrame = expected[colour]!.second.map(psnr2x2)
                    let page = rgba(colour)
                    let showingThePage = transparent.filter { pixel in
                        [0, 8, 16].allSatisfy { shift in
                            abs(Int(picture[pixel] >> shift & 0xFF) - Int(page >> shift & 0xFF)) <= 8
                        }
                    }.count
                    let share = Double(showingThePage) / Double(transparent.count)
                    print(
                        "webm engines \(label) (\(result.version ?? "?")): PSNR 2x2 \(reading) dB against the first frame (\(secondFrame.map { "\($0)" } ?? "-") against the second); page colour in \(showingThePage) of \(transparent.count) transparent pixels (\(share)); ring \(result.ring ?? 0); duration \(result.duration ?? 0) s; \(result.screenshots ?? 0) screenshots"
                    )
                    #expect(reading >= 30, "\(label): \(reading) dB")
                    // The first frame, not the next (WebKitGTK shows the next one after some seeks): both GIFs'
                    // second frames differ from their first by far more than the coding error.
                    #expect(secondFrame.map { $0 + 6 < reading } ?? true, "\(label): the second frame is shown")
                    #expect(share >= 0.99, "\(label): \(showingThePage) of \(transparent.count) show the page")
                    #expect((result.ring ?? 0) >= 0.99, "\(label): the page's colour is not around the video")
                    #expect(abs((result.duration ?? 0) - length) <= 0.001, "\(label): video.duration \(result)")
                }
            }
        }
    }
}
