import CFFmpeg

extension WebPPrescan: AnimationHeader {
    var format: SourceFormat { .webp }
    /// The browser rule shared with GIF and APNG: 10 ms or less plays as 100 ms.
    var frameMilliseconds: [Int] { self.durations.map { $0 <= 10 ? 100 : $0 } }
    /// A WebP cut short is refused by the pre-scan.
    var truncated: Bool { false }
    /// The loop count 0 is forever, n is n plays (Chromium's reading).
    var playCount: Int? { self.loopCount == 0 ? nil : self.loopCount }

    func makeFrameSource(_ bytes: UnsafeRawBufferPointer) throws -> any FrameSource {
        try WebPFrameSource(prescan: self, bytes: bytes)
    }
}

/// The animated WebP implementation: libwebp's `WebPAnimDecoder` (the demux library) composites each frame
/// onto the canvas, blending and disposal included, the background colour ignored as browsers do, and hands
/// back straight-alpha RGBA canvases. Timing comes from the prescan's `ANMF` reading.
final class WebPFrameSource: FrameSource {
    private let prescan: WebPPrescan
    private let decoder: OpaquePointer
    /// The decoder's current canvas (owned by it, valid until the next frame).
    private var canvas: UnsafeMutablePointer<UInt8>?
    private var next = 0
    private(set) var sawTransparency = false

    /// - Parameter bytes: the whole WebP, alive and unchanged for the source's lifetime (libwebp's demuxer
    ///   reads it in place).
    init(prescan: WebPPrescan, bytes: UnsafeRawBufferPointer) throws {
        var options = WebPAnimDecoderOptions()
        var data = WebPData(bytes: bytes.baseAddress?.assumingMemoryBound(to: UInt8.self), size: bytes.count)
        var info = WebPAnimInfo()
        guard WebPAnimDecoderOptionsInit(&options) != 0 else {
            throw TranscodeError(.corrupt, "libwebp's demux library does not match its headers")
        }
        options.color_mode = MODE_RGBA
        options.use_threads = 0
        guard let decoder = WebPAnimDecoderNew(&data, &options) else {
            throw TranscodeError(.corrupt, "libwebp cannot read the animated WebP")
        }
        // Checked before `self` is complete, so that a failure frees the decoder once (deinit does not run).
        guard WebPAnimDecoderGetInfo(decoder, &info) != 0, Int(info.canvas_width) == prescan.width,
            Int(info.canvas_height) == prescan.height
        else {
            WebPAnimDecoderDelete(decoder)
            throw TranscodeError(.corrupt, "libwebp reads another canvas than the VP8X chunk announces")
        }
        self.prescan = prescan
        self.decoder = decoder
    }

    deinit {
        WebPAnimDecoderDelete(self.decoder)
    }

    func advance() throws -> Bool {
        guard self.next < self.prescan.durations.count, WebPAnimDecoderHasMoreFrames(self.decoder) != 0 else {
            return false
        }
        var timestamp: Int32 = 0
        guard WebPAnimDecoderGetNext(self.decoder, &self.canvas, &timestamp) != 0, self.canvas != nil else {
            throw TranscodeError(.corrupt, "libwebp cannot decode frame \(self.next + 1)")
        }
        self.next += 1
        return true
    }

    func flatten(
        rows: Range<Int>, over background: UInt32, into output: UnsafeMutableBufferPointer<UInt32>, stride: Int
    ) {
        guard let canvas = self.canvas else { return }
        let width = self.prescan.width
        if flattenStraightAlpha(
            canvas + rows.lowerBound * width * 4, sourceStride: width * 4, width: width, height: rows.count,
            over: background, into: output, stride: stride)
        {
            self.sawTransparency = true
        }
    }

    func withCanvas<Result>(_ body: (UnsafeRawBufferPointer) throws -> Result) rethrows -> Result {
        let count = self.prescan.width * self.prescan.height * 4
        // Before the first frame there is no canvas: a fully transparent one, as the GIF and APNG sources start.
        guard let canvas = self.canvas else {
            return try [UInt8](repeating: 0, count: count).withUnsafeBytes(body)
        }
        return try body(UnsafeRawBufferPointer(start: canvas, count: count))
    }
}
