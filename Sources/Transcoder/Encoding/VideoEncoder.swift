import CFFmpeg

/// An encoder of pictures into compressed packets, with millisecond timestamps: H.264 today (`H264Encoder`),
/// AV1 or VP9 next. The transcoder composites, hands it pictures and passes its packets to a `ContainerWriter`;
/// the size guard drives it through the CRF of its `RenditionSpec`. One encode uses one encoder: not `Sendable`.
protocol VideoEncoder: AnyObject {
    /// The pictures' size (even: 4:2:0).
    var width: Int { get }
    var height: Int { get }
    /// The timestamps' unit (1/1000: GIF and WebP delays are whole milliseconds).
    var timeBase: AVRational { get }

    /// Sends one picture shown from `pts` (milliseconds), a key frame when `key` (else as the encoder decides);
    /// hands every packet that is ready to `emit`, in decode order (the packet is only valid during the call).
    func encode(_ frame: VideoFrame, pts: Int64, key: Bool, emit: (Packet) throws -> Void) throws

    /// Flushes what the encoder holds and hands the remaining packets to `emit`.
    func finish(emit: (Packet) throws -> Void) throws

    /// The luma SSIM of each picture encoded so far, in the order the pictures were sent, as the encoder scores
    /// its own reconstruction (what a decoder shows) against the picture it got; nil unless asked for when it
    /// was made (`measureSSIM`). A picture not scored (yet) is nil; one too small to score, NaN.
    var pictureSSIM: [Double?]? { get }

    /// The stream's RFC 6381 `codecs` parameter (for a `<source type>`), when the encoder knows it.
    var codecsParameter: String? { get }

    /// The stream parameters a container copies.
    func withCodecContext<Result>(_ body: (UnsafeMutablePointer<AVCodecContext>) throws -> Result) rethrows -> Result
}

/// A `VideoEncoder` over one libavcodec encoder: sending pictures, draining packets and lending the context are
/// the same for every codec.
protocol LibavcodecVideoEncoder: VideoEncoder {
    var codec: CodecContext { get }
    /// The packet each one received is handed out in (valid during `emit`).
    var packet: Packet { get }
}

extension LibavcodecVideoEncoder {
    /// Milliseconds, for every encoder here: each picture's pts is its start, exactly.
    static var timeBase: AVRational { AVRational(num: 1, den: 1000) }
    var timeBase: AVRational { Self.timeBase }
}

extension CodecContext {
    /// The picture parameters every video encoder here shares: yuv420p pictures of `width` x `height`, square
    /// pixels, timestamps in `timeBase`, BT.709 limited range (tagged in the stream's headers and the container, so
    /// every player converts colours the same way), `threads` threads. `averageFrameRate` feeds rate-control
    /// heuristics only.
    func setVideoPictures(
        width: Int, height: Int, timeBase: AVRational, averageFrameRate: AVRational, threads: Int
    ) {
        self.withUnsafeMutablePointer { context in
            context.pointee.width = Int32(width)
            context.pointee.height = Int32(height)
            context.pointee.pix_fmt = AV_PIX_FMT_YUV420P
            context.pointee.time_base = timeBase
            context.pointee.framerate = averageFrameRate
            context.pointee.sample_aspect_ratio = AVRational(num: 1, den: 1)
            context.pointee.color_primaries = AVCOL_PRI_BT709
            context.pointee.color_trc = AVCOL_TRC_BT709
            context.pointee.colorspace = AVCOL_SPC_BT709
            context.pointee.color_range = AVCOL_RANGE_MPEG
            context.pointee.thread_count = Int32(max(1, threads))
        }
    }
}

extension VideoEncoder {
    /// `encode(_:pts:key:emit:)`, the encoder choosing its key frames.
    func encode(_ frame: VideoFrame, pts: Int64, emit: (Packet) throws -> Void) throws {
        try self.encode(frame, pts: pts, key: false, emit: emit)
    }
}

extension LibavcodecVideoEncoder {
    func withCodecContext<Result>(_ body: (UnsafeMutablePointer<AVCodecContext>) throws -> Result) rethrows -> Result {
        try self.codec.withUnsafeMutablePointer(body)
    }

    func encode(_ frame: VideoFrame, pts: Int64, key: Bool, emit: (Packet) throws -> Void) throws {
        let progress = try frame.withUnsafeMutablePointer { frame in
            frame.pointee.pts = pts
            // libx264 and libvpx take an I picture type as a forced key frame.
            frame.pointee.pict_type = key ? AV_PICTURE_TYPE_I : AV_PICTURE_TYPE_NONE
            return try self.codec.send(frame)
        }
        guard progress == .done else {
            throw FFmpegError(code: CFFmpeg_AVERROR_EAGAIN(), function: "avcodec_send_frame")
        }
        try self.drain(emit: emit)
    }

    func finish(emit: (Packet) throws -> Void) throws {
        _ = try self.codec.send(nil)
        try self.drain(emit: emit)
    }

    private func drain(emit: (Packet) throws -> Void) throws {
        while try self.codec.receive(into: self.packet) == .done {
            try emit(self.packet)
        }
    }
}

/// A file holding one encoder's stream: MP4 or WebM (`MediaMuxer`). It writes the packets in the order the
/// encoder hands them out; `finish` is told where the last picture ends, writes the trailer and closes the file.
protocol ContainerWriter: AnyObject {
    func write(_ packet: Packet) throws
    func finish(endTime: Int64) throws
}

/// How one video format of the registry (`OutputFormat`) is made: its encoder and its container. The only place
/// that pairs a format with code; a new video format is one more entry, plus its two types.
struct VideoRecipe: Sendable {
    /// The format it makes.
    let format: OutputFormat
    /// An encoder for pictures of `width` x `height`, as `rendition` says (`simd`: see
    /// `Transcoder.x264UsesSIMD`); `averageFrameRate` feeds rate-control heuristics only; with `measureSSIM` it
    /// scores every picture (`pictureSSIM`).
    let makeEncoder:
        @Sendable (
            _ width: Int, _ height: Int, _ rendition: RenditionSpec, _ simd: Bool, _ averageFrameRate: AVRational,
            _ measureSSIM: Bool
        )
            throws -> any VideoEncoder
    /// A container writing `path`, for `encoder`'s stream (its header is written at once); `alpha`: each packet
    /// carries an alpha picture beside it (VP9 in WebM).
    let makeWriter: @Sendable (_ path: String, _ encoder: any VideoEncoder, _ alpha: Bool) throws -> any ContainerWriter

    /// H.264 High profile in MP4 with faststart: what every browser and AVPlayer play.
    static let h264MP4 = VideoRecipe(
        format: .mp4,
        makeEncoder: { width, height, rendition, simd, rate, measureSSIM in
            try H264Encoder(
                width: width, height: height, rendition: rendition, simd: simd, averageFrameRate: rate,
                globalHeader: true, measureSSIM: measureSSIM)
        },
        makeWriter: { path, encoder, _ in try MediaMuxer(path: path, format: .mp4, encoder: encoder) })

    /// VP9 with alpha in WebM: a `<video>` that keeps transparency in Chromium and Firefox. Its CRF is libvpx's
    /// (`rendition.crf`, set by `Transcoder.encodeAlphaVideoChoosing`); no SSIM of its own. The encoder codes
    /// yuv420p pictures: the colour, and in a pass of its own the alpha (`Transcoder.encodeAlphaVideo`).
    static let vp9WebM = VideoRecipe(
        format: .webm,
        makeEncoder: { width, height, rendition, _, rate, _ in
            try VP9Encoder(
                width: width, height: height, crf: rendition.crf, threads: rendition.threads, averageFrameRate: rate)
        },
        makeWriter: { path, encoder, alpha in
            try MediaMuxer(path: path, format: .webm, encoder: encoder, alphaMode: alpha)
        })
}
