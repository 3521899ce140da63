import CFFmpeg

/// Streams a GIF's frames out of giflib, one row at a time, from bytes held in memory.
///
/// Owns the `GifFileType` handle (closed with `DGifCloseFile` in `deinit`) and the memory cursor giflib
/// reads through. Does not own the bytes: the caller keeps them alive for the decoder's lifetime.
/// `DGifSlurp` is never used: it allocates every frame before a size could be checked.
final class GIFDecoder {
    private let gif: UnsafeMutablePointer<GifFileType>
    private let reader: UnsafeMutablePointer<CFFmpeg_MemoryInput>
    /// One row of colour indices, as wide as the widest frame the pre-scan allowed.
    private var row: [UInt8]

    /// - Parameters:
    ///   - bytes: the whole GIF; must stay valid until the decoder is released.
    ///   - maxFrameWidth: the widest frame rectangle the pre-scan accepted.
    /// - Throws: `GIFError` when giflib cannot read the header.
    init(bytes: UnsafeRawBufferPointer, maxFrameWidth: Int) throws {
        let reader = UnsafeMutablePointer<CFFmpeg_MemoryInput>.allocate(capacity: 1)
        reader.initialize(
            to: CFFmpeg_MemoryInput(
                data: bytes.baseAddress?.assumingMemoryBound(to: UInt8.self), size: bytes.count, position: 0))
        var error: Int32 = 0
        guard let gif = CFFmpeg_DGifOpenMemory(reader, &error) else {
            reader.deallocate()
            throw GIFError(code: error, function: "DGifOpen")
        }
        self.gif = gif
        self.reader = reader
        self.row = [UInt8](repeating: 0, count: max(1, maxFrameWidth))
    }

    deinit {
        var error: Int32 = 0
        DGifCloseFile(self.gif, &error)
        self.reader.deallocate()
    }

    /// Skips to the next image descriptor and hands its rows to `body` in display order
    /// (interlaced frames are delivered de-interlaced: `body` receives the row's y within the frame).
    /// - Parameter expected: the frame as the pre-scan found it; giflib must read the same rectangle, or
    ///   the two parsers disagree about the file and decoding stops (rows are then never indexed with
    ///   another frame's geometry).
    /// - Returns: `false` when the stream has no more images.
    /// - Throws: `GIFError` when the data is damaged, ends inside the image, or disagrees with the pre-scan.
    func decodeNextImage(
        expected: GIFFrameInfo, _ body: (_ y: Int, _ indices: UnsafeBufferPointer<UInt8>) -> Void
    ) throws -> Bool {
        while true {
            var recordType = UNDEFINED_RECORD_TYPE
            guard DGifGetRecordType(self.gif, &recordType) == GIF_OK else {
                throw GIFError(code: self.gif.pointee.Error, function: "DGifGetRecordType")
            }
            switch recordType {
            case IMAGE_DESC_RECORD_TYPE:
                guard DGifGetImageDesc(self.gif) == GIF_OK else {
                    throw GIFError(code: self.gif.pointee.Error, function: "DGifGetImageDesc")
                }
                let image = self.gif.pointee.Image
                guard Int(image.Left) == expected.left, Int(image.Top) == expected.top,
                    Int(image.Width) == expected.width, Int(image.Height) == expected.height
                else {
                    throw GIFError(
                        code: D_GIF_ERR_WRONG_RECORD, function: "DGifGetImageDesc (disagrees with the pre-scan)")
                }
                try self.readRows(body)
                return true
            case EXTENSION_RECORD_TYPE:
                var code: Int32 = 0
                var block: UnsafeMutablePointer<GifByteType>?
                guard DGifGetExtension(self.gif, &code, &block) == GIF_OK else {
                    throw GIFError(code: self.gif.pointee.Error, function: "DGifGetExtension")
                }
                while block != nil {
                    guard DGifGetExtensionNext(self.gif, &block) == GIF_OK else {
                        throw GIFError(code: self.gif.pointee.Error, function: "DGifGetExtensionNext")
                    }
                }
            case TERMINATE_RECORD_TYPE:
                return false
            default:
                return false
            }
        }
    }

    private func readRows(_ body: (_ y: Int, _ indices: UnsafeBufferPointer<UInt8>) -> Void) throws {
        let descriptor = self.gif.pointee.Image
        let width = Int(descriptor.Width)
        let height = Int(descriptor.Height)
        guard width > 0, height > 0, width <= self.row.count else {
            throw GIFError(code: D_GIF_ERR_WRONG_RECORD, function: "DGifGetImageDesc")
        }
        try self.row.withUnsafeMutableBufferPointer { row in
            let base = row.baseAddress!
            for y in Self.rowOrder(height: height, interlaced: descriptor.Interlace) {
                guard DGifGetLine(self.gif, base, Int32(width)) == GIF_OK else {
                    throw GIFError(code: self.gif.pointee.Error, function: "DGifGetLine")
                }
                body(y, UnsafeBufferPointer(start: base, count: width))
            }
        }
    }

    /// The y of each row in file order. Interlaced frames store every 8th row from 0, then every 8th
    /// from 4, every 4th from 2, and every 2nd from 1.
    static func rowOrder(height: Int, interlaced: Bool) -> [Int] {
        guard interlaced else { return Array(0..<height) }
        var order: [Int] = []
        order.reserveCapacity(height)
        for (start, step) in [(0, 8), (4, 8), (2, 4), (1, 2)] {
            order.append(contentsOf: stride(from: start, to: height, by: step))
        }
        return order
    }
}
