import Foundation
import Transcoder

/// The part of a `/v1/{signature}/...` URL after the signature: output options, the GIF's URL and the
/// file wanted. `/bg:ffffff/aHR0cHM6Ly9leGFtcGxlLmNvbS9hLmdpZg.mp4`:
///
/// - options are `name:value` segments, before the source (base64url has no `:`); each at most once.
///   `bg` (or `background`): the colour transparency is flattened over, `RRGGBB`. `w` (or `width`) and `h` (or
///   `height`): a box in pixels (16-8192) the video fits inside, its aspect kept, never upscaled: a rendition
///   for a narrow column (`/w:480/...`), converted on its first request and cached as a result of its own.
///   `preview` (`preview:1`, `preview:2`): the first 1 or 2 seconds only, the video at most 50,000 bytes (its box
///   shrinks when it must: `Transcoder.encodePreview`), a rendition of its own for a grid of teasers.
///   `also`: the object's extras besides the file's own (`also:webm`, `also:webp,webm`: names of
///   `ObjectFiles.extras`, in the registry's order), so that every file of an object made with them is one object:
///   `/also:webm/<source>.mp4` is the video of the object whose WebM is `/<source>.webm`.
/// - the source URL is base64url without padding (padding is tolerated), and may be cut into
///   `/`-separated chunks, which are joined before decoding;
/// - the extension picks the file: `mp4`, `jpg` (the poster), `json` (the metadata), or an extra: `webp` (an animated
///   WebP that keeps transparency), `avif`, `webm` (VP9 with alpha), `poster.webp` and `poster.avif` (the first
///   picture, transparency kept), each an extra of its object, which is then
///   converted with it, a result of its own; `auto`
///   answers what the client's `Accept` says its `<img>` shows best (`ImageNegotiation`), from the same object as
///   `webp`.
package struct SourcePath: Sendable, Equatable {
    package var sourceURL: String
    package var background: RGBColor?
    /// The rendition's box (`w:`, `h:`); nil: the configured `transcode.maxOutputWidth` x `maxOutputHeight`.
    package var width: Int?
    package var height: Int?
    /// A preview's length in seconds (`preview:`); nil: the whole animation.
    package var preview: Int?
    /// The object's extras besides the file's own (`also:`), in the registry's order.
    var also: [OutputFormat] = []
    package var fileExtension: String

    /// The options this route takes, by every name it accepts.
    static var optionNames: [String: String] {
        [
            "bg": "bg", "background": "bg", "w": "w", "width": "w", "h": "h", "height": "h", "preview": "preview",
            "also": "also",
        ]
    }

    /// The extras of the object this path names: `also`, with the file's own format when it is an extra.
    package var extras: [OutputFormat] {
        ObjectFiles.extras.filter { self.also.contains($0) || $0.fileExtension == self.fileExtension }
    }
    /// The sizes a box may have (`w:`, `h:`).
    static let boxRange = 16...8192
    /// The files the route serves: an object's (`ObjectFiles`).
    package static var formats: [OutputFormat] { ObjectFiles.commitOrder }
    /// The extension of the negotiated answer: the smallest file the client's `<img>` shows, by its `Accept`
    /// (`ImageNegotiation`), or the source itself.
    package static let negotiated = "auto"
    /// Every extension the route takes.
    static var extensions: [String] { Self.formats.map(\.fileExtension) + [Self.negotiated] }

    /// - Parameter extras: the object's extras; the path names those besides `format` (`also`).
    init(
        sourceURL: String, background: RGBColor? = nil, width: Int? = nil, height: Int? = nil, preview: Int? = nil,
        format: OutputFormat = ObjectFiles.video, extras: [OutputFormat] = []
    ) {
        self.init(
            sourceURL: sourceURL, background: background, width: width, height: height, preview: preview,
            also: ObjectFiles.extras.filter { extras.contains($0) && $0 != format },
            fileExtension: format.fileExtension)
    }

    /// A path to the file `.fileExtension` (one of `formats`, as `parse` checks).
    package init(
        sourceURL: String, background: RGBColor? = nil, width: Int? = nil, height: Int? = nil, preview: Int? = nil,
        also: [OutputFormat] = [], fileExtension: String
    ) {
        self.sourceURL = sourceURL
        self.background = background
        self.width = width
        self.height = height
        self.preview = preview
        self.also = also
        self.fileExtension = fileExtension
    }

    /// The extensions the route takes, for messages: `.mp4, .jpg, .webp, .json or .auto`.
    private static var extensionList: String {
        let names = Self.extensions.map { "." + $0 }
        return names.dropLast().joined(separator: ", ") + " or " + (names.last ?? "")
    }

    /// The canonical path: options, then the source URL in one chunk. What gets signed.
    package var path: String {
        var segments: [String] = []
        if let background { segments.append("bg:" + background.description.dropFirst()) }
        if let width { segments.append("w:\(width)") }
        if let height { segments.append("h:\(height)") }
        if let preview { segments.append("preview:\(preview)") }
        if !self.also.isEmpty { segments.append("also:" + self.also.map(\.name).joined(separator: ",")) }
        segments.append(URLSigner.base64URL(Array(self.sourceURL.utf8)) + "." + self.fileExtension)
        return "/" + segments.joined(separator: "/")
    }

    /// Reads a path as `path` writes it (and the variations described above).
    /// - Throws: `bad-request` naming what is wrong.
    package static func parse(_ path: String) throws -> SourcePath {
        guard path.hasPrefix("/") else { throw ServiceError.badRequest("the path must start with /") }
        let segments = path.dropFirst().split(separator: "/", omittingEmptySubsequences: false)
        // From the first dot: an extension may have two parts (`poster.webp`), and base64url has no dot.
        guard let last = segments.last, let dot = last.firstIndex(of: ".") else {
            throw ServiceError.badRequest("the path must end with \(Self.extensionList)")
        }
        let fileExtension = String(last[last.index(after: dot)...])
        guard Self.extensions.contains(fileExtension) else {
            throw ServiceError.badRequest("unknown file .\(fileExtension); use \(Self.extensionList)")
        }
        var background: RGBColor?
        var also: [OutputFormat] = []
        var box: [String: Int] = [:]
        var preview: Int?
        var seen: Set<String> = []
        var chunks: [Substring] = []
        for (index, segment) in segments.enumerated() {
            let text = index == segments.count - 1 ? last[..<dot] : segment
            guard !text.isEmpty else { throw ServiceError.badRequest("the path has an empty segment") }
            if let colon = text.firstIndex(of: ":") {
                guard chunks.isEmpty else {
                    throw ServiceError.badRequest("options come before the source URL, not after")
                }
                let name = String(text[..<colon])
                let value = String(text[text.index(after: colon)...])
                guard let option = Self.optionNames[name] else {
                    throw ServiceError.badRequest(
                        "unknown option \"\(name)\"; the options are \(Self.optionNames.keys.sorted().joined(separator: ", "))"
                    )
                }
                guard seen.insert(option).inserted else {
                    throw ServiceError.badRequest("option \(option) is given twice")
                }
                if option == "bg" {
                    guard let color = RGBColor(hex: value) else {
                        throw ServiceError.badRequest("\(name) must be RRGGBB, got \(value)")
                    }
                    background = color
                } else if option == "also" {
                    // One spelling per object: the registry's names, in its order, each once.
                    let names = value.split(separator: ",", omittingEmptySubsequences: false).map(String.init)
                    let formats = names.compactMap(ObjectFiles.extra(named:))
                    guard formats.count == names.count, !formats.isEmpty,
                        formats == ObjectFiles.extras.filter(formats.contains)
                    else {
                        throw ServiceError.badRequest(
                            "also must name extras of \(ObjectFiles.extras.map(\.name).joined(separator: ",")), each once, in that order, got \(value)"
                        )
                    }
                    also = formats
                } else if option == "preview" {
                    let range = RenditionSpec.previewSecondsRange
                    guard let seconds = Self.number(value), range.contains(seconds) else {
                        throw ServiceError.badRequest(
                            "preview must be a number of seconds, \(range.lowerBound)-\(range.upperBound), got \(value)"
                        )
                    }
                    preview = seconds
                } else {
                    guard let pixels = Self.number(value), Self.boxRange.contains(pixels) else {
                        throw ServiceError.badRequest(
                            "\(name) must be a number of pixels, \(Self.boxRange.lowerBound)-\(Self.boxRange.upperBound), got \(value)"
                        )
                    }
                    box[option] = pixels
                }
            } else {
                chunks.append(text)
            }
        }
        guard !chunks.isEmpty else { throw ServiceError.badRequest("the path has no source URL") }
        // `.auto` may answer the source itself, whole: never a preview's cut and budget.
        if preview != nil, fileExtension == Self.negotiated {
            throw ServiceError.badRequest("preview names a file of the preview's own object, not .auto")
        }
        // One spelling per object: `also` names only extras besides the file's own, and none for `.auto`, whose
        // object is the negotiated one.
        if !also.isEmpty,
            fileExtension == Self.negotiated || also.contains(where: { $0.fileExtension == fileExtension })
        {
            throw ServiceError.badRequest("also names the extras besides the file's own, and none for .auto")
        }
        guard let bytes = URLSigner.decodeBase64URL(chunks.joined()), let url = String(validating: bytes, as: UTF8.self)
        else {
            throw ServiceError.badRequest("the source URL is not base64url-encoded UTF-8")
        }
        return SourcePath(
            sourceURL: url, background: background, width: box["w"], height: box["h"], preview: preview, also: also,
            fileExtension: fileExtension)
    }

    /// A positive number in decimal digits only: "+480" or "0480" would be other paths (and signatures) for the same
    /// value.
    private static func number(_ text: String) -> Int? {
        guard text.utf8.allSatisfy({ (0x30...0x39).contains($0) }), text.first != "0" else { return nil }
        return Int(text)
    }
}
