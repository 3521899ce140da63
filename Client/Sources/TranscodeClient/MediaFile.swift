/// A file of a converted object, as the extension of a signed `GET /v1/...` URL names it, or `.auto`, the answer
/// the service picks by the client's `Accept` header. The same list as the server's (`SourcePath.extensions`).
public enum MediaFile: String, CaseIterable, Sendable, Hashable, Codable {
    /// The H.264 video, every object has one.
    case mp4
    /// The poster: the first picture as a JPEG, flattened over the object's background.
    case jpg
    /// An animated WebP that keeps transparency (an extra).
    case webp
    /// An animated AVIF that keeps transparency (an extra; only of GIFs that loop forever).
    case avif
    /// VP9 with alpha in WebM (an extra; only where it shows what the MP4 cannot).
    case webm
    /// The first picture as a still WebP, transparency kept (an extra).
    case posterWebP = "poster.webp"
    /// The first picture as a still AVIF (an extra).
    case posterAVIF = "poster.avif"
    /// The object's manifest (`Manifest`).
    case json
    /// What the client's `<img>` shows best, by its `Accept` header.
    case auto

    /// The extension, as written after the source in a path.
    public var fileExtension: String { self.rawValue }

    /// The files an object has only when asked for (`also:`), in the server's registry order.
    public static let extras: [MediaFile] = [.webp, .avif, .webm, .posterWebP, .posterAVIF]

    /// Whether this file is an extra (`extras`).
    public var isExtra: Bool { Self.extras.contains(self) }

    /// The file's media type, as the service serves it.
    public var mediaType: String {
        switch self {
        case .mp4: "video/mp4"
        case .jpg: "image/jpeg"
        case .webp, .posterWebP: "image/webp"
        case .avif, .posterAVIF: "image/avif"
        case .webm: "video/webm"
        case .json: "application/json"
        case .auto: "*/*"
        }
    }
}
