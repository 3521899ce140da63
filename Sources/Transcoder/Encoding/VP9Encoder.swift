import CFFmpeg

/// Encodes yuv420p pictures with libvpx's VP9 through libavcodec: a WebM's colour, or its alpha as luma (one
/// encoder each, one after the other: `Transcoder.encodeAlphaVideo`).
///
/// Constant quality (`crf` with no bitrate), millisecond timestamps like `H264Encoder`: each picture's pts is its
/// start, so the WebM's blocks keep the source's own display times. No alternate reference frames: they are
/// hidden pictures, and each colour picture's packet must have its alpha's beside it.
final class VP9Encoder: LibavcodecVideoEncoder {
    static let timeBase = AVRational(num: 1, den: 1000)
    var timeBase: AVRational { Self.timeBase }

    let width: Int
    let height: Int
    let codec: CodecContext
    let packet: Packet

    /// libvpx's speed in its good-quality mode (0 slowest, 5 fastest of that mode; 6 and up are real-time
    /// shortcuts). Chosen on the corpus: see docs/benchmarks.md, "VP9 with alpha".
    static let speed = 4

    /// The pictures libvpx holds before it hands out the first packet: its default 25 up to a quarter megapixel,
    /// fewer above, at least 3 (a 1080x1080 picture is 1.75 MB).
    static func lookahead(width: Int, height: Int) -> Int {
        let pixels = max(1, width * height)
        return max(3, min(25, 6_000_000 / pixels))
    }

    /// - Parameters:
    ///   - crf: libvpx's constant quality (0 best, 63 worst).
    ///   - threads: libvpx's threads (row-based multithreading within each picture).
    ///   - averageFrameRate: for libvpx's rate heuristics only; timestamps stay exact.
    init(width: Int, height: Int, crf: Int, threads: Int, averageFrameRate: AVRational) throws {
        self.width = width
        self.height = height
        self.codec = try CodecContext(encoderNamed: "libvpx-vp9")
        self.packet = try Packet()
        self.codec.withUnsafeMutablePointer { context in
            context.pointee.width = Int32(width)
            context.pointee.height = Int32(height)
            context.pointee.pix_fmt = AV_PIX_FMT_YUV420P
            context.pointee.time_base = Self.timeBase
            context.pointee.framerate = averageFrameRate
            context.pointee.sample_aspect_ratio = AVRational(num: 1, den: 1)
            // BT.709 limited range, in the VP9 headers and in the WebM's Colour element.
            context.pointee.color_primaries = AVCOL_PRI_BT709
            context.pointee.color_trc = AVCOL_TRC_BT709
            context.pointee.colorspace = AVCOL_SPC_BT709
            context.pointee.color_range = AVCOL_RANGE_MPEG
            context.pointee.thread_count = Int32(max(1, threads))
            // Constant quality: no target bitrate (libavcodec's default is 200 kb/s).
            context.pointee.bit_rate = 0
            // libavcodec's default group of 12 pictures would make every twelfth a key frame: an animation
            // loops from its start, which is one.
            context.pointee.gop_size = 240
            context.pointee.flags |= Int32(AV_CODEC_FLAG_GLOBAL_HEADER)
        }
        try self.codec.open(options: [
            ("crf", String(crf)),
            ("deadline", "good"),
            ("cpu-used", String(Self.speed)),
            ("row-mt", "1"),
            ("auto-alt-ref", "0"),
            ("lag-in-frames", String(Self.lookahead(width: width, height: height))),
        ])
    }

    var pictureSSIM: [Double?]? { nil }
}
