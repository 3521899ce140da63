import CFFmpeg

/// Owns an `AVFrame` (`av_frame_alloc` / `av_frame_free`) and, once allocated, its reference-counted
/// picture buffers. Not `Sendable`: one transcode job creates, uses and drops it on one thread.
final class VideoFrame {
    private let frame: UnsafeMutablePointer<AVFrame>

    /// Allocates a frame with picture buffers for `width` x `height` in `format`.
    /// - Throws: `FFmpegError` when allocation fails.
    init(width: Int, height: Int, format: AVPixelFormat) throws {
        guard let frame = av_frame_alloc() else {
            throw FFmpegError(code: CFFmpeg_AVERROR(ENOMEM), function: "av_frame_alloc")
        }
        self.frame = frame
        frame.pointee.width = Int32(width)
        frame.pointee.height = Int32(height)
        frame.pointee.format = format.rawValue
        try FFmpegError.check(av_frame_get_buffer(frame, 0), "av_frame_get_buffer")
    }

    /// An empty frame, for a decoder to fill (`avcodec_receive_frame`).
    init() throws {
        guard let frame = av_frame_alloc() else {
            throw FFmpegError(code: CFFmpeg_AVERROR(ENOMEM), function: "av_frame_alloc")
        }
        self.frame = frame
    }

    deinit {
        var frame: UnsafeMutablePointer<AVFrame>? = self.frame
        av_frame_free(&frame)
    }

    /// Makes the buffers safe to write: an encoder may still hold a reference to the previous picture,
    /// in which case FFmpeg gives this frame fresh buffers.
    func makeWritable() throws {
        try FFmpegError.check(av_frame_make_writable(self.frame), "av_frame_make_writable")
    }

    func withUnsafeMutablePointer<Result>(_ body: (UnsafeMutablePointer<AVFrame>) throws -> Result) rethrows
        -> Result
    {
        try body(self.frame)
    }
}

/// Owns an `AVPacket` (`av_packet_alloc` / `av_packet_free`), reused for every packet a codec returns.
final class Packet {
    private let packet: UnsafeMutablePointer<AVPacket>

    init() throws {
        guard let packet = av_packet_alloc() else {
            throw FFmpegError(code: CFFmpeg_AVERROR(ENOMEM), function: "av_packet_alloc")
        }
        self.packet = packet
    }

    deinit {
        var packet: UnsafeMutablePointer<AVPacket>? = self.packet
        av_packet_free(&packet)
    }

    func withUnsafeMutablePointer<Result>(_ body: (UnsafeMutablePointer<AVPacket>) throws -> Result) rethrows
        -> Result
    {
        try body(self.packet)
    }
}

/// Owns an encoder's or a decoder's `AVCodecContext` (`avcodec_alloc_context3` / `avcodec_free_context`).
final class CodecContext {
    private let context: UnsafeMutablePointer<AVCodecContext>

    /// - Throws: `FFmpegError` with `AVERROR_ENCODER_NOT_FOUND` when FFmpeg was built without `name`.
    init(encoderNamed name: String) throws {
        guard let codec = avcodec_find_encoder_by_name(name) else {
            throw FFmpegError(
                code: CFFmpeg_AVERROR_ENCODER_NOT_FOUND(), function: "avcodec_find_encoder_by_name(\(name))")
        }
        guard let context = avcodec_alloc_context3(codec) else {
            throw FFmpegError(code: CFFmpeg_AVERROR(ENOMEM), function: "avcodec_alloc_context3")
        }
        self.context = context
    }

    /// A decoder for a demuxed stream, set up from its parameters and opened.
    /// - Throws: `FFmpegError` with `AVERROR_DECODER_NOT_FOUND` when FFmpeg has no decoder for the stream.
    /// - Parameter name: this decoder (nil: FFmpeg's first for the stream's codec).
    init(decoderFor parameters: UnsafePointer<AVCodecParameters>, named name: String? = nil) throws {
        guard
            let codec = name.map({ avcodec_find_decoder_by_name($0) })
                ?? avcodec_find_decoder(parameters.pointee.codec_id)
        else {
            throw FFmpegError(code: CFFmpeg_AVERROR_DECODER_NOT_FOUND(), function: "avcodec_find_decoder")
        }
        guard let context = avcodec_alloc_context3(codec) else {
            throw FFmpegError(code: CFFmpeg_AVERROR(ENOMEM), function: "avcodec_alloc_context3")
        }
        self.context = context
        try FFmpegError.check(avcodec_parameters_to_context(context, parameters), "avcodec_parameters_to_context")
        // One thread: the check runs beside other jobs, and frame threading would only add latency.
        context.pointee.thread_count = 1
        try self.open(options: [])
    }

    deinit {
        var context: UnsafeMutablePointer<AVCodecContext>? = self.context
        avcodec_free_context(&context)
    }

    func withUnsafeMutablePointer<Result>(_ body: (UnsafeMutablePointer<AVCodecContext>) throws -> Result)
        rethrows -> Result
    {
        try body(self.context)
    }

    /// Opens the codec with private options (`preset`, `crf`, ...); an option the codec does not know is
    /// an error rather than silently ignored.
    func open(options: [(String, String)]) throws {
        var dictionary: OpaquePointer?
        defer { av_dict_free(&dictionary) }
        for (key, value) in options {
            av_dict_set(&dictionary, key, value, 0)
        }
        try FFmpegError.check(avcodec_open2(self.context, self.context.pointee.codec, &dictionary), "avcodec_open2")
        if let left = av_dict_get(dictionary, "", nil, AV_DICT_IGNORE_SUFFIX) {
            throw FFmpegError(
                code: CFFmpeg_AVERROR(EINVAL),
                function: "avcodec_open2 (unknown option \(String(cString: left.pointee.key)))")
        }
    }

    /// What a send or receive call asks of the caller next. `EAGAIN` and `EOF` are control flow, not errors.
    enum Progress {
        case done
        case again
        case endOfStream
    }

    /// `avcodec_send_frame`; `frame` nil starts draining.
    func send(_ frame: UnsafeMutablePointer<AVFrame>?) throws -> Progress {
        let result = avcodec_send_frame(self.context, frame)
        if result == CFFmpeg_AVERROR_EAGAIN() { return .again }
        if result == CFFmpeg_AVERROR_EOF() { return .endOfStream }
        try FFmpegError.check(result, "avcodec_send_frame")
        return .done
    }

    /// `avcodec_send_packet`; `packet` nil starts draining.
    func send(packet: Packet?) throws -> Progress {
        let result =
            if let packet {
                packet.withUnsafeMutablePointer { avcodec_send_packet(self.context, $0) }
            } else {
                avcodec_send_packet(self.context, nil)
            }
        if result == CFFmpeg_AVERROR_EAGAIN() { return .again }
        if result == CFFmpeg_AVERROR_EOF() { return .endOfStream }
        try FFmpegError.check(result, "avcodec_send_packet")
        return .done
    }

    /// `avcodec_receive_frame` into `frame`.
    func receive(into frame: VideoFrame) throws -> Progress {
        let result = frame.withUnsafeMutablePointer { avcodec_receive_frame(self.context, $0) }
        if result == CFFmpeg_AVERROR_EAGAIN() { return .again }
        if result == CFFmpeg_AVERROR_EOF() { return .endOfStream }
        try FFmpegError.check(result, "avcodec_receive_frame")
        return .done
    }

    /// `avcodec_receive_packet` into `packet`.
    func receive(into packet: Packet) throws -> Progress {
        let result = packet.withUnsafeMutablePointer { avcodec_receive_packet(self.context, $0) }
        if result == CFFmpeg_AVERROR_EAGAIN() { return .again }
        if result == CFFmpeg_AVERROR_EOF() { return .endOfStream }
        try FFmpegError.check(result, "avcodec_receive_packet")
        return .done
    }
}

/// Owns a libswscale context (`sws_getContext` / `sws_freeContext`) converting packed RGBA pictures
/// to a planar YUV frame, scaling when the sizes differ.
final class ImageScaler {
    private let context: OpaquePointer
    let sourceWidth: Int
    let sourceHeight: Int

    /// - Parameters:
    ///   - matrix: `SWS_CS_ITU709` for the video, `SWS_CS_ITU601` for JPEG.
    ///   - fullRange: whether the destination uses full-range (JPEG) or limited-range (video) levels.
    init(
        sourceWidth: Int, sourceHeight: Int, destinationWidth: Int, destinationHeight: Int,
        destinationFormat: AVPixelFormat, matrix: Int32, fullRange: Bool
    ) throws {
        // Bicubic both for downscaling and for the 4:2:0 chroma subsampling of a same-size conversion: point
        // sampling keeps one pixel's colour per 2x2 block and aliases dithered GIFs (scripts/bench at CRF 23:
        // 1.2 dB lower mean PSNR and 19% larger files). Chroma is read at full horizontal resolution first;
        // accurate rounding keeps flat colours flat.
        let flags = SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INP
        guard
            let context = sws_getContext(
                Int32(sourceWidth), Int32(sourceHeight), AV_PIX_FMT_RGBA,
                Int32(destinationWidth), Int32(destinationHeight), destinationFormat,
                flags, nil, nil, nil)
        else {
            throw FFmpegError(code: CFFmpeg_AVERROR(EINVAL), function: "sws_getContext")
        }
        self.context = context
        self.sourceWidth = sourceWidth
        self.sourceHeight = sourceHeight
        // RGB input is full range; the coefficient table for RGB sources is ignored by swscale.
        let coefficients = sws_getCoefficients(matrix)
        sws_setColorspaceDetails(context, coefficients, 1, coefficients, fullRange ? 1 : 0, 0, 1 << 16, 1 << 16)
    }

    deinit {
        sws_freeContext(self.context)
    }

    /// Converts `pixels` (`sourceWidth` x `sourceHeight` RGBA, tightly packed) into `frame`.
    func convert(_ pixels: UnsafeBufferPointer<UInt32>, into frame: VideoFrame) throws {
        try frame.makeWritable()
        try frame.withUnsafeMutablePointer { frame in
            var sourcePlanes: [UnsafePointer<UInt8>?] = [
                UnsafeRawPointer(pixels.baseAddress).map { $0.assumingMemoryBound(to: UInt8.self) }, nil, nil, nil,
            ]
            var sourceStrides: [Int32] = [Int32(self.sourceWidth * 4), 0, 0, 0]
            let result = withUnsafeMutablePointer(to: &frame.pointee.data) { data in
                withUnsafeMutablePointer(to: &frame.pointee.linesize) { linesize in
                    data.withMemoryRebound(to: UnsafeMutablePointer<UInt8>?.self, capacity: 8) { planes in
                        linesize.withMemoryRebound(to: Int32.self, capacity: 8) { strides in
                            sws_scale(
                                self.context, &sourcePlanes, &sourceStrides, 0, Int32(self.sourceHeight),
                                planes, strides)
                        }
                    }
                }
            }
            try FFmpegError.check(result, "sws_scale")
        }
    }
}

/// Owns a libswscale context converting decoded pictures of any pixel format (palette, grey, RGB, 16-bit,
/// with or without alpha) to straight-alpha RGBA of the same size, tightly packed. Pictures already in
/// RGBA are copied row by row.
final class RGBAConverter {
    private let context: OpaquePointer?
    let sourceFormat: Int32
    private let width: Int
    private let height: Int

    /// - Parameter videoMatrix: a YUV source's matrix, limited range (`SWS_CS_ITU709`); nil, swscale's default
    ///   (BT.601), which is also what a JPEG-range source asks for.
    init(width: Int, height: Int, sourceFormat: AVPixelFormat, videoMatrix: Int32? = nil) throws {
        self.width = width
        self.height = height
        self.sourceFormat = sourceFormat.rawValue
        if sourceFormat == AV_PIX_FMT_RGBA {
            self.context = nil
            return
        }
        // Same size: no resampling, only the format conversion (exact for 8-bit formats).
        guard
            let context = sws_getContext(
                Int32(width), Int32(height), sourceFormat, Int32(width), Int32(height), AV_PIX_FMT_RGBA,
                // A video's 4:2:0 chroma interpolated between the samples, as browsers draw it.
                (videoMatrix == nil ? SWS_POINT : SWS_BILINEAR | SWS_FULL_CHR_H_INT) | SWS_ACCURATE_RND, nil, nil, nil)
        else {
            throw FFmpegError(code: CFFmpeg_AVERROR(EINVAL), function: "sws_getContext(RGBA)")
        }
        self.context = context
        if let videoMatrix {
            let coefficients = sws_getCoefficients(videoMatrix)
            sws_setColorspaceDetails(context, coefficients, 0, coefficients, 1, 0, 1 << 16, 1 << 16)
        }
    }

    deinit {
        if let context = self.context { sws_freeContext(context) }
    }

    /// Converts `frame` (`width` x `height`, `sourceFormat`) into `output` (`width * height` pixels).
    func convert(_ frame: UnsafeMutablePointer<AVFrame>, into output: UnsafeMutableBufferPointer<UInt32>) throws {
        let rowBytes = self.width * 4
        guard let context = self.context else {
            guard let source = frame.pointee.data.0 else {
                throw FFmpegError(code: CFFmpeg_AVERROR(EINVAL), function: "AVFrame.data")
            }
            let stride = Int(frame.pointee.linesize.0)
            let destination = UnsafeMutableRawPointer(output.baseAddress!)
            for y in 0..<self.height {
                (destination + y * rowBytes).copyMemory(from: source + y * stride, byteCount: rowBytes)
            }
            return
        }
        var destinationPlanes: [UnsafeMutablePointer<UInt8>?] = [
            UnsafeMutableRawPointer(output.baseAddress).map { $0.assumingMemoryBound(to: UInt8.self) }, nil, nil,
            nil,
        ]
        var destinationStrides: [Int32] = [Int32(rowBytes), 0, 0, 0]
        let result = withUnsafePointer(to: &frame.pointee.data) { data in
            withUnsafePointer(to: &frame.pointee.linesize) { linesize in
                data.withMemoryRebound(to: UnsafePointer<UInt8>?.self, capacity: 8) { planes in
                    linesize.withMemoryRebound(to: Int32.self, capacity: 8) { strides in
                        sws_scale(
                            context, planes, strides, 0, Int32(self.height), &destinationPlanes, &destinationStrides)
                    }
                }
            }
        }
        try FFmpegError.check(result, "sws_scale(RGBA)")
    }
}
