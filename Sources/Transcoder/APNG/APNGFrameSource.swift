import CFFmpeg

extension APNGPrescan: AnimationHeader {
    var format: SourceFormat { .apng }
    var frameMilliseconds: [Int] { self.frames.map(\.displayMilliseconds) }
    /// `num_plays` 0 is forever, n is n plays.
    var playCount: Int? { self.loopCount == 0 ? nil : self.loopCount }

    func makeFrameSource(_ bytes: UnsafeRawBufferPointer) throws -> any FrameSource {
        try APNGFrameSource(prescan: self, bytes: bytes)
    }
}

/// The APNG implementation: libavformat's `apng` demuxer and libavcodec's `apng` decoder, which apply each
/// frame's blending and disposal and return whole composited canvases (in the PNG's own pixel format,
/// converted here to straight-alpha RGBA). Timing comes from the prescan's `fcTL` reading: the demuxer
/// rewrites a delay of 0. The demuxer leaves out an `IDAT` image that is not part of the animation, as
/// browsers do. Known gap: the decoder cannot blend 16-bit frames with alpha (`rgba64be`, `ya16be`) OVER
/// the canvas and drops them; the animation then ends there (`truncated`).
final class APNGFrameSource: FrameSource {
    private let prescan: APNGPrescan
    private let reader: MediaReader
    private var converter: RGBAConverter?
    /// The last composited canvas, straight-alpha RGBA, `width * height` pixels.
    private var canvas: [UInt32]
    private var next = 0
    private(set) var sawTransparency = false

    init(prescan: APNGPrescan, bytes: UnsafeRawBufferPointer) throws {
        self.prescan = prescan
        do {
            self.reader = try MediaReader(memory: bytes, formatName: "apng", interFramesOnly: true)
        } catch {
            throw TranscodeError(.corrupt, "libavformat cannot read the APNG", underlying: error)
        }
        self.canvas = [UInt32](repeating: 0, count: prescan.width * prescan.height)
    }

    func advance() throws -> Bool {
        guard self.next < self.prescan.frames.count else { return false }
        // The demuxer leaves out an IDAT image that is not part of the animation, as browsers do.
        guard let frame = try self.reader.next() else { return false }
        guard Int(frame.pointee.width) == self.prescan.width, Int(frame.pointee.height) == self.prescan.height
        else {
            throw TranscodeError(
                .corrupt, "the decoder returned a \(frame.pointee.width)x\(frame.pointee.height) frame")
        }
        if self.converter?.sourceFormat != frame.pointee.format {
            self.converter = try RGBAConverter(
                width: self.prescan.width, height: self.prescan.height,
                sourceFormat: AVPixelFormat(frame.pointee.format))
        }
        try self.canvas.withUnsafeMutableBufferPointer { try self.converter!.convert(frame, into: $0) }
        self.next += 1
        return true
    }

    func flatten(
        rows: Range<Int>, over background: UInt32, into output: UnsafeMutableBufferPointer<UInt32>, stride: Int
    ) {
        let width = self.prescan.width
        let transparent = self.canvas.withUnsafeBytes {
            flattenStraightAlpha(
                $0.baseAddress! + rows.lowerBound * width * 4, sourceStride: width * 4, width: width,
                height: rows.count, over: background, into: output, stride: stride)
        }
        if transparent { self.sawTransparency = true }
    }

    func withCanvas<Result>(_ body: (UnsafeRawBufferPointer) throws -> Result) rethrows -> Result {
        try self.canvas.withUnsafeBytes(body)
    }
}
