import CFFmpeg
import Foundation
import TestSupport
import Testing

@testable import Transcoder

/// What a browser or AVPlayer receives: a web-ready container, a matching poster, stable bytes.
@Suite(.tags(.integration), .timeLimit(.minutes(10))) struct OutputTests {
    private func sample() throws -> [UInt8] {
        var gif = GIFBuilder(width: 48, height: 32)
        gif.frames = (0..<6).map { .filled(UInt8(2 + $0 % 4), left: $0 * 4, top: 0, width: 16, height: 32, delay: 4) }
        return try gif.build()
    }

    @Test func webReadyContainer() async throws {
        let result = try await convert(try self.sample())
        #expect(result.video.codecName == "h264")
        #expect(result.video.pixelFormat == "yuv420p")
        #expect(result.video.profile == 100)  // High
        #expect(result.video.colorPrimaries == AVCOL_PRI_BT709)
        #expect(result.video.videoStreams == 1)
        #expect(result.video.audioStreams == 0)
        #expect(result.video.moovBeforeMdat)
        #expect(result.video.width % 2 == 0 && result.video.height % 2 == 0)
    }

    /// The video's `codecs` parameter (for a `<source type>`) names what libavformat reads from the MP4 itself:
    /// `avc1.`, the profile (High: 0x64), the SPS's constraint flags, and the level.
    @Test func videoCodecsParameterIsTheStreams() async throws {
        let result = try await convert(try self.sample())
        let codecs = try #require(result.metadata.artifacts.first?.codecs)
        #expect(codecs.count == 11 && codecs.hasPrefix("avc1.64"), "\(codecs)")
        #expect(
            codecs.suffix(2) == String(format: "%02x", result.video.level), "\(codecs), level \(result.video.level)")
        #expect(result.metadata.mp4Codecs == codecs)
    }

    /// VP9's level in the WebM's `codecs` parameter: the lowest whose picture size, longer side, sample rate and
    /// bitrate (libvpx's `vp9_level_defs`) the stream stays within.
    @Test(
        arguments: [
            (128, 128, 100, 13_270, 800, "vp09.00.10.08"),
            // 131,400 luma samples: over level 2's 122,880.
            (365, 360, 100, 70_956, 800, "vp09.00.21.08"),
            // The same at 10 Mb/s: over 2.1's and 3's bitrates.
            (365, 360, 100, 1_000_000, 800, "vp09.00.31.08"),
            // 600 px wide: within level 1.1's picture size but not its longer side (768 is; 513 is not level 1's).
            (600, 40, 100, 1_000, 1_000, "vp09.00.11.08"),
            // 1,166,400 samples, 17.0 Mb/s: level 4; at 21.3 Mb/s, 4.1.
            (1080, 1080, 100, 6_367_732, 3_000, "vp09.00.40.08"),
            (1080, 1080, 100, 8_000_000, 3_000, "vp09.00.41.08"),
            // 10 ms pictures of 1080 x 1080: 117 million samples a second, over level 4's 83.6.
            (1080, 1080, 10, 100_000, 3_000, "vp09.00.41.08"),
        ] as [(Int, Int, Int64, Int, Int64, String)])
    func vp9CodecsParameter(width: Int, height: Int, shortest: Int64, bytes: Int, milliseconds: Int64, expected: String)
    {
        #expect(
            VP9Encoder.codecsParameter(
                width: width, height: height, shortestPicture: shortest, bytes: bytes, milliseconds: milliseconds)
                == expected)
    }

    /// A render leaves its files where it was told and reports them in commit order, the manifest last, each
    /// with the size on disk and the digest `sha256sum` computes; a store does the rest.
    @Test(.tags(.childProcess)) func renderReportsItsArtifacts() async throws {
        try await withTemporaryDirectory { directory in
            let rendered = try await renderFiles(try self.sample(), into: directory, name: "clip")
            #expect(rendered.artifacts.map(\.format) == [.mp4, .jpeg, .manifest])
            #expect(rendered.artifacts.map(\.path) == ["mp4", "jpg", "json"].map { directory + "/clip." + $0 })
            for artifact in rendered.artifacts {
                let size = try FileManager.default.attributesOfItem(atPath: artifact.path)[.size] as? Int
                #expect(size == artifact.bytes, "\(artifact.format)")
            }
            let media = rendered.artifacts.prefix(2)
            let sums = String(decoding: try run("sha256sum", media.map(\.path)), as: UTF8.self)
            #expect(sums.split(separator: "\n").map { String($0.prefix(64)) } == media.map(\.sha256))
            #expect(rendered.artifacts.last?.sha256 == nil)
            #expect(rendered.metadata.mp4Bytes == rendered.artifacts[0].bytes)
        }
    }

    @Test(.tags(.childProcess)) func filesAndMetadataAgree() async throws {
        try await withTemporaryDirectory { directory in
            let bytes = try self.sample()
            let metadata = try await convertFiles(bytes, directory: directory, name: "clip")
            let names = try FileManager.default.contentsOfDirectory(atPath: directory).sorted()
            #expect(names == ["clip.jpg", "clip.json", "clip.mp4"])
            let json = try Data(contentsOf: URL(fileURLWithPath: directory + "/clip.json"))
            #expect(try JSONDecoder().decode(TranscodeMetadata.self, from: json) == metadata)
            #expect(metadata.sourceBytes == bytes.count)
            // The recorded hashes, against coreutils' sha256sum (an implementation of its own).
            let sums = String(
                decoding: try run("sha256sum", [directory + "/clip.mp4", directory + "/clip.jpg"]), as: UTF8.self)
            let digests = sums.split(separator: "\n").map { String($0.prefix(64)) }
            #expect(digests == [metadata.mp4Sha256, metadata.posterSha256].compactMap { $0 })
            #expect(digests.count == 2)
            // Written after the listing above, beside the outputs.
            try Data(bytes).write(to: URL(fileURLWithPath: directory + "/source.gif"))
            let gifSum = String(decoding: try run("sha256sum", [directory + "/source.gif"]), as: UTF8.self)
            #expect(metadata.sourceSha256 == String(gifSum.prefix(64)))
            #expect(
                metadata.mp4Bytes
                    == (try FileManager.default.attributesOfItem(atPath: directory + "/clip.mp4")[.size] as? Int))
            #expect(
                metadata.posterBytes
                    == (try FileManager.default.attributesOfItem(atPath: directory + "/clip.jpg")[.size] as? Int))
            #expect(metadata.recommendation == (metadata.mp4Bytes < metadata.sourceBytes ? .video : .keepGIF))
        }
    }

    @Test func posterIsTheFirstFrameAtTheVideoSize() async throws {
        var gif = GIFBuilder(width: 33, height: 31)
        gif.frames = [.filled(2, width: 33, height: 31), .filled(4, width: 33, height: 31)]
        try await withTemporaryDirectory { directory in
            try await convertFiles(try gif.build(), directory: directory, name: "p")
            let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: directory + "/p.jpg")))
            #expect(bytes.prefix(2) == [0xFF, 0xD8])
            let poster = try MP4Probe(path: directory + "/p.jpg")
            #expect(poster.codecName == "mjpeg")
            #expect(poster.width == 34 && poster.height == 32)
            let first = try #require(poster.pictures.first)
            let interior = (0..<30).flatMap { y in (0..<32).map { first[y * 34 + $0] } }
            #expect(psnr(interior, [UInt32](repeating: rgba(0xFF0000), count: interior.count)) > 30)
        }
    }

    /// The same input and options give the same poster bytes and the same pictures at the same times. The
    /// MP4's bytes are identical nearly always (200 concurrent encodes in one process were), but a run of the
    /// whole suite once produced an encode 11 bytes larger while other conversions ran beside it
    /// (docs/open-questions.md); nothing depends on it (keys are computed from the input and the options), so the
    /// video is compared picture by picture.
    @Test func sameInputSamePictures() async throws {
        let bytes = try self.sample()
        try await withTemporaryDirectory { directory in
            let transcoder = Transcoder()
            let first = try await convertFiles(bytes, directory: directory, name: "a")
            let second = try await convertFiles(bytes, directory: directory, name: "b")
            let posterA = try Data(contentsOf: URL(fileURLWithPath: "\(directory)/a.jpg"))
            let posterB = try Data(contentsOf: URL(fileURLWithPath: "\(directory)/b.jpg"))
            #expect(posterA == posterB, "poster differs")
            #expect(first.durationMs == second.durationMs && first.encodedFrameCount == second.encodedFrameCount)
            #expect(
                abs(first.mp4Bytes - second.mp4Bytes) * 20 <= first.mp4Bytes, "\(first.mp4Bytes) vs \(second.mp4Bytes)")
            let a = try MP4Probe(path: directory + "/a.mp4")
            let b = try MP4Probe(path: directory + "/b.mp4")
            #expect(a.ptsMilliseconds == b.ptsMilliseconds)
            for (pictureA, pictureB) in zip(a.pictures, b.pictures) {
                #expect(psnr(pictureA, pictureB) > 40)
            }
        }
    }

    /// x264's buffers follow the picture size: six references and about 12 megapixels of lookahead up to half a
    /// megapixel, then two references and about 6 megapixels (at least 3 frames), the lookahead shared among
    /// frame threads and never more than the preset's.
    @Test func encoderMemoryIsBoundedByThePictureSize() {
        func bound(_ width: Int, _ height: Int, _ preset: String, threads: Int = 1) -> String {
            let bound = H264Encoder.memoryBound(width: width, height: height, preset: preset, threads: threads)
            return "\(bound.references) \(bound.lookahead.map(String.init) ?? "-") \(bound.x264Params)"
        }
        #expect(bound(256, 256, "medium") == "6 - ")
        #expect(bound(256, 256, "medium", threads: 2) == "6 - sync-lookahead=0")
        #expect(bound(640, 480, "medium") == "6 39 rc-lookahead=39")
        #expect(bound(640, 480, "medium", threads: 2) == "6 19 rc-lookahead=19:sync-lookahead=0")
        #expect(bound(706, 706, "medium", threads: 2) == "6 12 rc-lookahead=12:sync-lookahead=0")
        #expect(bound(1080, 1080, "medium") == "2 5 rc-lookahead=5")
        #expect(bound(1080, 1080, "medium", threads: 2) == "2 3 rc-lookahead=3:sync-lookahead=0")
        #expect(bound(1920, 1080, "medium") == "2 3 rc-lookahead=3")
        #expect(bound(1080, 1080, "ultrafast") == "2 - ")
        #expect(bound(1080, 1080, "unknown") == "2 5 rc-lookahead=5")
    }

    @Test func failureLeavesEarlierOutputsAlone() async throws {
        try await withTemporaryDirectory { directory in
            let good = try self.sample()
            let first = try await convertFiles(good, directory: directory, name: "x")
            await #expect(throws: TranscodeError.self) {
                try await convertFiles(Array("not a gif".utf8), directory: directory, name: "x")
            }
            let names = try FileManager.default.contentsOfDirectory(atPath: directory).sorted()
            #expect(names == ["x.jpg", "x.json", "x.mp4"])
            let json = try Data(contentsOf: URL(fileURLWithPath: directory + "/x.json"))
            #expect(try JSONDecoder().decode(TranscodeMetadata.self, from: json) == first)
        }
    }

    @Test func unwritableDirectoryIsAnIOError() async throws {
        do {
            try await convertFiles(try self.sample(), directory: "/nonexistent-\(UUID().uuidString)", name: "x")
            Issue.record("writing into a missing directory succeeded")
        } catch let error as TranscodeError {
            #expect(error.code == .io, "\(error)")
        }
    }
}
