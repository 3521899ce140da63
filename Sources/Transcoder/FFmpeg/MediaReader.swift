import CFFmpeg

/// Demuxes and decodes the video stream of bytes in memory, picture by picture, in presentation order:
/// APNG sources (libavformat's `apng` demuxer and libavcodec's decoder, which composite each frame onto
/// the canvas). Owns the `AVFormatContext` (`avformat_open_input` / `avformat_close_input`), the in-memory
/// `AVIOContext`, and the decoder. Not `Sendable`: one job uses it.
final class MediaReader {
    private var format: UnsafeMutablePointer<AVFormatContext>?
    private var io: UnsafeMutablePointer<AVIOContext>?
    private let input: UnsafeMutablePointer<CFFmpeg_MemoryInput>?
    private let streamIndex: Int32
    private let decoder: CodecContext
    private let packet: Packet
    private let frame: VideoFrame
    private var draining = false
    private let interFramesOnly: Bool
    private var packets = 0

    /// Reads `memory`, which must stay alive and unchanged as long as the reader, with the demuxer
    /// `formatName` (no probing: the caller has already told the format by its signature).
    /// - Parameter interFramesOnly: hand every packet after the first to the decoder as an inter frame.
    ///   ffmpeg 5.1's `apng` demuxer flags a whole-canvas frame as a key frame when its own `dispose_op` is
    ///   BACKGROUND, and the decoder then skips that frame's OVER blending onto the canvas, which browsers do
    ///   (the disposal applies after the frame is shown); as an inter frame it is blended and disposed by
    ///   the decoder's ordinary rules, which cover a true key frame too.
    /// - Throws: `FFmpegError` when the data does not open or has no decodable video stream.
    /// - Parameter decoderName: the decoder to use instead of FFmpeg's first for the stream's codec (`libvpx-vp9`,
    ///   which decodes a WebM's alpha pictures; FFmpeg's own VP9 decoder drops them).
    init(
        memory: UnsafeRawBufferPointer, formatName: String, interFramesOnly: Bool = false, decoderName: String? = nil
    ) throws {
        self.interFramesOnly = interFramesOnly
        var format: UnsafeMutablePointer<AVFormatContext>?
        var io: UnsafeMutablePointer<AVIOContext>?
        var input: UnsafeMutablePointer<CFFmpeg_MemoryInput>?
        func cleanUp() {
            avformat_close_input(&format)
            CFFmpeg_MemoryInputClose(&io)
            input?.deallocate()
        }
        do {
            input = UnsafeMutablePointer<CFFmpeg_MemoryInput>.allocate(capacity: 1)
            input?.initialize(
                to: CFFmpeg_MemoryInput(
                    data: memory.baseAddress?.assumingMemoryBound(to: UInt8.self), size: memory.count, position: 0))
            io = input.flatMap { CFFmpeg_MemoryInputOpen($0) }
            format = avformat_alloc_context()
            guard io != nil, format != nil else {
                throw FFmpegError(code: CFFmpeg_AVERROR(ENOMEM), function: "avio_alloc_context")
            }
            format?.pointee.pb = io
            // On failure avformat_open_input frees the context it was given (not a custom AVIOContext).
            try FFmpegError.check(
                avformat_open_input(&format, nil, av_find_input_format(formatName), nil), "avformat_open_input")
            let index = av_find_best_stream(format, AVMEDIA_TYPE_VIDEO, -1, -1, nil, 0)
            try FFmpegError.check(index, "av_find_best_stream")
            guard let parameters = format?.pointee.streams[Int(index)]?.pointee.codecpar else {
                throw FFmpegError(code: CFFmpeg_AVERROR(EINVAL), function: "AVStream.codecpar")
            }
            self.decoder = try CodecContext(decoderFor: parameters, named: decoderName)
            self.packet = try Packet()
            self.frame = try VideoFrame()
            self.streamIndex = index
        } catch {
            cleanUp()
            throw error
        }
        self.format = format
        self.io = io
        self.input = input
    }

    deinit {
        self.close()
    }

    private func close() {
        avformat_close_input(&self.format)
        CFFmpeg_MemoryInputClose(&self.io)
        self.input?.deallocate()
    }

    /// The next picture, valid until the next call; nil at the end of the stream.
    /// - Throws: `FFmpegError` when the data is damaged.
    func next() throws -> UnsafeMutablePointer<AVFrame>? {
        while true {
            switch try self.decoder.receive(into: self.frame) {
            case .done: return self.frame.withUnsafeMutablePointer { $0 }
            case .endOfStream: return nil
            case .again: break
            }
            if self.draining { return nil }
            // Feed the decoder one packet of the video stream, or start draining at the end of the input.
            while true {
                let result = self.packet.withUnsafeMutablePointer { av_read_frame(self.format, $0) }
                if result == CFFmpeg_AVERROR_EOF() {
                    _ = try self.decoder.send(packet: nil)
                    self.draining = true
                    break
                }
                try FFmpegError.check(result, "av_read_frame")
                defer { self.packet.withUnsafeMutablePointer { av_packet_unref($0) } }
                guard self.packet.withUnsafeMutablePointer({ $0.pointee.stream_index }) == self.streamIndex else {
                    continue
                }
                if self.interFramesOnly, self.packets > 0 {
                    self.packet.withUnsafeMutablePointer { $0.pointee.flags &= ~AV_PKT_FLAG_KEY }
                }
                self.packets += 1
                _ = try self.decoder.send(packet: self.packet)
                break
            }
        }
    }
}
