/// An animation as browsers show it, read from its headers before any pixel is decoded: the canvas, each
/// frame's display time (the browser delay rule applied) and how many times it plays. The encoder side
/// knows nothing else of the input format: GIF (`GIFPrescan`), APNG (`APNGPrescan`) and animated WebP
/// (`WebPPrescan`) implement it.
protocol AnimationHeader: Sendable {
    var format: SourceFormat { get }
    /// The canvas as browsers show it.
    var width: Int { get }
    var height: Int { get }
    /// Display time of each frame the headers announce, in milliseconds.
    var frameMilliseconds: [Int] { get }
    /// The loop count as written (`nil` when the file has none) and the plays a browser makes (`nil`:
    /// forever).
    var loopCount: Int? { get }
    var playCount: Int? { get }
    /// The headers already show the file is cut short.
    var truncated: Bool { get }
    /// Where each frame's data ends in the file (the bytes the source spends up to and including it), when the
    /// format tells (GIF); nil otherwise. The size guard compares a video's bytes with the source's for the same
    /// pictures (`SizeGuardPolicy.overrunsTheSource`).
    var frameSourceEnds: [Int]? { get }

    /// A new decoder positioned before the first frame (each pass over the animation takes its own).
    /// - Throws: `TranscodeError` (`corrupt`) when the decoder cannot start.
    func makeFrameSource(_ bytes: UnsafeRawBufferPointer) throws -> any FrameSource
}

/// Composites an animation's frames one after another onto its canvas, as a browser does.
protocol FrameSource: AnyObject {
    /// Composites the next frame. - Returns: false when it does not decode completely: like a browser,
    /// keep the frames before it. - Throws: when the data is damaged (treated the same way).
    func advance() throws -> Bool
    /// Writes the canvas's `rows` flattened over `background` (opaque RGBA) into `output`, the first of them
    /// at `output`'s first row, rows `stride` apart (a band of rows lets a picture be compared with another
    /// without a second whole picture in memory).
    func flatten(
        rows: Range<Int>, over background: UInt32, into output: UnsafeMutableBufferPointer<UInt32>, stride: Int)
    /// Whether any picture flattened so far had transparent pixels.
    var sawTransparency: Bool { get }
    /// Calls `body` with the canvas as it stands, transparency kept: straight-alpha RGBA (memory order R, G, B,
    /// A), `width * 4` bytes a row, valid during the call. What an output that keeps alpha (animated WebP)
    /// encodes; `flatten` is what one without alpha does.
    func withCanvas<Result>(_ body: (UnsafeRawBufferPointer) throws -> Result) rethrows -> Result
}

extension FrameSource {
    /// Composites each frame of `durations` in turn and calls `shown` with its start (milliseconds), stopping at
    /// the first frame that does not decode completely, as browsers keep the frames before it.
    /// - Returns: how many frames were shown, and where the last one ends.
    func forEachFrame(durations: [Int], _ shown: (_ start: Int64) throws -> Void) throws -> (
        frames: Int, end: Int64
    ) {
        var time: Int64 = 0
        var frames = 0
        for milliseconds in durations {
            guard (try? self.advance()) == true else { break }
            try shown(time)
            time += Int64(milliseconds)
            frames += 1
        }
        return (frames, time)
    }
}

/// Flattens straight-alpha RGBA rows (memory order R, G, B, A) over an opaque background, as a page shows
/// the animation over its background colour: `c * a + background * (1 - a)`, rounded.
/// - Returns: whether any pixel was not opaque.
func flattenStraightAlpha(
    _ source: UnsafeRawPointer, sourceStride: Int, width: Int, height: Int, over background: UInt32,
    into output: UnsafeMutableBufferPointer<UInt32>, stride: Int
) -> Bool {
    var sawTransparency = false
    let backgroundChannels = (background & 0xFF, (background >> 8) & 0xFF, (background >> 16) & 0xFF)
    for y in 0..<height {
        let row = (source + y * sourceStride).assumingMemoryBound(to: UInt32.self)
        let destination = y * stride
        for x in 0..<width {
            let pixel = row[x]
            let alpha = pixel >> 24
            if alpha == 255 {
                output[destination + x] = pixel
                continue
            }
            sawTransparency = true
            if alpha == 0 {
                output[destination + x] = background
                continue
            }
            let inverse = 255 - alpha
            let red = ((pixel & 0xFF) * alpha + backgroundChannels.0 * inverse + 127) / 255
            let green = (((pixel >> 8) & 0xFF) * alpha + backgroundChannels.1 * inverse + 127) / 255
            let blue = (((pixel >> 16) & 0xFF) * alpha + backgroundChannels.2 * inverse + 127) / 255
            output[destination + x] = red | green << 8 | blue << 16 | 0xFF00_0000
        }
    }
    return sawTransparency
}

extension AnimationHeader {
    var frameSourceEnds: [Int]? { nil }
}

extension GIFPrescan: AnimationHeader {
    var format: SourceFormat { .gif }
    var frameMilliseconds: [Int] { self.frames.map(\.displayMilliseconds) }
    var frameSourceEnds: [Int]? { self.frames.map(\.sourceEnd) }

    func makeFrameSource(_ bytes: UnsafeRawBufferPointer) throws -> any FrameSource {
        try GIFFrameSource(prescan: self, bytes: bytes)
    }
}

/// The GIF implementation: giflib decodes each frame's indices, `GIFCompositor` applies disposal and
/// transparency on the canvas.
final class GIFFrameSource: FrameSource {
    private let prescan: GIFPrescan
    private let decoder: GIFDecoder
    private let compositor: GIFCompositor
    private var next = 0

    init(prescan: GIFPrescan, bytes: UnsafeRawBufferPointer) throws {
        self.prescan = prescan
        do {
            self.decoder = try GIFDecoder(bytes: bytes, maxFrameWidth: prescan.frames.map(\.width).max() ?? 1)
        } catch {
            throw TranscodeError(.corrupt, "giflib cannot read the GIF", underlying: error)
        }
        self.compositor = GIFCompositor(prescan: prescan, bytes: bytes)
    }

    func advance() throws -> Bool {
        guard self.next < self.prescan.frames.count else { return false }
        defer { self.next += 1 }
        return try self.compositor.draw(self.prescan.frames[self.next], from: self.decoder)
    }

    func flatten(
        rows: Range<Int>, over background: UInt32, into output: UnsafeMutableBufferPointer<UInt32>, stride: Int
    ) {
        self.compositor.flatten(rows: rows, over: background, into: output, stride: stride)
    }

    var sawTransparency: Bool { self.compositor.sawTransparency }

    func withCanvas<Result>(_ body: (UnsafeRawBufferPointer) throws -> Result) rethrows -> Result {
        try self.compositor.canvas.withUnsafeBytes(body)
    }
}
