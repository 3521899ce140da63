/// The files an object may have besides its video and poster, each registered with what making it costs and how it
/// is made. Adding one is one entry here and its encoder: `ObjectFiles.extras`, `MemoryPrediction.cost(of:)` and
/// `Transcoder`'s conversion read this list, and none of them switches over formats (a format in the list is made
/// when asked for; one not in it is no extra at all).
struct ExtraFormat: Sendable {
    /// Its registry entry (name, extension, media type).
    let format: OutputFormat
    /// What making it takes at its peak (`MemoryPrediction`).
    let cost: MemoryPrediction.Cost
    /// The largest side it is made at; above, it is not made (and not counted by the memory prediction).
    var maxSide: Int? = nil
    /// Whether it is made for this source, once asked for (a WebM only when it shows more than the MP4).
    var isMade: @Sendable (_ transcoder: Transcoder, _ plan: Transcoder.Plan, _ transparent: Bool) -> Bool = {
        _, _, _ in true
    }
    /// Encodes it from a pass of its own over the source; `path` is where it will be committed.
    let encode:
        @Sendable (
            _ transcoder: Transcoder, _ bytes: UnsafeRawBufferPointer, _ plan: Transcoder.Plan, _ transparent: Bool,
            _ path: String
        ) throws -> Encoded

    /// An extra's bytes, size, whether it is lossless, its PSNR against the source, and its `codecs` string.
    struct Encoded {
        let bytes: [UInt8]
        let width: Int
        let height: Int
        let lossless: Bool
        let psnr: Double?
        let codecs: String?
    }

    /// The extras, in the order they are made and listed.
    static let registry: [ExtraFormat] = [
        ExtraFormat(format: .webp, cost: MemoryPrediction.webp) { transcoder, bytes, plan, _, _ in
            let webp = try transcoder.encodeAnimatedWebPChoosing(bytes, plan: plan)
            return Encoded(
                bytes: webp.bytes, width: webp.width, height: webp.height, lossless: webp.lossless, psnr: webp.psnr,
                codecs: nil)
        },
        ExtraFormat(format: .avif, cost: MemoryPrediction.avif, maxSide: Transcoder.avifMaxSide) {
            transcoder, bytes, plan, transparent, _ in
            let avif = try transcoder.encodeAnimatedAVIFChoosing(bytes, plan: plan, transparent: transparent)
            return Encoded(
                bytes: avif.bytes, width: avif.width, height: avif.height, lossless: false, psnr: avif.psnr,
                codecs: nil)
        },
        ExtraFormat(
            format: .webm, cost: MemoryPrediction.webm,
            isMade: { transcoder, plan, transparent in
                Transcoder.webmShowsMore(transparent: transparent, size: transcoder.imageSize(plan))
            }
        ) { transcoder, bytes, plan, _, path in
            let webm = try transcoder.encodeAlphaVideoChoosing(
                bytes, plan: plan, scratch: OutputFile.temporaryPath(for: path))
            return Encoded(
                bytes: webm.bytes, width: webm.width, height: webm.height, lossless: false, psnr: webm.psnr,
                codecs: webm.codecs)
        },
        ExtraFormat(format: .webpPoster, cost: MemoryPrediction.still) { transcoder, bytes, plan, _, _ in
            let still = try transcoder.encodeStillWebP(bytes, plan: plan)
            return Encoded(
                bytes: still.bytes, width: still.width, height: still.height, lossless: still.lossless,
                psnr: still.psnr, codecs: nil)
        },
        ExtraFormat(format: .avifPoster, cost: MemoryPrediction.still) { transcoder, bytes, plan, transparent, _ in
            let still = try transcoder.encodeAnimatedAVIFChoosing(
                bytes, plan: plan, still: true, transparent: transparent)
            return Encoded(
                bytes: still.bytes, width: still.width, height: still.height, lossless: false, psnr: still.psnr,
                codecs: nil)
        },
    ]

    /// The registered extra of `format`, nil for the video, the poster, the manifest.
    static func of(_ format: OutputFormat) -> ExtraFormat? {
        self.registry.first { $0.format == format }
    }
}
