import Foundation
import TestSupport
import Testing

@testable import Transcoder

/// The preview rendition (`RenditionSpec.previewSeconds`): the first seconds of the animation, the frame across the
/// cut shown until it, its video within `RenditionSpec.previewMaxBytes`, at a higher CRF and then in a smaller box
/// when it must.
@Suite(.tags(.integration), .timeLimit(.minutes(10))) struct PreviewTests {
    static func options(seconds: Int) -> TranscodeOptions {
        var options = TranscodeOptions()
        options.rendition.previewSeconds = seconds
        return options
    }

    /// Frames of 700 ms cut at 2 s: three frames, the third shown 600 ms; an animation shorter than the preview is
    /// all kept, timed as the plain video is; every sample lasts its frame's time.
    @Test func theCutEndsTheLastFrameAtThePreviewsLength() async throws {
        var gif = GIFBuilder(width: 32, height: 32)
        gif.frames = (0..<5).map { .filled(UInt8(2 + $0), width: 32, height: 32, delay: 70) }
        let cut = try await convert(try gif.build(), options: Self.options(seconds: 2))
        #expect(cut.video.ptsMilliseconds == [0, 700, 1400])
        #expect(cut.video.sampleDurationsMilliseconds == [700, 700, 600])
        #expect(cut.video.formatDurationMilliseconds == 2000)
        #expect(cut.metadata.durationMs == 2000)
        #expect(cut.metadata.sourceFrameCount == 3)
        #expect(!cut.metadata.truncated)
        let preview = try #require(cut.metadata.preview)
        #expect(preview.seconds == 2 && preview.maxBytes == 50_000)
        #expect(preview.attempts.count == 1 && preview.attempts[0].bytes == cut.metadata.mp4Bytes)
        #expect(preview.attempts[0].crf == TranscodeOptions.defaultCRF)

        let one = try await convert(try gif.build(), options: Self.options(seconds: 1))
        #expect(one.video.ptsMilliseconds == [0, 700])
        #expect(one.video.sampleDurationsMilliseconds == [700, 300])

        gif.frames = Array(gif.frames.prefix(2))
        let short = try await convert(try gif.build(), options: Self.options(seconds: 2))
        let plain = try await convert(try gif.build())
        #expect(short.video.ptsMilliseconds == [0, 700])
        #expect(short.metadata.durationMs == 1400)
        #expect(short.metadata.mp4Sha256 == plain.metadata.mp4Sha256)
        // Not the plain object: another key, and a manifest that says what it is.
        #expect(plain.metadata.preview == nil)
    }

    /// Noise that x264 cannot make small: over the budget at the rendition's CRF, then at the highest CRF in a
    /// smaller box (aspect kept), under the budget, every attempt recorded, the poster at the kept size, only the
    /// kept video left on disk.
    @Test func noiseOverTheBudgetComesOutSmaller() async throws {
        var builder = GIFBuilder(width: 320, height: 240)
        builder.frames = (0..<40).map { index in
            let pixels = BrowserTimingTests.noise(UInt8(index + 1), size: 320).prefix(320 * 240)
            return GIFBuilder.Frame(width: 320, height: 240, pixels: Array(pixels), delay: 10)
        }
        let gif = try builder.build()
        try await withTemporaryDirectory { directory in
            let metadata = try await convertFiles(
                gif, options: Self.options(seconds: 2), directory: directory, name: "a")
            let preview = try #require(metadata.preview)
            #expect(preview.attempts.count >= 2, "\(preview)")
            #expect(preview.attempts[0].bytes > 50_000 && preview.attempts[0].width == 320, "\(preview)")
            #expect(preview.attempts.dropLast().allSatisfy { $0.bytes > 50_000 }, "\(preview)")
            let kept = try #require(preview.attempts.last)
            #expect(kept.bytes == metadata.mp4Bytes && metadata.mp4Bytes <= 50_000, "\(preview)")
            #expect(kept.crf == Transcoder.previewHighestCRF && metadata.crf == kept.crf)
            #expect(metadata.outputWidth == kept.width && metadata.outputHeight == kept.height)
            #expect(metadata.outputWidth < 320 && metadata.outputWidth % 2 == 0 && metadata.outputHeight % 2 == 0)
            let aspect = Double(metadata.outputWidth) / Double(metadata.outputHeight)
            #expect(abs(aspect - 320.0 / 240.0) < 0.05, "\(metadata.outputWidth)x\(metadata.outputHeight)")
            #expect(metadata.durationMs == 2000 && metadata.sourceFrameCount == 20)
            #expect(metadata.sizeGuard == nil)
            let probe = try MP4Probe(path: directory + "/a.mp4")
            #expect(probe.formatDurationMilliseconds == 2000)
            let poster = try #require(JPEGSize(path: directory + "/a.jpg"))
            #expect(poster.width == metadata.outputWidth && poster.height == metadata.outputHeight)
            let files = try FileManager.default.contentsOfDirectory(atPath: directory).sorted()
            #expect(files == ["a.jpg", "a.json", "a.mp4"])
        }
    }

    /// A preview is a rendition of its own (another fingerprint, so another key); its length is 1 or 2 seconds,
    /// refused otherwise before any pixel is decoded; the plain options' fingerprint is what it was.
    @Test func optionsAndFingerprint() async throws {
        let plain = TranscodeOptions()
        #expect(!plain.outputFingerprint.contains("preview"))
        #expect(Self.options(seconds: 2).outputFingerprint == plain.outputFingerprint + ";preview=2")
        #expect(Self.options(seconds: 1).outputFingerprint != Self.options(seconds: 2).outputFingerprint)
        for seconds in [0, 3, -1] {
            #expect(Self.options(seconds: seconds).violations.map(\.field) == ["previewSeconds"])
            var gif = GIFBuilder(width: 8, height: 8)
            gif.frames = [.filled(1, width: 8, height: 8, delay: 10)]
            try await expectFailure(try gif.build(), .invalidOptions, options: Self.options(seconds: seconds))
        }
        // Recorded before previews existed: read as the whole animation.
        let old = try JSONDecoder().decode(
            RenditionSpec.self, from: JSONEncoder().encode(RenditionSpec()))
        #expect(old.previewSeconds == nil)
        #expect(!String(decoding: try JSONEncoder().encode(RenditionSpec()), as: UTF8.self).contains("preview"))
    }

    /// The next box: the budget's share of the area, at least a tenth smaller a side, the shorter side never under
    /// 16 px (a strip's longer side alone); none once both sides are 16 px or less.
    @Test func previewBoxes() {
        let box = Transcoder.previewBox(after: (1000, 500, false), bytes: 400_000, budget: 50_000)
        // sqrt(0.9 * 50 / 400) = 0.335
        #expect(box?.width == 335 && box?.height == 167)
        let near = Transcoder.previewBox(after: (100, 100, false), bytes: 51_000, budget: 50_000)
        #expect(near?.width == 90 && near?.height == 90)
        let floor = Transcoder.previewBox(after: (200, 20, false), bytes: 5_000_000, budget: 50_000)
        #expect(floor?.height == 16 && floor?.width == 160)
        // A strip: its longer side alone bounds the next box; none once both sides are 16 px or less.
        let strip = Transcoder.previewBox(after: (1920, 16, true), bytes: 100_000, budget: 50_000)
        #expect(strip?.width == 1287 && strip?.height == 16)  // 1920 x sqrt(0.45) = 1287.97
        #expect(Transcoder.previewBox(after: (16, 16, true), bytes: 90_000, budget: 50_000) == nil)
    }
}

/// A baseline or progressive JPEG's size, from its first start-of-frame marker.
struct JPEGSize {
    var width: Int
    var height: Int

    init?(path: String) {
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        let bytes = [UInt8](data)
        var index = 2
        while index + 9 < bytes.count {
            guard bytes[index] == 0xFF else { return nil }
            let marker = bytes[index + 1]
            let length = Int(bytes[index + 2]) << 8 | Int(bytes[index + 3])
            if (0xC0...0xC3).contains(marker) {
                self.height = Int(bytes[index + 5]) << 8 | Int(bytes[index + 6])
                self.width = Int(bytes[index + 7]) << 8 | Int(bytes[index + 8])
                return
            }
            index += 2 + length
        }
        return nil
    }
}
