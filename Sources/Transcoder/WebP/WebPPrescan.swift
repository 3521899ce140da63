/// An animated WebP frame as its `ANMF` chunk describes it: everything but its pixels.
struct WebPFrameInfo: Sendable, Equatable {
    var left: Int
    var top: Int
    var width: Int
    var height: Int
    /// The duration as written, in milliseconds.
    var durationMilliseconds: Int

    /// How long the frame shows: the browser rule shared with GIF and APNG, 10 ms or less plays as 100 ms.
    var displayMilliseconds: Int {
        self.durationMilliseconds <= 10 ? 100 : self.durationMilliseconds
    }
}

/// The structure of an animated WebP, found by walking its RIFF chunks without decoding any image data.
/// The limits (canvas, frame count, total pixels) are enforced here, before any pixel is decoded; libwebp's
/// demuxer validates the rest (frames inside the canvas, chunk order) when the decoder starts.
struct WebPPrescan: Sendable {
    var width: Int
    var height: Int
    var frames: [WebPFrameInfo]
    /// `ANIM`'s loop count: 0 plays forever, n plays n times.
    var loopCount: Int?
    /// The file ends before the size its RIFF header announces (libwebp's demuxer then refuses it, as
    /// Chromium does).
    var truncated: Bool

    /// Whether `bytes` start like a WebP: `RIFF`, a size, `WEBP`.
    static func matches(_ bytes: UnsafeRawBufferPointer) -> Bool {
        bytes.count >= 12 && bytes.starts(with: Array("RIFF".utf8))
            && bytes[8..<12].elementsEqual(Array("WEBP".utf8))
    }

    /// Scans `bytes` (which `matches`) and checks `limits`.
    /// - Throws: `TranscodeError` with `not-animated` (a still WebP), `corrupt`, `too-large`,
    ///   `dimensions-too-large`, `too-many-frames` or `too-many-pixels`.
    init(bytes: UnsafeRawBufferPointer, limits: TranscodeLimits) throws {
        guard bytes.count <= limits.maxInputBytes else {
            throw TranscodeError(
                .tooLarge, "the WebP is \(bytes.count) bytes; the limit is \(limits.maxInputBytes)")
        }
        func uint24(_ offset: Int) -> Int {
            Int(bytes[offset]) | Int(bytes[offset + 1]) << 8 | Int(bytes[offset + 2]) << 16
        }
        func uint32(_ offset: Int) -> Int { uint24(offset) | Int(bytes[offset + 3]) << 24 }

        let riffEnd = 8 + uint32(4)
        self.truncated = riffEnd > bytes.count
        let end = min(riffEnd, bytes.count)
        self.width = 0
        self.height = 0
        self.frames = []
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
                self.truncated = true
                break
            }
            position = data + length + (length & 1)
            switch type {
            case "ANIM" where length >= 6:
                self.loopCount = Int(bytes[data + 4]) | Int(bytes[data + 5]) << 8
            case "ANMF" where length >= 16:
                guard self.frames.count < limits.maxFrames else {
                    throw TranscodeError(.tooManyFrames, "the WebP has more than \(limits.maxFrames) frames")
                }
                // Each frame is composited onto a whole canvas.
                guard Int64(self.frames.count + 1) * canvasPixels <= limits.maxTotalPixels else {
                    throw TranscodeError(
                        .tooManyPixels, "decoding would produce more than \(limits.maxTotalPixels) pixels")
                }
                self.frames.append(
                    WebPFrameInfo(
                        left: 2 * uint24(data), top: 2 * uint24(data + 3), width: 1 + uint24(data + 6),
                        height: 1 + uint24(data + 9), durationMilliseconds: uint24(data + 12)))
            default:
                break
            }
        }
        guard !self.frames.isEmpty else {
            throw TranscodeError(.corrupt, "the animated WebP has no complete frame")
        }
    }
}
