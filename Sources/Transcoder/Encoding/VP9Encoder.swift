import CFFmpeg

/// Encodes yuv420p pictures with libvpx's VP9 through libavcodec: a WebM's colour, or its alpha as luma (one
/// encoder each, one after the other: `Transcoder.encodeAlphaVideo`).
///
/// Constant quality (`crf` with no bitrate), millisecond timestamps like `H264Encoder`: each picture's pts is its
/// start, so the WebM's blocks keep the source's own display times. No alternate reference frames: they are
/// hidden pictures, and each colour picture's packet must have its alpha's beside it.
final class VP9Encoder: LibavcodecVideoEncoder {
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
        // BT.709 limited range, in the VP9 headers and in the WebM's Colour element.
        self.codec.setVideoPictures(
            width: width, height: height, timeBase: Self.timeBase, averageFrameRate: averageFrameRate, threads: threads)
        self.codec.withUnsafeMutablePointer { context in
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

    /// Known once the stream is whole (its level depends on its bitrate): `codecsParameter(width:...)`.
    var codecsParameter: String? { nil }

    /// VP9's levels (libvpx's `vp9_level_defs`): the name in a `codecs` parameter, the luma samples a second,
    /// the luma picture size, the longer side and the bitrate (kb/s) each allows.
    static let levels: [(name: String, sampleRate: Int, pictureSize: Int, breadth: Int, kilobits: Int)] = [
        ("10", 829_440, 36_864, 512, 200), ("11", 2_764_800, 73_728, 768, 800),
        ("20", 4_608_000, 122_880, 960, 1_800), ("21", 9_216_000, 245_760, 1_344, 3_600),
        ("30", 20_736_000, 552_960, 2_048, 7_200), ("31", 36_864_000, 983_040, 2_752, 12_000),
        ("40", 83_558_400, 2_228_224, 4_160, 18_000), ("41", 160_432_128, 2_228_224, 4_160, 30_000),
        ("50", 311_951_360, 8_912_896, 8_384, 60_000), ("51", 588_251_136, 8_912_896, 8_384, 120_000),
        ("52", 1_176_502_272, 8_912_896, 8_384, 180_000), ("60", 1_176_502_272, 35_651_584, 16_832, 180_000),
        ("61", 2_353_004_544, 35_651_584, 16_832, 240_000), ("62", 4_706_009_088, 35_651_584, 16_832, 480_000),
    ]

    /// The RFC 6381 `codecs` parameter of a profile 0, 8-bit VP9 stream (`vp09.00.LL.08`, the VP9 codec string of
    /// the WebM project's ISO-BMFF binding): its level the lowest that allows its size, its fastest pictures
    /// (`shortestPicture`, milliseconds) and its average bitrate.
    static func codecsParameter(width: Int, height: Int, shortestPicture: Int64, bytes: Int, milliseconds: Int64)
        -> String
    {
        let pixels = width * height
        let rate = pixels * 1000 / Int(max(1, shortestPicture))
        let kilobits = bytes * 8 / Int(max(1, milliseconds))
        let level =
            Self.levels.first {
                pixels <= $0.pictureSize && max(width, height) <= $0.breadth && rate <= $0.sampleRate
                    && kilobits <= $0.kilobits
            }?.name ?? "62"
        return "vp09.00.\(level).08"
    }
}
