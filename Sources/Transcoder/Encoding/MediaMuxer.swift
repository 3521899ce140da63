import CFFmpeg

/// Writes one encoder's stream into a file of a video format of the registry through libavformat (its
/// `muxerName`): MP4 with the `moov` atom moved before `mdat` (`+faststart`) so browsers can start playing
/// before the whole file has arrived; WebM (Matroska), whose blocks carry millisecond timestamps and, for VP9
/// with alpha, the alpha picture beside each one (`BlockAdditional`, from the packets' side data).
///
/// In MP4 the timeline means the same to every player, with no edit list: the encoder makes no B-frames, so each
/// sample is decoded when it is presented (no `ctts`), the first at 0, and each sample's `stts` duration is
/// exactly its picture's display time, the last one included. Chromium plays a track for the sum of the
/// sample durations (not `mvhd` or the edit list) and takes each frame's duration from `stts`; `mdhd`,
/// `mvhd` and `tkhd` say the same length. The last packet is held back until `finish`, which knows where
/// the animation ends. In WebM the last block's duration makes the segment's `Duration` end where the
/// animation does.
///
/// Owns the `AVFormatContext` (`avformat_free_context`) and its `AVIOContext` (`avio_closep`). The
/// trailer is written and the file closed in `finish()`, which throws; `deinit` only releases what a
/// failed job left open.
final class MediaMuxer: ContainerWriter {
    private let context: UnsafeMutablePointer<AVFormatContext>
    private let stream: UnsafeMutablePointer<AVStream>
    private var isOpen = false
    /// The newest packet, written once the next one arrives or at `finish`, when its duration is known.
    private let held: Packet
    private var isHolding = false
    /// The last presentation time taken, in the encoder's time base.
    private var lastTime: Int64 = -1
    /// The encoder's time base, the packets' unit.
    private let encoderTimeBase: AVRational

    /// Creates `path` and writes the header of `format` (one with a `muxerName`) for the encoder's stream.
    /// - Parameter alphaMode: the packets carry alpha pictures as side data (WebM's `AlphaMode` 1).
    init(path: String, format: OutputFormat, encoder: any VideoEncoder, alphaMode: Bool = false) throws {
        guard let muxerName = format.muxerName else {
            throw FFmpegError(code: CFFmpeg_AVERROR(EINVAL), function: "MediaMuxer (\(format) has no muxer)")
        }
        self.encoderTimeBase = encoder.timeBase
        var context: UnsafeMutablePointer<AVFormatContext>?
        try FFmpegError.check(
            avformat_alloc_output_context2(&context, nil, muxerName, path),
            "avformat_alloc_output_context2")
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
        stream.pointee.time_base = encoder.timeBase
        if alphaMode { av_dict_set(&stream.pointee.metadata, "alpha_mode", "1", 0) }
        let opened = avio_open(&context.pointee.pb, path, AVIO_FLAG_WRITE)
        guard opened >= 0 else {
            throw TranscodeError(
                OutputFile.isStorageFull(-opened) ? .insufficientStorage : .io, "cannot create \(path)",
                underlying: FFmpegError(code: opened, function: "avio_open"))
        }
        self.isOpen = true
        var options: OpaquePointer?
        defer { av_dict_free(&options) }
        if format == .mp4 { av_dict_set(&options, "movflags", "+faststart", 0) }
        try FFmpegError.check(avformat_write_header(context, &options), "avformat_write_header")
    }

    deinit {
        if self.isOpen {
            avio_closep(&self.context.pointee.pb)
        }
        avformat_free_context(self.context)
    }

    /// Takes one encoded packet, timestamps in the encoder's time base; `packet` is left empty.
    /// - Throws: `FFmpegError` when packets do not come in presentation order (B-frames).
    func write(_ packet: Packet) throws {
        try packet.withUnsafeMutablePointer { packet in
            guard packet.pointee.pts > self.lastTime else {
                throw FFmpegError(
                    code: CFFmpeg_AVERROR(EINVAL), function: "MediaMuxer.write (packets out of presentation order)")
            }
            self.lastTime = packet.pointee.pts
            packet.pointee.dts = packet.pointee.pts
            // libavformat derives every sample's duration but the last from the gap to the next one.
            packet.pointee.duration = 0
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
            av_packet_rescale_ts(packet, self.encoderTimeBase, self.stream.pointee.time_base)
            packet.pointee.stream_index = self.stream.pointee.index
            try FFmpegError.check(av_interleaved_write_frame(self.context, packet), "av_interleaved_write_frame")
        }
    }

    /// Writes the last packet so that the track ends at `endTime` (encoder time base), then the trailer
    /// (and, for faststart, rewrites the file with `moov` first), then closes the file.
    func finish(endTime: Int64) throws {
        if self.isHolding {
            self.held.withUnsafeMutablePointer { $0.pointee.duration = endTime - $0.pointee.pts }
            try self.writeHeld()
        }
        try FFmpegError.check(av_write_trailer(self.context), "av_write_trailer")
        self.isOpen = false
        try FFmpegError.check(avio_closep(&self.context.pointee.pb), "avio_closep")
    }
}
