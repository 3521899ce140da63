import CFFmpeg
import Foundation

extension Transcoder {
    /// libvpx's constant quality for the VP9 WebM, and the better one tried when the first is under the quality
    /// floor (`webpMinPSNR`, the same 35 dB over black and over white as the animated images, of 2x2 means as a
    /// 4:2:0 video is judged, measured by decoding it again with libvpx, alpha included) by at most `webmReach`.
    /// Flat drawings whose colour edges 4:2:0 cannot keep stay under it at any quality (a flag: 33.4 dB at 32, 34.2
    /// at 24, 34.6 at 16) and get no WebM. See docs/benchmarks.md, "VP9 with alpha".
    static let webmCRF = 32
    static let webmBetterCRF = 24
    static let webmReach = 1.5

    /// The VP9 WebM as it is kept: at `webmCRF`, or `webmBetterCRF`, at or above the quality floor.
    /// - Parameter scratch: a path the muxer may write and that is removed before this returns.
    /// - Throws: `TranscodeError` `.encodeFailed` when neither is.
    func encodeAlphaVideoChoosing(_ bytes: UnsafeRawBufferPointer, plan: Plan, scratch: String) throws -> (
        bytes: [UInt8], width: Int, height: Int, psnr: Double, crf: Int, codecs: String
    ) {
        let size = self.imageSize(plan)
        var readings: [Double] = []
        for crf in [Self.webmCRF, Self.webmBetterCRF] {
            if let last = readings.last, Self.webpMinPSNR - last > Self.webmReach { break }
            let (file, timing) = try self.encodeAlphaVideo(bytes, plan: plan, crf: crf, scratch: scratch)
            let psnr = try self.imagePSNR(
                file, reader: { try EncodedWebM($0, width: $1, height: $2) }, against: bytes, plan: plan,
                averaging2x2: true)
            if psnr >= Self.webpMinPSNR {
                let codecs = VP9Encoder.codecsParameter(
                    width: size.width, height: size.height, shortestPicture: timing.shortest, bytes: file.count,
                    milliseconds: timing.end)
                return (file, size.width, size.height, psnr, crf, codecs)
            }
            readings.append(psnr)
        }
        throw TranscodeError(
            .encodeFailed,
            "no VP9 WebM reaches \(Self.webpMinPSNR) dB: "
                + readings.map { String(format: "%.2f", $0) }.joined(separator: ", "))
    }

    /// One VP9 encode of the source with its transparency (`forEachImageCanvas`): at the animated image's size
    /// (odd sizes as they are), each distinct picture from its start, identical consecutive ones merged.
    ///
    /// The colour and the alpha are two VP9 streams, as libavcodec's own yuva420p encoder makes them, but encoded
    /// one after the other, each in a pass over the source of its own: libvpx holds about 90 MB per encoder of
    /// 1080x1080 pictures whatever its options (lookahead, threads, tiles, speed), and the two at once made a
    /// conversion of huge_1080_transparent_30f.gif peak at 331 MB, one at a time at 205 MB (the MP4 alone: 136). The colour's packets are
    /// kept (the file's size) until the alpha's join them, each alpha packet beside its picture's as the block's
    /// `BlockAdditional` (ID 1), which WebM readers and libvpx's decoder in libavcodec take it from. A source
    /// without a transparent pixel (a WebM made for its odd size: `Transcoder.webmShowsMore`) has no alpha stream.
    /// - Returns: the file, and its shortest picture's display time and its end (milliseconds).
    func encodeAlphaVideo(_ bytes: UnsafeRawBufferPointer, plan: Plan, crf: Int, scratch: String) throws -> (
        file: [UInt8], timing: (shortest: Int64, end: Int64)
    ) {
        let size = self.imageSize(plan)
        let (width, height) = (size.width, size.height)
        let rate = Plan.averageFrameRate(plan.header.frameMilliseconds)
        var rendition = self.options.rendition
        rendition.crf = crf
        let recipe = VideoRecipe.vp9WebM
        defer { unlink(scratch) }

        /// One pass: each distinct canvas, made into a picture by `fill`, encoded (a key frame where `key` says);
        /// the packets kept.
        func pass(
            key: (Int) -> Bool = { _ in false }, fill: (UnsafeRawBufferPointer, VideoFrame) throws -> Void
        ) throws -> (packets: [Packet], end: Int64, encoder: any VideoEncoder) {
            let encoder = try recipe.makeEncoder(width, height, rendition, self.x264UsesSIMD, rate, false)
            let frame = try VideoFrame(width: width, height: height, format: AV_PIX_FMT_YUV420P)
            var previous = [UInt8](repeating: 0, count: width * height * 4)
            var encoded = 0
            var packets: [Packet] = []
            func keep(_ packet: Packet) throws {
                let copy = try Packet()
                _ = try copy.withUnsafeMutablePointer { copy in
                    try packet.withUnsafeMutablePointer {
                        try FFmpegError.check(av_packet_ref(copy, $0), "av_packet_ref")
                    }
                }
                packets.append(copy)
            }
            let end = try self.forEachImageCanvas(bytes, plan: plan, size: size) { canvas, start in
                let same = previous.withUnsafeMutableBytes { previous in
                    if encoded > 0, memcmp(previous.baseAddress!, canvas.baseAddress!, previous.count) == 0 {
                        return true
                    }
                    previous.copyMemory(from: canvas)
                    return false
                }
                // The same picture again: the one encoded simply shows longer.
                if same { return }
                try fill(canvas, frame)
                try encoder.encode(frame, pts: start, key: key(encoded), emit: keep)
                encoded += 1
            }
            try encoder.finish(emit: keep)
            return (packets, end, encoder)
        }

        var transparent = false
        let writer: any ContainerWriter
        let colour: (packets: [Packet], end: Int64)
        do {
            let scaler = try ImageScaler(
                sourceWidth: width, sourceHeight: height, destinationWidth: width, destinationHeight: height,
                destinationFormat: AV_PIX_FMT_YUV420P, matrix: SWS_CS_ITU709, fullRange: false)
            var filled = [UInt32](repeating: 0, count: width * height)
            let background = self.options.background.rgbaPixel
            let made = try pass { canvas, frame in
                filled.withUnsafeMutableBytes { $0.copyMemory(from: canvas) }
                transparent =
                    filled.withUnsafeMutableBufferPointer { Self.fillTransparentPixels($0, colour: background) }
                    || transparent
                try filled.withUnsafeBufferPointer { try scaler.convert($0, into: frame) }
            }
            colour = (made.packets, made.end)
            // The header needs the colour stream's parameters; its encoder (and its memory) goes with this scope.
            writer = try recipe.makeWriter(scratch, made.encoder, transparent)
        }
        var alpha: [Packet] = []
        if transparent {
            // The alpha stream's key frames where the colour's are (it may have more): a reader that seeks to a
            // colour key frame decodes the alpha from there too.
            let colourKeys = colour.packets.map { packet in
                packet.withUnsafeMutablePointer { $0.pointee.flags & AV_PKT_FLAG_KEY != 0 }
            }
            alpha = try pass(key: { $0 < colourKeys.count && colourKeys[$0] }) { canvas, frame in
                try Self.alphaPicture(canvas, into: frame, width: width, height: height)
            }.packets
            try Self.checkPairs(colour: colour.packets, alpha: alpha)
        }
        var shortest = colour.end
        var last: Int64?
        for (index, packet) in colour.packets.enumerated() {
            let start = packet.withUnsafeMutablePointer { $0.pointee.pts }
            if let last { shortest = min(shortest, start - last) }
            last = start
            if transparent { try Self.attachAlpha(alpha[index], to: packet) }
            try writer.write(packet)
        }
        try writer.finish(endTime: colour.end)
        guard let data = FileManager.default.contents(atPath: scratch) else {
            throw TranscodeError(.io, "cannot read back \(scratch)")
        }
        if let last { shortest = min(shortest, colour.end - last) }
        return ([UInt8](data), (max(1, shortest), colour.end))
    }

    /// Each colour packet has its alpha packet: the same count, the same timestamps, a key frame wherever the
    /// colour's is, none empty (libvpx drops no picture in constant-quality mode; this makes sure).
    /// - Throws: `TranscodeError` `.encodeFailed` otherwise.
    static func checkPairs(colour: [Packet], alpha: [Packet]) throws {
        guard colour.count == alpha.count else {
            throw TranscodeError(.encodeFailed, "libvpx made \(colour.count) colour and \(alpha.count) alpha packets")
        }
        for (index, (picture, transparency)) in zip(colour, alpha).enumerated() {
            let (start, key) = picture.withUnsafeMutablePointer {
                ($0.pointee.pts, $0.pointee.flags & AV_PKT_FLAG_KEY != 0)
            }
            let (alphaStart, alphaKey, size) = transparency.withUnsafeMutablePointer {
                ($0.pointee.pts, $0.pointee.flags & AV_PKT_FLAG_KEY != 0, $0.pointee.size)
            }
            guard start == alphaStart, !key || alphaKey, size > 0 else {
                throw TranscodeError(.encodeFailed, "the alpha packet of picture \(index) does not match its colour's")
            }
        }
    }

    /// The alpha of `canvas` as the luma of `frame` (yuv420p), its chroma neutral: the picture the alpha stream codes.
    static func alphaPicture(_ canvas: UnsafeRawBufferPointer, into frame: VideoFrame, width: Int, height: Int) throws {
        try frame.makeWritable()
        try frame.withUnsafeMutablePointer { frame in
            guard let luma = frame.pointee.data.0, let blue = frame.pointee.data.1, let red = frame.pointee.data.2
            else { throw TranscodeError(.encodeFailed, "a picture plane is missing") }
            let pixels = canvas.bindMemory(to: UInt32.self)
            for y in 0..<height {
                let row = luma + y * Int(frame.pointee.linesize.0)
                for x in 0..<width { row[x] = UInt8(pixels[y * width + x] >> 24) }
            }
            for y in 0..<((height + 1) / 2) {
                memset(blue + y * Int(frame.pointee.linesize.1), 128, (width + 1) / 2)
                memset(red + y * Int(frame.pointee.linesize.2), 128, (width + 1) / 2)
            }
        }
    }

    /// Puts `alpha`'s data beside `packet`'s as WebM's `BlockAdditional` with ID 1 (`AV_PKT_DATA_MATROSKA_
    /// BLOCKADDITIONAL`: the ID as 8 bytes big-endian, then the data), as libavcodec's VP9 encoder does.
    static func attachAlpha(_ alpha: Packet, to packet: Packet) throws {
        try alpha.withUnsafeMutablePointer { alpha in
            try packet.withUnsafeMutablePointer { packet in
                let count = Int(alpha.pointee.size)
                guard
                    let side = av_packet_new_side_data(packet, AV_PKT_DATA_MATROSKA_BLOCKADDITIONAL, 8 + count)
                else { throw FFmpegError(code: CFFmpeg_AVERROR(ENOMEM), function: "av_packet_new_side_data") }
                for index in 0..<8 { side[index] = index == 7 ? 1 : 0 }
                if count > 0, let data = alpha.pointee.data { (side + 8).update(from: data, count: count) }
            }
        }
    }

    /// Gives the fully transparent pixels `colour` (alpha left at 0) and tells whether any pixel is not opaque.
    /// The background colour (the MP4's): a player that ignores the alpha stream shows what the MP4 shows. What the
    /// colour costs varies by file (four transparent corpus files, black, grey and white: -18% to +8% bytes against
    /// grey, within 0.2 dB); copying the nearest visible colour 4 px out, against fringes, cost +25% for 0.0-0.8 dB
    /// (docs/benchmarks.md, "VP9 with alpha").
    static func fillTransparentPixels(_ pixels: UnsafeMutableBufferPointer<UInt32>, colour: UInt32) -> Bool {
        var transparent = false
        let colour = colour & 0x00FF_FFFF
        for index in pixels.indices where pixels[index] >> 24 != 0xFF {
            transparent = true
            if pixels[index] >> 24 == 0 { pixels[index] = colour }
        }
        return transparent
    }
}

/// A WebM this process just wrote, read back with libvpx's VP9 decoder (which decodes the alpha pictures that
/// FFmpeg's own VP9 decoder drops): each picture as straight-alpha RGBA with the time it ends (the next one's
/// start; the last one, never). The bytes must outlive it.
final class EncodedWebM: EncodedAnimation {
    private let reader: MediaReader
    private let width: Int
    private let height: Int
    private var converter: RGBAConverter?
    /// Two pictures: the one handed out and the one read ahead to learn where the first ends.
    private let pictures: [UnsafeMutableBufferPointer<UInt32>]
    private var current = 0
    private var ahead: Int64?
    private var started = false

    init(_ bytes: UnsafeRawBufferPointer, width: Int, height: Int) throws {
        self.reader = try MediaReader(memory: bytes, formatName: "matroska", decoderName: "libvpx-vp9")
        self.width = width
        self.height = height
        self.pictures = (0..<2).map { _ in
            let picture = UnsafeMutableBufferPointer<UInt32>.allocate(capacity: width * height)
            picture.initialize(repeating: 0)
            return picture
        }
    }

    deinit {
        for picture in self.pictures { picture.deallocate() }
    }

    /// Reads the next picture into `pictures[slot]`; its start, nil at the end.
    private func read(into slot: Int) throws -> Int64? {
        guard let frame = try self.reader.next() else { return nil }
        guard Int(frame.pointee.width) == self.width, Int(frame.pointee.height) == self.height else {
            throw TranscodeError(.encodeFailed, "the WebM written is not \(self.width)x\(self.height)")
        }
        let format = AVPixelFormat(rawValue: frame.pointee.format)
        if self.converter?.sourceFormat != format.rawValue {
            self.converter = try RGBAConverter(
                width: self.width, height: self.height, sourceFormat: format, videoMatrix: SWS_CS_ITU709)
        }
        try self.converter!.convert(frame, into: self.pictures[slot])
        return frame.pointee.best_effort_timestamp
    }

    func next() throws -> (picture: UnsafeRawBufferPointer, end: Int64)? {
        if !self.started {
            self.started = true
            self.ahead = try self.read(into: 0)
            self.current = 1
        }
        guard self.ahead != nil else { return nil }
        self.current = 1 - self.current
        self.ahead = try self.read(into: 1 - self.current)
        let end = self.ahead ?? .max
        return (UnsafeRawBufferPointer(self.pictures[self.current]), end)
    }
}
