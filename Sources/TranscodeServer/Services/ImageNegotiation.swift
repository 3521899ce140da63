import Foundation
import Transcoder

/// What a signed `.auto` URL answers (`SourceController`): the smallest file the client's `<img>` shows, told by
/// its `Accept` header, or the source itself. One owner of that rule: the route and the tests ask it.
///
/// - An animated WebP when `Accept` names `image/webp` (Chromium, Firefox 65 and later, Safari 14 and later) and
///   the object's WebP is smaller than the source: it keeps transparency, timing and the play count.
/// - Else the MP4 when `Accept` names `video/mp4` or `video/*` (Safari's `<img>` plays MP4; Safari 13 sends
///   `video/*;q=0.8`), the video is smaller than the source, the source has no transparency (the MP4 would
///   show a box where the page shows through) and loops forever (an `<img>` loops an MP4 forever).
/// - Else the source (a redirect to the GIF's own URL): `*/*` and `image/*` do not say a client decodes WebP (old
///   browsers, curl, crawlers), and a file that is not smaller is not worth it.
///
/// Only types named outright count, with a quality above 0; the order and the weights between them do not (every
/// browser that names WebP shows it). Answers carry `Vary: Accept`.
enum ImageNegotiation {
    /// The files an `.auto` object is made with besides its video and poster (the same options in the route and
    /// in the rewrite's eager mode, so the same key): the animated WebP. Not the AVIF, though it is smaller: libaom
    /// under libavif 0.11 holds its whole lookahead (which libavif 0.11 cannot shorten), 146-625 MiB per job on the
    /// corpus against the service's 150 MiB, and takes about 19x the video's time, which every first reader of an
    /// `.auto` URL would wait for. `formats: ["avif"]` and `.avif` make it.
    static let objectFormats: [OutputFormat] = [.webp]

    enum Choice: Equatable, Sendable {
        /// One of the object's files.
        case file(OutputFormat)
        /// The source, at its own URL.
        case source
    }

    /// The answer for a client that sent `accept` (nil: no header), for the object `metadata` describes.
    static func choose(accept: String?, metadata: TranscodeMetadata) -> Choice {
        let named = self.namedTypes(accept ?? "")
        if named.contains("image/webp"), let webp = ObjectFiles.recorded(.webp, in: metadata),
            webp.recommendation == nil
        {
            return .file(.webp)
        }
        // Safari's <img> loops an MP4 forever: only for a GIF that loops forever.
        if named.contains("video/mp4") || named.contains("video/*"), metadata.recommendation == .video,
            !metadata.hasTransparency, metadata.loopsForever
        {
            return .file(ObjectFiles.video)
        }
        return .source
    }

    /// Whether some client is answered anything but the source: what makes rewriting a GIF's URLs worth it (the
    /// rewrite's eager mode leaves the others as they are).
    static func beatsTheSource(_ metadata: TranscodeMetadata) -> Bool {
        ["image/webp", "video/*"].contains { self.choose(accept: $0, metadata: metadata) != .source }
    }

    /// The media types and ranges `accept` names with a quality above 0, lower-cased, parameters dropped
    /// (RFC 9110, section 12.5.1: `type/subtype;q=0.8`). A malformed quality counts as 1, as most servers read it.
    static func namedTypes(_ accept: String) -> Set<String> {
        var named: Set<String> = []
        for element in accept.split(separator: ",") {
            let parts = element.split(separator: ";")
            guard let type = parts.first?.trimmingCharacters(in: .whitespaces).lowercased(), type.contains("/")
            else { continue }
            var quality = 1.0
            for parameter in parts.dropFirst() {
                let pair = parameter.split(separator: "=", maxSplits: 1).map {
                    $0.trimmingCharacters(in: .whitespaces).lowercased()
                }
                if pair.count == 2, pair[0] == "q", let value = Double(pair[1]) { quality = value }
            }
            if quality > 0 { named.insert(type) }
        }
        return named
    }
}
