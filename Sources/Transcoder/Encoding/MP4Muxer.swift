import CFFmpeg

/// Writes one H.264 stream into an MP4 file through libavformat, with the `moov` atom moved before
/// `mdat` (`+faststart`) so browsers can start playing before the whole file has arrived.
///
/// Owns the `AVFormatContext` (`avformat_free_context`) and its `AVIOContext` (`avio_closep`). The
/// trailer is written and the file closed in `finish()`, which throws; `deinit` only releases what a
/// failed job left open.
final class MP4Muxer {
    private let context: UnsafeMutablePointer<AVFormatContext>
    private let stream: UnsafeMutablePointer<AVStream>
    private var isOpen = false

    /// Creates `path` and writes the MP4 header for the encoder's stream.
    init(path: String, encoder: H264Encoder) throws {
        var context: UnsafeMutablePointer<AVFormatContext>?
        try FFmpegError.check(
            avformat_alloc_output_context2(&context, nil, "mp4", path), "avformat_alloc_output_context2")
        guard let context else {
            throw FFmpegError(code: CFFmpeg_AVERROR(ENOMEM), function: "avformat_alloc_output_context2")
        }
        self.context = context
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

    /// Writes one encoded packet (timestamps in the encoder's time base).
    func write(_ packet: Packet) throws {
        try packet.withUnsafeMutablePointer { packet in
            av_packet_rescale_ts(packet, H264Encoder.timeBase, self.stream.pointee.time_base)
            packet.pointee.stream_index = self.stream.pointee.index
            try FFmpegError.check(av_interleaved_write_frame(self.context, packet), "av_interleaved_write_frame")
        }
    }

    /// Writes the trailer (and, for faststart, rewrites the file with `moov` first), then closes it.
    func finish() throws {
        try FFmpegError.check(av_write_trailer(self.context), "av_write_trailer")
        self.isOpen = false
        try FFmpegError.check(avio_closep(&self.context.pointee.pb), "avio_closep")
    }
}
