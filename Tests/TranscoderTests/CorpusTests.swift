import Foundation
import Testing

@testable import Transcoder

/// Every file of `../shared/corpus` either converts and passes the output checks, or fails with the
/// error code its manifest category and notes call for. Timing and frame counts are checked against
/// ffprobe's reading of the GIF (an independent decoder that applies the same browser delay rule);
/// pixels against ffmpeg's decoding of the GIF where ffmpeg composites like a browser.
@Suite struct CorpusTests {
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

    /// Files that must fail, and with which code. Everything in the apng, webp and not-gif categories is
    /// `not-a-gif` (the signature is checked, not the name); other corrupt files that still hold complete
    /// frames convert, as they play in browsers.
    static let expectedFailures: [String: TranscodeError.Code] = [
        "corrupt_15b_zero_loop.gif": .corrupt,  // header only, then a stray byte
        "corrupt_bad_lzw_code.gif": .corrupt,  // the only frame fails to decompress
        "corrupt_bad_magic.gif": .notAGIF,
        "corrupt_bug00005_truncated.gif": .corrupt,  // no frame before the break
        "corrupt_decompression_bomb.gif": .corrupt,  // ends inside the first frame's data
        "corrupt_empty_0b.gif": .notAGIF,
        "corrupt_garbage_prefix.gif": .notAGIF,  // a GIF89a signature later in the file is not a GIF
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
    ]

    /// Files where ffmpeg's GIF decoder is no reference for the pixels: it draws colour indices past the
    /// palette as transparent, where we follow Firefox and draw them black.
    static let pixelReferenceExceptions: Set<String> = ["corrupt_uninit_read.gif"]

    static func expectedCode(_ entry: Entry) -> TranscodeError.Code? {
        if ["apng", "webp", "not-gif"].contains(entry.category) { return .notAGIF }
        return self.expectedFailures[entry.name]
    }

    @Test func manifestIsThere() {
        #expect(Self.entries.count > 100, "no corpus at \(Self.corpusDirectory)")
    }

    @Test(arguments: entries)
    func corpusFile(_ entry: Entry) throws {
        let path = Self.corpusDirectory + "/" + entry.name
        let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
        if let code = Self.expectedCode(entry) {
            try expectFailure(bytes, code)
            return
        }
        let result = try convert(bytes)
        let metadata = result.metadata
        let video = result.video

        // The container a browser gets.
        #expect(video.codecName == "h264")
        #expect(video.pixelFormat == "yuv420p")
        #expect(video.audioStreams == 0)
        #expect(video.moovBeforeMdat)
        #expect(video.width == metadata.outputWidth && video.height == metadata.outputHeight)
        #expect(video.width % 2 == 0 && video.height % 2 == 0)
        #expect(video.width <= 1920 && video.height <= 1080)
        if let width = entry.width, let height = entry.height {
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
        #expect(video.editMediaTimes.allSatisfy { $0 == 0 }, "\(video.editMediaTimes)")
        let reference = try FFmpegReference(gifPath: path)
        #expect(metadata.gifFrameCount == reference.frameDurations.count)
        #expect(metadata.durationMs == reference.frameDurations.reduce(0, +))

        // Loop count, from the manifest's notes (`loop=N` or `loop=none`).
        if let loop = entry.notes.split(separator: ";").map({ $0.trimmingCharacters(in: .whitespaces) })
            .first(where: { $0.hasPrefix("loop=") })?.dropFirst(5)
        {
            #expect(metadata.loopCount == (loop == "none" ? nil : Int(loop)))
        }

        // Pixels, against ffmpeg's composite, where ffmpeg composites like a browser: it fills what is
        // transparent with the GIF's background colour where browsers show the page through, so only
        // pictures without transparency compare; below 16 px 4:2:0 chroma dominates any difference.
        let scaled = metadata.outputWidth != metadata.sourceWidth + metadata.sourceWidth % 2
        guard !metadata.hasTransparency, !scaled, metadata.sourceWidth >= 16, metadata.sourceHeight >= 16,
            !Self.pixelReferenceExceptions.contains(entry.name)
        else { return }
        let frames = try reference.frames(width: metadata.sourceWidth, height: metadata.sourceHeight)
        var start = 0
        var total = 0.0
        var compared = 0
        for (index, expected) in frames.enumerated().prefix(metadata.gifFrameCount) {
            defer { start += reference.frameDurations[index] }
            guard let shown = video.ptsMilliseconds.lastIndex(where: { $0 <= Int64(start) }) else { continue }
            let picture = video.pictures[shown]
            let cropped = (0..<metadata.sourceHeight).flatMap { y in
                picture[(y * video.width)..<(y * video.width + metadata.sourceWidth)]
            }
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
            (0..<(width * height)).map { index in
                let base = offset + index * 4
                let alpha = UInt32(raw[base + 3])
                func channel(_ value: UInt8) -> UInt32 { (UInt32(value) * alpha + 255 * (255 - alpha)) / 255 }
                return channel(raw[base]) | channel(raw[base + 1]) << 8 | channel(raw[base + 2]) << 16 | 0xFF00_0000
            }
        }
    }
}

/// Runs a tool from PATH and returns its standard output.
func run(_ tool: String, _ arguments: [String]) throws -> [UInt8] {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = [tool] + arguments
    let pipe = Pipe()
    process.standardOutput = pipe
    process.standardError = FileHandle.nullDevice
    try process.run()
    let data = pipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return [UInt8](data)
}
