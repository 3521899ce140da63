/// The structure of an animated WebP, found by walking its RIFF chunks without decoding any image data.
/// The limits (canvas, frame count, total pixels) are enforced here, before any pixel is decoded; libwebp's
/// demuxer validates the rest (frames inside the canvas, chunk order) when the decoder starts.
struct WebPPrescan: Sendable {
    var width: Int
    var height: Int
    /// Each `ANMF` frame's duration as written, in milliseconds (libwebp reads the rest of the chunk).
    var durations: [Int]
    /// `ANIM`'s loop count: 0 plays forever, n plays n times.
    var loopCount: Int?

    /// Whether `bytes` start like a WebP: `RIFF`, a size, `WEBP`.
    static func matches(_ bytes: UnsafeRawBufferPointer) -> Bool {
        bytes.count >= 12 && bytes.starts(with: Array("RIFF".utf8))
            && bytes[8..<12].elementsEqual(Array("WEBP".utf8))
    }

    /// Scans `bytes` (which `matches`) and checks `limits` (the input's size is checked before, by
    /// `Transcoder.header`). Unlike a GIF or an APNG, a WebP cut short is refused whole (`corrupt`): libwebp's
    /// demuxer refuses it, and Chromium shows nothing of it.
    /// - Throws: `TranscodeError` with `not-animated` (a still WebP), `corrupt`, `dimensions-too-large`,
    ///   `too-many-frames` or `too-many-pixels`.
    init(bytes: UnsafeRawBufferPointer, limits: TranscodeLimits) throws {
        func uint24(_ offset: Int) -> Int {
            Int(bytes[offset]) | Int(bytes[offset + 1]) << 8 | Int(bytes[offset + 2]) << 16
        }
        func uint32(_ offset: Int) -> Int { uint24(offset) | Int(bytes[offset + 3]) << 24 }

        let end = 8 + uint32(4)
        guard end <= bytes.count else {
            throw TranscodeError(.corrupt, "the WebP ends before the \(end) bytes its RIFF header announces")
        }
        self.width = 0
        self.height = 0
        self.durations = []
        self.loopCount = nil
        var position = 12
        guard end - position >= 8 else { throw TranscodeError(.corrupt, "the WebP ends inside its first chunk") }
        let firstType = String(decoding: bytes[position..<(position + 4)], as: UTF8.self)
        let firstLength = uint32(position + 4)
        guard firstType == "VP8X" else {
            throw TranscodeError(.notAnimated, "a still WebP (a lone \(firstType) chunk): nothing to animate")
        }
        guard firstLength >= 10, end - position - 8 >= 10 else {
            throw TranscodeError(.corrupt, "the WebP ends inside its VP8X chunk")
        }
        let flags = bytes[position + 8]
        guard flags & 0x02 != 0 else {
            throw TranscodeError(.notAnimated, "a still WebP (VP8X announces no animation): nothing to animate")
        }
        self.width = 1 + uint24(position + 12)
        self.height = 1 + uint24(position + 15)
        guard self.width <= limits.maxWidth, self.height <= limits.maxHeight else {
            throw TranscodeError(
                .dimensionsTooLarge,
                "the canvas is \(self.width)x\(self.height); the limit is \(limits.maxWidth)x\(limits.maxHeight)")
        }
        let canvasPixels = Int64(self.width) * Int64(self.height)
        while end - position >= 8 {
            let type = String(decoding: bytes[position..<(position + 4)], as: UTF8.self)
            let length = uint32(position + 4)
            let data = position + 8
            guard end - data >= length else {
                throw TranscodeError(.corrupt, "the WebP's \(type) chunk runs past the end of the file")
            }
            position = data + length + (length & 1)
            switch type {
            case "ANIM" where length >= 6:
                self.loopCount = Int(bytes[data + 4]) | Int(bytes[data + 5]) << 8
            case "ANMF" where length >= 16:
                guard self.durations.count < limits.maxFrames else {
                    throw TranscodeError(.tooManyFrames, "the WebP has more than \(limits.maxFrames) frames")
                }
                // Each frame is composited onto a whole canvas.
                guard Int64(self.durations.count + 1) * canvasPixels <= limits.maxTotalPixels else {
                    throw TranscodeError(
                        .tooManyPixels, "decoding would produce more than \(limits.maxTotalPixels) pixels")
                }
                self.durations.append(uint24(data + 12))
            default:
                break
            }
        }
        guard !self.durations.isEmpty else {
            throw TranscodeError(.corrupt, "the animated WebP has no complete frame")
        }
    }
}
