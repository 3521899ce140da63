/// An APNG frame as its `fcTL` chunk describes it: everything but its pixels.
struct APNGFrameInfo: Sendable, Equatable {
    var width: Int
    var height: Int
    var left: Int
    var top: Int
    /// The delay as written: `delayNumerator / delayDenominator` seconds, a denominator of 0 meaning 100.
    var delayNumerator: Int
    var delayDenominator: Int
    /// `dispose_op` (0 none, 1 background, 2 previous) and `blend_op` (0 source, 1 over).
    var dispose: UInt8
    var blend: UInt8

    /// How long the frame shows, in milliseconds, as Chromium computes it: whole milliseconds of the
    /// written fraction (a denominator of 0 means 100), then the browser rule shared with GIF and WebP: 10 ms
    /// or less plays as 100 ms.
    var displayMilliseconds: Int {
        let denominator = self.delayDenominator == 0 ? 100 : self.delayDenominator
        let milliseconds = self.delayNumerator * 1000 / denominator
        return milliseconds <= 10 ? 100 : milliseconds
    }
}

/// The structure of an animated PNG, found by walking its chunks without inflating any image data. The
/// limits (canvas, frame count, total pixels) are enforced here, before any pixel is decoded.
///
/// Browser rules (Chromium's `PNGImageReader`):
/// - a PNG is animated when an `acTL` chunk comes before the first `IDAT`; otherwise it is a still image;
/// - the `IDAT` image is the first frame when an `fcTL` precedes it, else it is hidden from the animation;
/// - a frame counts once its `fcTL` is followed by image data (`IDAT` or `fdAT`); a frame whose rectangle
///   leaves the canvas, or whose `dispose_op`/`blend_op` is unknown, ends the animation where it stands;
/// - `num_plays` 0 plays forever, n plays n times.
struct APNGPrescan: Sendable {
    var width: Int
    var height: Int
    /// Frames whose image data is in the file, in order.
    var frames: [APNGFrameInfo]
    /// `acTL`'s `num_plays`.
    var loopCount: Int?
    /// The file ended (or a frame was unusable) before `IEND`: the frames found are all that is kept.
    var truncated: Bool

    static let signature: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]

    /// Scans `bytes` (which start like a PNG) and checks `limits` (the input's size is checked before, by
    /// `Transcoder.header`).
    /// - Throws: `TranscodeError` with `not-animated` (a still PNG), `corrupt`, `dimensions-too-large`,
    ///   `too-many-frames` or `too-many-pixels`.
    init(bytes: UnsafeRawBufferPointer, limits: TranscodeLimits) throws {
        guard bytes.starts(with: Self.signature) else {
            throw TranscodeError(.corrupt, "the file ends inside the PNG signature")
        }
        func uint32(_ offset: Int) -> Int {
            Int(bytes[offset]) << 24 | Int(bytes[offset + 1]) << 16 | Int(bytes[offset + 2]) << 8
                | Int(bytes[offset + 3])
        }
        func uint16(_ offset: Int) -> Int { Int(bytes[offset]) << 8 | Int(bytes[offset + 1]) }

        self.width = 0
        self.height = 0
        self.frames = []
        self.loopCount = nil
        self.truncated = true
        var animated = false
        var ignoredAnimation = false
        var sawImageData = false
        var pending: APNGFrameInfo?
        var position = Self.signature.count
        var first = true
        scan: while bytes.count - position >= 12 {
            let length = uint32(position)
            let type = String(decoding: bytes[(position + 4)..<(position + 8)], as: UTF8.self)
            let data = position + 8
            guard length <= 0x7FFF_FFFF, bytes.count - data - 4 >= length else { break scan }
            position = data + length + 4
            if first {
                guard type == "IHDR", length == 13 else {
                    throw TranscodeError(.corrupt, "the PNG does not start with its IHDR chunk")
                }
                first = false
                self.width = uint32(data)
                self.height = uint32(data + 4)
                guard self.width > 0, self.height > 0 else {
                    throw TranscodeError(.corrupt, "the PNG is \(self.width)x\(self.height)")
                }
                guard self.width <= limits.maxWidth, self.height <= limits.maxHeight else {
                    throw TranscodeError(
                        .dimensionsTooLarge,
                        "the canvas is \(self.width)x\(self.height); the limit is "
                            + "\(limits.maxWidth)x\(limits.maxHeight)")
                }
                continue
            }
            switch type {
            case "acTL" where !sawImageData && !animated && !ignoredAnimation && length == 8:
                let frameCount = uint32(data)
                // Chromium ignores an acTL that announces no frame or more than 2^31 - 1: a still image.
                guard frameCount > 0, frameCount <= 0x7FFF_FFFF else {
                    ignoredAnimation = true
                    break
                }
                animated = true
                self.loopCount = uint32(data + 4)
            case "fcTL" where animated && length == 26:
                let frame = APNGFrameInfo(
                    width: uint32(data + 4), height: uint32(data + 8), left: uint32(data + 12),
                    top: uint32(data + 16), delayNumerator: uint16(data + 20), delayDenominator: uint16(data + 22),
                    dispose: bytes[data + 24], blend: bytes[data + 25])
                let usable =
                    frame.width > 0 && frame.height > 0 && frame.left + frame.width <= self.width
                    && frame.top + frame.height <= self.height && frame.dispose <= 2 && frame.blend <= 1
                if !sawImageData {
                    // The IDAT image's own fcTL must cover the canvas; otherwise Chromium ignores the
                    // animation and shows the still image.
                    guard usable, frame.left == 0, frame.top == 0, frame.width == self.width,
                        frame.height == self.height
                    else {
                        animated = false
                        ignoredAnimation = true
                        break
                    }
                } else if !usable {
                    // An unusable frame ends the animation: the frames before it play.
                    break scan
                }
                pending = frame
            case "IDAT":
                if !sawImageData {
                    sawImageData = true
                    guard animated else { break }
                    // Without an fcTL before it, the IDAT image is not part of the animation.
                    if let frame = pending {
                        try self.append(frame, limits: limits)
                        pending = nil
                    }
                }
            case "fdAT" where animated && sawImageData:
                if let frame = pending {
                    try self.append(frame, limits: limits)
                    pending = nil
                }
            case "IEND":
                self.truncated = false
                break scan
            default:
                break
            }
        }
        guard !first else { throw TranscodeError(.corrupt, "the file ends inside the PNG's IHDR chunk") }
        guard animated else {
            throw TranscodeError(
                .notAnimated,
                ignoredAnimation
                    ? "the animation chunks are invalid (acTL frame count, or the first fcTL): browsers show the "
                        + "still image"
                    : "a still PNG (no acTL chunk before the image data): nothing to animate")
        }
        guard !self.frames.isEmpty else {
            if !sawImageData {
                throw TranscodeError(.corrupt, "the APNG ends before its first frame's image data")
            }
            throw TranscodeError(.notAnimated, "the APNG has no animation frame: a still image")
        }
    }

    private mutating func append(_ frame: APNGFrameInfo, limits: TranscodeLimits) throws {
        guard self.frames.count < limits.maxFrames else {
            throw TranscodeError(.tooManyFrames, "the APNG has more than \(limits.maxFrames) frames")
        }
        // Each frame is composited onto, and decoded as, a whole canvas.
        let pixels = Int64(self.frames.count + 1) * Int64(self.width) * Int64(self.height)
        guard pixels <= limits.maxTotalPixels else {
            throw TranscodeError(
                .tooManyPixels, "decoding would produce more than \(limits.maxTotalPixels) pixels")
        }
        self.frames.append(frame)
    }
}
