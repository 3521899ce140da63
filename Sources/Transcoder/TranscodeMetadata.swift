/// The animation formats the transcoder reads, told apart by their signatures (never by a name or a
/// Content-Type).
public enum SourceFormat: String, Codable, Hashable, Sendable, CaseIterable {
    case gif
    /// Animated PNG: a PNG with an `acTL` chunk before its image data.
    case apng
    /// Animated WebP: RIFF `WEBP` with a `VP8X` chunk announcing an animation.
    case webp

    /// The media type a browser's image decoder takes for it (APNG is `image/png`).
    public var mediaType: String {
        switch self {
        case .gif: "image/gif"
        case .apng: "image/png"
        case .webp: "image/webp"
        }
    }
}

/// One file of an object, as its manifest lists it.
public struct ManifestEntry: Codable, Hashable, Sendable {
    /// Its role in answers and signed links (`ObjectFiles.roles`: the video's is its format's name, `poster`).
    public var role: ObjectRole
    /// Its format, by registry name (`OutputFormat.name`).
    public var format: String
    /// Its size in bytes.
    public var bytes: Int
    /// Its SHA-256, lower-case hex; nil in manifests written before digests were recorded.
    public var sha256: String?
    /// Its pictures' size (an animated WebP keeps an odd canvas as it is); nil for the video and the poster,
    /// which are the object's `outputWidth` x `outputHeight`.
    public var width: Int?
    public var height: Int?
    /// For an animated WebP: whether it is lossless (every pixel exact) or lossy.
    public var lossless: Bool?
    /// For a lossy animated WebP: its mean PSNR against the source's frames, over black and over white (the
    /// lower), in dB, to two decimals (`Transcoder.imagePSNR`).
    public var psnr: Double?
    /// For a video: its RFC 6381 `codecs` parameter, for a `<source type>` (`avc1.640015`, `vp09.00.21.08`); nil for
    /// the other files, and in manifests written before it was recorded.
    public var codecs: String?
    /// `keep-gif` when this file is not smaller than the source (x `maxSizeRatio`) whichever way it was encoded:
    /// a page should show the source rather than it. Nil (absent) otherwise, and for the video and the poster,
    /// whose verdict is the object's `recommendation`.
    public var recommendation: TranscodeMetadata.Recommendation?

    public init(
        role: ObjectRole, format: String, bytes: Int, sha256: String?, width: Int? = nil, height: Int? = nil,
        codecs: String? = nil
    ) {
        self.codecs = codecs
        self.role = role
        self.format = format
        self.bytes = bytes
        self.sha256 = sha256
        self.width = width
        self.height = height
    }
}

/// What a transcode produced, written as JSON beside the outputs: the object's manifest. Version 2 lists the
/// object's files (`artifacts`); version 1, the JSON before it, named the video's and the poster's sizes and
/// digests only in fields, and is read as a manifest of those two. The fields stay, in both directions: clients
/// read `mp4Bytes` and the rest from answers.
///
/// Fields once named after GIF (`gifFrameCount`, `gifBytes`, `gifSha256`) are now named after the source
/// (`sourceFrameCount`, `sourceBytes`, `sourceSha256`); the JSON carries both names for one release, and
/// either is read.
public struct TranscodeMetadata: Codable, Hashable, Sendable {
    /// Whether a page should use the video or keep serving the GIF.
    public enum Recommendation: String, Codable, Hashable, Sendable {
        /// The MP4 is smaller than the source.
        case video
        /// The MP4 is not smaller than the source (tiny or single-colour animations).
        case keepGIF = "keep-gif"
    }

    /// What the source was. Metadata written before other formats were read says nothing: GIF.
    public var sourceFormat: SourceFormat = .gif
    /// The source's canvas as browsers show it (for a GIF: the logical screen, enlarged to the first
    /// frame's rectangle where that reaches past it).
    public var sourceWidth: Int
    public var sourceHeight: Int
    /// The video (and poster) size: even, padded or scaled down into the output box.
    public var outputWidth: Int
    public var outputHeight: Int
    /// Frames decoded from the source (JSON alias, for one release: `gifFrameCount`).
    public var sourceFrameCount: Int
    /// Frames in the MP4 (identical consecutive pictures merge into one longer frame).
    public var encodedFrameCount: Int
    /// Length of one play, in milliseconds: the sum of the frames' browser-clamped delays (10 ms or less
    /// plays as 100 ms).
    public var durationMs: Int
    /// The loop count as written, in the source format's own terms: a GIF's NETSCAPE2.0 loop count (`nil`
    /// when the GIF has no loop block), an APNG's `num_plays`, a WebP's `ANIM` loop count.
    public var loopCount: Int?
    /// How many times a browser plays the animation: `nil` means forever (a loop count of 0 in every
    /// format); for a GIF 1 with no loop block and n + 1 for a loop count n, for APNG and WebP n.
    public var playCount: Int?
    /// Whether a browser would loop it forever (use `<video loop>`, `AVPlayerLooper`).
    public var loopsForever: Bool
    /// Whether any shown picture had transparent pixels (flattened over `background`).
    public var hasTransparency: Bool
    /// The source broke off; the frames before the break were kept, as browsers do.
    public var truncated: Bool
    /// The colour transparency was flattened over, `#rrggbb`.
    public var background: RGBColor
    /// The source's size (JSON alias, for one release: `gifBytes`).
    public var sourceBytes: Int
    public var mp4Bytes: Int
    public var posterBytes: Int
    public var recommendation: Recommendation
    /// SHA-256 of the MP4 and of the poster, lower-case hex, so a cache can check its files byte for byte.
    /// `nil` in metadata written before they were recorded.
    public var mp4Sha256: String? = nil
    public var posterSha256: String? = nil
    /// The MP4's RFC 6381 `codecs` parameter (`avc1.` and its SPS's profile, constraints and level), the video
    /// entry's `codecs`; `nil` in metadata written before it was recorded.
    public var mp4Codecs: String? = nil
    /// SHA-256 of the source itself, whatever the options: what a takedown of these bytes is recorded
    /// under. `nil` in metadata written before it was recorded (JSON alias, for one release: `gifSha256`).
    public var sourceSha256: String? = nil
    /// The x264 CRF of the stored video (`nil` in metadata written before it was recorded).
    public var crf: Int? = nil
    /// The size guard's attempts, when the first encode was not smaller than the GIF (x
    /// `maxSizeRatio`); `nil` when it was.
    public var sizeGuard: SizeGuard? = nil
    /// For a preview rendition (`RenditionSpec.previewSeconds`): its length and budget, and each encode tried to
    /// meet it; `nil` for every other rendition (and absent from its JSON).
    public var preview: Preview? = nil
    /// The object's files besides the video and the poster, by role (none yet: other formats and renditions add
    /// theirs). The manifest never lists itself.
    public var otherArtifacts: [ManifestEntry] = []
    /// The manifest version written (`manifestVersion`); JSON without `artifacts` is version 1, read as well.
    public static var currentManifestVersion: Int { 2 }

    /// The object's media files, as the manifest lists them: the video and the poster (from their fields), then
    /// the others.
    public var artifacts: [ManifestEntry] {
        [self.namedArtifact(.video), self.namedArtifact(.poster)] + self.otherArtifacts
    }

    /// The files every object has, recorded in fields of their own.
    public enum NamedArtifact: Sendable { case video, poster }

    /// The entry of the video or the poster, from its fields.
    public func namedArtifact(_ which: NamedArtifact) -> ManifestEntry {
        switch which {
        case .video:
            ManifestEntry(
                role: .video, format: ObjectFiles.video.name, bytes: self.mp4Bytes,
                sha256: self.mp4Sha256, codecs: self.mp4Codecs)
        case .poster:
            ManifestEntry(
                role: .poster, format: ObjectFiles.poster.name, bytes: self.posterBytes, sha256: self.posterSha256)
        }
    }

    public init(
        sourceFormat: SourceFormat, sourceWidth: Int, sourceHeight: Int, outputWidth: Int, outputHeight: Int,
        sourceFrameCount: Int, encodedFrameCount: Int, durationMs: Int, loopCount: Int?, playCount: Int?,
        loopsForever: Bool, hasTransparency: Bool, truncated: Bool, background: RGBColor, sourceBytes: Int,
        mp4Bytes: Int, posterBytes: Int, recommendation: Recommendation
    ) {
        self.sourceFormat = sourceFormat
        self.sourceWidth = sourceWidth
        self.sourceHeight = sourceHeight
        self.outputWidth = outputWidth
        self.outputHeight = outputHeight
        self.sourceFrameCount = sourceFrameCount
        self.encodedFrameCount = encodedFrameCount
        self.durationMs = durationMs
        self.loopCount = loopCount
        self.playCount = playCount
        self.loopsForever = loopsForever
        self.hasTransparency = hasTransparency
        self.truncated = truncated
        self.background = background
        self.sourceBytes = sourceBytes
        self.mp4Bytes = mp4Bytes
        self.posterBytes = posterBytes
        self.recommendation = recommendation
    }

    enum CodingKeys: String, CodingKey {
        case sourceFormat, sourceWidth, sourceHeight, outputWidth, outputHeight, sourceFrameCount
        case encodedFrameCount, durationMs, loopCount, playCount, loopsForever, hasTransparency, truncated
        case background, sourceBytes, mp4Bytes, posterBytes, recommendation, mp4Sha256, posterSha256
        case mp4Codecs, sourceSha256, crf, sizeGuard, preview, manifestVersion, artifacts
        // The names of one release ago.
        case gifFrameCount, gifBytes, gifSha256
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.sourceFormat = try container.decodeIfPresent(SourceFormat.self, forKey: .sourceFormat) ?? .gif
        self.sourceWidth = try container.decode(Int.self, forKey: .sourceWidth)
        self.sourceHeight = try container.decode(Int.self, forKey: .sourceHeight)
        self.outputWidth = try container.decode(Int.self, forKey: .outputWidth)
        self.outputHeight = try container.decode(Int.self, forKey: .outputHeight)
        self.sourceFrameCount =
            try container.decodeIfPresent(Int.self, forKey: .sourceFrameCount)
            ?? container.decode(Int.self, forKey: .gifFrameCount)
        self.encodedFrameCount = try container.decode(Int.self, forKey: .encodedFrameCount)
        self.durationMs = try container.decode(Int.self, forKey: .durationMs)
        self.loopCount = try container.decodeIfPresent(Int.self, forKey: .loopCount)
        self.playCount = try container.decodeIfPresent(Int.self, forKey: .playCount)
        self.loopsForever = try container.decode(Bool.self, forKey: .loopsForever)
        self.hasTransparency = try container.decode(Bool.self, forKey: .hasTransparency)
        self.truncated = try container.decode(Bool.self, forKey: .truncated)
        self.background = try container.decode(RGBColor.self, forKey: .background)
        self.sourceBytes =
            try container.decodeIfPresent(Int.self, forKey: .sourceBytes)
            ?? container.decode(Int.self, forKey: .gifBytes)
        self.mp4Bytes = try container.decode(Int.self, forKey: .mp4Bytes)
        self.posterBytes = try container.decode(Int.self, forKey: .posterBytes)
        self.recommendation = try container.decode(Recommendation.self, forKey: .recommendation)
        self.mp4Sha256 = try container.decodeIfPresent(String.self, forKey: .mp4Sha256)
        self.posterSha256 = try container.decodeIfPresent(String.self, forKey: .posterSha256)
        self.mp4Codecs = try container.decodeIfPresent(String.self, forKey: .mp4Codecs)
        self.sourceSha256 =
            try container.decodeIfPresent(String.self, forKey: .sourceSha256)
            ?? container.decodeIfPresent(String.self, forKey: .gifSha256)
        self.crf = try container.decodeIfPresent(Int.self, forKey: .crf)
        self.sizeGuard = try container.decodeIfPresent(SizeGuard.self, forKey: .sizeGuard)
        self.preview = try container.decodeIfPresent(Preview.self, forKey: .preview)
        // Version 1 lists nothing: its fields are the whole manifest.
        guard let listed = try container.decodeIfPresent([ManifestEntry].self, forKey: .artifacts) else { return }
        // The video and the poster are the fields' (what version 1 reads, and what the files are checked
        // against): their entries in the list are not read again, so a list that says otherwise (a newer writer,
        // a hand edit) changes nothing. Other roles are kept, whatever their format (a second video rendition).
        let named = Set(self.artifacts.map(\.role))
        self.otherArtifacts = listed.filter { !named.contains($0.role) && $0.format != ObjectFiles.manifest.name }
    }

    // Written by hand so that `loopCount` and `playCount` are always present, `null` when absent: a client
    // reading `playCount` must not have to tell "forever" from "field missing".
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(self.sourceFormat, forKey: .sourceFormat)
        try container.encode(self.sourceWidth, forKey: .sourceWidth)
        try container.encode(self.sourceHeight, forKey: .sourceHeight)
        try container.encode(self.outputWidth, forKey: .outputWidth)
        try container.encode(self.outputHeight, forKey: .outputHeight)
        try container.encode(self.sourceFrameCount, forKey: .sourceFrameCount)
        try container.encode(self.sourceFrameCount, forKey: .gifFrameCount)
        try container.encode(self.encodedFrameCount, forKey: .encodedFrameCount)
        try container.encode(self.durationMs, forKey: .durationMs)
        try container.encode(self.loopCount, forKey: .loopCount)
        try container.encode(self.playCount, forKey: .playCount)
        try container.encode(self.loopsForever, forKey: .loopsForever)
        try container.encode(self.hasTransparency, forKey: .hasTransparency)
        try container.encode(self.truncated, forKey: .truncated)
        try container.encode(self.background, forKey: .background)
        try container.encode(self.sourceBytes, forKey: .sourceBytes)
        try container.encode(self.sourceBytes, forKey: .gifBytes)
        try container.encode(self.mp4Bytes, forKey: .mp4Bytes)
        try container.encode(self.posterBytes, forKey: .posterBytes)
        try container.encode(self.recommendation, forKey: .recommendation)
        try container.encode(self.mp4Sha256, forKey: .mp4Sha256)
        try container.encode(self.posterSha256, forKey: .posterSha256)
        try container.encodeIfPresent(self.mp4Codecs, forKey: .mp4Codecs)
        try container.encode(self.sourceSha256, forKey: .sourceSha256)
        try container.encode(self.sourceSha256, forKey: .gifSha256)
        try container.encode(self.crf, forKey: .crf)
        try container.encode(self.sizeGuard, forKey: .sizeGuard)
        try container.encodeIfPresent(self.preview, forKey: .preview)
        try container.encode(Self.currentManifestVersion, forKey: .manifestVersion)
        try container.encode(self.artifacts, forKey: .artifacts)
    }
}

/// What a preview rendition is, and the encodes tried to fit it in its budget: the first at the rendition's CRF and
/// box, then higher CRFs up to `Transcoder.previewHighestCRF`, then smaller boxes (`Transcoder.encodePreview`).
public struct Preview: Codable, Hashable, Sendable {
    public struct Attempt: Codable, Hashable, Sendable {
        public var width: Int
        public var height: Int
        public var crf: Int
        /// The video's size.
        public var bytes: Int

        public init(width: Int, height: Int, crf: Int, bytes: Int) {
            self.width = width
            self.height = height
            self.crf = crf
            self.bytes = bytes
        }
    }

    /// The length asked for, in seconds (the preview is shorter when the animation is).
    public var seconds: Int
    /// The budget of its video.
    public var maxBytes: Int
    /// Every encode, the kept one last.
    public var attempts: [Attempt]

    public init(seconds: Int, maxBytes: Int, attempts: [Attempt]) {
        self.seconds = seconds
        self.maxBytes = maxBytes
        self.attempts = attempts
    }
}

/// What the size guard tried: each encode's setting, size and quality, and which one was kept.
public struct SizeGuard: Codable, Hashable, Sendable {
    public struct Attempt: Codable, Hashable, Sendable {
        public var crf: Int
        /// The MP4's size; for a stopped attempt, the bytes encoded when it was stopped.
        public var bytes: Int
        /// Mean SSIM (luma, x264's own) against the encoded pictures, weighted by display time; `nil` when not
        /// measured (an attempt at the first CRF), or not measurable (pictures under 10 pixels in a dimension, too
        /// small for x264's windows); written as 0.
        public var ssim: Double?
        /// For an attempt at the first CRF stopped early (`SizeGuardPolicy.run`: at its key frame, once its bytes
        /// passed the target, once it spent more than the source on the same pictures, or when it overran the
        /// target steadily; `bytes` may then be under the target): the size projected for the whole, from the key
        /// frame's rate, the share of the source's bytes or the share of the animation encoded by then. When a
        /// key-frame stop misjudged the whole, the guard runs again and a second such attempt may follow.
        public var projectedBytes: Int?

        public init(crf: Int, bytes: Int, ssim: Double?, projectedBytes: Int? = nil) {
            self.crf = crf
            self.bytes = bytes
            self.ssim = ssim
            self.projectedBytes = projectedBytes
        }

        /// What the next CRF is chosen from: the size, or the projection of a stopped attempt.
        var expectedBytes: Int { self.projectedBytes ?? self.bytes }

        private enum Keys: String, CodingKey {
            case crf, bytes, ssim, projectedBytes
        }

        // `ssim` is always written, 0 when there is none (no SSIM is 0): versions before stopped attempts
        // require the field, and a fleet upgraded node by node, or rolled back, must still read every object's
        // metadata.
        public func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: Keys.self)
            try container.encode(self.crf, forKey: .crf)
            try container.encode(self.bytes, forKey: .bytes)
            try container.encode(self.ssim ?? 0, forKey: .ssim)
            try container.encodeIfPresent(self.projectedBytes, forKey: .projectedBytes)
        }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: Keys.self)
            self.crf = try container.decode(Int.self, forKey: .crf)
            self.bytes = try container.decode(Int.self, forKey: .bytes)
            self.projectedBytes = try container.decodeIfPresent(Int.self, forKey: .projectedBytes)
            let ssim = try container.decodeIfPresent(Double.self, forKey: .ssim)
            self.ssim = self.projectedBytes == nil && ssim != 0 ? ssim : nil
        }
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
