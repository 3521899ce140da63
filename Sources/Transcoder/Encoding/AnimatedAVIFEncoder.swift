import CFFmpeg

/// Encodes straight-alpha RGBA canvases into an animated AVIF with libavif (0.11, Debian 12) over libaom: each
/// picture's own display time in whole milliseconds (timescale 1000), transparency as AVIF's alpha auxiliary
/// image (lossless: GIF transparency is all or nothing), colour at a fixed quantizer.
///
/// libavif wants each picture's duration when it is added, which is known only when the next one starts: the
/// last picture added is held (converted to YUV) until then. A picture identical to the one held lengthens it
/// instead of adding another, as the video's composite pass and libwebp do.
///
/// libaom only at speed 6 or slower: from speed 7 libavif 0.11 switches libaom to its real-time mode, whose rate
/// control aborts the process on some inputs (`rc_pick_q_and_bounds_no_stats_cbr` assertion, libaom 3.6, seen on
/// cartoon_hotdog.gif). libavif 0.11 writes no loop count: readers loop such a file forever, so the transcoder
/// makes an AVIF only of a source that loops forever (`Transcoder.encodeAnimatedAVIFChoosing`).
///
/// Not `Sendable`: one encode, one thread. Everything libavif allocated is freed in `deinit`.
final class AnimatedAVIFEncoder {
    let width: Int
    let height: Int
    private let encoder: UnsafeMutablePointer<avifEncoder>
    /// The picture held until the next one's start gives its duration, its start, and its RGBA to compare.
    private var held: (image: UnsafeMutablePointer<avifImage>, start: Int64)?
    /// The held picture's RGBA, to compare the next one with (one buffer, refilled).
    private var heldPixels: [UInt8] = []
    private let pixelFormat: avifPixelFormat
    /// One picture, a still image (`AVIF_ADD_IMAGE_FLAG_SINGLE`: libavif sets libaom up for one frame, no
    /// lookahead, and writes no image sequence).
    private let still: Bool
    /// Whether the file carries an alpha plane: only for a source that shows a transparent pixel. Without one,
    /// libaom encodes one image per picture instead of two, and holds half the memory.
    private let alpha: Bool

    /// libaom's speed for the AVIF: the fastest setting that stays in libaom's good-quality mode (see above).
    static let speed: Int32 = 6

    /// Colour is limited range (16-235), signalled BT.709 primaries, sRGB transfer and BT.601 matrix: Chromium's
    /// animated-image path reads full-range AV1 as limited (25 dB against its own reading of the GIF on
    /// cartoon_hotdog.gif, 37 dB once limited).
    /// - Parameters:
    ///   - quantizer: the colour's quantizer, 0 (best) to 63; alpha is lossless.
    ///   - fullChroma: 4:4:4 instead of 4:2:0: flat drawings keep their colour edges (a flag's red on blue read
    ///     31 dB at 4:2:0, 36 at 4:4:4), where photographs only grow.
    ///   - threads: libaom's threads.
    ///   - still: one picture only, written as a still image (the poster).
    ///   - alpha: write the alpha plane (`AVIF_PLANES_ALL`); false for an opaque source (`AVIF_PLANES_YUV`, the RGBA's
    ///     alpha ignored).
    /// - Throws: `TranscodeError` `.encodeFailed` when libavif cannot be set up.
    init(
        width: Int, height: Int, quantizer: Int32, fullChroma: Bool, threads: Int, still: Bool = false,
        alpha: Bool = true
    ) throws {
        guard width > 0, height > 0, width <= 65536, height <= 65536 else {
            throw TranscodeError(.encodeFailed, "an AVIF cannot be \(width)x\(height)")
        }
        guard let encoder = avifEncoderCreate() else {
            throw TranscodeError(.encodeFailed, "avifEncoderCreate failed (out of memory?)")
        }
        self.width = width
        self.height = height
        self.encoder = encoder
        self.still = still
        self.alpha = alpha
        self.pixelFormat = fullChroma ? AVIF_PIXEL_FORMAT_YUV444 : AVIF_PIXEL_FORMAT_YUV420
        encoder.pointee.codecChoice = AVIF_CODEC_CHOICE_AOM
        encoder.pointee.speed = Self.speed
        encoder.pointee.maxThreads = Int32(max(1, threads))
        encoder.pointee.timescale = 1000
        encoder.pointee.keyframeInterval = 0
        encoder.pointee.minQuantizer = quantizer
        encoder.pointee.maxQuantizer = quantizer
        encoder.pointee.minQuantizerAlpha = Int32(AVIF_QUANTIZER_LOSSLESS)
        encoder.pointee.maxQuantizerAlpha = Int32(AVIF_QUANTIZER_LOSSLESS)
    }

    deinit {
        if let held { avifImageDestroy(held.image) }
        avifEncoderDestroy(self.encoder)
    }

    /// Adds the picture shown from `start` (milliseconds; later than the last one's) until the next one starts.
    /// - Parameter rgba: `width` x `height` straight-alpha RGBA, `width * 4` bytes a row.
    func add(_ rgba: UnsafeRawBufferPointer, start: Int64) throws {
        let count = self.width * self.height * 4
        guard rgba.count >= count, start > (self.held?.start ?? -1) else {
            throw TranscodeError(.encodeFailed, "an AVIF picture out of order or short")
        }
        if self.still, self.held != nil {
            throw TranscodeError(.encodeFailed, "a still AVIF has one picture")
        }
        if self.held != nil, self.heldPixels.withUnsafeBytes({ memcmp($0.baseAddress!, rgba.baseAddress!, count) == 0 })
        {
            return
        }
        guard let image = avifImageCreate(UInt32(self.width), UInt32(self.height), 8, self.pixelFormat) else {
            throw TranscodeError(.encodeFailed, "avifImageCreate failed (out of memory?)")
        }
        image.pointee.yuvRange = AVIF_RANGE_LIMITED
        image.pointee.colorPrimaries = UInt16(AVIF_COLOR_PRIMARIES_BT709)
        image.pointee.transferCharacteristics = UInt16(AVIF_TRANSFER_CHARACTERISTICS_SRGB)
        image.pointee.matrixCoefficients = UInt16(AVIF_MATRIX_COEFFICIENTS_BT601)
        var rgb = avifRGBImage()
        avifRGBImageSetDefaults(&rgb, image)
        rgb.format = AVIF_RGB_FORMAT_RGBA
        rgb.pixels = UnsafeMutablePointer(mutating: rgba.baseAddress!.assumingMemoryBound(to: UInt8.self))
        rgb.rowBytes = UInt32(self.width * 4)
        rgb.ignoreAlpha = self.alpha ? AVIF_FALSE : AVIF_TRUE
        let planes = self.alpha ? AVIF_PLANES_ALL : AVIF_PLANES_YUV
        let allocated = avifImageAllocatePlanes(image, planes.rawValue)
        let converted = allocated == AVIF_RESULT_OK ? avifImageRGBToYUV(image, &rgb) : allocated
        guard converted == AVIF_RESULT_OK else {
            avifImageDestroy(image)
            throw TranscodeError(.encodeFailed, "libavif: \(String(cString: avifResultToString(converted)))")
        }
        try self.flushHeld(until: start)
        self.held = (image, start)
        if self.heldPixels.count != count { self.heldPixels = [UInt8](repeating: 0, count: count) }
        self.heldPixels.withUnsafeMutableBytes { $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: rgba[..<count])) }
    }

    /// Ends the last picture at `end` (milliseconds) and assembles the file.
    /// - Returns: the whole animated AVIF.
    func finish(end: Int64) throws -> [UInt8] {
        guard let held, end > held.start else {
            throw TranscodeError(.encodeFailed, "an AVIF with no picture, or ending before its last one starts")
        }
        try self.flushHeld(until: end)
        var output = avifRWData(data: nil, size: 0)
        defer { avifRWDataFree(&output) }
        let result = avifEncoderFinish(self.encoder, &output)
        guard result == AVIF_RESULT_OK, let data = output.data else {
            throw TranscodeError(.encodeFailed, "avifEncoderFinish: \(self.describe(result))")
        }
        var file = Array(UnsafeBufferPointer(start: data, count: output.size))
        Self.clearTimestamps(&file)
        return file
    }

    /// Zeroes the creation and modification times libavif writes into an image sequence's `mvhd`, `tkhd` and
    /// `mdhd` boxes (the clock at encoding): the same source and options must make the same bytes, on every node
    /// and every day (one key, one file; the ETag holds the file's digest). Zero is what MP4 writers put when they
    /// have no time to give. Walks the box tree (`moov`, `trak`, `mdia`) so that no byte of the picture data is
    /// read as a box.
    static func clearTimestamps(_ file: inout [UInt8]) {
        func walk(_ start: Int, _ end: Int) {
            var position = start
            while position + 8 <= end {
                var size = file[position..<position + 4].reduce(0) { $0 << 8 | Int($1) }
                let type = String(decoding: file[position + 4..<position + 8], as: UTF8.self)
                var header = 8
                if size == 1, position + 16 <= end {
                    size = file[position + 8..<position + 16].reduce(0) { $0 << 8 | Int($1) }
                    header = 16
                } else if size == 0 {
                    size = end - position
                }
                guard size >= header, position + size <= end else { return }
                switch type {
                case "moov", "trak", "mdia": walk(position + header, position + size)
                case "mvhd", "tkhd", "mdhd":
                    // A full box: version (1 byte) and flags (3), then the two times, 8 bytes each in version 1.
                    let times = position + header + 4
                    let length = file[position + header] == 1 ? 16 : 8
                    if times + length <= position + size {
                        for index in times..<times + length { file[index] = 0 }
                    }
                default: break
                }
                position += size
            }
        }
        walk(0, file.count)
    }

    private func flushHeld(until end: Int64) throws {
        guard let held else { return }
        self.held = nil
        defer { avifImageDestroy(held.image) }
        let flags = self.still ? AVIF_ADD_IMAGE_FLAG_SINGLE : AVIF_ADD_IMAGE_FLAG_NONE
        let result = avifEncoderAddImage(
            self.encoder, held.image, UInt64(end - held.start), avifAddImageFlags(flags.rawValue))
        guard result == AVIF_RESULT_OK else {
            throw TranscodeError(.encodeFailed, "avifEncoderAddImage: \(self.describe(result))")
        }
    }

    private func describe(_ result: avifResult) -> String {
        let detail = withUnsafeBytes(of: self.encoder.pointee.diag.error) { raw in
            String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
        }
        return String(cString: avifResultToString(result)) + (detail.isEmpty ? "" : " (\(detail))")
    }
}

/// An animated AVIF read back with libavif (dav1d), picture by picture as RGBA: what the quality check compares.
final class EncodedAVIF: EncodedAnimation {
    private let decoder: UnsafeMutablePointer<avifDecoder>
    /// The picture `next()` hands out, reused for each.
    private let pixels: UnsafeMutableRawBufferPointer
    private let width: Int
    private let height: Int

    init(_ bytes: UnsafeRawBufferPointer, width: Int, height: Int) throws {
        guard let decoder = avifDecoderCreate() else {
            throw TranscodeError(.encodeFailed, "avifDecoderCreate failed (out of memory?)")
        }
        self.decoder = decoder
        self.width = width
        self.height = height
        self.pixels = .allocate(byteCount: width * height * 4, alignment: 16)
        decoder.pointee.maxThreads = 1
        let parsed =
            avifDecoderSetIOMemory(decoder, bytes.baseAddress?.assumingMemoryBound(to: UInt8.self), bytes.count)
                == AVIF_RESULT_OK ? avifDecoderParse(decoder) : AVIF_RESULT_IO_ERROR
        guard parsed == AVIF_RESULT_OK, Int(decoder.pointee.image.pointee.width) == width,
            Int(decoder.pointee.image.pointee.height) == height
        else {
            throw TranscodeError(.encodeFailed, "libavif cannot read the \(width)x\(height) AVIF it wrote")
        }
    }

    deinit {
        avifDecoderDestroy(self.decoder)
        self.pixels.deallocate()
    }

    func next() throws -> (picture: UnsafeRawBufferPointer, end: Int64)? {
        let result = avifDecoderNextImage(self.decoder)
        if result == AVIF_RESULT_NO_IMAGES_REMAINING { return nil }
        guard result == AVIF_RESULT_OK, let image = self.decoder.pointee.image else {
            throw TranscodeError(.encodeFailed, "libavif cannot decode the AVIF it wrote")
        }
        var rgb = avifRGBImage()
        avifRGBImageSetDefaults(&rgb, image)
        rgb.format = AVIF_RGB_FORMAT_RGBA
        rgb.rowBytes = UInt32(self.width * 4)
        rgb.pixels = self.pixels.baseAddress!.assumingMemoryBound(to: UInt8.self)
        let converted = avifImageYUVToRGB(image, &rgb)
        guard converted == AVIF_RESULT_OK else {
            throw TranscodeError(.encodeFailed, "libavif cannot convert the AVIF it wrote")
        }
        let timing = self.decoder.pointee.imageTiming
        let end = Int64(timing.ptsInTimescales + timing.durationInTimescales) * 1000 / Int64(max(1, timing.timescale))
        return (UnsafeRawBufferPointer(self.pixels), end)
    }
}
