import CFFmpeg

/// Encodes one RGBA picture as a baseline JPEG with libavcodec's `mjpeg` encoder.
enum PosterEncoder {
    /// JPEG quantiser scale (2 = best, 31 = worst). 3 keeps text and flat GIF colours clean at a size
    /// far below the GIF's.
    static let quality: Int32 = 3

    /// - Parameters:
    ///   - pixels: `width` x `height` RGBA, already flattened over the background.
    ///   - outputWidth / outputHeight: the poster size (the video's, so the two line up in a page).
    /// - Returns: a complete JFIF file.
    static func encode(
        _ pixels: UnsafeBufferPointer<UInt32>, width: Int, height: Int, outputWidth: Int, outputHeight: Int
    ) throws -> [UInt8] {
        let codec = try CodecContext(encoderNamed: "mjpeg")
        let lambda = self.quality * FF_QP2LAMBDA
        codec.withUnsafeMutablePointer { context in
            context.pointee.width = Int32(outputWidth)
            context.pointee.height = Int32(outputHeight)
            // JFIF is full-range BT.601; yuvj420p is how libavcodec's mjpeg says so.
            context.pointee.pix_fmt = AV_PIX_FMT_YUVJ420P
            context.pointee.color_range = AVCOL_RANGE_JPEG
            context.pointee.time_base = AVRational(num: 1, den: 1)
            context.pointee.flags |= Int32(AV_CODEC_FLAG_QSCALE)
            context.pointee.global_quality = lambda
            context.pointee.thread_count = 1
            // The integer DCT in C: "auto" takes the CPU's SIMD one, whose last bits differ from it (a CPU without
            // SSE2, an ARM node), so the same GIF would get two posters in a mixed fleet.
            context.pointee.dct_algo = FF_DCT_INT
        }
        try codec.open(options: [])
        let frame = try VideoFrame(width: outputWidth, height: outputHeight, format: AV_PIX_FMT_YUVJ420P)
        let scaler = try ImageScaler(
            sourceWidth: width, sourceHeight: height, destinationWidth: outputWidth, destinationHeight: outputHeight,
            destinationFormat: AV_PIX_FMT_YUVJ420P, matrix: SWS_CS_ITU601, fullRange: true)
        try scaler.convert(pixels, into: frame)
        let sent = try frame.withUnsafeMutablePointer { frame in
            frame.pointee.pts = 0
            frame.pointee.quality = lambda
            return try codec.send(frame)
        }
        guard sent == .done, try codec.send(nil) == .done else {
            throw FFmpegError(code: CFFmpeg_AVERROR(EINVAL), function: "avcodec_send_frame(mjpeg)")
        }
        let packet = try Packet()
        guard try codec.receive(into: packet) == .done else {
            throw FFmpegError(code: CFFmpeg_AVERROR_EOF(), function: "avcodec_receive_packet(mjpeg)")
        }
        return packet.withUnsafeMutablePointer { packet in
            Array(UnsafeBufferPointer(start: packet.pointee.data, count: Int(packet.pointee.size)))
        }
    }
}
