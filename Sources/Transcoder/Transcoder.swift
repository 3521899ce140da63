import CFFmpeg
import Foundation

/// Turns an animated GIF into a looping-ready, muted H.264 MP4 and a JPEG poster that look and time like
/// the GIF in a browser.
///
/// Synchronous and CPU-bound: run it on a thread of its own (the server uses a `NIOThreadPool`), never on
/// an async executor. Memory stays bounded whatever the frame count: a few canvases plus x264's lookahead.
public struct Transcoder: Sendable {
    public var options: TranscodeOptions

    public init(options: TranscodeOptions = TranscodeOptions()) {
        self.options = options
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
        let mp4Path = base + ".mp4"
        let posterPath = base + ".jpg"
        let metadataPath = base + ".json"
        let mp4Temporary = OutputFile.temporaryPath(for: mp4Path)
        var temporaries = [mp4Temporary]
        defer {
            for path in temporaries { unlink(path) }
        }
        do {
            var metadata = try gif.withUnsafeBytes { bytes in
                try self.encode(bytes, mp4Path: mp4Temporary)
            }
            try OutputFile.sync(mp4Temporary)
            let posterTemporary = try OutputFile.writeTemporary(metadata.poster, beside: posterPath)
            temporaries.append(posterTemporary)
            metadata.result.mp4Bytes = try OutputFile.size(mp4Temporary)
            metadata.result.posterBytes = metadata.poster.count
            metadata.result.mp4Sha256 = try ContentHash.sha256(ofFile: mp4Temporary)
            metadata.result.posterSha256 = try ContentHash.sha256(metadata.poster)
            metadata.result.gifSha256 = try ContentHash.sha256(gif)
            metadata.result.recommendation = metadata.result.mp4Bytes < gif.count ? .video : .keepGIF
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .prettyPrinted]
            let json = try Array(encoder.encode(metadata.result))
            let metadataTemporary = try OutputFile.writeTemporary(json, beside: metadataPath)
            temporaries.append(metadataTemporary)
            try OutputFile.commit(mp4Temporary, to: mp4Path)
            try OutputFile.commit(posterTemporary, to: posterPath)
            try OutputFile.commit(metadataTemporary, to: metadataPath)
            temporaries.removeAll()
            return metadata.result
        } catch let error as TranscodeError {
            throw error
        } catch let error as FFmpegError {
            throw Self.failure(error)
        } catch {
            throw TranscodeError(.io, "writing the outputs failed", underlying: error)
        }
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
    /// or, when it does not fit the output box, scaled down (aspect kept) to even dimensions.
    static func outputSize(width: Int, height: Int, maxWidth: Int, maxHeight: Int) -> (
        width: Int, height: Int, scaled: Bool
    ) {
        guard width > maxWidth || height > maxHeight else {
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

    private func encode(_ bytes: UnsafeRawBufferPointer, mp4Path: String) throws -> (
        result: TranscodeMetadata, poster: [UInt8]
    ) {
        try self.options.validate()
        FFmpegLogging.configured
        let prescan = try GIFPrescan(bytes: bytes, limits: self.options.limits)
        let output = Self.outputSize(
            width: prescan.width, height: prescan.height,
            maxWidth: self.options.maxOutputWidth, maxHeight: self.options.maxOutputHeight)
        // The flattened picture: canvas size (padded to the output size by edge copies when not scaling).
        let pictureWidth = output.scaled ? prescan.width : output.width
        let pictureHeight = output.scaled ? prescan.height : output.height
        let background = self.options.background.rgbaPixel
        // Two pictures: the one waiting to be encoded (its duration grows while identical pictures follow)
        // and the newest.
        var pending = [UInt32](repeating: background, count: pictureWidth * pictureHeight)
        var current = pending

        let maxFrameWidth = prescan.frames.map(\.width).max() ?? 1
        let decoder: GIFDecoder
        do {
            decoder = try GIFDecoder(bytes: bytes, maxFrameWidth: maxFrameWidth)
        } catch {
            throw TranscodeError(.corrupt, "giflib cannot read the GIF", underlying: error)
        }
        let compositor = GIFCompositor(prescan: prescan, bytes: bytes)
        let totalMilliseconds = prescan.frames.reduce(0) { $0 + $1.displayMilliseconds }
        let frameRate = AVRational(
            num: Int32(clamping: max(1, prescan.frames.count) * 1000), den: Int32(clamping: max(1, totalMilliseconds)))
        let encoder = try H264Encoder(
            width: output.width, height: output.height, options: self.options,
            averageFrameRate: av_reduce_rational(frameRate), globalHeader: true)
        let muxer = try MP4Muxer(path: mp4Path, encoder: encoder)
        let scaler = try ImageScaler(
            sourceWidth: pictureWidth, sourceHeight: pictureHeight,
            destinationWidth: output.width, destinationHeight: output.height,
            destinationFormat: AV_PIX_FMT_YUV420P, matrix: SWS_CS_ITU709, fullRange: false)
        let frame = try VideoFrame(width: output.width, height: output.height, format: AV_PIX_FMT_YUV420P)

        var poster: [UInt8] = []
        var decodedFrames = 0
        var encodedFrames = 0
        var truncated = prescan.truncated
        var time: Int64 = 0
        var pendingStart: Int64 = 0
        func encodePending() throws {
            try pending.withUnsafeBufferPointer { try scaler.convert($0, into: frame) }
            try encoder.encode(frame, pts: pendingStart, emit: muxer.write)
            encodedFrames += 1
        }

        for info in prescan.frames {
            do {
                guard try compositor.draw(info, from: decoder) else {
                    truncated = true
                    break
                }
            } catch {
                // Damaged image data: like a browser, keep the frames that decoded completely.
                truncated = true
                break
            }
            current.withUnsafeMutableBufferPointer {
                compositor.flatten(over: background, into: $0, stride: pictureWidth)
                Self.extendEdges(
                    $0, width: prescan.width, height: prescan.height, stride: pictureWidth, rows: pictureHeight)
            }
            let duration = Int64(info.displayMilliseconds)
            if decodedFrames == 0 {
                poster = try current.withUnsafeBufferPointer {
                    try PosterEncoder.encode(
                        $0, width: pictureWidth, height: pictureHeight,
                        outputWidth: output.width, outputHeight: output.height)
                }
                swap(&pending, &current)
                pendingStart = 0
            } else if Self.identical(current, pending) {
                // Same picture again: the pending frame simply shows longer.
            } else {
                try encodePending()
                swap(&pending, &current)
                pendingStart = time
            }
            time += duration
            decodedFrames += 1
        }
        guard decodedFrames > 0 else {
            throw TranscodeError(.corrupt, "the GIF has no frame that decodes completely")
        }
        try encodePending()
        try encoder.finish(emit: muxer.write)
        try muxer.finish(endTime: time)

        let metadata = TranscodeMetadata(
            sourceWidth: prescan.width, sourceHeight: prescan.height,
            outputWidth: output.width, outputHeight: output.height,
            gifFrameCount: decodedFrames, encodedFrameCount: encodedFrames, durationMs: Int(time),
            loopCount: prescan.loopCount, playCount: prescan.playCount, loopsForever: prescan.playCount == nil,
            hasTransparency: compositor.sawTransparency, truncated: truncated,
            background: self.options.background, gifBytes: bytes.count, mp4Bytes: 0, posterBytes: 0,
            recommendation: .video)
        return (metadata, poster)
    }

    /// Fills the padding column and row (odd sizes padded to even) with copies of the last real column
    /// and row. 4:2:0 averages chroma over 2x2 blocks: a background-coloured pad would bleed into the
    /// picture's last column and row (a 1x1 GIF's one pixel came out at 4.5 dB PSNR); a copy of the edge
    /// leaves the block's colour unchanged.
    static func extendEdges(
        _ pixels: UnsafeMutableBufferPointer<UInt32>, width: Int, height: Int, stride: Int, rows: Int
    ) {
        guard width > 0, height > 0 else { return }
        if stride > width {
            for y in 0..<height {
                let edge = pixels[y * stride + width - 1]
                for x in width..<stride { pixels[y * stride + x] = edge }
            }
        }
        for y in height..<rows {
            for x in 0..<stride { pixels[y * stride + x] = pixels[(height - 1) * stride + x] }
        }
    }

    private static func identical(_ a: [UInt32], _ b: [UInt32]) -> Bool {
        a.withUnsafeBytes { a in
            b.withUnsafeBytes { b in
                a.count == b.count && memcmp(a.baseAddress!, b.baseAddress!, a.count) == 0
            }
        }
    }
}

/// `av_reduce` on a rational, keeping both terms within Int32.
private func av_reduce_rational(_ value: AVRational) -> AVRational {
    var num: Int32 = 0
    var den: Int32 = 0
    av_reduce(&num, &den, Int64(value.num), Int64(value.den), 1 << 20)
    return AVRational(num: num, den: den)
}
