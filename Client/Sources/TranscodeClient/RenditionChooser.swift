/// What a player can show, for clients that cannot send an `Accept` header (AVPlayer, an image view): the chooser
/// picks, from an object's manifest, the smallest rendition the profile plays.
public struct PlaybackProfile: Sendable, Hashable {
    /// What a profile can show.
    public enum Playable: Sendable, Hashable {
        /// A file of the object.
        case file(MediaFile)
        /// The GIF itself (an image view).
        case gif
        /// The preview object (`preview:` seconds): a short MP4 of at most 50,000 bytes.
        case preview
    }

    public var name: String
    public var plays: Set<Playable>

    public init(name: String, plays: Set<Playable>) {
        self.name = name
        self.plays = plays
    }

    /// AVPlayer: the H.264 MP4, or the GIF in an image view when the manifest says `keep-gif` (the MP4 is then not
    /// smaller). A transparent GIF's MP4 is flattened over the object's background: ask for the manifest with
    /// `bg:` the colour of the view behind it (dark mode included).
    public static let avPlayer = PlaybackProfile(name: "avplayer", plays: [.file(.mp4), .gif])
    /// An image view that decodes animated AVIF and WebP (transparency kept), or the GIF.
    public static let transparentImage = PlaybackProfile(
        name: "transparent-image", plays: [.file(.avif), .file(.webp), .gif])
    /// An image view that decodes animated WebP but not AVIF (transparency kept), or the GIF.
    public static let webPImage = PlaybackProfile(name: "webp-image", plays: [.file(.webp), .gif])
    /// Data saver: the preview (the first seconds, at most 50,000 bytes), or the GIF when it is smaller.
    public static let dataSaver = PlaybackProfile(name: "data-saver", plays: [.preview, .gif])

    public static let all: [PlaybackProfile] = [.avPlayer, .transparentImage, .webPImage, .dataSaver]
}

/// One rendition of a GIF: what to fetch and show, and its size.
public struct Rendition: Sendable, Hashable {
    public var playable: PlaybackProfile.Playable
    public var bytes: Int

    /// The file to sign for an object asked with `options` (nil for the GIF itself): the preview's MP4 is the
    /// video of the object with `preview:`; a file of an object with extras names the others in `also:`.
    public func signedFile(options: RenditionOptions) -> (file: MediaFile, options: RenditionOptions)? {
        var options = options
        switch self.playable {
        case .gif:
            return nil
        case .preview:
            options.preview = options.preview ?? RenditionOptions.previewRange.lowerBound
            options.also = []
            return (.mp4, options)
        case .file(let file):
            options.also.removeAll { $0 == file }
            return (file, options)
        }
    }
}

/// Picks the smallest rendition a profile plays.
public enum RenditionChooser {
    /// - Parameters:
    ///   - manifest: the object's manifest (ask it with the extras the profile may play: `also:webp,avif`).
    ///   - preview: the manifest of the preview object, for profiles that play it (its MP4's bytes); without it a
    ///     preview counts as its budget, 50,000 bytes.
    /// - Returns: the smallest of what the profile plays and the object has; nil when it has nothing the profile
    ///   plays (a profile without the GIF, of an object without its format).
    public static func choose(
        for profile: PlaybackProfile, manifest: Manifest, preview: Manifest? = nil
    ) -> Rendition? {
        var candidates: [Rendition] = []
        for playable in profile.plays {
            switch playable {
            case .gif:
                candidates.append(Rendition(playable: .gif, bytes: manifest.sourceBytes))
            case .preview:
                candidates.append(Rendition(playable: .preview, bytes: preview?.mp4Bytes ?? Self.previewBudget))
            case .file(let file):
                if let artifact = manifest.artifact(file) {
                    candidates.append(Rendition(playable: playable, bytes: artifact.bytes))
                }
            }
        }
        // The smallest; at equal sizes a converted file before the GIF (it is what the service made for this).
        return candidates.min { a, b in
            a.bytes != b.bytes ? a.bytes < b.bytes : Self.rank(a.playable) < Self.rank(b.playable)
        }
    }

    /// A preview's most bytes (`Transcoder.encodePreview`).
    public static let previewBudget = 50_000

    private static func rank(_ playable: PlaybackProfile.Playable) -> Int {
        switch playable {
        case .file(let file): MediaFile.allCases.firstIndex(of: file) ?? 0
        case .preview: 100
        case .gif: 101
        }
    }
}
