import CFFmpeg

/// The SSIM of an encode, measured while it runs: each packet the encoder hands out is decoded at once
/// (libavcodec's H.264 decoder, one thread: the pictures a player shows) and compared by `LumaSSIM` with
/// the luma of the picture it was encoded from, kept only until then (x264's delay: its lookahead and frame
/// threads, a few pictures). The mean is weighted by how long each picture shows.
///
/// Measuring after the encode meant compositing the GIF a second time and decoding the file: a sixth of a
/// guarded 1080x1080 conversion's CPU, and with x264's frame threads done on one core while the other idled.
/// Here the decode and the comparison run on the thread that feeds the encoder, beside x264's own threads.
///
/// Owns its decoder and the kept luma planes. Not `Sendable`: one encode uses it.
final class EncodeSSIM {
    private let width: Int
    private let height: Int
    private let decoder: CodecContext
    private let decoded: VideoFrame
    /// Luma of the pictures sent and not yet decoded back, by start time (tightly packed rows).
    private var waiting: [Int64: [UInt8]] = [:]
    private var spare: [[UInt8]] = []
    private var scores: [(start: Int64, ssim: Double)] = []

    /// A decoder for `encoder`'s stream (its SPS and PPS from the encoder's extradata).
    init(encoder: any VideoEncoder) throws {
        self.width = encoder.width
        self.height = encoder.height
        guard let parameters = avcodec_parameters_alloc() else {
            throw FFmpegError(code: CFFmpeg_AVERROR(ENOMEM), function: "avcodec_parameters_alloc")
        }
        var owned: UnsafeMutablePointer<AVCodecParameters>? = parameters
        defer { avcodec_parameters_free(&owned) }
        _ = try encoder.withCodecContext { codec in
            try FFmpegError.check(
                avcodec_parameters_from_context(parameters, codec), "avcodec_parameters_from_context")
        }
        self.decoder = try CodecContext(decoderFor: parameters)
        self.decoded = try VideoFrame()
    }

    /// Keeps the luma of `frame`, about to be encoded as the picture shown from `start`.
    /// - Throws: `TranscodeError.encodeFailed` when the frame has no luma plane.
    func sending(_ frame: VideoFrame, start: Int64) throws {
        var luma = self.spare.popLast() ?? [UInt8](repeating: 0, count: self.width * self.height)
        try frame.withUnsafeMutablePointer { frame in
            let stride = Int(frame.pointee.linesize.0)
            guard let plane = frame.pointee.data.0 else {
                throw TranscodeError(.encodeFailed, "a picture sent to the encoder has no luma plane")
            }
            luma.withUnsafeMutableBufferPointer { copy in
                for row in 0..<self.height {
                    (copy.baseAddress! + row * self.width).update(from: plane + row * stride, count: self.width)
                }
            }
        }
        self.waiting[start] = luma
    }

    /// Decodes `packet` (before the muxer takes it) and scores the pictures it completes.
    func encoded(_ packet: Packet) throws {
        _ = try self.decoder.send(packet: packet)
        try self.score()
    }

    /// Drains the decoder; the mean SSIM of the pictures, each weighted by its display time up to `end`
    /// (where the last one ends, milliseconds).
    /// - Throws: `TranscodeError.encodeFailed` when a picture sent did not come back from the decoder.
    func finish(end: Int64) throws -> Double {
        _ = try self.decoder.send(packet: nil)
        try self.score()
        guard self.waiting.isEmpty else {
            throw TranscodeError(
                .encodeFailed, "\(self.waiting.count) encoded pictures did not decode back for the SSIM check")
        }
        // Decoded in presentation order (no B-frames: see H264Encoder).
        var weighted = 0.0
        let scores = self.scores
        for (index, score) in scores.enumerated() {
            let next = index + 1 < scores.count ? scores[index + 1].start : end
            weighted += score.ssim * Double(next - score.start)
        }
        return end > 0 ? weighted / Double(end) : 1
    }

    private func score() throws {
        while try self.decoder.receive(into: self.decoded) == .done {
            try self.decoded.withUnsafeMutablePointer { picture in
                let start = picture.pointee.pts
                guard let luma = self.waiting.removeValue(forKey: start), let plane = picture.pointee.data.0 else {
                    throw TranscodeError(
                        .encodeFailed, "the decoder returned a picture at \(start) ms that was not encoded")
                }
                let ssim = luma.withUnsafeBufferPointer { source in
                    LumaSSIM.compute(
                        source.baseAddress!, strideA: self.width, plane, strideB: Int(picture.pointee.linesize.0),
                        width: self.width, height: self.height)
                }
                self.scores.append((start, ssim))
                self.spare.append(luma)
                av_frame_unref(picture)
            }
        }
    }
}
