import CFFmpeg

/// Writes one H.264 stream into an MP4 file through libavformat, with the `moov` atom moved before
/// `mdat` (`+faststart`) so browsers can start playing before the whole file has arrived.
///
/// The timeline means the same to every player, without an edit list: the first sample is decoded and
/// presented at 0, every picture is presented at its GIF start time (`ctts` offsets, never negative), and
/// the sample durations (`stts`) add up to exactly the animation's length. Chromium plays a track for the
/// sum of its sample durations and ignores `mvhd` and the edit list for that. x264 with B-frames starts
/// decode timestamps below zero, which libavformat answers with a shifted track plus an edit list, and the
/// last sample's duration was a decode-order gap: a 1.5 s last frame played for 0.1 s. So decode
/// timestamps are moved up to start at 0 (each at least 1 ms after the previous one, never past its own
/// presentation time), and the last sample, held back until `finish`, lasts until the animation's end.
/// B-frames stay: without them `cartoon_giphy_logo.gif` grew from 47,780 to 73,982 bytes (+55%).
///
/// Owns the `AVFormatContext` (`avformat_free_context`) and its `AVIOContext` (`avio_closep`). The
/// trailer is written and the file closed in `finish()`, which throws; `deinit` only releases what a
/// failed job left open.
final class MP4Muxer {
    private let context: UnsafeMutablePointer<AVFormatContext>
    private let stream: UnsafeMutablePointer<AVStream>
    private var isOpen = false
    /// The newest packet, written once the next one arrives or at `finish`, when its duration is known.
    private let held: Packet
    private var isHolding = false
    /// The last decode timestamp given out, in the encoder's time base.
    private var lastDecodeTime: Int64 = -1

    /// Creates `path` and writes the MP4 header for the encoder's stream.
    init(path: String, encoder: H264Encoder) throws {
        var context: UnsafeMutablePointer<AVFormatContext>?
        try FFmpegError.check(
            avformat_alloc_output_context2(&context, nil, "mp4", path), "avformat_alloc_output_context2")
        guard let context else {
            throw FFmpegError(code: CFFmpeg_AVERROR(ENOMEM), function: "avformat_alloc_output_context2")
        }
        self.context = context
        do {
            self.held = try Packet()
        } catch {
            avformat_free_context(context)
            throw error
        }
        guard let stream = avformat_new_stream(context, nil) else {
            avformat_free_context(context)
            throw FFmpegError(code: CFFmpeg_AVERROR(ENOMEM), function: "avformat_new_stream")
        }
        self.stream = stream
        // No encoder version strings or creation times: the same input must give the same bytes.
        context.pointee.flags |= AVFMT_FLAG_BITEXACT
        _ = try encoder.withCodecContext { codec in
            try FFmpegError.check(
                avcodec_parameters_from_context(stream.pointee.codecpar, codec), "avcodec_parameters_from_context")
        }
        stream.pointee.time_base = H264Encoder.timeBase
        let opened = avio_open(&context.pointee.pb, path, AVIO_FLAG_WRITE)
        guard opened >= 0 else {
            throw TranscodeError(
                .io, "cannot create \(path)", underlying: FFmpegError(code: opened, function: "avio_open"))
        }
        self.isOpen = true
        var options: OpaquePointer?
        defer { av_dict_free(&options) }
        av_dict_set(&options, "movflags", "+faststart", 0)
        try FFmpegError.check(avformat_write_header(context, &options), "avformat_write_header")
    }

    deinit {
        if self.isOpen {
            avio_closep(&self.context.pointee.pb)
        }
        avformat_free_context(self.context)
    }

    /// Takes one encoded packet, in decode order, timestamps in the encoder's time base; `packet` is left
    /// empty.
    func write(_ packet: Packet) throws {
        try packet.withUnsafeMutablePointer { packet in
            let decodeTime = max(packet.pointee.dts, self.lastDecodeTime + 1)
            guard decodeTime <= packet.pointee.pts else {
                throw FFmpegError(code: CFFmpeg_AVERROR(EINVAL), function: "MP4Muxer.write (decode after presentation)")
            }
            packet.pointee.dts = decodeTime
            self.lastDecodeTime = decodeTime
        }
        if self.isHolding {
            try self.writeHeld()
        }
        self.held.withUnsafeMutablePointer { held in
            packet.withUnsafeMutablePointer { av_packet_move_ref(held, $0) }
        }
        self.isHolding = true
    }

    private func writeHeld() throws {
        self.isHolding = false
        try self.held.withUnsafeMutablePointer { packet in
            av_packet_rescale_ts(packet, H264Encoder.timeBase, self.stream.pointee.time_base)
            packet.pointee.stream_index = self.stream.pointee.index
            try FFmpegError.check(av_interleaved_write_frame(self.context, packet), "av_interleaved_write_frame")
        }
    }

    /// Writes the last packet so that the track ends at `endTime` (encoder time base), then the trailer
    /// (and, for faststart, rewrites the file with `moov` first), then closes the file.
    func finish(endTime: Int64) throws {
        if self.isHolding {
            // The last sample is decoded at its own presentation time (later than every other decode time,
            // since those never pass their presentation times) and lasts until the end: the `stts` durations
            // then add up to `endTime`, and libavformat's `mdhd`/`mvhd`/`elst` duration (the largest
            // presentation time plus duration) is `endTime` too.
            self.held.withUnsafeMutablePointer { packet in
                packet.pointee.dts = packet.pointee.pts
                packet.pointee.duration = endTime - packet.pointee.pts
            }
            try self.writeHeld()
        }
        try FFmpegError.check(av_write_trailer(self.context), "av_write_trailer")
        self.isOpen = false
        try FFmpegError.check(avio_closep(&self.context.pointee.pb), "avio_closep")
    }
}
