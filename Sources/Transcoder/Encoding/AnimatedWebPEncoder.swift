import CFFmpeg

/// Encodes straight-alpha RGBA canvases into an animated WebP with libwebp's `WebPAnimEncoder` (the mux library):
/// transparency kept, each picture's own display time in whole milliseconds and the play count written in the
/// `ANIM` chunk, so that a browser shows it as it shows the source, over whatever the page has behind it.
///
/// The encoder owns its `WebPAnimEncoder` and one `WebPPicture` it imports each canvas into; both are freed in
/// `deinit`. The assembled file is handed back by `finish`. Not `Sendable`: one encode, one thread.
///
/// libwebp finds each picture's changed rectangle and, for a picture identical to the one before, lengthens
/// the one before instead of adding a frame: the same merging the video's composite pass does.
final class AnimatedWebPEncoder {
    let width: Int
    let height: Int
    private let encoder: OpaquePointer
    private var config = WebPConfig()
    private var picture = WebPPicture()
    private var lastStart: Int64 = -1

    /// Lossless, or lossy colour at `quality` with lossless alpha (`alpha_quality` 100): GIF transparency is all
    /// or nothing, and a lossy alpha plane would fray its edges over a dark page. The pixels under full
    /// transparency may change (`exact` 0): no browser shows them, and they compress better as libwebp picks them.
    /// - Parameters:
    ///   - playCount: plays a browser makes, nil for forever (written as `ANIM` loop count 0; n plays as n, the
    ///     reading of Chromium, Firefox and Safari).
    ///   - lossless: every pixel exact (VP8L); else lossy colour (VP8).
    ///   - quality: libwebp's 0-100: the picture's quality when lossy, the effort spent when lossless.
    ///   - method: libwebp's effort, 0-6.
    /// - Throws: `TranscodeError` `.encodeFailed` when libwebp refuses the parameters or cannot allocate.
    init(width: Int, height: Int, playCount: Int?, lossless: Bool, quality: Float, method: Int32) throws {
        guard (1...Int(WEBP_MAX_DIMENSION)).contains(width), (1...Int(WEBP_MAX_DIMENSION)).contains(height) else {
            throw TranscodeError(.encodeFailed, "a WebP cannot be \(width)x\(height)")
        }
        self.width = width
        self.height = height
        var options = WebPAnimEncoderOptions()
        guard WebPAnimEncoderOptionsInit(&options) != 0, WebPConfigInit(&self.config) != 0,
            WebPPictureInit(&self.picture) != 0
        else {
            throw TranscodeError(.encodeFailed, "libwebp's mux library does not match its headers")
        }
        // A loop count is 16 bits; more plays than it holds are as good as forever to a reader.
        options.anim_params.loop_count = Int32(min(playCount ?? 0, 65535))
        // Transparent black: the canvas's start, which browsers ignore anyway (they clear to transparent).
        options.anim_params.bgcolor = 0
        // No key frames beyond the first (libwebp's default for WebPAnimEncoder; gif2webp's own kmin 9, kmax 17
        // made the corpus's files slower and larger); mixed lossy and lossless frames off: trying both per frame
        // doubles the work (the whole file is tried both ways instead, see `encodeAnimatedWebPChoosing`).
        options.allow_mixed = 0
        try Self.configure(&self.config, lossless: lossless, quality: quality, method: method)
        guard let encoder = WebPAnimEncoderNew(Int32(width), Int32(height), &options) else {
            throw TranscodeError(.encodeFailed, "WebPAnimEncoderNew failed (out of memory?)")
        }
        self.encoder = encoder
        self.picture.width = Int32(width)
        self.picture.height = Int32(height)
        self.picture.use_argb = 1
    }

    deinit {
        WebPAnimEncoderDelete(self.encoder)
        WebPPictureFree(&self.picture)
    }

    /// Adds the picture shown from `start` (milliseconds; later than the last one's) until the next one starts.
    /// - Parameter rgba: `width` x `height` straight-alpha RGBA, `width * 4` bytes a row.
    func add(_ rgba: UnsafeRawBufferPointer, start: Int64) throws {
        guard rgba.count >= self.width * self.height * 4, start > self.lastStart else {
            throw TranscodeError(.encodeFailed, "a WebP picture out of order or short")
        }
        guard
            WebPPictureImportRGBA(
                &self.picture, rgba.baseAddress!.assumingMemoryBound(to: UInt8.self), Int32(self.width * 4)) != 0
        else {
            throw TranscodeError(.encodeFailed, "WebPPictureImportRGBA failed (out of memory?)")
        }
        guard WebPAnimEncoderAdd(self.encoder, &self.picture, Int32(clamping: start), &self.config) != 0 else {
            throw TranscodeError(.encodeFailed, "WebPAnimEncoderAdd: \(self.lastError)")
        }
        self.lastStart = start
    }

    /// Ends the last picture at `end` (milliseconds) and assembles the file.
    /// - Returns: the whole animated WebP.
    func finish(end: Int64) throws -> [UInt8] {
        guard end > self.lastStart, self.lastStart >= 0 else {
            throw TranscodeError(.encodeFailed, "a WebP with no picture, or ending before its last one starts")
        }
        // The end, passed as a picture-less add, is what gives the last frame its duration.
        guard WebPAnimEncoderAdd(self.encoder, nil, Int32(clamping: end), nil) != 0 else {
            throw TranscodeError(.encodeFailed, "WebPAnimEncoderAdd: \(self.lastError)")
        }
        var data = WebPData()
        WebPDataInit(&data)
        defer { WebPDataClear(&data) }
        guard WebPAnimEncoderAssemble(self.encoder, &data) != 0, let bytes = data.bytes else {
            throw TranscodeError(.encodeFailed, "WebPAnimEncoderAssemble: \(self.lastError)")
        }
        return Array(UnsafeBufferPointer(start: bytes, count: data.size))
    }

    /// The settings of every picture (see `init`).
    static func configure(_ config: inout WebPConfig, lossless: Bool, quality: Float, method: Int32) throws {
        config.lossless = lossless ? 1 : 0
        config.quality = quality
        config.method = method
        config.alpha_quality = 100
        config.alpha_compression = 1
        config.exact = 0
        config.thread_level = 0
        guard WebPValidateConfig(&config) != 0 else {
            throw TranscodeError(.encodeFailed, "libwebp refuses quality \(quality), method \(method)")
        }
    }

    /// One picture as a still WebP (no `ANIM` chunk: libwebp's simple format, or `VP8X` with an alpha flag), with
    /// the settings of the animated one's pictures. `WebPAnimEncoder` writes a one-picture file as a still only when
    /// its picture covers the canvas; a transparent border makes it a one-frame animation.
    /// - Parameter rgba: `width` x `height` straight-alpha RGBA, `width * 4` bytes a row.
    static func still(
        _ rgba: UnsafeRawBufferPointer, width: Int, height: Int, lossless: Bool, quality: Float, method: Int32
    ) throws -> [UInt8] {
        guard (1...Int(WEBP_MAX_DIMENSION)).contains(width), (1...Int(WEBP_MAX_DIMENSION)).contains(height),
            rgba.count >= width * height * 4
        else { throw TranscodeError(.encodeFailed, "a WebP cannot be \(width)x\(height)") }
        var config = WebPConfig()
        var picture = WebPPicture()
        guard WebPConfigInit(&config) != 0, WebPPictureInit(&picture) != 0 else {
            throw TranscodeError(.encodeFailed, "libwebp does not match its headers")
        }
        defer { WebPPictureFree(&picture) }
        try Self.configure(&config, lossless: lossless, quality: quality, method: method)
        picture.width = Int32(width)
        picture.height = Int32(height)
        picture.use_argb = 1
        guard
            WebPPictureImportRGBA(&picture, rgba.baseAddress!.assumingMemoryBound(to: UInt8.self), Int32(width * 4))
                != 0
        else { throw TranscodeError(.encodeFailed, "WebPPictureImportRGBA failed (out of memory?)") }
        var writer = WebPMemoryWriter()
        WebPMemoryWriterInit(&writer)
        defer { WebPMemoryWriterClear(&writer) }
        let encoded = withUnsafeMutablePointer(to: &writer) { writer in
            picture.writer = WebPMemoryWrite
            picture.custom_ptr = UnsafeMutableRawPointer(writer)
            return WebPEncode(&config, &picture)
        }
        guard encoded != 0, let memory = writer.mem else {
            throw TranscodeError(.encodeFailed, "WebPEncode failed (error \(picture.error_code.rawValue))")
        }
        return Array(UnsafeBufferPointer(start: memory, count: writer.size))
    }

    private var lastError: String {
        WebPAnimEncoderGetError(self.encoder).map { String(cString: $0) } ?? "unknown error"
    }
}
