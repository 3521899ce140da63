import CFFmpeg
import Foundation

/// Turns an animated GIF into a looping-ready, muted H.264 MP4 and a JPEG poster that look and time like
/// the GIF in a browser.
///
/// Synchronous and CPU-bound: run it on a thread of its own (the server uses a `NIOThreadPool`), never on
/// an async executor. Each encode hands its pictures to x264 from one more thread, which it joins before
/// returning (`PictureHandoff`). Memory stays bounded whatever the frame count: a few canvases plus x264's lookahead.
public struct Transcoder: Sendable {
    public var options: TranscodeOptions
    /// Let x264 use the CPU's SIMD instructions (FFmpeg's are process-wide: `av_force_cpu_flags`). Off, only
    /// to check that the bytes do not depend on the CPU (`convert --without-simd`): the output is the same.
    public var x264UsesSIMD = true
    /// Where the conversion's steps are timed (decoding's plan, each size-guard attempt, each extra format, the
    /// commit), for a tracer; nil: none is.
    public var steps: StepLog?

    /// The video's encoder and container: the object's video format (`ObjectFiles.video`).
    let video = VideoRecipe.h264MP4

    public init(options: TranscodeOptions = TranscodeOptions()) {
        self.options = options
    }

    /// FFmpeg (decoders, libswscale, the poster's encoder) uses no SIMD instruction in this process from now on:
    /// `av_force_cpu_flags(0)`. With `x264UsesSIMD` off, a conversion runs as on a CPU without any.
    public static func stopFFmpegSIMD() {
        av_force_cpu_flags(0)
    }

    /// Converts `gif` into `directory/name.mp4`, `directory/name.jpg` and `directory/name.json` (the
    /// metadata). Each file is written under a temporary name, synced and renamed into place, the JSON
    /// last: when it exists, the other two are complete. A failure leaves none of the three behind.
    /// - Parameters:
    ///   - gif: the whole GIF.
    ///   - directory: an existing directory.
    ///   - name: the files' base name (not a path).
    /// - Returns: the metadata that was written.
    /// - Throws: `TranscodeError`.
    @discardableResult
    public func convert(_ gif: [UInt8], directory: String, name: String) throws -> TranscodeMetadata {
        let base = URL(fileURLWithPath: directory).appendingPathComponent(name).path
        let mp4Path = base + "." + self.video.format.fileExtension
        let posterPath = base + "." + ObjectFiles.poster.fileExtension
        let metadataPath = base + "." + ObjectFiles.manifest.fileExtension
        let mp4Temporary = OutputFile.temporaryPath(for: mp4Path)
        var temporaries = [mp4Temporary]
        defer {
            for path in temporaries { unlink(path) }
        }
        do {
            let (guarded, extras) = try gif.withUnsafeBytes { bytes in
                var plan = try self.steps.record("decode") { try self.plan(bytes) }
                let guarded: (metadata: (result: TranscodeMetadata, poster: [UInt8]), mp4Path: String)
                if let seconds = self.options.rendition.previewSeconds {
                    // A preview's budget, not the source's size, decides its encodes; its other files are made
                    // at the size its video came out.
                    let preview = try self.encodePreview(
                        bytes, plan: plan, seconds: seconds, mp4Path: mp4Temporary, temporaries: &temporaries)
                    guarded = (preview.metadata, preview.mp4Path)
                    plan = preview.plan
                } else {
                    guarded = try self.encodeGuarded(
                        bytes, plan: plan, mp4Path: mp4Temporary, temporaries: &temporaries)
                }
                let extras = try self.steps.record("encode.extras") {
                    try self.encodeExtras(
                        bytes, plan: plan, transparent: guarded.metadata.result.hasTransparency, beside: base,
                        temporaries: &temporaries)
                }
                return (guarded, extras)
            }
            var metadata = guarded.metadata
            metadata.result.otherArtifacts = extras.map(\.entry)
            // The attempt kept; the others are removed with the temporaries.
            let mp4Temporary = guarded.mp4Path
            try OutputFile.sync(mp4Temporary)
            let posterTemporary = try OutputFile.writeTemporary(metadata.poster, beside: posterPath)
            temporaries.append(posterTemporary)
            metadata.result.mp4Bytes = try OutputFile.size(mp4Temporary)
            metadata.result.posterBytes = metadata.poster.count
            metadata.result.mp4Sha256 = try ContentHash.sha256(ofFile: mp4Temporary)
            metadata.result.posterSha256 = try ContentHash.sha256(metadata.poster)
            metadata.result.sourceSha256 = try ContentHash.sha256(gif)
            metadata.result.recommendation =
                Double(metadata.result.mp4Bytes) < Double(gif.count) * self.options.maxSizeRatio ? .video : .keepGIF
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .prettyPrinted]
            let json = try Array(encoder.encode(metadata.result))
            let metadataTemporary = try OutputFile.writeTemporary(json, beside: metadataPath)
            temporaries.append(metadataTemporary)
            try OutputFile.commit(mp4Temporary, to: mp4Path)
            try OutputFile.commit(posterTemporary, to: posterPath)
            for extra in extras { try OutputFile.commit(extra.temporary, to: extra.path) }
            try OutputFile.commit(metadataTemporary, to: metadataPath)
            // Committed files are gone from their temporary names; what is left (other attempts) goes.
            let committed = Set([mp4Temporary, posterTemporary, metadataTemporary] + extras.map(\.temporary))
            temporaries.removeAll { committed.contains($0) }
            return metadata.result
        } catch let error as TranscodeError {
            throw error
        } catch let error as FFmpegError {
            throw Self.failure(error)
        } catch {
            throw TranscodeError(.io, "writing the outputs failed", underlying: error)
        }
    }

    /// The files the options ask for besides the video and the poster (`RenditionSpec.extraFormats`), each
    /// encoded from a pass of its own over the source and written, synced, to a temporary file beside
    /// `base.<extension>` (added to `temporaries`).
    /// - Returns: each file's manifest entry, temporary path and final path, in the registry's order.
    /// - Parameter transparent: whether the source shows a transparent pixel: the VP9 WebM is made only then, or
    ///   when its size is odd (`webmShowsMore`).
    private func encodeExtras(
        _ bytes: UnsafeRawBufferPointer, plan: Plan, transparent: Bool, beside base: String, temporaries: inout [String]
    ) throws -> [(entry: ManifestEntry, temporary: String, path: String)] {
        var made: [(entry: ManifestEntry, temporary: String, path: String)] = []
        for extra in ExtraFormat.registry where self.options.rendition.extraFormats.contains(extra.format) {
            let format = extra.format
            let path = base + "." + format.fileExtension
            guard extra.isMade(self, plan, transparent) else { continue }
            let image: ExtraFormat.Encoded
            do {
                image = try self.steps.record("encode." + format.name) {
                    try extra.encode(self, bytes, plan, transparent, path)
                }
            } catch let error as TranscodeError where error.code == .encodeFailed {
                // The video and the poster are good: the object is kept without this file, and its manifest does
                // not list it (`.auto` then answers another format or the source; `.<format>` finds no such file).
                continue
            } catch let error as FFmpegError where !OutputFile.isStorageFull(-error.code) {
                // The same for a libavcodec or libavformat failure in an extra's own encoder, muxer or read-back (the
                // WebM's): an extra never costs the object. A full disk still fails the conversion.
                continue
            }
            let temporary = try OutputFile.writeTemporary(image.bytes, beside: path)
            temporaries.append(temporary)
            var entry = ManifestEntry(
                role: .extra(format), format: format.name, bytes: image.bytes.count,
                sha256: try ContentHash.sha256(image.bytes), width: image.width, height: image.height)
            entry.lossless = image.lossless
            entry.codecs = image.codecs
            entry.psnr = image.psnr.map { ($0 * 100).rounded() / 100 }
            if Double(image.bytes.count) >= Double(bytes.count) * self.options.maxSizeRatio {
                entry.recommendation = .keepGIF
            }
            made.append((entry, temporary, path))
        }
        return made
    }

    /// Whether a VP9 WebM shows what the MP4 cannot: transparency, or an odd width or height kept as it is (the MP4
    /// is padded to even sizes, and a page's box of the odd size resamples it: 22 dB against the source where the
    /// picture itself reads 36; VP9 keeps the size exactly). A picture scaled into the box is resampled in both.
    /// Otherwise the MP4 is the video: VP9 without alpha was 1.06x its bytes at the median, for 4x the time.
    static func webmShowsMore(transparent: Bool, size: (width: Int, height: Int, scaled: Bool)) -> Bool {
        transparent || (!size.scaled && (size.width % 2 == 1 || size.height % 2 == 1))
    }

    /// An FFmpeg failure as the transcoder reports it: a full disk while libavformat writes the MP4 is
    /// `insufficient-storage` (the caller may retry elsewhere or later), anything else `encode-failed`.
    static func failure(_ error: FFmpegError) -> TranscodeError {
        if OutputFile.isStorageFull(-error.code) {
            return TranscodeError(.insufficientStorage, "the disk is full", underlying: error)
        }
        return TranscodeError(.encodeFailed, "encoding failed", underlying: error)
    }

    /// The output size: the canvas padded to even dimensions (the pad repeats the last column and row),
    /// or, when that does not fit the output box, scaled down (aspect kept) to even dimensions. (A canvas as wide
    /// as an odd box is scaled too: padded, it would be 1 px wider than the box.)
    static func outputSize(width: Int, height: Int, maxWidth: Int, maxHeight: Int) -> (
        width: Int, height: Int, scaled: Bool
    ) {
        guard width + width % 2 > maxWidth || height + height % 2 > maxHeight else {
            // yuv420p needs even sizes (and H.264 crops 4:2:0 only by 2): pad one row or column.
            return (width + width % 2, height + height % 2, false)
        }
        let factor = min(Double(maxWidth) / Double(width), Double(maxHeight) / Double(height))
        func even(_ value: Double, limit: Int) -> Int {
            let rounded = Int((value / 2).rounded()) * 2
            return min(max(2, rounded), limit - limit % 2)
        }
        return (even(Double(width) * factor, limit: maxWidth), even(Double(height) * factor, limit: maxHeight), true)
    }

    /// The animation's headers and the output size, read once per conversion.
    struct Plan {
        let header: any AnimationHeader
        let output: (width: Int, height: Int, scaled: Bool)

        /// Pictures a second over the whole animation (`durations`: each frame's milliseconds), reduced to fit
        /// Int32: what encoders take for their rate heuristics (the timestamps stay exact).
        static func averageFrameRate(_ durations: [Int]) -> AVRational {
            let total = durations.reduce(0) { $0 + Int64($1) }
            var num: Int32 = 0
            var den: Int32 = 0
            av_reduce(
                &num, &den, Int64(Int32(clamping: max(1, durations.count) * 1000)),
                Int64(Int32(clamping: max(1, total))),
                1 << 20)
            return AVRational(num: num, den: den)
        }
    }

    func plan(_ bytes: UnsafeRawBufferPointer) throws -> Plan {
        try self.options.validate()
        FFmpegLogging.configured
        var header = try self.header(bytes)
        if let seconds = self.options.rendition.previewSeconds {
            header = PreviewHeader(header, milliseconds: seconds * 1000)
        }
        let output = Self.outputSize(
            width: header.width, height: header.height,
            maxWidth: self.options.maxOutputWidth, maxHeight: self.options.maxOutputHeight)
        return Plan(header: header, output: output)
    }

    /// The animation's headers, limits checked before any pixel is decoded. The one place the input format
    /// is told apart: by its signature, never by a name or a Content-Type.
    /// - Throws: `unsupported-format` for anything but GIF, PNG and WebP; `not-animated` for a still PNG or
    ///   WebP; the format's own errors otherwise.
    private func header(_ bytes: UnsafeRawBufferPointer) throws -> any AnimationHeader {
        let limits = self.options.limits
        guard bytes.count <= limits.maxInputBytes else {
            throw TranscodeError(.tooLarge, "the input is \(bytes.count) bytes; the limit is \(limits.maxInputBytes)")
        }
        // Starts with the signature, or is a non-empty part of it: that format cut short (`corrupt`).
        func startsLike(_ signature: [UInt8]) -> Bool {
            bytes.starts(with: signature)
                || (!bytes.isEmpty && bytes.count < signature.count && signature.starts(with: bytes))
        }
        if startsLike(Array("GIF8".utf8)) {
            return try GIFPrescan(bytes: bytes, limits: limits)
        }
        if startsLike(APNGPrescan.signature) {
            return try APNGPrescan(bytes: bytes, limits: limits)
        }
        if WebPPrescan.matches(bytes) {
            return try WebPPrescan(bytes: bytes, limits: limits)
        }
        if bytes.count < 12, startsLike(Array("RIFF".utf8)) {
            throw TranscodeError(.corrupt, "the file ends inside the RIFF header")
        }
        throw TranscodeError(
            .unsupportedFormat, "the data is not a GIF, an animated PNG or an animated WebP (told by its signature)")
    }

    /// - Parameters:
    ///   - stop: stop (throw `StoppedAboveTarget`) once the packets written pass its bytes, or overrun them
    ///     (`keyFrameOverruns` when it says so, `overrunsTheSource`, `overrunsSteadily`).
    ///   - measure: measure the video's SSIM against the pictures encoded, while encoding (x264's own: `X264SSIM`),
    ///     each picture weighted by how long it shows.
    ///   - poster: the poster, when an earlier attempt made it (the first picture is the same in every attempt);
    ///     made here and stored when nil, so a stopped attempt's poster is kept for the next.
    /// - Returns: the metadata, the poster and, when measured, the SSIM.
    func encode(
        _ bytes: UnsafeRawBufferPointer, plan: Plan, crf: Int, mp4Path: String, stop: SizeGuardPolicy.Stop? = nil,
        measure: Bool = false, poster: inout [UInt8]?
    ) throws -> (result: TranscodeMetadata, poster: [UInt8], ssim: Double?) {
        let header = plan.header
        let output = plan.output
        // Where each source frame starts (milliseconds), read once (`frameMilliseconds` is made on each call, and
        // the stopping rules below ask on every packet).
        let durations = header.frameMilliseconds
        var frameStarts: [Int64] = []
        frameStarts.reserveCapacity(durations.count)
        var clock: Int64 = 0
        for milliseconds in durations {
            frameStarts.append(clock)
            clock += Int64(milliseconds)
        }
        let totalMilliseconds = clock
        var rendition = self.options.rendition
        rendition.crf = crf
        let encoder = try self.video.makeEncoder(
            output.width, output.height, rendition, self.x264UsesSIMD, Plan.averageFrameRate(durations), measure)
        let muxer = try self.video.makeWriter(mp4Path, encoder, false)
        // The source's bytes through each frame, when its format tells: how much of the source the pictures encoded
        // so far cover.
        let sourceEnds = header.frameSourceEnds.flatMap { $0.count == durations.count && !$0.isEmpty ? $0 : nil }
        var coveredFrame = 0
        var pictureStarts: [Int64] = []
        var written = 0
        var packets = 0
        var quarter: SizeGuardPolicy.EncodedShare?
        func write(_ packet: Packet) throws {
            let (size, start) = packet.withUnsafeMutablePointer { (Int($0.pointee.size), $0.pointee.pts) }
            try muxer.write(packet)
            guard let stop else { return }
            let stopAbove = stop.above
            written += size
            packets += 1
            // The share encoded: by time, or at least by pictures (a first picture alone has no length yet).
            let now = SizeGuardPolicy.EncodedShare(
                share: max(
                    Double(start) / Double(max(1, totalMilliseconds)),
                    Double(packets) / Double(max(1, durations.count))),
                bytes: written)
            if quarter == nil, now.share >= 0.25 { quarter = now }
            var sourceShare = 0.0
            if let sourceEnds {
                // Packets come in presentation order (no B-frames): the frames covered only grow.
                while coveredFrame + 1 < frameStarts.count, frameStarts[coveredFrame + 1] <= start { coveredFrame += 1 }
                sourceShare = Double(sourceEnds[coveredFrame]) / Double(max(1, bytes.count))
            }
            if packets == 1, stop.judgesTheKeyFrame,
                SizeGuardPolicy.keyFrameOverruns(
                    bytes: written, sourceShare: sourceShare, target: stopAbove, sourceBytes: bytes.count)
            {
                throw SizeGuardPolicy.StoppedAboveTarget(
                    bytes: written,
                    projectedBytes: SizeGuardPolicy.projectedFromTheKeyFrame(bytes: written, sourceShare: sourceShare),
                    atTheKeyFrame: true)
            }
            if SizeGuardPolicy.overrunsTheSource(bytes: written, sourceShare: sourceShare, target: stopAbove) {
                throw SizeGuardPolicy.StoppedAboveTarget(
                    bytes: written, projectedBytes: Int(Double(written) / sourceShare))
            }
            if written > stopAbove || SizeGuardPolicy.overrunsSteadily(now, quarter: quarter, target: stopAbove) {
                // Early on, at most twice what was written: a big first picture must not look like a huge whole.
                let whole = Double(written) / max(now.share, 0.01)
                let projected = now.share >= 0.25 ? whole : min(whole, Double(written) * 2)
                throw SizeGuardPolicy.StoppedAboveTarget(bytes: written, projectedBytes: Int(projected))
            }
        }
        let pass = try self.composite(
            bytes, plan: plan, pipelined: true,
            first: { picture, width, height in
                guard poster == nil else { return }
                poster = try PosterEncoder.encode(
                    picture, width: width, height: height, outputWidth: output.width, outputHeight: output.height)
            },
            picture: { frame, start in
                if measure { pictureStarts.append(start) }
                try encoder.encode(frame, pts: start, emit: write)
            })
        try encoder.finish(emit: write)
        try muxer.finish(endTime: pass.time)
        let ssim =
            measure
            ? try X264SSIM.weightedMean(encoder.pictureSSIM ?? [], starts: pictureStarts, end: pass.time) : nil

        var metadata = TranscodeMetadata(
            sourceFormat: header.format, sourceWidth: header.width, sourceHeight: header.height,
            outputWidth: output.width, outputHeight: output.height,
            sourceFrameCount: pass.decodedFrames, encodedFrameCount: pass.encodedFrames, durationMs: Int(pass.time),
            loopCount: header.loopCount, playCount: header.playCount, loopsForever: header.playCount == nil,
            hasTransparency: pass.sawTransparency, truncated: pass.truncated,
            background: self.options.background, sourceBytes: bytes.count, mp4Bytes: 0, posterBytes: 0,
            recommendation: .video)
        metadata.mp4Codecs = encoder.codecsParameter
        guard let poster else { throw TranscodeError(.encodeFailed, "the conversion made no poster") }
        return (metadata, poster, ssim)
    }
}
