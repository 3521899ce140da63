/// Writes small animated GIFs byte by byte (the server tests have no giflib encoder): a 4-colour global
/// palette, one full-screen frame per entry, each filled with one palette index and given its delay.
///
/// The image data is valid LZW that never grows past 3-bit codes: a clear code before every pair of
/// pixels keeps the code table at 7 entries, so any decoder reads it.
struct TinyGIF {
    var width: Int
    var height: Int
    /// nil: no NETSCAPE2.0 block (plays once).
    var loopCount: Int?
    /// (palette index 0-3, delay in centiseconds).
    var frames: [(index: UInt8, delay: Int)]
    /// The palette index every frame's graphic control extension marks transparent; nil: none.
    var transparentIndex: UInt8? = nil

    static let palette: [UInt8] = [0, 0, 0, 255, 0, 0, 0, 255, 0, 0, 0, 255]

    var bytes: [UInt8] {
        var out = Array("GIF89a".utf8)
        out += Self.little(self.width) + Self.little(self.height)
        out += [0x91, 0, 0]  // global table of 2^(1+1) colours, 2 bits of colour resolution
        out += Self.palette
        if let loopCount = self.loopCount {
            out += [0x21, 0xFF, 11] + Array("NETSCAPE2.0".utf8) + [3, 1] + Self.little(loopCount) + [0]
        }
        for frame in self.frames {
            out += [0x21, 0xF9, 4, self.transparentIndex == nil ? 0 : 1] + Self.little(frame.delay)
            out += [self.transparentIndex ?? 0, 0]
            out += [0x2C] + Self.little(0) + Self.little(0) + Self.little(self.width) + Self.little(self.height) + [0]
            out += [2] + Self.subBlocks(Self.lzw(frame.index, count: self.width * self.height)) + [0]
        }
        return out + [0x3B]
    }

    private static func little(_ value: Int) -> [UInt8] { [UInt8(value & 0xFF), UInt8((value >> 8) & 0xFF)] }

    /// `count` pixels of `index`, as 3-bit codes packed least significant bit first.
    private static func lzw(_ index: UInt8, count: Int) -> [UInt8] {
        let clear: UInt32 = 4
        let end: UInt32 = 5
        var codes: [UInt32] = []
        for pixel in 0..<count {
            if pixel % 2 == 0 { codes.append(clear) }
            codes.append(UInt32(index))
        }
        codes.append(end)
        var bytes: [UInt8] = []
        var buffer: UInt32 = 0
        var bits = 0
        for code in codes {
            buffer |= code << bits
            bits += 3
            while bits >= 8 {
                bytes.append(UInt8(buffer & 0xFF))
                buffer >>= 8
                bits -= 8
            }
        }
        if bits > 0 { bytes.append(UInt8(buffer & 0xFF)) }
        return bytes
    }

    private static func subBlocks(_ data: [UInt8]) -> [UInt8] {
        stride(from: 0, to: data.count, by: 255).flatMap { start in
            let block = data[start..<min(start + 255, data.count)]
            return [UInt8(block.count)] + block
        }
    }
}
