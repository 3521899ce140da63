import CFFmpeg
import Foundation

/// A frame of an APNG or WebP written by a test: a rectangle of straight-alpha pixels (0xAARRGGBB) and how
/// it joins the canvas.
struct AnimationFrame {
    var left = 0
    var top = 0
    var width: Int
    var height: Int
    /// Row-major 0xAARRGGBB, `width * height`.
    var pixels: [UInt32]
    /// APNG: `delay_num/delay_den` seconds; WebP: `delayNumerator` milliseconds.
    var delayNumerator = 10
    var delayDenominator = 100
    /// APNG `dispose_op` (0 none, 1 background, 2 previous); WebP: 1 disposes to background.
    var dispose: UInt8 = 0
    /// APNG `blend_op` (0 source, 1 over); WebP: 1 blends, 0 does not.
    var blend: UInt8 = 1

    static func filled(
        _ color: UInt32, left: Int = 0, top: Int = 0, width: Int, height: Int, delay: Int = 10,
        denominator: Int = 100, dispose: UInt8 = 0, blend: UInt8 = 1
    ) -> AnimationFrame {
        AnimationFrame(
            left: left, top: top, width: width, height: height,
            pixels: [UInt32](repeating: color, count: width * height), delayNumerator: delay,
            delayDenominator: denominator, dispose: dispose, blend: blend)
    }

    /// RGBA bytes in memory order.
    var rgbaBytes: [UInt8] {
        self.pixels.flatMap { [UInt8($0 >> 16 & 0xFF), UInt8($0 >> 8 & 0xFF), UInt8($0 & 0xFF), UInt8($0 >> 24)] }
    }
}

/// Writes APNGs chunk by chunk (8-bit RGBA, stored deflate blocks), so that every field can be set, even to
/// values encoders refuse to write (frames outside the canvas, impossible frame counts).
struct APNGBuilder {
    var width: Int
    var height: Int
    var frames: [AnimationFrame] = []
    var numPlays = 0
    /// Written as acTL's num_frames instead of the real count.
    var numFramesOverride: UInt32? = nil
    /// An IDAT image that is not part of the animation (no fcTL before it); nil: the first frame is the
    /// IDAT image.
    var hiddenDefaultImage: AnimationFrame? = nil
    /// No acTL at all: a still PNG.
    var still = false

    func build() -> [UInt8] {
        var out: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]
        var ihdr = Self.be32(self.width) + Self.be32(self.height)
        ihdr += [8, 6, 0, 0, 0]
        Self.chunk("IHDR", ihdr, into: &out)
        if !self.still {
            Self.chunk(
                "acTL", Self.be32(Int(self.numFramesOverride ?? UInt32(self.frames.count))) + Self.be32(self.numPlays),
                into: &out)
        }
        var sequence = 0
        func fcTL(_ frame: AnimationFrame) {
            var data = Self.be32(sequence) + Self.be32(frame.width) + Self.be32(frame.height)
            data += Self.be32(frame.left) + Self.be32(frame.top)
            data += Self.be16(frame.delayNumerator) + Self.be16(frame.delayDenominator) + [frame.dispose, frame.blend]
            Self.chunk("fcTL", data, into: &out)
            sequence += 1
        }
        var remaining = self.frames[...]
        if let hidden = self.hiddenDefaultImage {
            Self.chunk("IDAT", Self.zlib(hidden), into: &out)
        } else if let first = remaining.popFirst() {
            if !self.still { fcTL(first) }
            Self.chunk("IDAT", Self.zlib(first), into: &out)
        }
        for frame in remaining {
            fcTL(frame)
            Self.chunk("fdAT", Self.be32(sequence) + Self.zlib(frame), into: &out)
            sequence += 1
        }
        Self.chunk("IEND", [], into: &out)
        return out
    }

    private static func be32(_ value: Int) -> [UInt8] {
        [UInt8(value >> 24 & 0xFF), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)]
    }
    private static func be16(_ value: Int) -> [UInt8] { [UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)] }

    private static func chunk(_ type: String, _ data: [UInt8], into out: inout [UInt8]) {
        out += be32(data.count)
        let body = Array(type.utf8) + data
        out += body
        out += be32(Int(crc32(body)))
    }

    /// The frame's rows, each after filter byte 0, as a zlib stream of stored blocks.
    private static func zlib(_ frame: AnimationFrame) -> [UInt8] {
        let rgba = frame.rgbaBytes
        var raw: [UInt8] = []
        for y in 0..<frame.height {
            raw.append(0)
            raw += rgba[(y * frame.width * 4)..<((y + 1) * frame.width * 4)]
        }
        var out: [UInt8] = [0x78, 0x01]
        var offset = 0
        repeat {
            let count = min(65535, raw.count - offset)
            let last: UInt8 = offset + count == raw.count ? 1 : 0
            out += [last, UInt8(count & 0xFF), UInt8(count >> 8), UInt8(~count & 0xFF), UInt8(~count >> 8 & 0xFF)]
            out += raw[offset..<(offset + count)]
            offset += count
        } while offset < raw.count
        var a: UInt32 = 1
        var b: UInt32 = 0
        for byte in raw {
            a = (a + UInt32(byte)) % 65521
            b = (b + a) % 65521
        }
        return out + be32(Int(b << 16 | a))
    }

    private static let crcTable: [UInt32] = (0..<256).map { index in
        var c = UInt32(index)
        for _ in 0..<8 { c = c & 1 != 0 ? 0xEDB8_8320 ^ (c >> 1) : c >> 1 }
        return c
    }

    private static func crc32(_ bytes: [UInt8]) -> UInt32 {
        var c: UInt32 = 0xFFFF_FFFF
        for byte in bytes { c = crcTable[Int((c ^ UInt32(byte)) & 0xFF)] ^ (c >> 8) }
        return c ^ 0xFFFF_FFFF
    }
}

/// Writes animated WebPs: each frame's bitstream from libwebp's lossless encoder, wrapped in ANMF chunks
/// with the offsets, duration, blending and disposal set here (libwebp's own animation encoder chooses
/// those itself).
struct WebPBuilder {
    var width: Int
    var height: Int
    var frames: [AnimationFrame] = []
    var loopCount = 0
    var backgroundColor: UInt32 = 0xFFFF_FFFF

    func build() throws -> [UInt8] {
        var body = Array("WEBP".utf8)
        var vp8x: [UInt8] = [0x02 | 0x10, 0, 0, 0]
        vp8x += Self.le24(self.width - 1) + Self.le24(self.height - 1)
        Self.chunk("VP8X", vp8x, into: &body)
        Self.chunk(
            "ANIM", Self.le32(Int(self.backgroundColor)) + [UInt8(self.loopCount & 0xFF), UInt8(self.loopCount >> 8)],
            into: &body)
        for frame in self.frames {
            var data = Self.le24(frame.left / 2) + Self.le24(frame.top / 2)
            data += Self.le24(frame.width - 1) + Self.le24(frame.height - 1) + Self.le24(frame.delayNumerator)
            data.append((frame.blend == 0 ? 0x02 : 0) | (frame.dispose == 1 ? 0x01 : 0))
            data += try Self.losslessChunk(frame)
            Self.chunk("ANMF", data, into: &body)
        }
        return Array("RIFF".utf8) + Self.le32(body.count) + body
    }

    /// The `VP8L` chunk of the frame encoded as a still lossless WebP.
    private static func losslessChunk(_ frame: AnimationFrame) throws -> [UInt8] {
        let rgba = frame.rgbaBytes
        var output: UnsafeMutablePointer<UInt8>?
        let size = rgba.withUnsafeBufferPointer {
            WebPEncodeLosslessRGBA(
                $0.baseAddress, Int32(frame.width), Int32(frame.height), Int32(frame.width * 4), &output)
        }
        defer { WebPFree(output) }
        guard size > 0, let output else { throw BuilderError(description: "WebPEncodeLosslessRGBA failed") }
        let file = Array(UnsafeBufferPointer(start: output, count: size))
        // RIFF, size, WEBP, then the one VP8L chunk (header and payload).
        guard file.count > 20, Array(file[12..<16]) == Array("VP8L".utf8) else {
            throw BuilderError(description: "libwebp wrote no lone VP8L chunk")
        }
        return Array(file[12...])
    }

    private static func le24(_ value: Int) -> [UInt8] {
        [UInt8(value & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value >> 16 & 0xFF)]
    }
    private static func le32(_ value: Int) -> [UInt8] { le24(value) + [UInt8(value >> 24 & 0xFF)] }

    private static func chunk(_ type: String, _ data: [UInt8], into out: inout [UInt8]) {
        out += Array(type.utf8) + le32(data.count) + data
        if data.count % 2 == 1 { out.append(0) }
    }
}

struct BuilderError: Error, CustomStringConvertible {
    var description: String
}
