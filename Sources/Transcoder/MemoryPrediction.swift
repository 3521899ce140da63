/// The peak memory one conversion is predicted to take, from its output's area and the formats it makes: what the
/// server admits conversions by against its budget (`transcode.memoryBudgetBytes`), before a pixel is decoded.
///
/// The table is measured (`scripts/bench-memory-formats`, docs/benchmarks.md#memory-per-conversion): the peak resident
/// memory of `transcode-server convert` making each format alone, at three canvas sizes, less the same process
/// converting nothing, fitted as a fixed part and a part per output pixel, each rounded up. An object's files are
/// encoded one after another, so a conversion's peak is the largest of its formats' peaks, plus the source's bytes
/// (held whole while it converts).
public enum MemoryPrediction {
    /// One format's peak: `fixedBytes + bytesPerPixel * output pixels`.
    public struct Cost: Sendable, Equatable {
        public let fixedBytes: Int
        public let bytesPerPixel: Int

        public func bytes(pixels: Int) -> Int { self.fixedBytes + self.bytesPerPixel * pixels }
    }

    /// The process itself, serving and converting nothing: what the budget keeps back from conversions (RSS of
    /// `serve` at rest after its first requests, with a margin).
    public static let processBaseBytes = 96 << 20

    /// The H.264 video and the JPEG poster (every conversion): x264's lookahead of 40 pictures and the canvases.
    public static let video = Cost(fixedBytes: 24 << 20, bytesPerPixel: 60)
    /// The animated WebP (libwebp's animation encoder keeps a few canvases and its candidates).
    public static let webp = Cost(fixedBytes: 16 << 20, bytesPerPixel: 70)
    /// The animated AVIF with an alpha plane (libaom good mode holds its whole lookahead, two images a picture). An
    /// opaque source's takes less than half (no alpha plane: 260 MiB at 1080x1080), but whether a GIF shows a
    /// transparent pixel is known only once it is decoded: every AVIF is predicted with alpha.
    public static let avif = Cost(fixedBytes: 48 << 20, bytesPerPixel: 540)
    /// VP9 with alpha in WebM (two libvpx encoders).
    public static let webm = Cost(fixedBytes: 40 << 20, bytesPerPixel: 120)
    /// A still (WebP or AVIF) of the first picture.
    public static let still = Cost(fixedBytes: 16 << 20, bytesPerPixel: 60)

    /// The cost of making `format`: an extra's registered cost (`ExtraFormat`), or the video's.
    public static func cost(of format: OutputFormat) -> Cost {
        ExtraFormat.of(format)?.cost ?? self.video
    }

    /// The predicted peak of converting a source of `sourceBytes` whose canvas is `width` x `height` with
    /// `options`: the largest of its formats' peaks at the output size (the canvas fitted into the box), plus the
    /// source. An AVIF above `Transcoder.avifMaxSide` is not made, and not counted.
    public static func peakBytes(width: Int, height: Int, sourceBytes: Int, options: TranscodeOptions) -> Int {
        let size = Transcoder.imageSize(
            width: max(1, width), height: max(1, height), maxWidth: options.maxOutputWidth,
            maxHeight: options.maxOutputHeight)
        let pixels = size.width * size.height
        var peak = self.video.bytes(pixels: pixels)
        for extra in ExtraFormat.registry where options.rendition.extraFormats.contains(extra.format) {
            if let maxSide = extra.maxSide, max(size.width, size.height) > maxSide { continue }
            peak = max(peak, extra.cost.bytes(pixels: pixels))
        }
        return peak + sourceBytes
    }

    /// The predicted peak of converting `source` with `options`: its canvas read from its header
    /// (`canvasSize(of:)`), or, when the header cannot be read, the largest the box allows.
    public static func peakBytes(of source: [UInt8], options: TranscodeOptions) -> Int {
        let canvas = self.canvasSize(of: source) ?? (options.maxOutputWidth, options.maxOutputHeight)
        return self.peakBytes(width: canvas.width, height: canvas.height, sourceBytes: source.count, options: options)
    }

    /// The canvas a GIF's logical screen, an APNG's `IHDR` or an animated WebP's `VP8X` declares, read from the
    /// first 30 bytes without decoding anything; nil for anything else. (The pre-scan checks it against the
    /// frames and the limits later; this only sizes the admission.)
    public static func canvasSize(of source: [UInt8]) -> (width: Int, height: Int)? {
        func le16(_ at: Int) -> Int { Int(source[at]) | Int(source[at + 1]) << 8 }
        func le24(_ at: Int) -> Int { le16(at) | Int(source[at + 2]) << 16 }
        func be32(_ at: Int) -> Int { source[at..<at + 4].reduce(0) { $0 << 8 | Int($1) } }
        func starts(_ text: String, at offset: Int = 0) -> Bool {
            let bytes = Array(text.utf8)
            return source.count >= offset + bytes.count && Array(source[offset..<offset + bytes.count]) == bytes
        }
        if (starts("GIF87a") || starts("GIF89a")), source.count >= 10 {
            return (le16(6), le16(8))
        }
        if source.count >= 24, source[0..<8].elementsEqual([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]),
            starts("IHDR", at: 12)
        {
            return (be32(16), be32(20))
        }
        if source.count >= 30, starts("RIFF"), starts("WEBP", at: 8), starts("VP8X", at: 12) {
            return (le24(24) + 1, le24(27) + 1)
        }
        return nil
    }
}
