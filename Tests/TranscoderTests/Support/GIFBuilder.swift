import CFFmpeg
import Foundation

/// Writes small GIFs with giflib's encoder, one feature at a time, so each browser rule gets a file of its
/// own. Colours are given as palette indices; `palette` entries are 0xRRGGBB.
struct GIFBuilder {
    struct Frame {
        var left = 0
        var top = 0
        var width: Int
        var height: Int
        /// Row-major colour indices, `width * height`, in display order (the builder interlaces them).
        var pixels: [UInt8]
        var localPalette: [UInt32]? = nil
        /// nil: no graphic control extension at all.
        var delay: Int? = 10
        var disposal: Int = 0
        var transparentIndex: Int? = nil
        var interlaced = false

        /// A frame filled with one index.
        static func filled(
            _ index: UInt8, left: Int = 0, top: Int = 0, width: Int, height: Int, delay: Int? = 10,
            disposal: Int = 0, transparentIndex: Int? = nil
        ) -> Frame {
            Frame(
                left: left, top: top, width: width, height: height,
                pixels: [UInt8](repeating: index, count: width * height), delay: delay, disposal: disposal,
                transparentIndex: transparentIndex)
        }
    }

    var width: Int
    var height: Int
    var palette: [UInt32]? = [0x000000, 0xFFFFFF, 0xFF0000, 0x00FF00, 0x0000FF, 0xFFFF00, 0x00FFFF, 0xFF00FF]
    /// nil: no NETSCAPE2.0 block.
    var loopCount: Int? = 0
    var frames: [Frame] = []

    /// The GIF's bytes.
    func build() throws -> [UInt8] {
        let path = FileManager.default.temporaryDirectory
            .appendingPathComponent("builder-\(UUID().uuidString).gif").path
        defer { unlink(path) }
        var error: Int32 = 0
        guard let gif = EGifOpenFileName(path, false, &error) else { throw BuilderError.giflib(error) }
        var closed = false
        defer { if !closed { EGifCloseFile(gif, &error) } }
        EGifSetGifVersion(gif, true)

        let globalMap = self.palette.map(Self.colorMap)
        defer { if let globalMap { GifFreeMapObject(globalMap) } }
        guard EGifPutScreenDesc(gif, Int32(self.width), Int32(self.height), 8, 0, globalMap) == GIF_OK else {
            throw BuilderError.giflib(gif.pointee.Error)
        }
        if let loopCount = self.loopCount {
            var netscape = Array("NETSCAPE2.0".utf8)
            var count: [UInt8] = [1, UInt8(loopCount & 0xFF), UInt8(loopCount >> 8)]
            guard EGifPutExtensionLeader(gif, APPLICATION_EXT_FUNC_CODE) == GIF_OK,
                EGifPutExtensionBlock(gif, 11, &netscape) == GIF_OK,
                EGifPutExtensionBlock(gif, 3, &count) == GIF_OK,
                EGifPutExtensionTrailer(gif) == GIF_OK
            else { throw BuilderError.giflib(gif.pointee.Error) }
        }
        for frame in self.frames {
            if let delay = frame.delay {
                var control = GraphicsControlBlock(
                    DisposalMode: Int32(frame.disposal), UserInputFlag: false, DelayTime: Int32(delay),
                    TransparentColor: frame.transparentIndex.map(Int32.init) ?? NO_TRANSPARENT_COLOR)
                var extensionBytes = [UInt8](repeating: 0, count: 4)
                let length = EGifGCBToExtension(&control, &extensionBytes)
                guard EGifPutExtension(gif, GRAPHICS_EXT_FUNC_CODE, Int32(length), &extensionBytes) == GIF_OK else {
                    throw BuilderError.giflib(gif.pointee.Error)
                }
            }
            let localMap = frame.localPalette.map(Self.colorMap)
            defer { if let localMap { GifFreeMapObject(localMap) } }
            guard
                EGifPutImageDesc(
                    gif, Int32(frame.left), Int32(frame.top), Int32(frame.width), Int32(frame.height),
                    frame.interlaced, localMap) == GIF_OK
            else { throw BuilderError.giflib(gif.pointee.Error) }
            let rows: [Int] =
                frame.interlaced
                ? [(0, 8), (4, 8), (2, 4), (1, 2)].flatMap { Array(stride(from: $0.0, to: frame.height, by: $0.1)) }
                : Array(0..<frame.height)
            for y in rows {
                var row = Array(frame.pixels[(y * frame.width)..<((y + 1) * frame.width)])
                guard EGifPutLine(gif, &row, Int32(frame.width)) == GIF_OK else {
                    throw BuilderError.giflib(gif.pointee.Error)
                }
            }
        }
        closed = true
        guard EGifCloseFile(gif, &error) == GIF_OK else { throw BuilderError.giflib(error) }
        return [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
    }

    private static func colorMap(_ colors: [UInt32]) -> UnsafeMutablePointer<ColorMapObject> {
        // giflib wants a power-of-two table.
        var size = 2
        while size < colors.count { size *= 2 }
        let entries = (0..<size).map { index -> GifColorType in
            let color = index < colors.count ? colors[index] : 0
            return GifColorType(Red: UInt8(color >> 16), Green: UInt8((color >> 8) & 0xFF), Blue: UInt8(color & 0xFF))
        }
        return entries.withUnsafeBufferPointer { GifMakeMapObject(Int32(size), $0.baseAddress)! }
    }

    enum BuilderError: Error {
        case giflib(Int32)
    }
}
