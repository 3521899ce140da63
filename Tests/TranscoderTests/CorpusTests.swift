import CTestSupport
import Foundation
import TestSupport
import Testing

@testable import Transcoder

/// Every file of `../shared/corpus` (GIF, APNG, animated WebP) either converts and passes the output checks,
/// or fails with the error code its manifest category and notes call for. Timing, frame counts, play counts
/// and pixels are checked against Chromium's own decoder; for GIFs also against ffprobe's reading (an
/// independent decoder that applies the same browser delay rule) and ffmpeg's composite where ffmpeg
/// composites like a browser.
@Suite(.tags(.integration), .timeLimit(.minutes(20))) struct CorpusTests {
    struct Entry: Sendable, CustomTestStringConvertible {
        var name: String
        var bytes: Int
        var width: Int?
        var height: Int?
        var category: String
        var notes: String
        var testDescription: String { self.name }
    }

    static let corpusDirectory: String = {
        // Tests/TranscoderTests/CorpusTests.swift -> repository root -> ../shared/corpus
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        return root.deletingLastPathComponent().appendingPathComponent("shared/corpus").path
    }()

    static let entries: [Entry] = {
        guard let text = try? String(contentsOfFile: corpusDirectory + "/MANIFEST.tsv", encoding: .utf8) else {
            return []
        }
        return text.split(separator: "\n").dropFirst().compactMap { line in
            let fields = line.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)
            guard fields.count >= 10 else { return nil }
            return Entry(
                name: fields[0], bytes: Int(fields[1]) ?? 0, width: Int(fields[3]), height: Int(fields[4]),
                category: fields[6], notes: fields[9])
        }
    }()

    /// Files that must fail, and with which code. The format is told by the signature, not the name: in the
    /// not-gif category a renamed animated WebP converts, a renamed still PNG is `not-animated`, the rest
    /// `unsupported-format`. Corrupt files that still hold complete frames convert, as they play in browsers.
    static let expectedFailures: [String: TranscodeError.Code] = [
        "corrupt_15b_zero_loop.gif": .corrupt,  // header only, then a stray byte
        "corrupt_bad_lzw_code.gif": .corrupt,  // the only frame fails to decompress
        "corrupt_bad_magic.gif": .unsupportedFormat,
        "corrupt_bug00005_truncated.gif": .corrupt,  // no frame before the break
        "corrupt_decompression_bomb.gif": .corrupt,  // ends inside the first frame's data
        "corrupt_empty_0b.gif": .unsupportedFormat,
        "corrupt_garbage_prefix.gif": .unsupportedFormat,  // a GIF89a signature later in the file is not a GIF
        "corrupt_huge_claim_12352x12418.gif": .dimensionsTooLarge,
        "corrupt_image_zero_size.gif": .corrupt,
        "corrupt_infinite_empty_loop.gif": .dimensionsTooLarge,
        "corrupt_invalid1_huge_claim.gif": .dimensionsTooLarge,
        "corrupt_no_data.gif": .corrupt,
        "corrupt_out_of_range_3x23850.gif": .dimensionsTooLarge,
        "corrupt_overflow_codes.gif": .corrupt,  // LZW code size 12
        "corrupt_pixel_data_none.gif": .corrupt,
        "corrupt_truncated_575x800.gif": .corrupt,  // truncated inside the first frame
        "corrupt_truncated_header_4b.gif": .corrupt,
        "corrupt_zero_width.gif": .corrupt,
        "odd_65535x1.gif": .dimensionsTooLarge,  // past the default 4096 limit
        // acTL announces 2^31 + 1 frames: Chromium ignores the animation and shows the still image.
        "apng_bad_num_frames.png": .notAnimated,
        "webp_static_photo.webp": .notAnimated,
        "notgif_png_static.gif": .notAnimated,
    ]

    /// Not-gif files that are an animation under another name.
    static let renamedAnimations: Set<String> = ["notgif_webp_anim.gif"]

    /// Files where ffmpeg's GIF decoder is no reference for the pixels: it draws colour indices past the
    /// palette as transparent, where we follow Firefox and draw them black.
    static let pixelReferenceExceptions: Set<String> = ["corrupt_uninit_read.gif"]

    /// Files whose first frame reaches past the logical screen, which Chromium (and we) enlarge to hold it.
    static let enlargedCanvases: [String: (Int, Int)] = [
        "corrupt_oob_frame.gif": (40, 40), "odd_oversized_frame.gif": (16, 16),
    ]

    /// Files made of one-pixel colour detail (stripes, 16 px pixel art), which 4:2:0 (one colour per 2x2
    /// block) and CRF 25 blur: the 2x2-averaged comparison still holds them.
    static let onePixelDetail: Set<String> = ["dispose_border_touching.gif", "odd_oversized_frame.gif"]

    /// Files where Chromium's decoder and ours part ways, and why.
    /// (How many frames Chromium decodes, why.) The frames both decode are still compared, and the test
    /// fails if Chromium's count changes.
    static let chromiumDisagreements: [String: (chromiumFrames: Int, reason: String)] = [
        "corrupt_invalid_multiframe.gif": (
            3,
            "Chromium refuses the 4th frame's image data (even with a trailer appended); giflib decodes it, so we"
                + " show 4 frames (250 ms) where Chromium shows 3 (200 ms)"
        )
    ]

    static func expectedCode(_ entry: Entry) -> TranscodeError.Code? {
        if let code = self.expectedFailures[entry.name] { return code }
        if entry.category == "not-gif", !self.renamedAnimations.contains(entry.name) { return .unsupportedFormat }
        return nil
    }

    @Test func manifestIsThere() {
        #expect(Self.entries.count > 100, "no corpus at \(Self.corpusDirectory)")
    }

    @Test(.tags(.browser, .childProcess), arguments: entries)
    func corpusFile(_ entry: Entry) async throws {
        let path = Self.corpusDirectory + "/" + entry.name
        let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
        if let code = Self.expectedCode(entry) {
            try await expectFailure(bytes, code)
            return
        }
        let run = try await CorpusRun.shared.value.get()
        defer { run.dropFrames(of: entry.name) }
        let metadata = try #require(run.metadata[entry.name], "\(run.failures[entry.name] ?? "not converted")")
        let video = try MP4Probe(path: run.directory + "/" + entry.name + ".mp4")

        // The container a browser gets.
        #expect(video.codecName == "h264")
        #expect(video.pixelFormat == "yuv420p")
        #expect(video.audioStreams == 0)
        #expect(video.moovBeforeMdat)
        #expect(video.width == metadata.outputWidth && video.height == metadata.outputHeight)
        #expect(video.width % 2 == 0 && video.height % 2 == 0)
        #expect(video.width <= 1920 && video.height <= 1080)
        if let (width, height) = Self.enlargedCanvases[entry.name]
            ?? entry.width.flatMap({ w in
                entry.height.map { (w, $0) }
            })
        {
            #expect(metadata.sourceWidth == width && metadata.sourceHeight == height)
        }

        // Timing: one picture per distinct frame, starting at 0, ending at the sum of the delays.
        #expect(video.ptsMilliseconds.first == 0)
        #expect(zip(video.ptsMilliseconds, video.ptsMilliseconds.dropFirst()).allSatisfy { $0 < $1 })
        #expect(video.ptsMilliseconds.count == metadata.encodedFrameCount)
        #expect(video.formatDurationMilliseconds == Int64(metadata.durationMs))
        // What Chromium plays: the sum of the sample durations, not mvhd's or the edit list's duration.
        #expect(video.sampleDurationTotalMilliseconds == Double(metadata.durationMs))
        #expect(video.samplePresentationMilliseconds == video.ptsMilliseconds.map(Double.init))
        #expect(!video.hasCompositionOffsets)
        #expect(video.editMediaTimes.allSatisfy { $0 == 0 }, "\(video.editMediaTimes)")
        // Our frame delays: for a GIF, equal to ffprobe's reading; for APNG and WebP (ffmpeg 5.1 rewrites an
        // APNG delay of 0 and reads no animated WebP), Chromium's below is the reference.
        let ours = try bytes.withUnsafeBytes { try Transcoder().plan($0).header.frameMilliseconds }
        let reference = metadata.sourceFormat == .gif ? try FFmpegReference(gifPath: path) : nil
        if let reference { #expect(ours == reference.frameDurations) }
        #expect(metadata.sourceFrameCount == ours.count)
        #expect(metadata.durationMs == ours.reduce(0, +))

        // Loop count, from the manifest's notes (`loop=N` or `loop=none`).
        if let loop = entry.notes.split(separator: ";").map({ $0.trimmingCharacters(in: .whitespaces) })
            .first(where: { $0.hasPrefix("loop=") })?.dropFirst(5)
        {
            #expect(metadata.loopCount == (loop == "none" ? nil : Int(loop)))
        }

        try self.compareWithChromium(entry, metadata: metadata, video: video, run: run, ours: ours)
        if let reference {
            try self.compareWithFFmpeg(entry, metadata: metadata, video: video, reference: reference)
        }
    }

    /// Chromium is the judge: its `<video>` must play the MP4 for the source's whole length, and its own
    /// image decoder (WebCodecs `ImageDecoder`) gives the reference timing, loop count and pixels. Prints one
    /// `chromium-reference` line per file: PSNR of our frames against Chromium's, at full resolution and
    /// 2x2-averaged (which discounts 4:2:0 chroma), mean and worst over the GIF's frames.
    func compareWithChromium(
        _ entry: Entry, metadata: TranscodeMetadata, video: MP4Probe, run: CorpusRun, ours: [Int]
    ) throws {
        let playback = try #require(run.playback[entry.name])
        #expect(playback.error == nil, "Chromium's <video>: \(playback.error ?? "")")
        let played = try #require(playback.duration, "Chromium's <video> has no duration")
        #expect(
            abs(played * 1000 - Double(metadata.durationMs)) <= 1,
            "Chromium's <video> plays \(played) s, the GIF \(metadata.durationMs) ms")

        let chromium = try run.chromium(entry.name)
        // Our frame delays, frame by frame against Chromium's.
        var ours = ours
        if let disagreement = Self.chromiumDisagreements[entry.name] {
            #expect(chromium.durationsMs.count == disagreement.chromiumFrames, "\(disagreement.reason)")
            print("chromium-reference \(entry.name) known disagreement: \(disagreement.reason)")
            ours = Array(ours.prefix(disagreement.chromiumFrames))
        } else {
            // Chromium stops at a frame it cannot decode, as we do (then `truncated`).
            #expect(chromium.error == nil || metadata.truncated, "Chromium's ImageDecoder: \(chromium.error ?? "")")
        }
        #expect(chromium.playedMilliseconds == ours, "Chromium's delays \(chromium.playedMilliseconds), ours \(ours)")
        if metadata.sourceFrameCount > 1 {
            // Chromium counts repetitions after the first play; nil is forever.
            #expect(chromium.repetitionCount.map { Int($0) + 1 } == metadata.playCount, "plays")
        }

        #expect(
            chromium.width == metadata.sourceWidth && chromium.height == metadata.sourceHeight,
            "Chromium's canvas is \(chromium.width ?? 0)x\(chromium.height ?? 0)")
        guard chromium.width == metadata.sourceWidth, chromium.height == metadata.sourceHeight else { return }
        // Scaled into the output box: Chromium's frame is scaled the way the encoder scales (bicubic), so that
        // resampling itself is not counted as a difference.
        let scaled = metadata.outputWidth != metadata.sourceWidth + metadata.sourceWidth % 2
        let (width, height) =
            scaled ? (metadata.outputWidth, metadata.outputHeight) : (metadata.sourceWidth, metadata.sourceHeight)
        var start = 0
        var full: [Double] = []
        var averaged: [Double] = []
        for (index, duration) in chromium.playedMilliseconds.enumerated() {
            defer { start += duration }
            var expected = try ChromiumOracle.frame(
                index, of: entry.name, in: run.chromiumDirectory, decoding: chromium)
            if scaled {
                expected = try scaleRGBA(
                    expected, from: metadata.sourceWidth, metadata.sourceHeight, to: width, height)
            }
            guard let shown = video.ptsMilliseconds.lastIndex(where: { $0 <= Int64(start) }) else { continue }
            let picture = crop(video.pictures[shown], width: video.width, to: width, height)
            full.append(min(psnr(picture, expected), 99))
            averaged.append(
                min(
                    psnr(
                        averaging2x2(picture, width: width, height: height),
                        averaging2x2(expected, width: width, height: height)), 99))
        }
        let mean = full.reduce(0, +) / Double(max(full.count, 1))
        let mean2x2 = averaged.reduce(0, +) / Double(max(averaged.count, 1))
        print(
            "chromium-reference \(entry.name) frames=\(full.count)"
                + String(
                    format: " psnr=%.2f worst=%.2f psnr2x2=%.2f worst2x2=%.2f", mean, full.min() ?? 0, mean2x2,
                    averaged.min() ?? 0))
        #expect(full.count == ours.count)
        // A compositing error (a disposal or transparency mistake) leaves whole regions in the wrong colour,
        // which 2x2 averaging does not hide; 4:2:0 loss on one-pixel detail (tiny canvases, stripes) lowers
        // the full-resolution figure only.
        // Below 16 px, 4:2:0 chroma dominates any difference (a 2x2 canvas has one chroma sample).
        if metadata.sourceWidth >= 16, metadata.sourceHeight >= 16 {
            #expect((averaged.min() ?? 0) >= 16, "worst 2x2-averaged PSNR against Chromium's frames")
            if !Self.onePixelDetail.contains(entry.name) {
                #expect(mean >= 20, "mean PSNR against Chromium's frames: \(mean) dB")
            }
        }
    }

    /// Pixels, against ffmpeg's composite, where ffmpeg composites like a browser: it fills what is
    /// transparent with the GIF's background colour where browsers show the page through, so only
    /// pictures without transparency compare; below 16 px 4:2:0 chroma dominates any difference.
    func compareWithFFmpeg(
        _ entry: Entry, metadata: TranscodeMetadata, video: MP4Probe, reference: FFmpegReference
    ) throws {
        let scaled = metadata.outputWidth != metadata.sourceWidth + metadata.sourceWidth % 2
        guard !metadata.hasTransparency, !scaled, metadata.sourceWidth >= 16, metadata.sourceHeight >= 16,
            !Self.pixelReferenceExceptions.contains(entry.name)
        else { return }
        let frames = try reference.frames(width: metadata.sourceWidth, height: metadata.sourceHeight)
        var start = 0
        var total = 0.0
        var compared = 0
        for (index, expected) in frames.enumerated().prefix(metadata.sourceFrameCount) {
            defer { start += reference.frameDurations[index] }
            guard let shown = video.ptsMilliseconds.lastIndex(where: { $0 <= Int64(start) }) else { continue }
            let cropped = crop(
                video.pictures[shown], width: video.width, to: metadata.sourceWidth, metadata.sourceHeight)
            total += min(psnr(cropped, expected), 99)
            compared += 1
        }
        #expect(compared > 0)
        let mean = total / Double(max(compared, 1))
        #expect(mean > 24, "mean PSNR against ffmpeg's composite: \(mean) dB")
    }
}

/// ffprobe's and ffmpeg's reading of a GIF.
struct FFmpegReference {
    let path: String
    /// Each frame's display time in milliseconds (ffmpeg's GIF demuxer applies the browser rule).
    let frameDurations: [Int]

    init(gifPath: String) throws {
        self.path = gifPath
        let output = try run(
            "ffprobe",
            ["-v", "error", "-select_streams", "v", "-show_entries", "packet=duration", "-of", "csv=p=0", gifPath])
        self.frameDurations = String(decoding: output, as: UTF8.self).split(whereSeparator: \.isNewline)
            .compactMap { Int($0.trimmingCharacters(in: CharacterSet(charactersIn: ", "))) }.map { $0 * 10 }
    }

    /// Every composited frame, flattened over white, as RGBA.
    func frames(width: Int, height: Int) throws -> [[UInt32]] {
        let raw = try run(
            "ffmpeg",
            ["-v", "error", "-i", self.path, "-fps_mode", "passthrough", "-f", "rawvideo", "-pix_fmt", "rgba", "-"])
        let size = width * height * 4
        return stride(from: 0, to: raw.count - size + 1, by: size).map { offset in
            [UInt32](unsafeUninitializedCapacity: width * height) { out, count in
                raw.withUnsafeBufferPointer {
                    CTestSupport_flatten_over_white($0.baseAddress! + offset, width * height, out.baseAddress)
                }
                count = width * height
            }
        }
    }
}

/// Runs a tool from PATH and returns its standard output.
func run(_ tool: String, _ arguments: [String]) throws -> [UInt8] {
    let child = try ChildProcess(tool, arguments, standardOutput: .pipe)
    defer { _ = child.waitUntilExit() }
    return child.readOutput()
}
