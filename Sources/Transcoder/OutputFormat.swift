/// One kind of file the service writes for a source: its name in URLs and APIs, its file extension and media
/// type, whether it can carry transparency and animation. The registry (`OutputFormat.all`) is the only place
/// that spells them: stores, routes and links ask it. (After imgproxy's `imagetype` registry.)
///
/// A new output format is one more entry here, plus its encoder; a store keeps whatever files an object's
/// `ObjectFiles` lists.
public struct OutputFormat: Hashable, Sendable, CustomStringConvertible {
    /// The name clients use (`/v1/.../source.<name>`, the signed-URL map's keys are the roles below).
    public let name: String
    /// The extension of its file in a store (`<key>.<fileExtension>`).
    public let fileExtension: String
    /// Its `Content-Type`.
    public let mediaType: String
    /// Whether it keeps an alpha channel (today's video and poster are flattened over the background).
    public let supportsAlpha: Bool
    /// Whether it carries more than one picture.
    public let isAnimated: Bool
    /// libavformat's muxer for it, when libavformat writes it.
    public let muxerName: String?
    /// What it is, in a few words, for help texts (`convert --also`): "an animated WebP that keeps transparency".
    public let summary: String

    public var description: String { self.name }

    // A format is its name: the registry has one entry per name. (Comparing every field was string compares
    // on each media request that asks `ObjectFiles` which file it wants.)
    public static func == (a: OutputFormat, b: OutputFormat) -> Bool { a.name == b.name }
    public func hash(into hasher: inout Hasher) { hasher.combine(self.name) }

    /// H.264 in MP4 (yuv420p, faststart): what every browser and AVPlayer play.
    public static let mp4 = OutputFormat(
        name: "mp4", fileExtension: "mp4", mediaType: "video/mp4", supportsAlpha: false, isAnimated: true,
        muxerName: "mp4",
        summary: "H.264 in MP4, what every browser and AVPlayer play")
    /// The JPEG poster: the first frame as shown.
    public static let jpeg = OutputFormat(
        name: "jpg", fileExtension: "jpg", mediaType: "image/jpeg", supportsAlpha: false, isAnimated: false,
        muxerName: nil,
        summary: "the JPEG poster, the first picture as shown")
    /// An animated WebP that keeps transparency, each picture's own duration and the play count: what a page's
    /// `<img>` shows over whatever is behind it, in Chromium, Firefox and Safari 14 and later.
    public static let webp = OutputFormat(
        name: "webp", fileExtension: "webp", mediaType: "image/webp", supportsAlpha: true, isAnimated: true,
        muxerName: nil,
        summary: "an animated WebP that keeps transparency")
    /// An animated AVIF (AV1) that keeps transparency and each picture's own duration: the smallest file a page's
    /// `<img>` shows in Chromium, Firefox and Safari 16 and later. Made only of sources that loop forever (its
    /// encoder writes no loop count).
    public static let avif = OutputFormat(
        name: "avif", fileExtension: "avif", mediaType: "image/avif", supportsAlpha: true, isAnimated: true,
        muxerName: nil,
        summary: "an animated AVIF that keeps transparency (of inputs that loop forever)")
    /// VP9 with alpha in WebM: a `<video>` that keeps transparency (Chromium, Firefox), at the source's own size
    /// (VP9 has no even-size rule), each picture's own display time.
    public static let webm = OutputFormat(
        name: "webm", fileExtension: "webm", mediaType: "video/webm", supportsAlpha: true, isAnimated: true,
        muxerName: "webm",
        summary:
            "VP9 with alpha in WebM, a video that keeps transparency and odd sizes (of inputs with transparency or of odd size)"
    )
    /// A still WebP of the first picture as shown, transparency kept: the poster of a transparent GIF's WebM (the
    /// JPEG is flattened over the background colour), and the still an app shows before playback over its own
    /// background. Its extension has two parts (`<key>.poster.webp`, `/v1/.../<source>.poster.webp`), as the animated
    /// WebP has `webp`.
    public static let webpPoster = OutputFormat(
        name: "poster.webp", fileExtension: "poster.webp", mediaType: "image/webp", supportsAlpha: true,
        isAnimated: false, muxerName: nil,
        summary: "a still WebP of the first picture that keeps transparency")
    /// The same still as an AVIF (`<key>.poster.avif`): smaller, as costly as the AVIF's encoder makes one picture.
    public static let avifPoster = OutputFormat(
        name: "poster.avif", fileExtension: "poster.avif", mediaType: "image/avif", supportsAlpha: true,
        isAnimated: false, muxerName: nil,
        summary: "a still AVIF of the first picture that keeps transparency")
    /// The object's manifest: `TranscodeMetadata` as JSON.
    public static let manifest = OutputFormat(
        name: "json", fileExtension: "json", mediaType: "application/json; charset=utf-8", supportsAlpha: false,
        isAnimated: false, muxerName: nil,
        summary: "the object's manifest (JSON)")

    /// Every format in the registry.
    public static let all: [OutputFormat] = [.mp4, .jpeg, .webp, .avif, .webm, .webpPoster, .avifPoster, .manifest]

    /// The format registered as `name` (a manifest names its artifacts' formats so), nil for any other.
    public static func named(_ name: some StringProtocol) -> OutputFormat? {
        self.all.first { $0.name == name }
    }

    /// The format whose files end in `.fileExtension`, nil for any other (a request's extension is checked here
    /// before anything touches a store).
    public static func withExtension(_ fileExtension: String) -> OutputFormat? {
        // Asked several times by every cache hit: `String == String` (small ASCII strings compare by their bits),
        // and the registry's entries compared in place rather than each copied into a closure.
        let all = self.all
        for index in all.indices where all[index].fileExtension == fileExtension { return all[index] }
        return nil
    }

    public static func withExtension(_ fileExtension: Substring) -> OutputFormat? {
        self.withExtension(String(fileExtension))
    }

    /// Whether its pictures are AV1 (the animated AVIF and its still): the encoders with the largest memory and
    /// the ladder that gave such objects keys of their own (`TranscodeOptions.outputFingerprint`).
    public var isAVIF: Bool { self.mediaType == OutputFormat.avif.mediaType }
}

/// A format travels as its name, as clients and manifests spell it (`"webp"`, `"poster.avif"`): options queued for a
/// fleet, and the options a key records, read the same as when they were `[String]`. A name the registry does not
/// know (a job a newer node queued during a rolling upgrade) decodes as `unknown(_:)`, as the name was kept before:
/// the options read and encode as they came, and the conversion refuses them as it did (`invalid-options`, naming
/// the format), rather than the job failing as unreadable. A manifest keeps its entries' names as text, so a newer
/// node's format is still listed there.
extension OutputFormat: Codable {
    public init(from decoder: any Decoder) throws {
        let name = try decoder.singleValueContainer().decode(String.self)
        self = OutputFormat.named(name) ?? .unknown(name)
    }

    /// A format this build does not know, kept by its name only: the options' `violations` name it, and it has no
    /// encoder or stored file here.
    static func unknown(_ name: String) -> OutputFormat {
        OutputFormat(
            name: name, fileExtension: name, mediaType: "application/octet-stream", supportsAlpha: false,
            isAnimated: false, muxerName: nil, summary: "a format this build does not know")
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(self.name)
    }
}

/// A file's role in an object: what answers, signed links and manifests call it (the keys of `POST /transcode`'s
/// signed-URL map, a manifest entry's `role`). The video's is `mp4`, the poster's `poster`, the manifest's
/// `metadata`, an extra's its format's name; a newer node's manifest may name another (`mp4-480`), kept as it is.
/// Encoded as its name (the standard library's `RawRepresentable` coding), and as a JSON object's key when it keys a
/// map.
public struct ObjectRole: RawRepresentable, Hashable, Codable, CodingKeyRepresentable, Sendable,
    CustomStringConvertible
{
    public let rawValue: String

    public init(rawValue: String) {
        self.rawValue = rawValue
    }

    public var description: String { self.rawValue }

    /// The video's (`ObjectFiles.video`): its format's name, as clients have always known it.
    public static let video = ObjectRole(rawValue: ObjectFiles.video.name)
    /// The still shown before playback.
    public static let poster = ObjectRole(rawValue: "poster")
    /// The manifest.
    public static let metadata = ObjectRole(rawValue: "metadata")

    /// An extra file's (`ObjectFiles.extras`): its format's name (`webp`, `poster.avif`).
    public static func extra(_ format: OutputFormat) -> ObjectRole {
        ObjectRole(rawValue: format.name)
    }
}

/// The files of one stored object, each with its role: what a store writes, checks, copies and deletes.
public enum ObjectFiles {
    /// The video (the `mp4` role of the answers and signed links).
    public static let video = OutputFormat.mp4
    /// The still shown before playback (the `poster` role).
    public static let poster = OutputFormat.jpeg
    /// The manifest: an object exists exactly when its manifest does.
    public static let manifest = OutputFormat.manifest

    /// The role of each file in answers (the signed-URL map of `POST /transcode`, rewrites, batch results).
    public static let roles: [(role: ObjectRole, format: OutputFormat)] = [
        (.video, video), (.poster, poster), (.metadata, manifest),
    ]

    /// The files every object has, which the manifest describes and whose sizes it records.
    public static let media: [OutputFormat] = [video, poster]
    /// The files an object has when its options ask for them (`RenditionSpec.extraFormats`), listed in its
    /// manifest with their sizes and digests (role: the format's name): the formats `ExtraFormat.registry` knows how
    /// to make, in its order.
    public static let extras: [OutputFormat] = ExtraFormat.registry.map(\.format)
    /// The extra registered as `name` (`webp`, `poster.avif`), nil for any other name, the video's and the poster's
    /// included: what a request's `formats`, a signed path's `also:` and `convert --also` may name.
    public static func extra(named name: some StringProtocol) -> OutputFormat? {
        self.extras.first { $0.name == name }
    }

    /// The order to write or move an object's files in: the manifest last, so an object never exists half.
    public static let commitOrder: [OutputFormat] = media + extras + [manifest]
    /// The order to delete them in: the manifest first, so the object is a miss from then on.
    public static let deleteOrder: [OutputFormat] = [manifest] + media + extras

    /// The files of `metadata`'s list a store keeps, each with its format, in the list's order (the video and
    /// the poster first). A store names a file by its format (`<key>.<fileExtension>`), so an entry of a format
    /// this build does not know (a newer node's object), or a second entry of one format, is not stored here:
    /// the manifest still lists it, and the store it came from still has it; this node serves the rest.
    public static func stored(in metadata: TranscodeMetadata) -> [(entry: ManifestEntry, format: OutputFormat)] {
        var seen: Set<OutputFormat> = []
        return metadata.artifacts.compactMap { entry in
            guard let format = OutputFormat.named(entry.format), seen.insert(format).inserted else { return nil }
            return (entry, format)
        }
    }

    /// The size of the `format` file that `metadata`'s artifact list records (nil for the manifest itself).
    public static func recordedSize(of format: OutputFormat, in metadata: TranscodeMetadata) -> Int? {
        self.recorded(format, in: metadata)?.bytes
    }

    /// The SHA-256 of the `format` file that `metadata`'s artifact list records (nil when it records none).
    public static func recordedSha256(of format: OutputFormat, in metadata: TranscodeMetadata) -> String? {
        self.recorded(format, in: metadata)?.sha256
    }

    /// The entry of `metadata.artifacts` for `format`, without building the list: the checks of every request
    /// (a media hit's ETag, the anti-tamper sizes) ask this, and the list is an array made on each call. Nil for the
    /// manifest itself and for a file the object does not have (an extra it was not asked for).
    public static func recorded(_ format: OutputFormat, in metadata: TranscodeMetadata) -> ManifestEntry? {
        switch format {
        case self.manifest: nil
        case self.video, self.poster: metadata.namedArtifact(format == self.video ? .video : .poster)
        default: metadata.otherArtifacts.first { $0.format == format.name }
        }
    }
}
