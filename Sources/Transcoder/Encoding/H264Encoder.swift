import CFFmpeg

/// Encodes yuv420p frames with libx264 through libavcodec, with variable frame durations.
///
/// Timestamps are milliseconds: the codec time base is 1/1000, so a GIF delay (always a whole number
/// of centiseconds) is represented exactly. A picture lasts until the next one starts; the muxer is told
/// where the last one ends (`MediaMuxer.finish(endTime:)`).
final class H264Encoder: LibavcodecVideoEncoder {
    let width: Int
    let height: Int
    let codec: CodecContext
    let packet: Packet
    /// x264's own SSIM of each picture, when asked for.
    private let ssim: X264SSIM?

    /// - Parameters:
    ///   - averageFrameRate: frames per second over the whole animation; x264 uses it for level and
    ///     rate-control heuristics, the timestamps stay exact either way.
    ///   - globalHeader: put SPS/PPS in extradata (MP4 needs it).
    /// - Parameter simd: let x264 use the CPU's SIMD instructions (the output is the same without: see
    ///   `cpuIndependent`).
    /// - Parameter measureSSIM: x264 scores each picture it encodes (`ssim=1`, `pictureSSIM`). The pictures are
    ///   coded the same; only the encoder's settings, written into the stream's first picture, say `ssim=1`.
    init(
        width: Int, height: Int, rendition options: RenditionSpec, simd: Bool = true, averageFrameRate: AVRational,
        globalHeader: Bool, measureSSIM: Bool = false
    ) throws {
        self.width = width
        self.height = height
        self.codec = try CodecContext(encoderNamed: "libx264")
        self.packet = try Packet()
        self.ssim = measureSSIM ? X264SSIM() : nil
        let bound = Self.memoryBound(width: width, height: height, preset: options.preset, threads: options.threads)
        // BT.709 limited range, tagged in the VUI.
        self.codec.setVideoPictures(
            width: width, height: height, timeBase: Self.timeBase, averageFrameRate: averageFrameRate,
            threads: options.threads)
        self.codec.withUnsafeMutablePointer { context in
            // No B-frames: decode order is presentation order, so each sample's stts duration is its own
            // display time, with no ctts and no edit list (see MediaMuxer): the timeline means the same to
            // every player. With B-frames the stts durations are decode-order gaps and the track's start
            // and end depend on how a player reads the edit list (Chromium played a 2.42 s GIF for 1.02 s).
            // Six reference frames win back part of what B-frames saved: scripts/bench's median MP4 is
            // +3.2% (+5.7% with the default three), see docs/fidelity.md, "Timing in every player".
            context.pointee.max_b_frames = 0
            context.pointee.refs = Int32(bound.references)
            if globalHeader {
                context.pointee.flags |= Int32(AV_CODEC_FLAG_GLOBAL_HEADER)
            }
            context.pointee.opaque = self.ssim.map { UnsafeMutableRawPointer($0.sink) }
        }
        try self.codec.open(
            options: [
                ("preset", options.preset),
                ("crf", String(options.crf)),
                // High profile: every browser and iOS device since 2013 decodes it, and it compresses
                // flat GIF content noticeably better than Main (8x8 transforms).
                ("profile", "high"),
                (
                    "x264-params",
                    ([Self.cpuIndependent] + (simd ? [] : ["asm=0"]) + (measureSSIM ? ["ssim=1"] : [])
                        + (bound.x264Params.isEmpty ? [] : [bound.x264Params]))
                        .joined(separator: ":")
                ),
            ])
    }

    /// The same bytes on every CPU: x264 otherwise picks algorithms by the instructions it finds, and they decide
    /// differently (the SSSE3/AVX functions that rate all nine intra predictions at once, and the mbtree
    /// propagation, whose SIMD versions use approximate reciprocals, whose last bits differ between CPU
    /// makers). Found with `XP=:asm=SSE2` against the default: cartoon_hotdog.gif gave 6,991 bytes of packets
    /// with SSE4.2 and up, 6,999 with SSE2 or none; with this, 6,999 everywhere. A fleet of mixed machines
    /// (Intel, AMD, ARM; a VM moved to another host) would otherwise keep two files under one key. Cost, the
    /// 11 first corpus GIFs through libx264 alone: bytes -0.04%, time within the runs' spread (2.02-2.05 s
    /// against 2.07-2.31 s).
    static let cpuIndependent = "cpu-independent=1"

    /// The frames x264 holds besides the one being encoded: reference frames and the rate-control lookahead
    /// (with mbtree, each with its own half-resolution copy and cost arrays), and with frame threads one
    /// picture per thread plus a synchronous lookahead. The lookahead is shared among the threads and held to a
    /// budget of pixels: about 12 megapixels up to half a megapixel per picture, with six references, and 6 above
    /// it, with two references (at least 3 frames), never more than the preset's; with more than one thread no
    /// synchronous lookahead (the same bytes, less memory). So a 1080x1080 GIF stays under 150 MiB: it peaked at
    /// 234 MiB (175 of them x264's), now at most 144 MiB (huge_1080_transparent_30f.gif: +0.2% bytes). Under half
    /// a megapixel the preset's 40 frames had no bound: a 706x706 GIF peaked at 172 MiB with one thread and 178
    /// with two.
    static func memoryBound(width: Int, height: Int, preset: String, threads: Int) -> (
        references: Int, lookahead: Int?, x264Params: String
    ) {
        let pixels = max(1, width * height)
        let small = pixels <= 500_000
        let budget = max(3, (small ? 12_000_000 : 6_000_000) / (pixels * max(1, threads)))
        let lookahead = budget < (Self.presetLookahead[preset] ?? 40) ? budget : nil
        var parameters = lookahead.map { ["rc-lookahead=\($0)"] } ?? []
        if threads > 1 { parameters.append("sync-lookahead=0") }
        return (small ? 6 : 2, lookahead, parameters.joined(separator: ":"))
    }

    /// x264's `rc_lookahead` per preset (x264 0.164, `x264_param_apply_preset`).
    static let presetLookahead: [String: Int] = [
        "ultrafast": 0, "superfast": 0, "veryfast": 10, "faster": 20, "fast": 30, "medium": 40, "slow": 50,
        "slower": 60, "veryslow": 60, "placebo": 60,
    ]

    deinit {
        // x264 logs its summary when the context is freed, after this: nothing may reach the sink then.
        self.codec.withUnsafeMutablePointer { $0.pointee.opaque = nil }
    }

    var pictureSSIM: [Double?]? { self.ssim?.scores }

    /// The stream's RFC 6381 `codecs` parameter: `avc1.` and the profile, constraint flags and level of the SPS
    /// x264 put in the extradata (Annex B); nil when it has none.
    var codecsParameter: String? {
        self.codec.withUnsafeMutablePointer { context in
            guard let data = context.pointee.extradata else { return nil }
            return Self.codecsParameter(
                annexB: UnsafeBufferPointer(start: data, count: Int(context.pointee.extradata_size)))
        }
    }

    /// `avc1.PPCCLL` from the first SPS (NAL type 7) after a start code in `annexB`.
    static func codecsParameter(annexB bytes: UnsafeBufferPointer<UInt8>) -> String? {
        var index = 0
        while index + 6 < bytes.count {
            if bytes[index] == 0, bytes[index + 1] == 0, bytes[index + 2] == 1, bytes[index + 3] & 0x1F == 7 {
                return String(format: "avc1.%02x%02x%02x", bytes[index + 4], bytes[index + 5], bytes[index + 6])
            }
            index += 1
        }
        return nil
    }
}
