import Foundation
import Transcoder

/// What the rewriter (and `POST /transcode`'s snippet) knows of one GIF when it writes its `<video>`: where the
/// video, the poster and the WebM are, and, once the GIF is known (converted, or found in the cache), its size, how
/// many times it plays and which files its object has.
package struct RewriteTarget: Sendable {
    var mp4URL: String
    var posterURL: String
    /// The object's VP9 WebM with alpha, when its files include one (`also:webm`).
    var webmURL: String? = nil
    /// The object's still WebP poster that keeps the transparency (`poster.webp`), when its files include one: the
    /// poster while the WebM is the source.
    var alphaPosterURL: String? = nil
    /// The object's manifest (`.json`): what `/player.js` reads of a GIF not converted yet whose WebM did not play
    /// (`data-gif2mp4-manifest`).
    package var manifestURL: String? = nil
    var metadata: TranscodeMetadata?

    package init(
        mp4URL: String, posterURL: String, webmURL: String? = nil, alphaPosterURL: String? = nil,
        manifestURL: String? = nil, metadata: TranscodeMetadata?
    ) {
        self.mp4URL = mp4URL
        self.posterURL = posterURL
        self.webmURL = webmURL
        self.alphaPosterURL = alphaPosterURL
        self.manifestURL = manifestURL
        self.metadata = metadata
    }

    /// The `<source>`s, best first: the WebM (unless the GIF is known to have none, or one no smaller than it: a
    /// GIF without one, neither transparent nor odd-sized, answers 404 and the browser goes on to the next), then
    /// the MP4.
    var sources: [(url: String, type: String)] {
        var sources: [(url: String, type: String)] = []
        if let webmURL {
            let entry = self.metadata.flatMap { ObjectFiles.recorded(.webm, in: $0) }
            if self.metadata == nil || (entry != nil && entry?.recommendation == nil) {
                sources.append((webmURL, HTMLRewriter.sourceType(OutputFormat.webm.mediaType, codecs: entry?.codecs)))
            }
        }
        sources.append(
            (self.mp4URL, HTMLRewriter.sourceType(ObjectFiles.video.mediaType, codecs: self.metadata?.mp4Codecs)))
        return sources
    }

    /// Whether the video's poster is the JPEG (flattened over the background): not when its first source is the
    /// WebM of a GIF known to be transparent, which shows the page through from its first picture; the JPEG would
    /// be an opaque box until then. (A GIF not known yet: `/player.js` swaps the poster when the WebM is the source
    /// chosen.)
    var showsJPEGPoster: Bool {
        guard let metadata = self.metadata, metadata.hasTransparency, let webmURL = self.webmURL else { return true }
        return self.sources.first?.url != webmURL
    }

    /// The still WebP that keeps the transparency (`poster.webp`), the poster while the WebM plays: when the WebM is
    /// the first source and the object has the still (or is not known yet); nil otherwise.
    var alphaPoster: String? {
        guard let alpha = self.alphaPosterURL, let webm = self.webmURL, self.sources.first?.url == webm,
            self.metadata.map({ ObjectFiles.recorded(.webpPoster, in: $0) != nil }) ?? true
        else { return nil }
        return alpha
    }

    /// The video's `poster`: the JPEG (`showsJPEGPoster`), or else the still WebP (`alphaPoster`), or none: a
    /// transparent GIF too shows nothing until it has loaded.
    package var poster: String? { self.showsJPEGPoster ? self.posterURL : self.alphaPoster }

    /// The `<source>` elements of `sources`, in order.
    package var sourceElements: String {
        self.sources.map { "<source src=\"\(HTMLRewriter.escape($0.url))\" type=\($0.type)>" }.joined()
    }
}

/// Turns the GIF elements `HTMLGIFScanner` found into `<video>` elements, copying every other byte of the
/// document as it is.
///
/// The video autoplays muted and inline (what iOS requires), loops as the GIF does (`loop`, nothing for one
/// play, `data-play-count` with `/player.js` for a finite count; `loop` while the count is not known yet),
/// and keeps what means something on a `<video>`: `id`, `class`, `style`, `title`, `width`/`height` (from the
/// attributes, else the GIF's own once known), `alt` as `aria-label` with `role="img"`. An `<img
/// loading="lazy">`, or a lazy-loading plugin's (its GIF in `data-src` or `data-srcset`), becomes `preload="none"`
/// without `autoplay` and without a `poster` (its URL in
/// `data-gif2mp4-poster`), marked `data-gif2mp4-lazy`: `/player.js` sets the poster and plays it when it comes
/// near the viewport. A GIF not converted yet keeps its URL in `data-gif2mp4-src`: `/player.js` puts the `<img>`
/// back if the video's source fails (a GIF the service refuses), or if its MP4 plays and its manifest
/// (`data-gif2mp4-manifest`) says the GIF is transparent. `srcset`, `sizes`, `loading`, `decoding` and `data-*` (a
/// lazy-loading plugin's `data-src` would fight the video) are not carried over as attributes: what of them lays the
/// image out is in `data-gif2mp4-img` (`layoutOfImage`), from which `/player.js` gives the video the image's box.
package enum HTMLRewriter {
    /// The extras of `output=video`'s objects: the VP9 WebM (with alpha, or for an odd size), and the still WebP of
    /// its first picture, its poster (the JPEG is flattened).
    package static var videoExtras: [OutputFormat] { [.webm, .webpPoster] }

    /// `html` with each element of `replacements` (sorted, not overlapping) replaced.
    package static func rewrite(_ html: [UInt8], _ replacements: [(range: Range<Int>, text: String)]) -> [UInt8] {
        var output: [UInt8] = []
        output.reserveCapacity(html.count + replacements.count * 256)
        var position = 0
        for replacement in replacements.sorted(by: { $0.range.lowerBound < $1.range.lowerBound })
        where replacement.range.lowerBound >= position {
            output += html[position..<replacement.range.lowerBound]
            output += Array(replacement.text.utf8)
            position = replacement.range.upperBound
        }
        output += html[position...]
        return output
    }

    /// The element kept as it is, each GIF URL of its URL attributes (`src`, `srcset`, `data-src`, `data-srcset`,
    /// of the `<img>` and of a `<picture>`'s `<source>`s) replaced by `replacement(url)` (a `srcset` candidate's
    /// descriptor kept), every other byte of the element unchanged: the page's CSS, `loading`, `sizes`, `alt`,
    /// `width`/`height` and a lazy-loading plugin's attributes go on applying. A URL `replacement` answers nil
    /// for stays.
    /// - Returns: the attribute values to replace, quoted; empty when no URL changed.
    package static func image(
        for element: GIFElement, replacement: (String) -> String?
    ) -> [(range: Range<Int>, text: String)] {
        var replacements: [(range: Range<Int>, text: String)] = []
        let whitespace = CharacterSet(charactersIn: " \t\n\r\u{0C}")
        for attribute in element.urlAttributes {
            var changed = false
            let value: String
            if attribute.name.hasSuffix("srcset") {
                // Only each GIF candidate's URL changes; separators and descriptors stay as written.
                var text = attribute.value
                for candidate in HTMLGIFScanner.srcsetCandidates(attribute.value).reversed() {
                    let url = String(attribute.value[candidate.url])
                    guard HTMLGIFScanner.isGIFPath(url), let new = replacement(url) else { continue }
                    changed = true
                    text.replaceSubrange(candidate.url, with: new)
                }
                value = text
            } else {
                let url = attribute.value.trimmingCharacters(in: whitespace)
                guard HTMLGIFScanner.isGIFPath(url) || url == element.source, let new = replacement(url) else {
                    continue
                }
                changed = true
                value = new
            }
            if changed { replacements.append((attribute.range, "\"" + Self.escape(value) + "\"")) }
        }
        return replacements
    }

    /// The `<video>` (and, when it needs it, the `/player.js` script tag) for `element`.
    /// - Parameter playerScript: the URL of `/player.js`.
    package static func video(for element: GIFElement, target: RewriteTarget, playerScript: String) -> String {
        var attributes: [(String, String?)] = []
        // Lazy: `loading="lazy"`, or a lazy-loading plugin's image (its GIF in `data-src` or `data-srcset`, which the
        // plugin copies over near the viewport).
        let lazy =
            element.attribute("loading")?.lowercased() == "lazy"
            || element.attribute("data-src") != nil || element.attribute("data-srcset") != nil
        if !lazy { attributes.append(("autoplay", nil)) }
        attributes += [("muted", nil), ("playsinline", nil)]
        var needsScript = lazy
        if let metadata = target.metadata {
            if metadata.loopsForever {
                attributes.append(("loop", nil))
            } else if let plays = metadata.playCount, plays > 1 {
                attributes.append(("data-play-count", String(plays)))
                needsScript = true
            }
        } else {
            attributes.append(("loop", nil))
        }
        if lazy {
            // The poster too waits until the video comes near the viewport (`/player.js` sets it then): its GET
            // would convert the GIF at page load, for a reader who may never scroll to it.
            attributes += [("preload", "none"), ("data-gif2mp4-lazy", nil)]
            if let poster = target.poster { attributes.append(("data-gif2mp4-poster", poster)) }
        } else if let poster = target.poster {
            attributes.append(("poster", poster))
        }
        // Not yet converted: should the service refuse the GIF (too large, not a GIF), `/player.js` puts the
        // `<img>` back, which the browser still shows.
        if target.metadata == nil {
            attributes.append(("data-gif2mp4-src", element.source))
            // Should the MP4 play (no WebM) of a GIF with transparency, `/player.js` puts the `<img>` back too: the
            // MP4 is flattened over the background colour.
            if let manifest = target.manifestURL { attributes.append(("data-gif2mp4-manifest", manifest)) }
            needsScript = true
        }
        // The poster while the WebM is the source (`/player.js`): its first picture with its transparency.
        if let alpha = target.alphaPoster { attributes.append(("data-gif2mp4-alpha-poster", alpha)) }
        for name in ["id", "class", "style", "title"] {
            if let value = element.attribute(name) { attributes.append((name, value)) }
        }
        let width = element.attribute("width") ?? target.metadata.map { String($0.sourceWidth) }
        let height = element.attribute("height") ?? target.metadata.map { String($0.sourceHeight) }
        if let width { attributes.append(("width", width)) }
        if let height { attributes.append(("height", height)) }
        if let alt = element.attribute("alt") {
            attributes += [("role", "img"), ("aria-label", alt)]
        }
        // What `/player.js` lays the video out from: the `<img>` the page's CSS would have styled (`layoutOfImage`).
        attributes.append(("data-gif2mp4-img", Self.layoutOfImage(element, natural: target.metadata)))
        needsScript = true
        let opening = attributes.map { name, value in value.map { "\(name)=\"\(Self.escape($0))\"" } ?? name }
            .joined(separator: " ")
        let script = needsScript ? "<script src=\"\(Self.escape(playerScript))\" defer></script>" : ""
        return "<video \(opening)>\(target.sourceElements)</video>" + script
    }

    /// The `<img>` a video replaces, as `/player.js` needs it to give the video the box the page's CSS gives that
    /// image (a `<video>` never matches the site's `img` selectors: `article img { max-width: 100%; height: auto }`):
    /// a JSON object with the image's `width`, `height`, `srcset` and `sizes` attributes as written (those it has),
    /// the GIF the video shows (`source`, a `srcset` candidate's URL as written, or `src`), and its size
    /// (`natural`, `[width, height]`) once known. The script lays out an `<img>` of those attributes whose every
    /// candidate is an empty SVG of the GIF's size scaled by its descriptor, in the video's place, and copies its
    /// box to the video.
    static func layoutOfImage(_ element: GIFElement, natural metadata: TranscodeMetadata?) -> String {
        var object: [String: Any] = ["source": element.largestSource]
        for name in ["width", "height"] {
            if let value = element.attribute(name) { object[name] = value }
        }
        // The attribute the GIF shown comes from (a lazy-loading plugin's `data-srcset` when `srcset` is its
        // placeholder), its candidates parsed as the HTML standard does (a URL may hold commas).
        let srcset = ["srcset", "data-srcset"].compactMap { element.attribute($0) }
            .first { HTMLGIFScanner.gifCandidate(srcset: $0) != nil }
        if let srcset {
            object["srcset"] = srcset
            object["candidates"] = HTMLGIFScanner.srcsetCandidates(srcset).map { candidate in
                [String(srcset[candidate.url]), candidate.descriptors.trimmingCharacters(in: .whitespaces)]
            }
        }
        if let sizes = element.attribute("sizes") ?? element.attribute("data-sizes") { object["sizes"] = sizes }
        if let metadata { object["natural"] = [metadata.sourceWidth, metadata.sourceHeight] }
        // An image with a `srcset` and no `src` (or an empty one, which is no candidate) has no 1x candidate but those
        // the `srcset` names.
        if (element.attribute("src") ?? "").trimmingCharacters(in: .whitespacesAndNewlines).isEmpty {
            object["src"] = false
        }
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data("{}".utf8)
        return String(decoding: data, as: UTF8.self)
    }

    /// A `<source type>` attribute value with its quotes: `"video/mp4"`, or with a `codecs` parameter (whose value is
    /// double-quoted) single-quoted, `'video/webm; codecs="vp09.00.21.08"'`. A parameter with anything but
    /// letters, digits and dots (a manifest from a shared store is data, not markup) is left out.
    static func sourceType(_ mediaType: String, codecs: String?) -> String {
        guard let codecs, !codecs.isEmpty,
            codecs.unicodeScalars.allSatisfy({
                ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0) || $0 == "."
            })
        else { return "\"\(mediaType)\"" }
        return "'\(mediaType); codecs=\"\(codecs)\"'"
    }

    /// An attribute value, quoted with `"`. By Unicode scalar, not by `Character`: a `"` followed by a combining
    /// mark is one `Character` that is not `"`, and would close the attribute unescaped.
    package static func escape(_ text: String) -> String {
        var escaped = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            switch scalar {
            case "&": escaped.append(contentsOf: "&amp;".unicodeScalars)
            case "\"": escaped.append(contentsOf: "&quot;".unicodeScalars)
            case "<": escaped.append(contentsOf: "&lt;".unicodeScalars)
            case ">": escaped.append(contentsOf: "&gt;".unicodeScalars)
            default: escaped.append(scalar)
            }
        }
        return String(escaped)
    }
}
