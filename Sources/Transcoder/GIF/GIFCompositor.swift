/// Builds each displayed picture of a GIF the way browsers do, and flattens it over a background.
///
/// Pixels are 32-bit RGBA in memory order (R, G, B, A), which is FFmpeg's `AV_PIX_FMT_RGBA`. GIF alpha
/// is all or nothing, so "transparent" is the value 0 and every palette colour has alpha 255.
///
/// Rules, as Chrome, Firefox and Safari apply them:
/// - the canvas starts fully transparent (the logical screen's background colour index is ignored);
/// - disposal 0 and 1 (and the reserved 4-7) keep the frame; 2 clears the frame rectangle to
///   transparent; 3 restores the canvas as it was before the frame was drawn;
/// - frame rectangles are clipped to the logical screen;
/// - a colour index past the end of the palette reads as opaque black (the palette is padded to 256
///   entries with black, as Firefox does), so no index can read out of bounds; a frame with no palette
///   at all is drawn with that all-black palette; the transparent index wins over both.
final class GIFCompositor {
    let width: Int
    let height: Int
    /// The current canvas, `width * height` pixels.
    private(set) var canvas: [UInt32]
    /// The pixels under the last frame's clipped rectangle, saved when its disposal is "restore previous".
    private var savedRegion: [UInt32] = []
    private var lastFrame: (disposal: GIFDisposal, clip: Clip)?
    /// Whether any displayed canvas so far had a transparent pixel.
    private(set) var sawTransparency = false

    private let bytes: UnsafeRawBufferPointer
    private let globalPalette: [UInt32]

    private struct Clip {
        var x0: Int
        var y0: Int
        var x1: Int
        var y1: Int
        var isEmpty: Bool { self.x0 >= self.x1 || self.y0 >= self.y1 }
    }

    /// - Parameters:
    ///   - prescan: the GIF's structure; its colour tables are read from `bytes`.
    ///   - bytes: the whole GIF, alive for the compositor's lifetime.
    init(prescan: GIFPrescan, bytes: UnsafeRawBufferPointer) {
        self.width = prescan.width
        self.height = prescan.height
        self.canvas = [UInt32](repeating: 0, count: prescan.width * prescan.height)
        self.bytes = bytes
        self.globalPalette = Self.palette(prescan.globalColorTable, in: bytes)
    }

    /// A 256-entry lookup table from colour index to RGBA, padded with opaque black.
    private static func palette(_ table: ColorTableLocation?, in bytes: UnsafeRawBufferPointer) -> [UInt32] {
        var palette = [UInt32](repeating: 0xFF00_0000, count: 256)
        guard let table else { return palette }
        for index in 0..<min(256, table.count) {
            let offset = table.offset + index * 3
            palette[index] =
                UInt32(bytes[offset]) | UInt32(bytes[offset + 1]) << 8 | UInt32(bytes[offset + 2]) << 16
                | 0xFF00_0000
        }
        return palette
    }

    /// Disposes of the previous frame, then decodes `frame` from `decoder` onto the canvas.
    /// - Returns: `false` when the decoder has no further image.
    /// - Throws: `GIFError` when the image data is damaged; the canvas then holds a partial frame and
    ///   must not be shown.
    func draw(_ frame: GIFFrameInfo, from decoder: GIFDecoder) throws -> Bool {
        self.disposeLastFrame()

        let clip = Clip(
            x0: max(0, frame.left), y0: max(0, frame.top),
            x1: min(self.width, frame.left + frame.width), y1: min(self.height, frame.top + frame.height))
        if frame.disposal == .restorePrevious, !clip.isEmpty {
            self.savedRegion.removeAll(keepingCapacity: true)
            // Exactly the region: grown by appends it doubled past it (8.9 MB for a 4.7 MB 1080x1080 canvas).
            self.savedRegion.reserveCapacity((clip.x1 - clip.x0) * (clip.y1 - clip.y0))
            for y in clip.y0..<clip.y1 {
                self.savedRegion.append(
                    contentsOf: self.canvas[(y * self.width + clip.x0)..<(y * self.width + clip.x1)])
            }
        }
        self.lastFrame = (frame.disposal, clip)

        var palette = frame.localColorTable.map { Self.palette($0, in: self.bytes) } ?? self.globalPalette
        if let transparent = frame.transparentIndex {
            palette[Int(transparent)] = 0
        }
        let width = self.width
        let left = frame.left
        let top = frame.top
        return try palette.withUnsafeBufferPointer { palette in
            try self.canvas.withUnsafeMutableBufferPointer { canvas in
                try decoder.decodeNextImage(expected: frame) { y, indices in
                    let canvasY = top + y
                    // Rows are still decoded when the frame lies off the screen (the LZW stream must be read).
                    guard !clip.isEmpty, canvasY >= clip.y0, canvasY < clip.y1 else { return }
                    let rowStart = canvasY * width
                    for x in clip.x0..<clip.x1 {
                        let color = palette[Int(indices[x - left])]
                        if color != 0 {
                            canvas[rowStart + x] = color
                        }
                    }
                }
            }
        }
    }

    private func disposeLastFrame() {
        guard let (disposal, clip) = self.lastFrame, !clip.isEmpty else { return }
        switch disposal {
        case .clearToTransparent:
            for y in clip.y0..<clip.y1 {
                let start = y * self.width
                for x in clip.x0..<clip.x1 { self.canvas[start + x] = 0 }
            }
        case .restorePrevious:
            let rowWidth = clip.x1 - clip.x0
            for (row, y) in (clip.y0..<clip.y1).enumerated() {
                let start = y * self.width + clip.x0
                self.canvas.replaceSubrange(
                    start..<(start + rowWidth), with: self.savedRegion[(row * rowWidth)..<((row + 1) * rowWidth)])
            }
        case .unspecified, .keep:
            break
        }
    }

    /// Writes the canvas's `rows` over `background` into `output`, a `stride`-pixel-wide RGBA buffer at
    /// least `rows.count` rows tall, the first row at its start; pixels of `output` beyond the canvas are
    /// left untouched (they hold the padding). GIF alpha is all or nothing, so this is the shared
    /// straight-alpha flattening at its two extremes.
    func flatten(
        rows: Range<Int>, over background: UInt32, into output: UnsafeMutableBufferPointer<UInt32>, stride: Int
    ) {
        let transparent = self.canvas.withUnsafeBytes {
            flattenStraightAlpha(
                $0.baseAddress! + rows.lowerBound * self.width * 4, sourceStride: self.width * 4, width: self.width,
                height: rows.count, over: background, into: output, stride: stride)
        }
        if transparent { self.sawTransparency = true }
    }
}

extension RGBColor {
    /// The colour as an opaque RGBA pixel in memory order R, G, B, A.
    var rgbaPixel: UInt32 {
        UInt32(self.red) | UInt32(self.green) << 8 | UInt32(self.blue) << 16 | 0xFF00_0000
    }
}
