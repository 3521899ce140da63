import Foundation
import TestSupport
import Testing

@testable import Transcoder

/// The size guard: a video not smaller than the GIF is encoded again at a higher CRF, within a quality floor
/// measured as SSIM against the pictures encoded.
@Suite(.tags(.integration), .timeLimit(.minutes(10))) struct SizeGuardTests {
    /// Our SSIM against FFmpeg's `ssim` filter (an implementation of its own) on the same two luma planes.
    @Test(.tags(.childProcess), arguments: [(64, 48, 3), (37, 29, 40), (200, 120, 12)])
    func lumaSSIMAgreesWithFFmpeg(width: Int, height: Int, noise: Int) throws {
        var generator = SystemRandomNumberGenerator()
        let a: [UInt8] = (0..<(width * height)).map { index in
            let x = index % width
            let y = index / width
            return UInt8(truncatingIfNeeded: (x * 3 + y * 2) ^ (x * y / 7))
        }
        let b: [UInt8] = a.map { UInt8(clamping: Int($0) + Int.random(in: -noise...noise, using: &generator)) }
        let ours = a.withUnsafeBufferPointer { pa in
            b.withUnsafeBufferPointer { pb in
                LumaSSIM.compute(
                    pa.baseAddress!, strideA: width, pb.baseAddress!, strideB: width, width: width, height: height)
            }
        }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("ssim-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        try Data(a).write(to: directory.appendingPathComponent("a.gray"))
        try Data(b).write(to: directory.appendingPathComponent("b.gray"))
        let input = ["-f", "rawvideo", "-pix_fmt", "gray", "-s", "\(width)x\(height)", "-i"]
        let output = String(
            decoding: try run(
                "ffmpeg",
                ["-v", "error"] + input + [directory.appendingPathComponent("a.gray").path] + input + [
                    directory.appendingPathComponent("b.gray").path, "-lavfi", "ssim=stats_file=-", "-f", "null", "-",
                ]), as: UTF8.self)
        let field = try #require(output.split(separator: " ").first { $0.hasPrefix("Y:") }, "ffmpeg said: \(output)")
        let theirs = try #require(Double(field.dropFirst(2)))
        #expect(abs(ours - theirs) < 0.002, "ours \(ours), ffmpeg \(theirs)")
        #expect(ours < 1 || noise == 0)
    }

    /// The size of the MP4 a default conversion gives with the guard off (the first attempt the guard makes).
    static func unguardedBytes(_ gif: [UInt8]) async throws -> Int {
        var options = TranscodeOptions()
        options.maxExtraAttempts = 0
        return try await withTemporaryDirectory {
            try await convertFiles(gif, options: options, directory: $0, name: "a").mp4Bytes
        }
    }

    static func corpus(_ name: String) throws -> [UInt8] {
        [UInt8](try Data(contentsOf: URL(fileURLWithPath: CorpusTests.corpusDirectory + "/" + name)))
    }

    /// A target the first encode misses: a higher CRF, chosen from the first attempt's size, meets it; every
    /// attempt is recorded; only the kept video is left on disk. With a target of 64 KB and more the first
    /// attempt is stopped once it is sure to miss the target, and its size projected.
    @Test(arguments: [("cartoon_hotdog.gif", false), ("cartoon_earth_3d_loop65535.gif", true)])
    func reencodesUntilSmaller(name: String, stopped: Bool) async throws {
        let gif = try Self.corpus(name)
        var options = TranscodeOptions()
        let plain = try await withTemporaryDirectory {
            try await convertFiles(gif, options: options, directory: $0, name: "a")
        }
        #expect(plain.sizeGuard == nil)
        #expect(plain.crf == TranscodeOptions.defaultCRF)
        // Aim at 85% of what the first encode gave.
        options.maxSizeRatio = Double(plain.mp4Bytes) * 0.85 / Double(gif.count)
        options.minSSIM = 0.9
        #expect((Double(gif.count) * options.maxSizeRatio >= Double(SizeGuardPolicy.smallestStoppedTarget)) == stopped)
        try await withTemporaryDirectory { directory in
            let metadata = try await convertFiles(gif, options: options, directory: directory, name: "a")
            let guarded = try #require(metadata.sizeGuard)
            #expect(guarded.outcome == .smaller)
            #expect(guarded.attempts.count >= 2)
            #expect(guarded.attempts[0].crf == TranscodeOptions.defaultCRF)
            // Not compared byte for byte with the plain encode: under a loaded test run the same GIF and
            // settings once came out 8084 instead of 7977 bytes in one process (see docs/open-questions.md
            // question on determinism); the size guard only needs the first attempt to miss the target.
            // The first attempt is never measured.
            #expect(guarded.attempts[0].ssim == nil)
            if stopped {
                // Stopped once past the target (it could only end larger), or before, once it spent 1.15x the
                // target's share of the GIF's bytes (`overrunsTheSource`); its size projected.
                let projected = try #require(guarded.attempts[0].projectedBytes)
                #expect(projected >= guarded.attempts[0].bytes)
                #expect(Double(projected) >= Double(gif.count) * options.maxSizeRatio)
                #expect(guarded.attempts[0].bytes < plain.mp4Bytes)
                #expect(abs(Double(projected) / Double(plain.mp4Bytes) - 1) < 0.3, "\(projected) vs \(plain.mp4Bytes)")
            } else {
                #expect(Double(guarded.attempts[0].bytes) >= Double(gif.count) * options.maxSizeRatio)
                #expect(guarded.attempts[0].projectedBytes == nil)
            }
            #expect(metadata.crf == guarded.chosenCRF && guarded.chosenCRF > TranscodeOptions.defaultCRF)
            #expect(Double(metadata.mp4Bytes) < Double(gif.count) * options.maxSizeRatio)
            #expect(metadata.mp4Bytes == guarded.attempts.last?.bytes)
            #expect(metadata.recommendation == .video)
            // Quality falls as CRF rises, and stays above the floor.
            let scores = guarded.attempts.compactMap(\.ssim)
            #expect(scores.count == guarded.attempts.count - 1)
            #expect(scores == scores.sorted(by: >))
            #expect(scores.allSatisfy { $0 >= 0.9 && $0 <= 1 })
            let names = try FileManager.default.contentsOfDirectory(atPath: directory).sorted()
            #expect(names == ["a.jpg", "a.json", "a.mp4"])
        }
    }

    /// The steady-overrun rule alone: from half the animation on, when both the whole so far and its second
    /// quarter project to 1.2x the target; not before half, not when the second quarter is cheaper (the first
    /// pictures, a key frame among them, cost more), not under 1.2x.
    @Test func aSteadyOverrunStopsAtHalf() {
        func stops(quarter: (Double, Int)?, now: (Double, Int)) -> Bool {
            SizeGuardPolicy.overrunsSteadily(
                .init(share: now.0, bytes: now.1), quarter: quarter.map { .init(share: $0.0, bytes: $0.1) },
                target: 1000)
        }
        #expect(stops(quarter: (0.25, 375), now: (0.5, 750)))
        #expect(stops(quarter: (0.3, 400), now: (0.6, 800)))
        #expect(!stops(quarter: (0.25, 375), now: (0.45, 700)))
        #expect(!stops(quarter: nil, now: (0.5, 750)))
        #expect(!stops(quarter: (0.25, 600), now: (0.5, 700)))
        #expect(!stops(quarter: (0.25, 250), now: (0.5, 550)))
        #expect(!stops(quarter: (0.5, 700), now: (0.5, 700)))
    }

    /// Pictures that all cost about the same (noise), with a target at 70% of the plain video: the first
    /// attempt overruns from the start, so it is stopped before its bytes pass the target (at its key frame, which
    /// spends over 1.4x the GIF's share of bytes on the first picture: `keyFrameOverruns`), and its projection
    /// is near the whole: 0.8x the key frame's rate, which for noise is the whole's rate (0.82x the plain video
    /// here). The stopped attempt is never the one kept, though its bytes are under the target, not even with no
    /// quality floor at all.
    @Test(arguments: [0.5, 0])
    func aSteadyOverrunIsStoppedBeforeItPassesTheTarget(minSSIM: Double) async throws {
        var builder = GIFBuilder(width: 192, height: 192)
        builder.frames = (0..<20).map { index in
            GIFBuilder.Frame(
                width: 192, height: 192, pixels: BrowserTimingTests.noise(UInt8(index + 1), size: 192), delay: 10)
        }
        let gif = try builder.build()
        let plainBytes = try await Self.unguardedBytes(gif)
        var options = TranscodeOptions()
        options.maxSizeRatio = Double(plainBytes) * 0.7 / Double(gif.count)
        options.minSSIM = minSSIM
        options.maxExtraAttempts = 3
        let target = Double(gif.count) * options.maxSizeRatio
        try #require(target >= Double(SizeGuardPolicy.smallestStoppedTarget))
        try await withTemporaryDirectory { directory in
            let metadata = try await convertFiles(gif, options: options, directory: directory, name: "a")
            let guarded = try #require(metadata.sizeGuard)
            let first = guarded.attempts[0]
            let projected = try #require(first.projectedBytes)
            #expect(Double(first.bytes) < target, "stopped at \(first.bytes) bytes, target \(Int(target))")
            #expect(Double(first.bytes) < 0.6 * Double(plainBytes), "\(first.bytes) of \(plainBytes)")
            // Its key frame, one picture of twenty (the source rule would have stopped it at 30% of the GIF's bytes).
            #expect(Double(first.bytes) < 0.15 * Double(plainBytes), "\(first.bytes) of \(plainBytes)")
            #expect(abs(Double(projected) / Double(plainBytes) - 1) < 0.25, "\(projected) vs \(plainBytes)")
            #expect(guarded.outcome == .smaller)
            #expect((metadata.crf ?? 0) > TranscodeOptions.defaultCRF)
            #expect(guarded.chosenCRF == metadata.crf && guarded.chosenCRF == guarded.attempts.last?.crf)
            #expect(Double(metadata.mp4Bytes) < target)
            #expect(metadata.recommendation == .video)
        }
    }

    /// An attempt's SSIM, x264's own measured while it is encoded, is the SSIM of the file written: the MP4 decoded
    /// by the ffmpeg CLI against the pictures the encoder got (`dumpPictures`), scored by `LumaSSIM` (checked against
    /// FFmpeg's `ssim` filter above) on x264's grid, 2 pixels in from the top-left corner, and each weighted by its
    /// display time; equal to the fifth decimal, which is as many as x264 gives. Both ways of the first attempt:
    /// whole (a small target) and stopped.
    @Test(.tags(.childProcess), arguments: [("cartoon_hotdog.gif", false), ("cartoon_earth_3d_loop65535.gif", true)])
    func measuredSSIMIsThatOfTheFileWritten(name: String, stopped: Bool) async throws {
        let gif = try Self.corpus(name)
        var options = TranscodeOptions()
        let plainBytes = try await Self.unguardedBytes(gif)
        options.maxSizeRatio = Double(plainBytes) * 0.85 / Double(gif.count)
        options.minSSIM = 0.9
        try await withTemporaryDirectory { directory in
            let metadata = try await convertFiles(gif, options: options, directory: directory, name: "a")
            let guarded = try #require(metadata.sizeGuard)
            #expect(guarded.attempts[0].ssim == nil)
            #expect((guarded.attempts[0].projectedBytes != nil) == stopped)
            let kept = try #require(guarded.attempts.last?.ssim)

            let dump = try await onOwnThread { [options] in
                try Transcoder(options: options).dumpPictures(gif, yuvPath: directory + "/pictures.yuv")
            }
            let pictures = [UInt8](try Data(contentsOf: URL(fileURLWithPath: directory + "/pictures.yuv")))
            _ = try run(
                "ffmpeg",
                [
                    "-v", "error", "-i", directory + "/a.mp4", "-fps_mode", "passthrough", "-f", "rawvideo",
                    "-pix_fmt", "yuv420p", directory + "/decoded.yuv",
                ])
            let decoded = [UInt8](try Data(contentsOf: URL(fileURLWithPath: directory + "/decoded.yuv")))
            let luma = dump.width * dump.height
            let pictureBytes = luma * 3 / 2
            // Not "gray": converting to it rescales limited-range luma to full range.
            try #require(decoded.count == pictures.count && pictures.count == dump.starts.count * pictureBytes)
            var weighted = 0.0
            for (index, start) in dump.starts.enumerated() {
                let score = pictures.withUnsafeBufferPointer { source in
                    decoded.withUnsafeBufferPointer { video in
                        LumaSSIM.compute(
                            source.baseAddress! + index * pictureBytes + 2 * dump.width + 2, strideA: dump.width,
                            video.baseAddress! + index * pictureBytes + 2 * dump.width + 2, strideB: dump.width,
                            width: dump.width - 2, height: dump.height - 2)
                    }
                }
                let end = index + 1 < dump.starts.count ? dump.starts[index + 1] : dump.end
                weighted += score * Double(end - start)
            }
            let measured = weighted / Double(dump.end)
            #expect(abs(measured - kept) < 1e-5, "measured while encoding \(kept), from the file \(measured)")
        }
    }

    /// When every attempt small enough falls under the floor, the first (best) video is kept, the attempts
    /// are recorded, and the answer is to keep the GIF. A stopped first attempt is then encoded whole.
    @Test(arguments: [("cartoon_hotdog.gif", false), ("cartoon_earth_3d_loop65535.gif", true)])
    func givesUpAtTheQualityFloor(name: String, stopped: Bool) async throws {
        let gif = try Self.corpus(name)
        var options = TranscodeOptions()
        let plainBytes = try await Self.unguardedBytes(gif)
        // Stopped: 70% of the plain video (over 64 KB) and a floor no higher CRF reaches; else a target
        // nothing reaches.
        options.maxSizeRatio = stopped ? Double(plainBytes) * 0.7 / Double(gif.count) : 0.001
        options.minSSIM = stopped ? 0.99999 : 0.98
        options.maxExtraAttempts = 3
        try await withTemporaryDirectory { directory in
            let metadata = try await convertFiles(gif, options: options, directory: directory, name: "a")
            let guarded = try #require(metadata.sizeGuard)
            #expect(guarded.outcome == .qualityFloor || guarded.outcome == .attemptsExhausted, "\(guarded)")
            #expect(guarded.chosenCRF == TranscodeOptions.defaultCRF)
            #expect(metadata.mp4Bytes == guarded.attempts[0].bytes)
            // The first attempt, at the default CRF, not a later one (here each is at least a third smaller).
            // Not within 2%: two encodes of one GIF in this busy test process have differed by 3.5% (8,150 and
            // 8,445 bytes of cartoon_hotdog.gif; docs/open-questions.md).
            #expect(
                abs(Double(metadata.mp4Bytes) / Double(plainBytes) - 1) < 0.08, "\(metadata.mp4Bytes) vs \(plainBytes)")
            #expect((guarded.attempts[0].projectedBytes != nil) == stopped)
            #expect(guarded.attempts[0].ssim == nil)
            #expect(metadata.recommendation == .keepGIF)
            #expect(guarded.attempts.count <= 4)
            let names = try FileManager.default.contentsOfDirectory(atPath: directory).sorted()
            #expect(names == ["a.jpg", "a.json", "a.mp4"])
        }
    }

    /// Pictures under 10 pixels in a dimension leave x264 no whole window to score ("SSIM Y:-nan"): such a
    /// re-encode has no SSIM, cannot be shown to meet the floor, and the first (whole) encode is kept, with the
    /// answer to keep the GIF (whose few bytes no MP4 beats anyway).
    @Test func picturesTooSmallToScoreKeepTheFirstEncode() async throws {
        var builder = GIFBuilder(width: 8, height: 8)
        builder.frames = (0..<3).map { .filled(UInt8($0 + 1), width: 8, height: 8, delay: 10) }
        let gif = try builder.build()
        try await withTemporaryDirectory { directory in
            let metadata = try await convertFiles(gif, directory: directory, name: "a")
            let guarded = try #require(metadata.sizeGuard)
            #expect(guarded.outcome == .qualityFloor && guarded.chosenCRF == TranscodeOptions.defaultCRF)
            #expect(guarded.attempts.count == 2 && guarded.attempts.allSatisfy { $0.ssim == nil })
            #expect(metadata.mp4Bytes == guarded.attempts[0].bytes && metadata.recommendation == .keepGIF)
        }
    }

    /// A stopped attempt's SSIM is written as 0, not left out: metadata written now must still decode where
    /// `ssim` is required (a fleet upgraded node by node, a rollback); read back, it is "not measured" again.
    @Test func stoppedAttemptsStayReadableByEarlierVersions() throws {
        struct EarlierAttempt: Decodable {
            var crf: Int
            var bytes: Int
            var ssim: Double
        }
        let attempts = [
            SizeGuard.Attempt(crf: 25, bytes: 70_000, ssim: nil, projectedBytes: 90_000),
            SizeGuard.Attempt(crf: 29, bytes: 60_000, ssim: 0.991),
        ]
        let data = try JSONEncoder().encode(attempts)
        let earlier = try JSONDecoder().decode([EarlierAttempt].self, from: data)
        #expect(earlier.map(\.ssim) == [0, 0.991])
        let read = try JSONDecoder().decode([SizeGuard.Attempt].self, from: data)
        #expect(read == attempts)
    }

    /// The guard is part of the options' fingerprint: results made with other guard settings are stored apart.
    @Test func guardSettingsChangeTheFingerprint() {
        var options = TranscodeOptions()
        let base = options.outputFingerprint
        options.minSSIM = 0.9
        #expect(options.outputFingerprint != base)
    }
}
