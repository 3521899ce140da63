import CFFmpeg
import CTestSupport
import Foundation

/// Reopens an MP4 with libavformat/libavcodec and reports what a player would see: the streams, the
/// codec settings, every frame's presentation time and (optionally) its pixels as RGBA.
struct MP4Probe {
    var videoStreams = 0
    var audioStreams = 0
    var codecName = ""
    var pixelFormat = ""
    var profile: Int32 = 0
    var level: Int32 = 0
    var width = 0
    var height = 0
    var colorPrimaries = AVCOL_PRI_UNSPECIFIED
    var colorSpace = AVCOL_SPC_UNSPECIFIED
    /// Presentation times in milliseconds, sorted.
    var ptsMilliseconds: [Int64] = []
    /// The video stream's duration in milliseconds, as the container states it.
    var streamDurationMilliseconds: Int64 = 0
    /// The file's duration in milliseconds (what a player's seek bar shows).
    var formatDurationMilliseconds: Int64 = 0
    /// Decoded pictures in presentation order, RGBA (R in the low byte), `width * height` each.
    var pictures: [[UInt32]] = []
    /// Whether the `moov` atom comes before `mdat` (faststart).
    var moovBeforeMdat = false
    /// The video track's sample table as Chromium's player reads it: the sum of the `stts` sample
    /// durations (its media duration, whatever `mvhd`, `mdhd` or an edit list say), in milliseconds.
    var sampleDurationTotalMilliseconds: Double = 0
    /// Presentation times read from the boxes (decode times from `stts` plus `ctts` offsets), sorted,
    /// milliseconds, with no edit list applied.
    var samplePresentationMilliseconds: [Double] = []
    /// Each sample's `stts` duration in milliseconds, in decode order.
    var sampleDurationsMilliseconds: [Double] = []
    /// Whether the track has a `ctts` box (decode order differs from presentation order).
    var hasCompositionOffsets = false
    /// The track's edit list (`elst` media times, in the track's timescale); empty when there is none.
    var editMediaTimes: [Int64] = []

    init(path: String, decodePictures: Bool = true) throws {
        var context: UnsafeMutablePointer<AVFormatContext>?
        guard avformat_open_input(&context, path, nil, nil) >= 0, let context else { throw ProbeError.open }
        defer { var context: UnsafeMutablePointer<AVFormatContext>? = context; avformat_close_input(&context) }
        guard avformat_find_stream_info(context, nil) >= 0 else { throw ProbeError.open }
        if let duration = Optional(context.pointee.duration), duration > 0 {
            self.formatDurationMilliseconds = duration / 1000
        }

        var videoIndex: Int32 = -1
        for index in 0..<Int(context.pointee.nb_streams) {
            let stream = context.pointee.streams[index]!
            switch stream.pointee.codecpar.pointee.codec_type {
            case AVMEDIA_TYPE_VIDEO:
                self.videoStreams += 1
                if videoIndex < 0 { videoIndex = Int32(index) }
            case AVMEDIA_TYPE_AUDIO:
                self.audioStreams += 1
            default:
                break
            }
        }
        guard videoIndex >= 0 else { return }
        let stream = context.pointee.streams[Int(videoIndex)]!
        let parameters = stream.pointee.codecpar!
        let timeBase = stream.pointee.time_base
        self.codecName = String(cString: avcodec_get_name(parameters.pointee.codec_id))
        self.pixelFormat =
            av_get_pix_fmt_name(AVPixelFormat(rawValue: parameters.pointee.format)).map { String(cString: $0) } ?? ""
        self.profile = parameters.pointee.profile
        self.level = parameters.pointee.level
        self.width = Int(parameters.pointee.width)
        self.height = Int(parameters.pointee.height)
        self.colorPrimaries = parameters.pointee.color_primaries
        self.colorSpace = parameters.pointee.color_space
        self.streamDurationMilliseconds = av_rescale_q(stream.pointee.duration, timeBase, AVRational(num: 1, den: 1000))

        guard let codec = avcodec_find_decoder(parameters.pointee.codec_id),
            var decoder = Optional(avcodec_alloc_context3(codec)), decoder != nil
        else { throw ProbeError.decoder }
        defer { avcodec_free_context(&decoder) }
        avcodec_parameters_to_context(decoder, parameters)
        guard avcodec_open2(decoder, codec, nil) >= 0 else { throw ProbeError.decoder }

        var packet = av_packet_alloc()
        var frame = av_frame_alloc()
        defer {
            av_packet_free(&packet)
            av_frame_free(&frame)
        }
        var decoded: [(Int64, [UInt32])] = []
        func receive() throws {
            while avcodec_receive_frame(decoder, frame) >= 0 {
                let pts = av_rescale_q(frame!.pointee.best_effort_timestamp, timeBase, AVRational(num: 1, den: 1000))
                decoded.append((pts, decodePictures ? try Self.rgba(frame!) : []))
                av_frame_unref(frame)
            }
        }
        while av_read_frame(context, packet) >= 0 {
            if packet!.pointee.stream_index == videoIndex {
                avcodec_send_packet(decoder, packet)
                try receive()
            }
            av_packet_unref(packet)
        }
        avcodec_send_packet(decoder, nil)
        try receive()
        decoded.sort { $0.0 < $1.0 }
        self.ptsMilliseconds = decoded.map(\.0)
        self.pictures = decoded.map(\.1)
        let file = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
        self.moovBeforeMdat = Self.moovComesFirst(file)
        if let table = SampleTable(file) {
            let milliseconds = { (ticks: Int64) in Double(ticks) * 1000 / Double(table.timescale) }
            self.sampleDurationTotalMilliseconds = milliseconds(table.deltas.reduce(0, +))
            self.sampleDurationsMilliseconds = table.deltas.map(milliseconds)
            self.hasCompositionOffsets = !table.compositionOffsets.isEmpty
            var decodeTime: Int64 = 0
            var presentation: [Double] = []
            for (index, delta) in table.deltas.enumerated() {
                let offset = index < table.compositionOffsets.count ? table.compositionOffsets[index] : 0
                presentation.append(milliseconds(decodeTime + offset))
                decodeTime += delta
            }
            self.samplePresentationMilliseconds = presentation.sorted()
            self.editMediaTimes = table.editMediaTimes
        }
    }

    private static func rgba(_ frame: UnsafeMutablePointer<AVFrame>) throws -> [UInt32] {
        let width = Int(frame.pointee.width)
        let height = Int(frame.pointee.height)
        guard
            let scaler = sws_getContext(
                Int32(width), Int32(height), AVPixelFormat(rawValue: frame.pointee.format), Int32(width), Int32(height),
                AV_PIX_FMT_RGBA, SWS_POINT | SWS_ACCURATE_RND, nil, nil, nil)
        else { throw ProbeError.decoder }
        defer { sws_freeContext(scaler) }
        let coefficients = sws_getCoefficients(SWS_CS_ITU709)
        sws_setColorspaceDetails(scaler, coefficients, 0, coefficients, 1, 0, 1 << 16, 1 << 16)
        var pixels = [UInt32](repeating: 0, count: width * height)
        pixels.withUnsafeMutableBytes { buffer in
            var destination: [UnsafeMutablePointer<UInt8>?] = [
                buffer.baseAddress!.assumingMemoryBound(to: UInt8.self), nil, nil, nil,
            ]
            var strides: [Int32] = [Int32(width * 4), 0, 0, 0]
            withUnsafePointer(to: &frame.pointee.data) { data in
                withUnsafePointer(to: &frame.pointee.linesize) { linesize in
                    data.withMemoryRebound(to: UnsafePointer<UInt8>?.self, capacity: 8) { planes in
                        linesize.withMemoryRebound(to: Int32.self, capacity: 8) { sourceStrides in
                            _ = sws_scale(scaler, planes, sourceStrides, 0, Int32(height), &destination, &strides)
                        }
                    }
                }
            }
        }
        return pixels
    }

    /// Walks the top-level boxes of the file.
    private static func moovComesFirst(_ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset + 8 <= bytes.count {
            let size =
                Int(bytes[offset]) << 24 | Int(bytes[offset + 1]) << 16 | Int(bytes[offset + 2]) << 8
                | Int(bytes[offset + 3])
            let type = String(decoding: bytes[(offset + 4)..<(offset + 8)], as: UTF8.self)
            if type == "moov" { return true }
            if type == "mdat" { return false }
            guard size >= 8 else { return false }
            offset += size
        }
        return false
    }

    enum ProbeError: Error {
        case open
        case decoder
    }
}

/// Peak signal-to-noise ratio over the RGB channels of two same-sized RGBA pictures, in dB
/// (infinity when identical).
func psnr(_ a: [UInt32], _ b: [UInt32]) -> Double {
    precondition(a.count == b.count)
    let squared = a.withUnsafeBufferPointer { a in
        b.withUnsafeBufferPointer { b in CTestSupport_rgb_squared_error(a.baseAddress, b.baseAddress, a.count) }
    }
    let mean = Double(squared) / Double(a.count * 3)
    return mean == 0 ? .infinity : 10 * log10(255 * 255 / mean)
}

/// An RGBA picture resampled to `width` x `height` with swscale's bicubic filter, as the encoder resamples.
func scaleRGBA(_ pixels: [UInt32], from sourceWidth: Int, _ sourceHeight: Int, to width: Int, _ height: Int) throws
    -> [UInt32]
{
    guard
        let scaler = sws_getContext(
            Int32(sourceWidth), Int32(sourceHeight), AV_PIX_FMT_RGBA, Int32(width), Int32(height), AV_PIX_FMT_RGBA,
            SWS_BICUBIC | SWS_ACCURATE_RND, nil, nil, nil)
    else { throw MP4Probe.ProbeError.decoder }
    defer { sws_freeContext(scaler) }
    var output = [UInt32](repeating: 0, count: width * height)
    pixels.withUnsafeBytes { source in
        output.withUnsafeMutableBytes { destination in
            // swscale reads four plane pointers and strides whatever the format.
            var sourcePlanes: [UnsafePointer<UInt8>?] = [
                source.baseAddress!.assumingMemoryBound(to: UInt8.self), nil, nil, nil,
            ]
            var sourceStrides: [Int32] = [Int32(sourceWidth * 4), 0, 0, 0]
            var destinationPlanes: [UnsafeMutablePointer<UInt8>?] = [
                destination.baseAddress!.assumingMemoryBound(to: UInt8.self), nil, nil, nil,
            ]
            var destinationStrides: [Int32] = [Int32(width * 4), 0, 0, 0]
            _ = sws_scale(
                scaler, &sourcePlanes, &sourceStrides, 0, Int32(sourceHeight), &destinationPlanes, &destinationStrides)
        }
    }
    return output
}

/// The top-left `width` x `height` of a picture `stride` pixels wide.
func crop(_ picture: [UInt32], width stride: Int, to width: Int, _ height: Int) -> [UInt32] {
    if stride == width { return Array(picture[0..<(width * height)]) }
    return [UInt32](unsafeUninitializedCapacity: width * height) { out, count in
        picture.withUnsafeBufferPointer { pixels in
            for y in 0..<height {
                for x in 0..<width { out[y * width + x] = pixels[y * stride + x] }
            }
        }
        count = width * height
    }
}

/// Each 2x2 block's mean colour (an odd last row or column is dropped): compares pictures at the
/// resolution 4:2:0 keeps colour at.
func averaging2x2(_ picture: [UInt32], width: Int, height: Int) -> [UInt32] {
    precondition(picture.count >= width * height)
    return [UInt32](unsafeUninitializedCapacity: (width / 2) * (height / 2)) { out, count in
        picture.withUnsafeBufferPointer { CTestSupport_average_2x2($0.baseAddress, width, height, out.baseAddress) }
        count = (width / 2) * (height / 2)
    }
}

/// An opaque RGBA pixel from 0xRRGGBB.
func rgba(_ color: UInt32) -> UInt32 {
    (color >> 16) & 0xFF | (color & 0xFF00) | (color & 0xFF) << 16 | 0xFF00_0000
}

/// The first video track's `mdhd` timescale, `stts` deltas, `ctts` offsets and `elst` media times, read
/// straight from the boxes (ISO/IEC 14496-12), independently of libavformat.
struct SampleTable {
    var timescale: Int64 = 0
    var deltas: [Int64] = []
    /// Per sample, in decode order; empty without `ctts`.
    var compositionOffsets: [Int64] = []
    var editMediaTimes: [Int64] = []

    init?(_ bytes: [UInt8]) {
        func integer(_ offset: Int, _ size: Int) -> Int64 {
            (offset..<(offset + size)).reduce(Int64(0)) { $0 << 8 | Int64(bytes[$1]) }
        }
        /// The boxes in `range`: (type, payload range).
        func boxes(_ range: Range<Int>) -> [(String, Range<Int>)] {
            var found: [(String, Range<Int>)] = []
            var offset = range.lowerBound
            while offset + 8 <= range.upperBound {
                var size = Int(integer(offset, 4))
                var header = 8
                if size == 1, offset + 16 <= range.upperBound {
                    size = Int(integer(offset + 8, 8))
                    header = 16
                } else if size == 0 {
                    size = range.upperBound - offset
                }
                guard size >= header, offset + size <= range.upperBound else { break }
                found.append(
                    (
                        String(decoding: bytes[(offset + 4)..<(offset + 8)], as: UTF8.self),
                        (offset + header)..<(offset + size)
                    ))
                offset += size
            }
            return found
        }
        func child(_ type: String, in range: Range<Int>) -> Range<Int>? {
            boxes(range).first { $0.0 == type }?.1
        }
        guard let moov = child("moov", in: 0..<bytes.count) else { return nil }
        for (type, trak) in boxes(moov) where type == "trak" {
            guard let mdia = child("mdia", in: trak), let hdlr = child("hdlr", in: mdia),
                String(decoding: bytes[(hdlr.lowerBound + 8)..<(hdlr.lowerBound + 12)], as: UTF8.self) == "vide",
                let mdhd = child("mdhd", in: mdia), let minf = child("minf", in: mdia),
                let stbl = child("stbl", in: minf), let stts = child("stts", in: stbl)
            else { continue }
            // mdhd: version, flags, then creation and modification times of 4 (v0) or 8 (v1) bytes each.
            self.timescale = integer(mdhd.lowerBound + (bytes[mdhd.lowerBound] == 1 ? 20 : 12), 4)
            let entries = Int(integer(stts.lowerBound + 4, 4))
            for entry in 0..<entries {
                let base = stts.lowerBound + 8 + entry * 8
                guard base + 8 <= stts.upperBound else { return nil }
                let count = Int(integer(base, 4))
                self.deltas.append(contentsOf: repeatElement(integer(base + 4, 4), count: count))
            }
            if let ctts = child("ctts", in: stbl) {
                // Version 1 offsets are signed; version 0 ones unsigned.
                let signed = bytes[ctts.lowerBound] == 1
                for entry in 0..<Int(integer(ctts.lowerBound + 4, 4)) {
                    let base = ctts.lowerBound + 8 + entry * 8
                    guard base + 8 <= ctts.upperBound else { return nil }
                    var offset = integer(base + 4, 4)
                    if signed, offset >= 1 << 31 { offset -= 1 << 32 }
                    self.compositionOffsets.append(contentsOf: repeatElement(offset, count: Int(integer(base, 4))))
                }
            }
            if let edts = child("edts", in: trak), let elst = child("elst", in: edts) {
                // Entries: segment duration and media time, 4 bytes each (v0) or 8 (v1), then the rate.
                let wide = bytes[elst.lowerBound] == 1
                let size = wide ? 20 : 12
                for entry in 0..<Int(integer(elst.lowerBound + 4, 4)) {
                    let base = elst.lowerBound + 8 + entry * size
                    guard base + size <= elst.upperBound else { return nil }
                    var mediaTime = integer(base + (wide ? 8 : 4), wide ? 8 : 4)
                    if !wide, mediaTime >= 1 << 31 { mediaTime -= 1 << 32 }
                    self.editMediaTimes.append(mediaTime)
                }
            }
            guard self.timescale > 0 else { return nil }
            return
        }
        return nil
    }
}

/// How many pixels' transparency, as a page sees it, differs by more than `tolerance` between two pictures, each
/// given flattened over white and over black (RGBA as 0xAABBGGRR): a pixel's see-through is how far its green over
/// white is from its green over black (0 opaque, 255 fully transparent).
func transparencyDisagreements(
    expected: (overWhite: [UInt32], overBlack: [UInt32]), actual: (overWhite: [UInt32], overBlack: [UInt32]),
    tolerance: Int
) -> Int {
    func seeThrough(_ overWhite: UInt32, _ overBlack: UInt32) -> Int {
        Int(overWhite >> 8 & 0xFF) - Int(overBlack >> 8 & 0xFF)
    }
    var disagreeing = 0
    for pixel in expected.overWhite.indices where pixel < actual.overWhite.count {
        let wanted = seeThrough(expected.overWhite[pixel], expected.overBlack[pixel])
        let got = seeThrough(actual.overWhite[pixel], actual.overBlack[pixel])
        if abs(wanted - got) > tolerance { disagreeing += 1 }
    }
    return disagreeing
}
