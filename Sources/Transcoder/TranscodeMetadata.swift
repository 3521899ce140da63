/// What a transcode produced, written as JSON beside the outputs.
public struct TranscodeMetadata: Codable, Hashable, Sendable {
    /// Whether a page should use the video or keep serving the GIF.
    public enum Recommendation: String, Codable, Hashable, Sendable {
        /// The MP4 is smaller than the GIF.
        case video
        /// The MP4 is not smaller than the GIF (tiny or single-colour GIFs).
        case keepGIF = "keep-gif"
    }

    /// The GIF's canvas as browsers show it: the logical screen, enlarged to the first frame's rectangle
    /// where that reaches past it.
    public var sourceWidth: Int
    public var sourceHeight: Int
    /// The video (and poster) size: even, padded or scaled down into the output box.
    public var outputWidth: Int
    public var outputHeight: Int
    /// Frames decoded from the GIF.
    public var gifFrameCount: Int
    /// Frames in the MP4 (identical consecutive pictures merge into one longer frame).
    public var encodedFrameCount: Int
    /// Length of one play, in milliseconds: the sum of the frames' browser-clamped delays.
    public var durationMs: Int
    /// The NETSCAPE2.0 loop count as written; `nil` when the GIF has no loop block.
    public var loopCount: Int?
    /// How many times a browser plays the animation: `nil` means forever (loop count 0), otherwise
    /// 1 with no loop block and n + 1 for a loop count n.
    public var playCount: Int?
    /// Whether a browser would loop it forever (use `<video loop>`, `AVPlayerLooper`).
    public var loopsForever: Bool
    /// Whether any shown picture had transparent pixels (flattened over `background`).
    public var hasTransparency: Bool
    /// The GIF broke off; the frames before the break were kept, as browsers do.
    public var truncated: Bool
    /// The colour transparency was flattened over, `#rrggbb`.
    public var background: RGBColor
    public var gifBytes: Int
    public var mp4Bytes: Int
    public var posterBytes: Int
    public var recommendation: Recommendation
    /// SHA-256 of the MP4 and of the poster, lower-case hex, so a cache can check its files byte for byte.
    /// `nil` in metadata written before they were recorded.
    public var mp4Sha256: String? = nil
    public var posterSha256: String? = nil
    /// SHA-256 of the GIF itself, whatever the options: what a takedown of these bytes is recorded under.
    /// `nil` in metadata written before it was recorded.
    public var gifSha256: String? = nil
    /// The x264 CRF of the stored video (`nil` in metadata written before it was recorded).
    public var crf: Int? = nil
    /// The size guard's attempts, when the first encode was not smaller than the GIF (x
    /// `maxSizeRatio`); `nil` when it was.
    public var sizeGuard: SizeGuard? = nil

    // Written by hand so that `loopCount` and `playCount` are always present, `null` when absent: a client
    // reading `playCount` must not have to tell "forever" from "field missing".
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(self.sourceWidth, forKey: .sourceWidth)
        try container.encode(self.sourceHeight, forKey: .sourceHeight)
        try container.encode(self.outputWidth, forKey: .outputWidth)
        try container.encode(self.outputHeight, forKey: .outputHeight)
        try container.encode(self.gifFrameCount, forKey: .gifFrameCount)
        try container.encode(self.encodedFrameCount, forKey: .encodedFrameCount)
        try container.encode(self.durationMs, forKey: .durationMs)
        try container.encode(self.loopCount, forKey: .loopCount)
        try container.encode(self.playCount, forKey: .playCount)
        try container.encode(self.loopsForever, forKey: .loopsForever)
        try container.encode(self.hasTransparency, forKey: .hasTransparency)
        try container.encode(self.truncated, forKey: .truncated)
        try container.encode(self.background, forKey: .background)
        try container.encode(self.gifBytes, forKey: .gifBytes)
        try container.encode(self.mp4Bytes, forKey: .mp4Bytes)
        try container.encode(self.posterBytes, forKey: .posterBytes)
        try container.encode(self.recommendation, forKey: .recommendation)
        try container.encode(self.mp4Sha256, forKey: .mp4Sha256)
        try container.encode(self.posterSha256, forKey: .posterSha256)
        try container.encode(self.gifSha256, forKey: .gifSha256)
        try container.encode(self.crf, forKey: .crf)
        try container.encode(self.sizeGuard, forKey: .sizeGuard)
    }
}

/// What the size guard tried: each encode's setting, size and quality, and which one was kept.
public struct SizeGuard: Codable, Hashable, Sendable {
    public struct Attempt: Codable, Hashable, Sendable {
        public var crf: Int
        public var bytes: Int
        /// Mean SSIM (luma) against the encoded pictures, weighted by display time.
        public var ssim: Double
    }

    /// How the guard ended.
    public enum Outcome: String, Codable, Hashable, Sendable {
        /// An attempt came out smaller than the GIF (x `maxSizeRatio`) at or above the quality floor.
        case smaller
        /// The attempts that would have been small enough fell under the quality floor: keep the GIF.
        case qualityFloor = "quality-floor"
        /// Every allowed attempt stayed larger: keep the GIF.
        case attemptsExhausted = "attempts-exhausted"
    }

    public var attempts: [Attempt]
    public var chosenCRF: Int
    public var outcome: Outcome
}
