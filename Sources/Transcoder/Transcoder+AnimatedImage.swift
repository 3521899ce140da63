import CFFmpeg

extension Transcoder {
    /// libwebp's qualities for the animated WebP's lossy colour (its alpha is lossless): the first tried, and the
    /// one tried when the first is under the quality floor. And its effort for a lossless one (its default, 75).
    static let webpQuality: Float = 80
    static let webpBetterQuality: Float = 90
    static let webpLosslessEffort: Float = 75
    /// libwebp's method (0-6): 4, its default. Method 2 encodes lossy frames in 55-60% of the time for 4-7% more
    /// bytes (gif2webp on the corpus's four slowest files); the bytes are what every reader downloads.
    static let webpMethod: Int32 = 4
    /// A lossy WebP at or above the floor but not under this share of the source's bytes is weighed against a
    /// lossless one, and the smaller kept. Lossy wins on photographic GIFs (0.1-0.4x the GIF on the corpus) and
    /// loses on flat drawings and screen recordings (1.1-6.7x), where lossless is the smaller (0.5-0.9x): see
    /// docs/benchmarks.md, "Animated WebP".
    static let webpLosslessTrigger = 0.5
    /// The lossy WebP's quality floor: its mean PSNR over the source's frames, over black and over white (the
    /// lower), in dB. A lossy WebP under it is never kept.
    static let webpMinPSNR = 35.0

    /// The animated WebP as it is kept, the smallest of the candidates at or above the quality floor
    /// (`webpMinPSNR`, measured by decoding each lossy one again):
    /// 1. lossy at quality 80: kept at once when it is under half the source;
    /// 2. under the floor, lossy at quality 90 (dithered photographs: 34 dB at 80, 35.6 at 90, at 0.35x the GIF):
    ///    kept at once when it is at or above the floor and under half the source;
    /// 3. lossless, always at the floor (every pixel exact).
    /// - Returns: the file, its size in pixels, whether it is lossless, and a lossy one's PSNR.
    /// The lossy file is weighed (`webpLosslessTrigger`) against the source's bytes the encoded frames come from: all
    /// of them, or a cut's share (a preview's seconds, the poster's first frame: a flat drawing's lossy still is
    /// larger than its lossless one, yet under half the whole GIF).
    /// - Parameter encode: one encode of `plan`, lossless or not, at a quality (`encodeAnimatedWebP`, or the still
    ///   poster's).
    func encodeAnimatedWebPChoosing(
        _ bytes: UnsafeRawBufferPointer, plan: Plan,
        encode: ((_ lossless: Bool, _ quality: Float) throws -> (bytes: [UInt8], width: Int, height: Int))? = nil
    ) throws -> (
        bytes: [UInt8], width: Int, height: Int, lossless: Bool, psnr: Double?
    ) {
        let encode = encode ?? { try self.encodeAnimatedWebP(bytes, plan: plan, lossless: $0, quality: $1) }
        typealias Candidate = (bytes: [UInt8], width: Int, height: Int, lossless: Bool, psnr: Double?)
        let sourceBytes = plan.header.frameSourceEnds?.last ?? bytes.count
        let smallEnough = Double(sourceBytes) * Self.webpLosslessTrigger
        var candidates: [Candidate] = []
        for quality in [Self.webpQuality, Self.webpBetterQuality] {
            let lossy = try encode(false, quality)
            // libwebp's own reader, not the input pre-scan: a one-picture result (a still GIF, a GIF whose frames
            // are all alike) is a still WebP without an ANIM chunk, which the pre-scan refuses as not animated.
            let psnr = try self.imagePSNR(
                lossy.bytes, reader: { try EncodedWebP($0, width: $1, height: $2) }, against: bytes, plan: plan)
            guard psnr >= Self.webpMinPSNR else { continue }
            let candidate = (lossy.bytes, lossy.width, lossy.height, false, psnr)
            if Double(lossy.bytes.count) < smallEnough { return candidate }
            candidates.append(candidate)
            // At the floor already: a better quality would only be larger.
            break
        }
        let lossless = try encode(true, Self.webpLosslessEffort)
        candidates.append((lossless.bytes, lossless.width, lossless.height, true, nil))
        return candidates.min { $0.bytes.count < $1.bytes.count }!
    }

    /// `plan` cut after its first frame (`PreviewHeader`): what a poster shows.
    static func firstPicture(of plan: Plan) -> Plan {
        let first = max(1, plan.header.frameMilliseconds.first ?? 1)
        return Plan(header: PreviewHeader(plan.header, milliseconds: first), output: plan.output)
    }

    /// The still WebP poster (`OutputFormat.webpPoster`): the first picture as shown, at the animated WebP's size,
    /// transparency kept, chosen as the animated WebP is (lossy at or above the quality floor when that is small
    /// enough, else the smaller of it and lossless), of the animation cut after its first frame (`PreviewHeader`).
    func encodeStillWebP(_ bytes: UnsafeRawBufferPointer, plan: Plan) throws -> (
        bytes: [UInt8], width: Int, height: Int, lossless: Bool, psnr: Double?
    ) {
        let cut = Self.firstPicture(of: plan)
        let size = self.imageSize(cut)
        // The first canvas, as the animated WebP's encoder is handed it.
        var canvas: [UInt8] = []
        _ = try self.forEachImageCanvas(bytes, plan: cut, size: size) { picture, _ in
            if canvas.isEmpty { canvas = Array(picture) }
        }
        guard !canvas.isEmpty else { throw TranscodeError(.encodeFailed, "the source has no first picture") }
        return try self.encodeAnimatedWebPChoosing(bytes, plan: cut) { lossless, quality in
            let file = try canvas.withUnsafeBytes {
                try AnimatedWebPEncoder.still(
                    $0, width: size.width, height: size.height, lossless: lossless, quality: quality,
                    method: Self.webpMethod)
            }
            return (file, size.width, size.height)
        }
    }

    /// The mean PSNR (dB, identical frames counted as 60) of an animated image (`file`, read back by `reader`)
    /// against the source's frames as `forEachImageCanvas` hands them to its encoder, each frame compared with
    /// the image's picture shown at its start, flattened over black and over white: the lower of the two means.
    /// - Parameter averaging2x2: compare each 2x2 block's mean colour (an odd last row or column left out): how a
    ///   4:2:0 video is judged, whose chroma has one value per block (the suite's Chromium checks of the MP4 do).
    func imagePSNR(
        _ file: [UInt8], reader: (UnsafeRawBufferPointer, _ width: Int, _ height: Int) throws -> any EncodedAnimation,
        against bytes: UnsafeRawBufferPointer, plan: Plan, averaging2x2: Bool = false
    ) throws -> Double {
        let header = plan.header
        let size = self.imageSize(plan)
        let scaler = try size.scaled ? AlphaScaler(from: header.width, header.height, to: size.width, size.height) : nil
        let source = try header.makeFrameSource(bytes)
        return try file.withUnsafeBytes { encoded in
            let decoder = try reader(encoded, size.width, size.height)
            // Where the WebP's current picture ends (libwebp's timestamps are each picture's end).
            var shownUntil: Int64 = -1
            var picture: UnsafeRawBufferPointer?
            var total = (black: 0.0, white: 0.0)
            let pass = try source.forEachFrame(durations: header.frameMilliseconds) { time in
                while shownUntil <= time, let next = try decoder.next() {
                    (picture, shownUntil) = (next.picture, next.end)
                }
                guard let picture else {
                    throw TranscodeError(.encodeFailed, "the animated image has no picture at \(time) ms")
                }
                // A side under 2 pixels has no 2x2 block: each pixel is compared.
                let blocks = averaging2x2 && size.width >= 2 && size.height >= 2
                func squaredError(_ canvas: UnsafeRawBufferPointer) -> (black: Double, white: Double) {
                    blocks
                        ? Self.squaredError2x2(canvas, picture, width: size.width, height: size.height)
                        : Self.squaredError(canvas, picture)
                }
                let error = try source.withCanvas { canvas in
                    if let scaler {
                        var error = (black: 0.0, white: 0.0)
                        try scaler.scale(canvas) { error = squaredError($0) }
                        return error
                    }
                    return squaredError(canvas)
                }
                let samples = Double(blocks ? (size.width / 2) * (size.height / 2) * 3 : size.width * size.height * 3)
                func decibels(_ squared: Double) -> Double {
                    squared == 0 ? 60 : min(60, 10 * log10(255 * 255 * samples / squared))
                }
                total = (total.black + decibels(error.black), total.white + decibels(error.white))
            }
            guard pass.frames > 0 else { return 0 }
            return min(total.black, total.white) / Double(pass.frames)
        }
    }

    /// The summed squared error of two straight-alpha RGBA pictures flattened over black and over white.
    static func squaredError(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer) -> (
        black: Double, white: Double
    ) {
        let a = a.bindMemory(to: UInt32.self)
        let b = b.bindMemory(to: UInt32.self)
        var black: Int64 = 0
        var white: Int64 = 0
        for index in 0..<min(a.count, b.count) where a[index] != b[index] {
            for shift: UInt32 in [0, 8, 16] {
                let (x, y) = (Self.flattened(a[index], shift), Self.flattened(b[index], shift))
                black += (x.black - y.black) * (x.black - y.black)
                white += (x.white - y.white) * (x.white - y.white)
            }
        }
        return (Double(black) / (255 * 255), Double(white) / (255 * 255))
    }

    /// One channel (`shift`: 0 red, 8 green, 16 blue) of a straight-alpha RGBA pixel flattened over black (c * a)
    /// and over white (c * a + 255 * (255 - a)), both scaled by 255.
    @inline(__always)
    static func flattened(_ pixel: UInt32, _ shift: UInt32) -> (black: Int64, white: Int64) {
        let alpha = Int64(pixel >> 24)
        let overBlack = Int64((pixel >> shift) & 0xFF) * alpha
        return (overBlack, overBlack + 255 * (255 - alpha))
    }

    /// `squaredError` of each 2x2 block's mean colour, flattened over black and over white (an odd last row or
    /// column left out).
    static func squaredError2x2(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer, width: Int, height: Int)
        -> (black: Double, white: Double)
    {
        let a = a.bindMemory(to: UInt32.self)
        let b = b.bindMemory(to: UInt32.self)
        guard a.count >= width * height, b.count >= width * height else { return (0, 0) }
        var black: Int64 = 0
        var white: Int64 = 0
        for y in stride(from: 0, to: height - 1, by: 2) {
            for x in stride(from: 0, to: width - 1, by: 2) {
                let top = y * width + x
                for shift: UInt32 in [0, 8, 16] {
                    // Sums of four pixels flattened over black and over white.
                    var (blackX, blackY, whiteX, whiteY): (Int64, Int64, Int64, Int64) = (0, 0, 0, 0)
                    for index in [top, top + 1, top + width, top + width + 1] {
                        let (x, y) = (Self.flattened(a[index], shift), Self.flattened(b[index], shift))
                        blackX += x.black
                        blackY += y.black
                        whiteX += x.white
                        whiteY += y.white
                    }
                    black += (blackX - blackY) * (blackX - blackY)
                    white += (whiteX - whiteY) * (whiteX - whiteY)
                }
            }
        }
        // Means of four, scaled by 255: each squared difference of sums is 16 * 255^2 times the means' one.
        return (Double(black) / (16 * 255 * 255), Double(white) / (16 * 255 * 255))
    }

    /// The animated image's size: the canvas as it is (a WebP needs no even size, so an odd GIF keeps its
    /// last row and column exactly), or, when the canvas does not fit the box, fitted inside it, aspect kept,
    /// each side rounded to the nearest pixel.
    static func imageSize(width: Int, height: Int, maxWidth: Int, maxHeight: Int) -> (
        width: Int, height: Int, scaled: Bool
    ) {
        guard width > maxWidth || height > maxHeight else { return (width, height, false) }
        let factor = min(Double(maxWidth) / Double(width), Double(maxHeight) / Double(height))
        return (
            min(maxWidth, max(1, Int((Double(width) * factor).rounded()))),
            min(maxHeight, max(1, Int((Double(height) * factor).rounded()))), true
        )
    }

    /// One pass over the source with its transparency kept: each frame composited as browsers do, scaled into
    /// the box when larger (`imageSize`), handed to `add` with its start time. Frames after a damaged one are
    /// left out, as the video's pass leaves them.
    /// - Returns: where the last frame ends (milliseconds).
    func forEachImageCanvas(
        _ bytes: UnsafeRawBufferPointer, plan: Plan, size: (width: Int, height: Int, scaled: Bool),
        add: (UnsafeRawBufferPointer, Int64) throws -> Void
    ) throws -> Int64 {
        let header = plan.header
        let scaler = try size.scaled ? AlphaScaler(from: header.width, header.height, to: size.width, size.height) : nil
        let source = try header.makeFrameSource(bytes)
        let pass = try source.forEachFrame(durations: header.frameMilliseconds) { start in
            try source.withCanvas { canvas in
                if let scaler {
                    try scaler.scale(canvas) { try add($0, start) }
                } else {
                    try add(canvas, start)
                }
            }
        }
        guard pass.frames > 0 else {
            throw TranscodeError(
                .corrupt, "the \(header.format.rawValue.uppercased()) has no frame that decodes completely")
        }
        return pass.end
    }

    /// The animated image's size for this transcoder's box.
    func imageSize(_ plan: Plan) -> (width: Int, height: Int, scaled: Bool) {
        Self.imageSize(
            width: plan.header.width, height: plan.header.height, maxWidth: self.options.maxOutputWidth,
            maxHeight: self.options.maxOutputHeight)
    }

    /// One WebP encode of the source (`forEachImageCanvas`).
    /// - Parameter quality: libwebp's quality when lossy, its effort when lossless.
    /// - Returns: the animated WebP and its size.
    func encodeAnimatedWebP(_ bytes: UnsafeRawBufferPointer, plan: Plan, lossless: Bool, quality: Float) throws -> (
        bytes: [UInt8], width: Int, height: Int
    ) {
        let size = self.imageSize(plan)
        let encoder = try AnimatedWebPEncoder(
            width: size.width, height: size.height, playCount: plan.header.playCount, lossless: lossless,
            quality: quality, method: Self.webpMethod)
        let end = try self.forEachImageCanvas(bytes, plan: plan, size: size) { try encoder.add($0, start: $1) }
        return (try encoder.finish(end: end), size.width, size.height)
    }

    /// The animated AVIF's ladder (libavif's colour quantizer: 0 best, 63 worst). It starts at `avifStart`; while an
    /// encode reads at or above the quality floor (`webpMinPSNR`: 35 dB over black and over white, measured by
    /// decoding it again) it climbs to the next of `avifUp` and keeps the last that did; while one reads below, it
    /// descends `avifDown`, the last rungs at full chroma (4:4:4: flat drawings keep their colour edges, where 4:2:0
    /// blurs them: cartoon_flag_delaware.gif read 29.6 at q32, 36.4 dB at q20 4:4:4). The earlier rungs started at
    /// q32 and never climbed: that, not libaom, made AVIFs of 0.165x the GIF where q40-q56 keep the floor
    /// (docs/benchmarks.md, "Animated AVIF").
    static let avifStart: Int32 = 40
    static let avifUp: [Int32] = [48, 56]
    static let avifDown: [(quantizer: Int32, fullChroma: Bool)] = [(32, false), (24, false), (20, true)]
    /// What one rung down gains at most (q32 over q40, q24 over q32: 2.4-3.1 dB on cartoon_dancing_banana.gif and
    /// photo_hopper.gif): the descent goes on only while the rungs left could reach the floor, so a dithered
    /// photograph far under it keeps its WebP without AV1 encodes that could not pass.
    static let avifGainPerRung = 3.0
    /// What 4:4:4 must gain over 4:2:0 at the start's quantizer for the descent to go on at 4:4:4.
    static let avifChromaGain = 1.0

    /// The largest canvas an AVIF is made of (either side; the output size, after the box): libaom holds its whole
    /// lookahead (about 540 bytes a pixel with alpha, `MemoryPrediction`), which libavif 0.11 cannot shorten. Above
    /// it the AVIF is not made and `.auto` answers the next format. (One hosted service caps at 1,200 px a side.)
    public static let avifMaxSide = 1200

    /// A play count at or above this is as good as forever (a loop count of 65535 plays 65536 times).
    static let avifForever = 65535

    /// The animated AVIF as it is kept: the highest rung of the ladder at or above the quality floor (`avifStart`,
    /// `avifUp`, `avifDown`); none when none is, when the output is larger than `avifMaxSide`, or when the source
    /// plays a number of times (libavif 0.11 writes no loop count, and readers loop such a file forever).
    /// - Parameters:
    ///   - still: the first picture only, as a still image (`OutputFormat.avifPoster`), whatever the play count.
    ///   - transparent: whether the source shows a transparent pixel: the alpha plane is written only then.
    /// - Throws: `TranscodeError` `.encodeFailed` when no AVIF is kept.
    func encodeAnimatedAVIFChoosing(
        _ bytes: UnsafeRawBufferPointer, plan: Plan, still: Bool = false, transparent: Bool = true
    ) throws -> (bytes: [UInt8], width: Int, height: Int, psnr: Double) {
        let plan = still ? Self.firstPicture(of: plan) : plan
        if !still, let plays = plan.header.playCount, plays < Self.avifForever {
            throw TranscodeError(
                .encodeFailed, "the source plays \(plays) times; an AVIF from libavif 0.11 loops forever")
        }
        let size = self.imageSize(plan)
        guard max(size.width, size.height) <= Self.avifMaxSide else {
            throw TranscodeError(
                .encodeFailed, "an AVIF is made up to \(Self.avifMaxSide) px a side, not \(size.width)x\(size.height)")
        }
        func encode(_ quantizer: Int32, fullChroma: Bool) throws -> (file: [UInt8], psnr: Double) {
            let encoder = try AnimatedAVIFEncoder(
                width: size.width, height: size.height, quantizer: quantizer, fullChroma: fullChroma,
                threads: self.options.rendition.threads, still: still, alpha: transparent)
            let end = try self.forEachImageCanvas(bytes, plan: plan, size: size) { try encoder.add($0, start: $1) }
            let file = try encoder.finish(end: end)
            let psnr = try self.imagePSNR(
                file, reader: { try EncodedAVIF($0, width: $1, height: $2) }, against: bytes, plan: plan)
            return (file, psnr)
        }
        // From an encode at or above the floor, up the quantizers of its chroma while the floor holds and the file
        // shrinks; the last that did is kept.
        func climb(from passed: (file: [UInt8], psnr: Double), fullChroma: Bool) throws -> (file: [UInt8], psnr: Double)
        {
            var kept = passed
            for quantizer in Self.avifUp {
                let made = try encode(quantizer, fullChroma: fullChroma)
                guard made.psnr >= Self.webpMinPSNR, made.file.count < kept.file.count else { break }
                kept = made
            }
            return kept
        }
        // The ladder: the file it keeps. - Throws: when no rung reaches the floor.
        func ladder() throws -> (file: [UInt8], psnr: Double) {
            let first = try encode(Self.avifStart, fullChroma: false)
            if first.psnr >= Self.webpMinPSNR { return try climb(from: first, fullChroma: false) }
            // Under the floor at 4:2:0: the same quantizer at 4:4:4 tells whether colour edges are what holds it there
            // (a flat drawing gains 5-25 dB: cartoon_dancing_banana.gif, apng_red_blue_loop3.apng's poster) or the
            // picture itself (a dithered photograph gains about 1).
            let full = try encode(Self.avifStart, fullChroma: true)
            if full.psnr >= Self.webpMinPSNR { return try climb(from: full, fullChroma: true) }
            let fullChroma = full.psnr >= first.psnr + Self.avifChromaGain
            var readings = [first.psnr, full.psnr]
            var smallest = min(first.file.count, full.file.count)
            let rungs = fullChroma ? Self.avifDown.map { ($0.quantizer, true) } : Self.avifDown
            for (index, rung) in rungs.enumerated() {
                // Down only while the rungs left could reach the floor, and while a file could still be kept: a lower
                // quantizer only grows it (huge_1080_transparent_30f.gif went on to q20 4:4:4 and 4.2 MB for a GIF of
                // 1.8, six encodes of a 1080x1080 canvas).
                let left = Double(rungs.count - index)
                guard Self.webpMinPSNR - (readings.max() ?? 0) <= Self.avifGainPerRung * left,
                    still || smallest < bytes.count
                else { break }
                let made = try encode(rung.0, fullChroma: rung.1)
                if made.psnr >= Self.webpMinPSNR { return made }
                readings.append(made.psnr)
                smallest = min(smallest, made.file.count)
            }
            throw TranscodeError(
                .encodeFailed,
                "no AVIF reaches \(Self.webpMinPSNR) dB: "
                    + readings.map { String(format: "%.2f", $0) }.joined(separator: ", "))
        }
        let kept = try ladder()
        // Kept only when smaller than the source: a transparent, dithered 1080x1080 GIF's lossless alpha plane alone
        // made its AVIF 2.3x the GIF (huge_1080_transparent_30f.gif), which no page is better off with. (A still is
        // one picture of it.)
        guard still || kept.file.count < bytes.count else {
            throw TranscodeError(
                .encodeFailed, "the AVIF at the quality floor is \(kept.file.count) bytes, not smaller than the source")
        }
        return (kept.file, size.width, size.height, kept.psnr)
    }
}

/// Scales straight-alpha RGBA canvases with libswscale's bicubic filter, premultiplied: a transparent pixel's
/// colour (black in a GIF's canvas) must not bleed into the opaque pixels beside it, which scaling straight
/// colours does (a dark fringe round every transparent hole).
final class AlphaScaler {
    private let scaler: ImageScaler
    private let frame: VideoFrame
    private var premultiplied: [UInt32]
    private var output: [UInt8]
    private let width: Int
    private let height: Int

    init(from sourceWidth: Int, _ sourceHeight: Int, to width: Int, _ height: Int) throws {
        self.scaler = try ImageScaler(
            sourceWidth: sourceWidth, sourceHeight: sourceHeight, destinationWidth: width, destinationHeight: height,
            destinationFormat: AV_PIX_FMT_RGBA, matrix: SWS_CS_ITU709, fullRange: true)
        self.frame = try VideoFrame(width: width, height: height, format: AV_PIX_FMT_RGBA)
        self.premultiplied = [UInt32](repeating: 0, count: sourceWidth * sourceHeight)
        self.output = [UInt8](repeating: 0, count: width * height * 4)
        self.width = width
        self.height = height
    }

    /// Scales `canvas` (the source's size, straight alpha) and calls `body` with the result (the destination's
    /// size, straight alpha, `width * 4` bytes a row), valid during the call.
    func scale(_ canvas: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer) throws -> Void) throws {
        let pixels = canvas.bindMemory(to: UInt32.self)
        self.premultiplied.withUnsafeMutableBufferPointer { premultiplied in
            for index in premultiplied.indices {
                let pixel = pixels[index]
                let alpha = pixel >> 24
                if alpha == 255 {
                    premultiplied[index] = pixel
                } else if alpha == 0 {
                    premultiplied[index] = 0
                } else {
                    let red = ((pixel & 0xFF) * alpha + 127) / 255
                    let green = (((pixel >> 8) & 0xFF) * alpha + 127) / 255
                    let blue = (((pixel >> 16) & 0xFF) * alpha + 127) / 255
                    premultiplied[index] = red | green << 8 | blue << 16 | alpha << 24
                }
            }
        }
        try self.premultiplied.withUnsafeBufferPointer { try self.scaler.convert($0, into: self.frame) }
        let (width, height) = (self.width, self.height)
        try self.frame.withUnsafeMutablePointer { frame in
            guard let data = frame.pointee.data.0 else { throw TranscodeError(.encodeFailed, "no scaled picture") }
            let stride = Int(frame.pointee.linesize.0)
            self.output.withUnsafeMutableBytes { output in
                for y in 0..<height {
                    let row = data + y * stride
                    for x in 0..<width {
                        let (red, green, blue, alpha) = (row[x * 4], row[x * 4 + 1], row[x * 4 + 2], row[x * 4 + 3])
                        let target = (y * width + x) * 4
                        guard alpha > 0 else {
                            output.storeBytes(of: UInt32(0), toByteOffset: target, as: UInt32.self)
                            continue
                        }
                        // Back to straight colour; a bicubic overshoot past the alpha is clamped.
                        func straight(_ channel: UInt8) -> UInt8 {
                            UInt8(min(255, (UInt32(channel) * 255 + UInt32(alpha) / 2) / UInt32(alpha)))
                        }
                        output[target] = straight(red)
                        output[target + 1] = straight(green)
                        output[target + 2] = straight(blue)
                        output[target + 3] = alpha
                    }
                }
            }
        }
        try self.output.withUnsafeBytes(body)
    }
}

/// A WebP this process just encoded, read back with libwebp's `WebPAnimDecoder` (animated or still): each picture as
/// a straight-alpha RGBA canvas with the time it ends. Owns the decoder (freed in `deinit`); the bytes must outlive it.
/// An animated image read back picture by picture as straight-alpha RGBA, for the quality check.
protocol EncodedAnimation: AnyObject {
    /// The next picture (valid until the next call) and where it ends, in milliseconds; nil after the last.
    func next() throws -> (picture: UnsafeRawBufferPointer, end: Int64)?
}

private final class EncodedWebP: EncodedAnimation {
    private let decoder: OpaquePointer
    private let count: Int

    init(_ bytes: UnsafeRawBufferPointer, width: Int, height: Int) throws {
        var options = WebPAnimDecoderOptions()
        guard WebPAnimDecoderOptionsInit(&options) != 0 else {
            throw TranscodeError(.encodeFailed, "libwebp's demux library does not match its headers")
        }
        options.color_mode = MODE_RGBA
        options.use_threads = 0
        var data = WebPData(bytes: bytes.baseAddress?.assumingMemoryBound(to: UInt8.self), size: bytes.count)
        guard let decoder = WebPAnimDecoderNew(&data, &options) else {
            throw TranscodeError(.encodeFailed, "libwebp cannot read the WebP it wrote")
        }
        var info = WebPAnimInfo()
        guard WebPAnimDecoderGetInfo(decoder, &info) != 0, Int(info.canvas_width) == width,
            Int(info.canvas_height) == height
        else {
            WebPAnimDecoderDelete(decoder)
            throw TranscodeError(.encodeFailed, "the WebP written is not \(width)x\(height)")
        }
        self.decoder = decoder
        self.count = width * height * 4
    }

    deinit {
        WebPAnimDecoderDelete(self.decoder)
    }

    /// The next picture (valid until the next call) and where it ends, in milliseconds; nil after the last.
    func next() throws -> (picture: UnsafeRawBufferPointer, end: Int64)? {
        guard WebPAnimDecoderHasMoreFrames(self.decoder) != 0 else { return nil }
        var canvas: UnsafeMutablePointer<UInt8>?
        var timestamp: Int32 = 0
        guard WebPAnimDecoderGetNext(self.decoder, &canvas, &timestamp) != 0, let canvas else {
            throw TranscodeError(.encodeFailed, "libwebp cannot decode the WebP it wrote")
        }
        return (UnsafeRawBufferPointer(start: canvas, count: self.count), Int64(timestamp))
    }
}
