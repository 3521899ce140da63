/// The options of a signed path (`/bg:000000/w:480/...`): which object of a GIF a URL names. Checked as the server
/// checks them, so a URL the client signs is one the server takes.
public struct RenditionOptions: Sendable, Hashable {
    /// The colour transparency is flattened over in the MP4 and the poster, `rrggbb` (lower case); nil: the
    /// service's default (white).
    public var background: String?
    /// A box in pixels (16-8192) the video fits inside, its aspect kept, never upscaled.
    public var width: Int?
    public var height: Int?
    /// The first 1 or 2 seconds only, the video at most 50,000 bytes: a preview object of its own.
    public var preview: Int?
    /// The object's extras besides the file's own (`also:webp,avif`), in the registry's order.
    public var also: [MediaFile]

    /// The sizes a box may have (`w:`, `h:`).
    public static let boxRange = 16...8192
    /// The lengths a preview may have, in seconds.
    public static let previewRange = 1...2

    /// - Throws: `TranscodeClientError.badRequest` for a value the server refuses (a colour that is not
    ///   `RRGGBB`, a box or preview out of range, an `also` entry that is not an extra).
    public init(
        background: String? = nil, width: Int? = nil, height: Int? = nil, preview: Int? = nil, also: [MediaFile] = []
    ) throws {
        if let background {
            guard let normalized = Self.color(background) else {
                throw TranscodeClientError.badRequest("bg must be RRGGBB, got \(background)")
            }
            self.background = normalized
        }
        for (name, value) in [("w", width), ("h", height)] {
            if let value, !Self.boxRange.contains(value) {
                throw TranscodeClientError.badRequest(
                    "\(name) must be a number of pixels, \(Self.boxRange.lowerBound)-\(Self.boxRange.upperBound), got \(value)"
                )
            }
        }
        if let preview, !Self.previewRange.contains(preview) {
            throw TranscodeClientError.badRequest(
                "preview must be a number of seconds, \(Self.previewRange.lowerBound)-\(Self.previewRange.upperBound), got \(preview)"
            )
        }
        guard also.allSatisfy(\.isExtra) else {
            throw TranscodeClientError.badRequest(
                "also must name extras of \(MediaFile.extras.map(\.rawValue).joined(separator: ",")), got \(also.map(\.rawValue).joined(separator: ","))"
            )
        }
        self.width = width
        self.height = height
        self.preview = preview
        // One spelling per object: the registry's order, each once.
        self.also = MediaFile.extras.filter(also.contains)
    }

    /// No option: the plain object.
    public static var none: RenditionOptions { RenditionOptions(unchecked: ()) }

    private init(unchecked: Void) {
        self.also = []
    }

    /// The options of `transcode-server sign --option name:value` (`bg:000000`, `w:480`, `also:webp,avif`), read as
    /// the server reads a path's: every name it accepts (`bg` or `background`, `w` or `width`, `h` or `height`,
    /// `preview`, `also`), each at most once.
    /// - Throws: `TranscodeClientError.badRequest` with the server's words for an unknown option, one given twice
    ///   or a value out of range.
    public init(parsing segments: [String]) throws {
        var values: [String: String] = [:]
        // Each option as the segment spelled it (`width` or `w`): the server's messages name it so.
        var spelling: [String: String] = [:]
        for segment in segments {
            guard let colon = segment.firstIndex(of: ":") else {
                throw TranscodeClientError.badRequest("an option is name:value, got \(segment)")
            }
            let name = String(segment[..<colon])
            let value = String(segment[segment.index(after: colon)...])
            guard let option = Self.optionNames[name] else {
                throw TranscodeClientError.badRequest(
                    "unknown option \"\(name)\"; the options are \(Self.optionNames.keys.sorted().joined(separator: ", "))"
                )
            }
            guard values[option] == nil else {
                throw TranscodeClientError.badRequest("option \(option) is given twice")
            }
            values[option] = value
            spelling[option] = name
        }
        var also: [MediaFile] = []
        if let text = values["also"] {
            let names = text.split(separator: ",", omittingEmptySubsequences: false).map(String.init)
            let files = names.compactMap { name in MediaFile.extras.first { $0.rawValue == name } }
            guard files.count == names.count, !files.isEmpty, files == MediaFile.extras.filter(files.contains) else {
                throw TranscodeClientError.badRequest(
                    "also must name extras of \(MediaFile.extras.map(\.rawValue).joined(separator: ",")), each once, in that order, got \(text)"
                )
            }
            also = files
        }
        func number(_ option: String, unit: String, range: ClosedRange<Int>) throws -> Int? {
            guard let text = values[option] else { return nil }
            guard let value = Self.number(text), range.contains(value) else {
                throw TranscodeClientError.badRequest(
                    "\(spelling[option] ?? option) must be a number of \(unit), \(range.lowerBound)-\(range.upperBound), got \(text)"
                )
            }
            return value
        }
        if let text = values["bg"], Self.color(text) == nil {
            throw TranscodeClientError.badRequest("\(spelling["bg"] ?? "bg") must be RRGGBB, got \(text)")
        }
        try self.init(
            background: values["bg"],
            width: number("w", unit: "pixels", range: Self.boxRange),
            height: number("h", unit: "pixels", range: Self.boxRange),
            preview: number("preview", unit: "seconds", range: Self.previewRange),
            also: also)
    }

    /// The options a path takes, by every name it accepts.
    public static let optionNames: [String: String] = [
        "bg": "bg", "background": "bg", "w": "w", "width": "w", "h": "h", "height": "h", "preview": "preview",
        "also": "also",
    ]

    /// The path's option segments, in the canonical order (what is signed).
    public var segments: [String] {
        var segments: [String] = []
        if let background { segments.append("bg:" + background) }
        if let width { segments.append("w:\(width)") }
        if let height { segments.append("h:\(height)") }
        if let preview { segments.append("preview:\(preview)") }
        if !self.also.isEmpty { segments.append("also:" + self.also.map(\.rawValue).joined(separator: ",")) }
        return segments
    }

    /// `rrggbb` of `#RRGGBB` or `RRGGBB` (either case); nil for anything else.
    static func color(_ text: String) -> String? {
        var digits = Substring(text)
        if digits.hasPrefix("#") { digits = digits.dropFirst() }
        guard digits.utf8.count == 6, digits.utf8.allSatisfy(Self.isHexDigit) else { return nil }
        return digits.lowercased()
    }

    private static func isHexDigit(_ byte: UInt8) -> Bool {
        (0x30...0x39).contains(byte) || (0x41...0x46).contains(byte) || (0x61...0x66).contains(byte)
    }

    /// A positive number in decimal digits only (`+480` and `0480` are refused, as by the server).
    private static func number(_ text: String) -> Int? {
        guard !text.isEmpty, text.utf8.allSatisfy({ (0x30...0x39).contains($0) }), text.first != "0" else {
            return nil
        }
        return Int(text)
    }
}
