import CFFmpeg

/// Decodes the video track of an MP4 the transcoder wrote, picture by picture, in presentation order:
/// what a player shows, to compare with what was encoded (`LumaSSIM`). Owns the `AVFormatContext`
/// (`avformat_open_input` / `avformat_close_input`) and the decoder. Not `Sendable`: one job uses it.
final class MP4Reader {
    private var format: UnsafeMutablePointer<AVFormatContext>?
    private let streamIndex: Int32
    private let decoder: CodecContext
    private let packet: Packet
    private let frame: VideoFrame
    private var draining = false

    /// - Throws: `FFmpegError` when the file does not open or has no decodable video stream.
    init(path: String) throws {
        var format: UnsafeMutablePointer<AVFormatContext>?
        try FFmpegError.check(avformat_open_input(&format, path, nil, nil), "avformat_open_input")
        self.format = format
        do {
            try FFmpegError.check(avformat_find_stream_info(format, nil), "avformat_find_stream_info")
            let index = av_find_best_stream(format, AVMEDIA_TYPE_VIDEO, -1, -1, nil, 0)
            try FFmpegError.check(index, "av_find_best_stream")
            self.streamIndex = index
            guard let parameters = format?.pointee.streams[Int(index)]?.pointee.codecpar else {
                throw FFmpegError(code: CFFmpeg_AVERROR(EINVAL), function: "AVStream.codecpar")
            }
            self.decoder = try CodecContext(decoderFor: parameters)
            self.packet = try Packet()
            self.frame = try VideoFrame()
        } catch {
            avformat_close_input(&self.format)
            throw error
        }
    }

    deinit {
        avformat_close_input(&self.format)
    }

    /// The next picture, valid until the next call; nil at the end of the track.
    func next() throws -> UnsafeMutablePointer<AVFrame>? {
        while true {
            switch try self.decoder.receive(into: self.frame) {
            case .done: return self.frame.withUnsafeMutablePointer { $0 }
            case .endOfStream: return nil
            case .again: break
            }
            if self.draining { return nil }
            // Feed the decoder one packet of the video stream, or start draining at the end of the file.
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
                _ = try self.decoder.send(packet: self.packet)
                break
            }
        }
    }
}
