/// What the service knows of one converted object: the `.json` file of a signed URL, and the body of a
/// `POST /transcode` answer (which adds the object's `key` and the links to its files).
public struct Manifest: Sendable, Hashable, Codable {
    /// One file of the object, with its size and SHA-256.
    public struct Artifact: Sendable, Hashable, Codable {
        /// `mp4`, `poster`, or an extra's format name (`webp`, `avif`, `webm`, `poster.webp`, `poster.avif`).
        public var role: String
        /// The file's extension (`mp4`, `jpg`, `webp`, ...).
        public var format: String
        public var bytes: Int
        /// Lower-case hex; nil in manifests written before digests were recorded.
        public var sha256: String?
        public var width: Int?
        public var height: Int?
        public var lossless: Bool?
        /// The file read again against the source over black and over white, in dB.
        public var psnr: Double?
        /// The RFC 6381 `codecs` parameter of a video, for a `<source type>`.
        public var codecs: String?

        /// The file this entry describes, by its role (nil for a role this client does not know).
        public var file: MediaFile? {
            switch self.role {
            case "mp4": .mp4
            case "poster": .jpg
            default: MediaFile(rawValue: self.role).flatMap { $0.isExtra ? $0 : nil }
            }
        }
    }

    /// `video`, or `keep-gif`: the video is not smaller than the GIF at the quality floor; show the GIF.
    public enum Recommendation: String, Sendable, Hashable, Codable {
        case video
        case keepGIF = "keep-gif"
    }

    public var sourceFormat: String?
    public var sourceWidth: Int
    public var sourceHeight: Int
    public var outputWidth: Int
    public var outputHeight: Int
    public var sourceFrameCount: Int?
    public var durationMs: Int
    /// The source's own loop field as written (NETSCAPE2.0 loop count, APNG `num_plays`, WebP `ANIM`).
    public var loopCount: Int?
    /// How many times a browser plays it: nil when it loops forever (`loopsForever`).
    public var playCount: Int?
    public var loopsForever: Bool
    /// The GIF has transparent pixels: the MP4 and the JPEG are flattened over `background`.
    public var hasTransparency: Bool
    public var background: String?
    public var sourceBytes: Int
    public var mp4Bytes: Int
    public var posterBytes: Int
    public var recommendation: Recommendation
    public var mp4Sha256: String?
    public var posterSha256: String?
    public var artifacts: [Artifact]?

    // A `POST /transcode` answer's fields.
    /// The object's key (64 hex digits): `/media/<key>.<ext>` are its files.
    public var key: String?
    public var mp4: String?
    public var poster: String?
    public var metadata: String?
    /// The signed `GET /v1/...` links of the GIF's URL, by role (`mp4`, `poster`, `metadata`, extras).
    public var signed: [String: String]?

    /// The object's files, with their sizes and digests; the video and the poster for a manifest written before
    /// artifacts were listed.
    public var files: [Artifact] {
        if let artifacts, !artifacts.isEmpty { return artifacts }
        return [
            Artifact(role: "mp4", format: "mp4", bytes: self.mp4Bytes, sha256: self.mp4Sha256),
            Artifact(role: "poster", format: "jpg", bytes: self.posterBytes, sha256: self.posterSha256),
        ]
    }

    /// The entry of `file`, nil when the object has none.
    public func artifact(_ file: MediaFile) -> Artifact? {
        self.files.first { $0.file == file }
    }
}
