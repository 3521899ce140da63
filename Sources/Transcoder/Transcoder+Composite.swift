import CFFmpeg
import Foundation

/// The pass over the GIF every output shares: compositing as a browser does, merging identical pictures, and the
/// edges of padded sizes; and the pictures written raw for `scripts/bench-floor`.
extension Transcoder {
    /// What one pass over the GIF saw.
    struct Pass {
        var decodedFrames = 0
        var encodedFrames = 0
        var truncated = false
        /// Where the last picture ends, in milliseconds.
        var time: Int64 = 0
        var sawTransparency = false
    }

    /// One pass over the GIF: composites every frame as a browser does, merges identical consecutive
    /// pictures into one longer one, converts each distinct picture to the output's yuv420p and hands it to
    /// `picture` with its start time (milliseconds). `first` gets the first flattened picture (the poster).
    /// - Parameter pipelined: call `picture` on a thread of its own (`PictureHandoff`), two pictures
    ///   alternating, so that the next one is made while `picture` takes the last; it is called in the same
    ///   order with the same pictures, and has returned for every picture when this returns or throws.
    func composite(
        _ bytes: UnsafeRawBufferPointer, plan: Plan, pipelined: Bool = false,
        first: (UnsafeBufferPointer<UInt32>, _ width: Int, _ height: Int) throws -> Void,
        picture: (VideoFrame, Int64) throws -> Void
    ) throws -> Pass {
        let header = plan.header
        let output = plan.output
        // The flattened picture: canvas size (padded to the output size by edge copies when not scaling).
        let pictureWidth = output.scaled ? header.width : output.width
        let pictureHeight = output.scaled ? header.height : output.height
        let background = self.options.background.rgbaPixel
        // One picture, the one waiting to be encoded (its duration grows while identical pictures follow);
        // each new canvas is compared with it band by band before it is flattened whole, so a second
        // picture is never held (4.7 MB at 1080x1080).
        var pending = [UInt32](repeating: background, count: pictureWidth * pictureHeight)
        let bandRows = 16
        var band = [UInt32](repeating: background, count: pictureWidth * bandRows)

        let source = try header.makeFrameSource(bytes)
        let scaler = try ImageScaler(
            sourceWidth: pictureWidth, sourceHeight: pictureHeight,
            destinationWidth: output.width, destinationHeight: output.height,
            destinationFormat: AV_PIX_FMT_YUV420P, matrix: SWS_CS_ITU709, fullRange: false)
        let frames = try (0..<(pipelined ? 2 : 1)).map { _ in
            try VideoFrame(width: output.width, height: output.height, format: AV_PIX_FMT_YUV420P)
        }

        var pass = Pass(truncated: header.truncated)
        var pendingStart: Int64 = 0
        var handoff: PictureHandoff?
        func emitPending() throws {
            let (index, frame) = try handoff?.nextFree() ?? (0, frames[0])
            try pending.withUnsafeBufferPointer { try scaler.convert($0, into: frame) }
            if let handoff { handoff.submit(index, start: pendingStart) } else { try picture(frame, pendingStart) }
            pass.encodedFrames += 1
        }
        // Flattens the canvas band by band (16 rows), comparing each band with the pending picture: while
        // they agree nothing is written; at the first band that differs the pending picture is encoded
        // (it is still whole), then that band and the rest are written over it. Each canvas is flattened
        // once, and an unchanged one costs no copy. Padding rows copy the last row, so only the canvas's
        // rows (with their padding column) are compared. - Returns: whether the picture changed.
        func absorbCanvas(comparing: Bool) throws -> Bool {
            var changed = !comparing
            for top in stride(from: 0, to: header.height, by: bandRows) {
                let rows = top..<min(header.height, top + bandRows)
                let count = rows.count * pictureWidth
                if !changed {
                    let same = band.withUnsafeMutableBufferPointer { band in
                        source.flatten(rows: rows, over: background, into: band, stride: pictureWidth)
                        Self.extendEdges(
                            band, width: header.width, height: rows.count, stride: pictureWidth, rows: rows.count)
                        return pending.withUnsafeBufferPointer {
                            memcmp(band.baseAddress!, $0.baseAddress! + top * pictureWidth, count * 4) == 0
                        }
                    }
                    if same { continue }
                    changed = true
                    try emitPending()
                    band.withUnsafeBufferPointer { band in
                        pending.withUnsafeMutableBufferPointer {
                            ($0.baseAddress! + top * pictureWidth).update(from: band.baseAddress!, count: count)
                        }
                    }
                    continue
                }
                pending.withUnsafeMutableBufferPointer {
                    let output = UnsafeMutableBufferPointer(
                        rebasing: $0[(top * pictureWidth)..<(top * pictureWidth + count)])
                    source.flatten(rows: rows, over: background, into: output, stride: pictureWidth)
                    Self.extendEdges(
                        output, width: header.width, height: rows.count, stride: pictureWidth, rows: rows.count)
                }
            }
            guard changed else { return false }
            pending.withUnsafeMutableBufferPointer {
                Self.extendEdges(
                    $0, width: header.width, height: header.height, stride: pictureWidth, rows: pictureHeight)
            }
            return true
        }

        func passOver() throws {
            for milliseconds in header.frameMilliseconds {
                do {
                    guard try source.advance() else {
                        pass.truncated = true
                        break
                    }
                } catch {
                    // Damaged image data: like a browser, keep the frames that decoded completely.
                    pass.truncated = true
                    break
                }
                let duration = Int64(milliseconds)
                if pass.decodedFrames == 0 {
                    _ = try absorbCanvas(comparing: false)
                    try pending.withUnsafeBufferPointer { try first($0, pictureWidth, pictureHeight) }
                    pendingStart = 0
                } else if try absorbCanvas(comparing: true) {
                    pendingStart = pass.time
                }
                // Else the same picture again: the pending frame simply shows longer.
                pass.time += duration
                pass.decodedFrames += 1
            }
            guard pass.decodedFrames > 0 else {
                throw TranscodeError(
                    .corrupt, "the \(header.format.rawValue.uppercased()) has no frame that decodes completely")
            }
            try emitPending()
        }
        try withoutActuallyEscaping(picture) { picture in
            handoff = pipelined ? PictureHandoff(frames: frames, encode: picture) : nil
            defer { handoff = nil }
            do {
                try passOver()
            } catch {
                // Joined before the error leaves, the encoder's side done with what it uses; what the encoder
                // threw (a stop above the size guard's target) wins, as it would have on one thread.
                try handoff?.finish()
                throw error
            }
            try handoff?.finish()
        }
        pass.sawTransparency = source.sawTransparency
        return pass
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
}

extension Transcoder {
    /// The pictures the encoder would get, written instead of encoded: every distinct picture as raw yuv420p
    /// (planes tightly packed) appended to `yuvPath`. For `scripts/bench-floor`, which times x264 alone on
    /// exactly these frames.
    /// - Returns: the picture size, each picture's start (milliseconds), where the last one ends, and the
    ///   x264 reference frames and lookahead (nil: the preset's) an encode of them uses with `options.threads`.
    public func dumpPictures(_ source: [UInt8], yuvPath: String) throws -> (
        width: Int, height: Int, starts: [Int64], end: Int64, references: Int, lookahead: Int?
    ) {
        guard let file = fopen(yuvPath, "wb") else {
            throw TranscodeError(.io, "cannot create \(yuvPath)")
        }
        defer { fclose(file) }
        var starts: [Int64] = []
        let result = try source.withUnsafeBytes { bytes in
            let plan = try self.plan(bytes)
            let pass = try self.composite(bytes, plan: plan, first: { _, _, _ in }) { frame, start in
                starts.append(start)
                try frame.withUnsafeMutablePointer { frame in
                    let planes = [
                        (frame.pointee.data.0, frame.pointee.linesize.0, plan.output.width, plan.output.height),
                        (frame.pointee.data.1, frame.pointee.linesize.1, plan.output.width / 2, plan.output.height / 2),
                        (frame.pointee.data.2, frame.pointee.linesize.2, plan.output.width / 2, plan.output.height / 2),
                    ]
                    for (data, stride, width, height) in planes {
                        guard let data else { throw TranscodeError(.io, "a picture plane is missing") }
                        for row in 0..<height where fwrite(data + row * Int(stride), 1, width, file) != width {
                            throw TranscodeError(.io, "writing \(yuvPath) failed")
                        }
                    }
                }
            }
            return (plan.output.width, plan.output.height, pass.time)
        }
        let bound = H264Encoder.memoryBound(
            width: result.0, height: result.1, preset: self.options.preset, threads: self.options.threads)
        return (result.0, result.1, starts, result.2, bound.references, bound.lookahead)
    }
}
