/// An animation as browsers show it, read from its headers before any pixel is decoded: the canvas, each
/// frame's display time (the browser delay rule applied) and how many times it plays. The encoder side
/// knows nothing else of the input format; GIF is one implementation (`GIFPrescan`).
protocol AnimationHeader: Sendable {
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

    /// A new decoder positioned before the first frame (each pass over the animation takes its own).
    /// - Throws: `TranscodeError` (`corrupt`) when the decoder cannot start.
    func makeFrameSource(_ bytes: UnsafeRawBufferPointer) throws -> any FrameSource
}

/// Composites an animation's frames one after another onto its canvas, as a browser does.
protocol FrameSource: AnyObject {
    /// Composites the next frame. - Returns: false when it does not decode completely: like a browser,
    /// keep the frames before it. - Throws: when the data is damaged (treated the same way).
    func advance() throws -> Bool
    /// Writes the canvas flattened over `background` (opaque RGBA) into `output`, rows `stride` apart.
    func flatten(over background: UInt32, into output: UnsafeMutableBufferPointer<UInt32>, stride: Int)
    /// Whether any picture flattened so far had transparent pixels.
    var sawTransparency: Bool { get }
}

extension GIFPrescan: AnimationHeader {
    var frameMilliseconds: [Int] { self.frames.map(\.displayMilliseconds) }

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

    func flatten(over background: UInt32, into output: UnsafeMutableBufferPointer<UInt32>, stride: Int) {
        self.compositor.flatten(over: background, into: output, stride: stride)
    }

    var sawTransparency: Bool { self.compositor.sawTransparency }
}
