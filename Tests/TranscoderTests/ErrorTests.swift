import CFFmpeg
import Foundation
import TestSupport
import Testing

@testable import Transcoder

/// Bad input gets a specific code, nothing is left behind, and limits hold before pixels are decoded.
@Suite(.tags(.integration), .timeLimit(.minutes(10))) struct ErrorTests {
    private func animation(width: Int = 32, height: Int = 32, frames: Int = 3) -> GIFBuilder {
        var gif = GIFBuilder(width: width, height: height)
        gif.frames = (0..<frames).map { .filled(UInt8(2 + $0 % 5), width: width, height: height) }
        return gif
    }

    /// A codec FFmpeg lacks is FFmpeg's own "not found" error, from libavutil's constants through the shim (a
    /// hand-written constant, -0x434E4510, once named no error at all: av_strerror had no text for it).
    @Test func aMissingEncoderIsFFmpegsEncoderNotFound() throws {
        do {
            _ = try CodecContext(encoderNamed: "no-such-encoder")
            Issue.record("an encoder FFmpeg does not have was found")
        } catch let error as FFmpegError {
            #expect(error.code == CFFmpeg_AVERROR_ENCODER_NOT_FOUND())
            #expect(error.code == -0x434E_45F8)
            #expect(error.description.contains("Encoder not found"), "\(error)")
        }
        #expect(CFFmpeg_AVERROR_DECODER_NOT_FOUND() == -0x4345_44F8)
    }

    @Test func unsupportedFormat() async throws {
        try await expectFailure([], .unsupportedFormat)
        try await expectFailure(Array("GIF90a".utf8) + [UInt8](repeating: 0, count: 20), .unsupportedFormat)
        try await expectFailure(Array("RIFF\u{4}\0\0\0WAVE".utf8), .unsupportedFormat)
        try await expectFailure([0xFF, 0xD8, 0xFF, 0xE0] + [UInt8](repeating: 0, count: 20), .unsupportedFormat)
    }

    @Test func truncatedHeaderIsCorrupt() async throws {
        try await expectFailure(Array("GIF8".utf8), .corrupt)
        try await expectFailure(Array("GIF89a".utf8) + [1, 0], .corrupt)
        try await expectFailure([0x89, 0x50, 0x4E], .corrupt)
        try await expectFailure(APNGPrescan.signature + Array("0000000000000".utf8), .corrupt)
        try await expectFailure(Array("RIFF\u{4}\0\0\0WEBP".utf8), .corrupt)
        try await expectFailure(Array("RIFF\u{4}\0".utf8), .corrupt)
    }

    @Test func headerWithoutFramesIsCorrupt() async throws {
        var gif = GIFBuilder(width: 8, height: 8)
        gif.frames = []
        try await expectFailure(try gif.build(), .corrupt)
    }

    @Test func inputLimit() async throws {
        let bytes = try self.animation().build()
        var options = TranscodeOptions()
        options.limits.maxInputBytes = bytes.count - 1
        try await expectFailure(bytes, .tooLarge, options: options)
        options.limits.maxInputBytes = bytes.count
        #expect(try await convert(bytes, options: options).metadata.sourceFrameCount == 3)
    }

    @Test func canvasLimit() async throws {
        var options = TranscodeOptions()
        options.limits.maxWidth = 31
        try await expectFailure(try self.animation().build(), .dimensionsTooLarge, options: options)
        options = TranscodeOptions()
        options.limits.maxHeight = 31
        try await expectFailure(try self.animation().build(), .dimensionsTooLarge, options: options)
    }

    @Test func frameRectangleLimit() async throws {
        // A tiny canvas with a frame rectangle far larger than any allowed canvas: giflib would have to
        // decode all of it even though clipping throws it away.
        var gif = GIFBuilder(width: 8, height: 8)
        gif.frames = [.filled(2, width: 64, height: 8)]
        var options = TranscodeOptions()
        options.limits.maxWidth = 32
        try await expectFailure(try gif.build(), .dimensionsTooLarge, options: options)
    }

    @Test func frameLimit() async throws {
        var options = TranscodeOptions()
        options.limits.maxFrames = 2
        try await expectFailure(try self.animation(frames: 3).build(), .tooManyFrames, options: options)
        options.limits.maxFrames = 3
        #expect(
            try await convert(try self.animation(frames: 3).build(), options: options).metadata.sourceFrameCount == 3)
    }

    @Test func totalPixelLimit() async throws {
        var options = TranscodeOptions()
        options.limits.maxTotalPixels = 32 * 32 * 3 - 1
        try await expectFailure(try self.animation(frames: 3).build(), .tooManyPixels, options: options)
        options.limits.maxTotalPixels = 32 * 32 * 3
        #expect(
            try await convert(try self.animation(frames: 3).build(), options: options).metadata.sourceFrameCount == 3)
    }

    @Test func invalidOptions() async throws {
        let bytes = try self.animation().build()
        var options = TranscodeOptions()
        options.crf = 52
        try await expectFailure(bytes, .invalidOptions, options: options)
        options.crf = 0
        try await expectFailure(bytes, .invalidOptions, options: options)
        options = TranscodeOptions()
        options.preset = "warp"
        try await expectFailure(bytes, .invalidOptions, options: options)
    }

    @Test func truncatedFileKeepsTheCompleteFrames() async throws {
        var gif = self.animation(frames: 3)
        gif.frames[2] = .filled(4, width: 32, height: 32, delay: 50)
        let bytes = try gif.build()
        // Cut inside the last frame's image data (the trailer and a few LZW bytes go).
        let cut = Array(bytes.prefix(bytes.count - 6))
        let result = try await convert(cut)
        #expect(result.metadata.truncated)
        #expect(result.metadata.sourceFrameCount == 2)
        #expect(result.metadata.durationMs == 200)
        #expect(result.video.ptsMilliseconds == [0, 100])
    }

    @Test func missingTrailerIsMarkedTruncated() async throws {
        let bytes = try self.animation(frames: 2).build()
        #expect(bytes.last == 0x3B)
        let result = try await convert(Array(bytes.dropLast()))
        #expect(result.metadata.truncated)
        #expect(result.metadata.sourceFrameCount == 2)
    }

    @Test func damagedImageDataStopsAtTheLastGoodFrame() async throws {
        var gif = self.animation(frames: 3)
        gif.frames[1].pixels = (0..<(32 * 32)).map { UInt8($0 % 8) }
        var bytes = try gif.build()
        // The second image descriptor's LZW minimum code size is replaced by an impossible 12-bit one:
        // the pre-scan treats the animation as ending after frame 1.
        let descriptors = bytes.indices.filter {
            bytes[$0] == 0x2C && $0 + 10 < bytes.count && bytes[$0 + 5] == 32 && bytes[$0 + 7] == 32
        }
        let second = try #require(descriptors.dropFirst().first)
        bytes[second + 10] = 12
        let result = try await convert(bytes)
        #expect(result.metadata.truncated)
        #expect(result.metadata.sourceFrameCount == 1)
    }

    /// A full disk or quota, from a write or from libavformat, is `insufficient-storage`, not `io` or
    /// `encode-failed`: the server answers 507 and the client knows to retry later.
    @Test func aFullDiskIsInsufficientStorage() {
        errno = ENOSPC
        #expect(OutputFile.error("write", "/x").code == .insufficientStorage)
        errno = EDQUOT
        #expect(OutputFile.error("write", "/x").code == .insufficientStorage)
        errno = EACCES
        #expect(OutputFile.error("write", "/x").code == .io)
        #expect(
            Transcoder.failure(FFmpegError(code: CFFmpeg_AVERROR(ENOSPC), function: "av_write_trailer")).code
                == .insufficientStorage)
        #expect(
            Transcoder.failure(FFmpegError(code: CFFmpeg_AVERROR(EINVAL), function: "avcodec_open2")).code
                == .encodeFailed)
    }
}
