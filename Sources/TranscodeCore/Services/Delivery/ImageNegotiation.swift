import Foundation
import Transcoder

/// What a signed `.auto` URL answers (`SourceController`): the smallest file the client's `<img>` shows, told by
/// its `Accept` header, or the source itself. One owner of that rule: the route, the rewrite and the tests ask it.
///
/// In order:
/// - the animated AVIF when `Accept` names `image/avif` (Chromium 85+, Firefox 113+, Safari 16.4+) and the object's
///   AVIF is smaller than the source: transparency and timing kept, the smallest file;
/// - the MP4 when `Accept` names `video/mp4` or `video/*` (Safari's `<img>` plays MP4, muted and looping; Safari
///   sends `video/*;q=0.8`), the video is smaller than the source, the source has no transparency (the MP4 would
///   show a box where the page shows through) and loops forever (an `<img>` loops an MP4 forever);
/// - the animated WebP when `Accept` names `image/webp` and the object's WebP is smaller than the source;
/// - else the source (a redirect to the GIF's own URL): `*/*` and `image/*` do not say a client decodes any of
///   them (old browsers, curl, crawlers), and a file that is not smaller is not worth it.
///
/// Only types named outright count, with a quality above 0; the order and the weights between them do not (every
/// browser that names a type shows it). Answers carry `Vary: Accept`.
package enum ImageNegotiation {
    /// The files an `.auto` object is made with besides its video and poster (the same options in the route, the
    /// rewrite and batches, so the same key): the animated WebP and AVIF. Made as an upgrade (`JobPriority.upgrade`):
    /// no reader waits for them (`SourceController`), and the AVIF is admitted by its memory (`MemoryPrediction`).
    package static let objectFormats: [OutputFormat] = [.webp, .avif]

    package enum Choice: Equatable, Sendable {
        /// One of the object's files.
        case file(OutputFormat)
        /// The source, at its own URL.
        case source
    }

    /// The answer for a client that sent `accept` (nil: no header), for the object `metadata` describes.
    package static func choose(accept: String?, metadata: TranscodeMetadata) -> Choice {
        let named = self.namedTypes(accept ?? "")
        if named.contains("image/avif"), self.smaller(.avif, in: metadata) { return .file(.avif) }
        if self.playsVideo(named), self.videoServes(metadata) { return .file(ObjectFiles.video) }
        if named.contains("image/webp"), self.smaller(.webp, in: metadata) { return .file(.webp) }
        return .source
    }

    /// Whether the object has a `format` file smaller than its source (an extra not smaller is recorded keep-gif).
    private static func smaller(_ format: OutputFormat, in metadata: TranscodeMetadata) -> Bool {
        guard let entry = ObjectFiles.recorded(format, in: metadata) else { return false }
        return entry.recommendation == nil
    }

    /// Whether a client that sent `accept` shows an MP4 in an `<img>` (it names `video/mp4` or `video/*`).
    package static func playsVideo(accept: String?) -> Bool { self.playsVideo(self.namedTypes(accept ?? "")) }

    private static func playsVideo(_ named: Set<String>) -> Bool {
        named.contains("video/mp4") || named.contains("video/*")
    }

    /// Whether `metadata`'s MP4 stands in for its source in an `<img>` that plays video: smaller, opaque, and
    /// looping forever (Safari's `<img>` loops an MP4 forever).
    package static func videoServes(_ metadata: TranscodeMetadata) -> Bool {
        metadata.recommendation == .video && !metadata.hasTransparency && metadata.loopsForever
    }

    /// Whether some client is answered anything but the source: what makes rewriting a GIF's URLs worth it (the
    /// rewrite's eager mode leaves the others as they are).
    package static func beatsTheSource(_ metadata: TranscodeMetadata) -> Bool {
        ["image/avif", "image/webp", "video/*"].contains { self.choose(accept: $0, metadata: metadata) != .source }
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
