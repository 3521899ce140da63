/// An opaque RGB colour, written `#RRGGBB`.
public struct RGBColor: Hashable, Sendable, Codable, CustomStringConvertible {
    public var red: UInt8
    public var green: UInt8
    public var blue: UInt8

    public init(red: UInt8, green: UInt8, blue: UInt8) {
        self.red = red
        self.green = green
        self.blue = blue
    }

    public static let white = RGBColor(red: 255, green: 255, blue: 255)
    public static let black = RGBColor(red: 0, green: 0, blue: 0)

    /// Parses `#RRGGBB` or `RRGGBB` (hex digits of either case); `nil` for anything else.
    public init?(hex: String) {
        var text = Substring(hex)
        if text.hasPrefix("#") { text = text.dropFirst() }
        guard text.count == 6, text.allSatisfy(\.isHexDigit), let value = UInt32(text, radix: 16) else {
            return nil
        }
        self.init(red: UInt8(value >> 16), green: UInt8((value >> 8) & 0xFF), blue: UInt8(value & 0xFF))
    }

    /// `#rrggbb`, lower case.
    public var description: String {
        let digits = Array("0123456789abcdef")
        var text = "#"
        for byte in [self.red, self.green, self.blue] {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0F)])
        }
        return text
    }

    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let color = RGBColor(hex: text) else {
            throw DecodingError.dataCorrupted(
                .init(codingPath: decoder.codingPath, debugDescription: "expected #RRGGBB, got \(text)"))
        }
        self = color
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(self.description)
    }
}

/// Bounds checked by the pre-scan, before any pixel is decoded.
public struct TranscodeLimits: Hashable, Sendable, Codable {
    /// Largest accepted input, in bytes. Default 50 MB.
    public var maxInputBytes: Int = 50_000_000
    /// Largest canvas (and frame rectangle) width. Default 4096.
    public var maxWidth: Int = 4096
    /// Largest canvas (and frame rectangle) height. Default 4096.
    public var maxHeight: Int = 4096
    /// Most frames. Default 3000.
    public var maxFrames: Int = 3000
    /// Most pixels decoding may produce: canvas pixels x frames. Default 1.5 gigapixels.
    public var maxTotalPixels: Int64 = 1_500_000_000

    public init() {}

    /// Every limit set out of its range (the configuration reader's `limits.*` checks).
    public var violations: [RangeViolation] {
        var found: [RangeViolation] = []
        RangeViolation.check("maxInputBytes", self.maxInputBytes > 0, "positive", self.maxInputBytes, into: &found)
        RangeViolation.check("maxWidth", (1...65535).contains(self.maxWidth), "1-65535", self.maxWidth, into: &found)
        RangeViolation.check("maxHeight", (1...65535).contains(self.maxHeight), "1-65535", self.maxHeight, into: &found)
        RangeViolation.check("maxFrames", self.maxFrames > 0, "positive", self.maxFrames, into: &found)
        RangeViolation.check("maxTotalPixels", self.maxTotalPixels > 0, "positive", self.maxTotalPixels, into: &found)
        return found
    }
}

/// A value out of its range: the field's name (`crf`, `maxFrames`), what it must be, what it is.
public struct RangeViolation: Sendable, Equatable {
    public let field: String
    public let expectation: String
    public let value: String

    static func check(_ field: String, _ valid: Bool, _ expectation: String, _ value: Any, into found: inout [Self]) {
        if !valid { found.append(Self(field: field, expectation: expectation, value: "\(value)")) }
    }
}

/// One rendition: what the output looks like and how hard the encoder works. Everything here changes the bytes.
public struct RenditionSpec: Hashable, Sendable, Codable {
    /// The colour transparency is flattened over (the MP4 has no alpha). Default white.
    public var background: RGBColor = .white
    /// The encoder's constant rate factor, 1-51; lower is better and larger. See `TranscodeOptions.defaultCRF`.
    public var crf: Int = TranscodeOptions.defaultCRF
    /// x264 preset. See `TranscodeOptions.defaultPreset`.
    public var preset: String = TranscodeOptions.defaultPreset
    /// Encoder threads per job (x264's frame threads), whatever else runs: the bytes are a function of the input
    /// and the options, never of the load (see `TranscodeOptions.outputFingerprint`).
    public var threads: Int = TranscodeOptions.defaultThreads
    /// Canvases larger than this box are scaled down (aspect kept). Default 1920 x 1080.
    public var maxOutputWidth: Int = 1920
    public var maxOutputHeight: Int = 1080
    /// Files made besides the video and the poster (`ObjectFiles.extras`, each encoded as its name): `webp` is an
    /// animated WebP that keeps transparency. Each at most once, in the registry's order (`withExtraFormats`).
    /// Default none.
    public var extraFormats: [OutputFormat] = []
    /// A preview rendition: the animation's first `previewSeconds` seconds (the frame that crosses the cut shown
    /// until it), its video at most `previewMaxBytes` (`Transcoder.encodePreview`); nil, the default: all of it.
    public var previewSeconds: Int? = nil

    /// The lengths a preview may have, in seconds.
    public static let previewSecondsRange = 1...2
    /// The most bytes a preview's video may have.
    public static let previewMaxBytes = 50_000

    public init() {}

    /// This rendition also making `formats`, each once, in the registry's order (a format that is not an extra
    /// after them, by name: `violations` names it).
    public func withExtraFormats(_ formats: some Sequence<OutputFormat>) -> RenditionSpec {
        var copy = self
        let wanted = Set(self.extraFormats).union(formats)
        copy.extraFormats =
            ObjectFiles.extras.filter(wanted.contains)
            + wanted.subtracting(ObjectFiles.extras).sorted { $0.name < $1.name }
        return copy
    }

    private enum CodingKeys: String, CodingKey {
        case background, crf, preset, threads, maxOutputWidth, maxOutputHeight, extraFormats, previewSeconds
    }

    // By hand for `extraFormats`: options recorded before it (a fleet's queued jobs) have no such key.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.background = try container.decode(RGBColor.self, forKey: .background)
        self.crf = try container.decode(Int.self, forKey: .crf)
        self.preset = try container.decode(String.self, forKey: .preset)
        self.threads = try container.decode(Int.self, forKey: .threads)
        self.maxOutputWidth = try container.decode(Int.self, forKey: .maxOutputWidth)
        self.maxOutputHeight = try container.decode(Int.self, forKey: .maxOutputHeight)
        self.extraFormats = try container.decodeIfPresent([OutputFormat].self, forKey: .extraFormats) ?? []
        self.previewSeconds = try container.decodeIfPresent(Int.self, forKey: .previewSeconds)
    }

    /// Every value out of its range, in field order.
    public var violations: [RangeViolation] {
        var found: [RangeViolation] = []
        RangeViolation.check(
            "crf", TranscodeOptions.crfRange.contains(self.crf), "1-51", self.crf, into: &found)
        RangeViolation.check(
            "preset", TranscodeOptions.presets.contains(self.preset),
            "one of \(TranscodeOptions.presets.joined(separator: ", "))", self.preset, into: &found)
        RangeViolation.check("threads", (1...64).contains(self.threads), "1-64", self.threads, into: &found)
        RangeViolation.check(
            "maxOutputWidth", self.maxOutputWidth >= 2, "at least 2", self.maxOutputWidth, into: &found)
        RangeViolation.check(
            "maxOutputHeight", self.maxOutputHeight >= 2, "at least 2", self.maxOutputHeight, into: &found)
        RangeViolation.check(
            "extraFormats",
            self.extraFormats.allSatisfy(ObjectFiles.extras.contains)
                && Set(self.extraFormats).count == self.extraFormats.count,
            "each at most once, of \(ObjectFiles.extras.map(\.name).joined(separator: ", "))",
            self.extraFormats.map(\.name).joined(separator: ","), into: &found)
        if let seconds = self.previewSeconds {
            let range = Self.previewSecondsRange
            RangeViolation.check(
                "previewSeconds", range.contains(seconds), "\(range.lowerBound)-\(range.upperBound)", seconds,
                into: &found)
        }
        return found
    }
}

/// The size guard's policy: a video not smaller than `maxSizeRatio` x the source is encoded again at a higher CRF,
/// at most `maxExtraAttempts` more times, while its SSIM stays at or above `minSSIM`; otherwise the recommendation
/// is to keep the source. It knows nothing of the encoder: `run` drives any encoder that takes a CRF
/// (`Transcoder+SizeGuard.swift`).
public struct SizeGuardPolicy: Hashable, Sendable, Codable {
    /// Default 1.0: never larger than the source.
    public var maxSizeRatio: Double = 1.0
    /// Default 2; 0 switches the guard off. With it, a conversion takes at most this many and 2 encodes (the first,
    /// stopped, whole after all); when a key-frame stop misjudged the whole (`SizeGuardPolicy.run`), the guard runs
    /// once more from the start: at most twice this many and 3 in all (7 by default).
    public var maxExtraAttempts: Int = 2
    /// See `TranscodeOptions.defaultMinSSIM`.
    public var minSSIM: Double = TranscodeOptions.defaultMinSSIM

    public init() {}

    /// Whether the guard re-encodes at all.
    public var isOn: Bool { self.maxExtraAttempts > 0 }

    /// Every value out of its range, in field order.
    public var violations: [RangeViolation] {
        var found: [RangeViolation] = []
        RangeViolation.check(
            "maxSizeRatio", self.maxSizeRatio > 0 && self.maxSizeRatio.isFinite, "positive", self.maxSizeRatio,
            into: &found)
        RangeViolation.check(
            "maxExtraAttempts", (0...10).contains(self.maxExtraAttempts), "0-10", self.maxExtraAttempts, into: &found)
        RangeViolation.check("minSSIM", (0...1).contains(self.minSSIM), "0-1", self.minSSIM, into: &found)
        return found
    }
}

/// Everything a conversion is told: the input limits, the rendition, the size guard's policy. The three parts are
/// separate types because they are separate decisions (an operator's bounds, a look, a budget); the flat
/// properties below are the view the configuration keys (`transcode.crf`, `transcode.minSSIM`) and the API use.
public struct TranscodeOptions: Hashable, Sendable, Codable {
    /// Input limits: checked before any pixel is decoded; they never change the output.
    public var limits = TranscodeLimits()
    /// The output's look and the encoder's effort.
    public var rendition = RenditionSpec()
    /// When to encode again to stay under the source's size.
    public var sizeGuard = SizeGuardPolicy()

    public var background: RGBColor {
        get { self.rendition.background }
        set { self.rendition.background = newValue }
    }
    public var crf: Int {
        get { self.rendition.crf }
        set { self.rendition.crf = newValue }
    }
    public var preset: String {
        get { self.rendition.preset }
        set { self.rendition.preset = newValue }
    }
    public var threads: Int {
        get { self.rendition.threads }
        set { self.rendition.threads = newValue }
    }
    public var maxOutputWidth: Int {
        get { self.rendition.maxOutputWidth }
        set { self.rendition.maxOutputWidth = newValue }
    }
    public var maxOutputHeight: Int {
        get { self.rendition.maxOutputHeight }
        set { self.rendition.maxOutputHeight = newValue }
    }
    public var maxSizeRatio: Double {
        get { self.sizeGuard.maxSizeRatio }
        set { self.sizeGuard.maxSizeRatio = newValue }
    }
    public var maxExtraAttempts: Int {
        get { self.sizeGuard.maxExtraAttempts }
        set { self.sizeGuard.maxExtraAttempts = newValue }
    }
    public var minSSIM: Double {
        get { self.sizeGuard.minSSIM }
        set { self.sizeGuard.minSSIM = newValue }
    }

    // Chosen by measuring the corpus with scripts/bench (see docs/benchmarks.md, "Choosing CRF and preset").
    public static let defaultCRF = 25
    public static let defaultPreset = "medium"
    /// Two, for every job whatever the load: a job alone uses both cores of a two-core machine (a 1080x1080 GIF
    /// in two thirds of the time), jobs side by side pay 5-7% of their throughput for it (the CLI on the corpus,
    /// the service's cold step), and a key's bytes never depend on what else ran (docs/fidelity.md, "One key, one file").
    public static let defaultThreads = 2
    /// Chosen by looking at the size guard's attempts on the corpus (docs/benchmarks.md, "Never bigger than the GIF").
    public static let defaultMinSSIM = 0.98

    /// CRF values accepted. 0 would be lossless, which x264 only encodes in the High 4:4:4 profile that
    /// browsers do not play.
    public static let crfRange = 1...51

    /// x264's preset names.
    public static let presets = [
        "ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow", "slower", "veryslow", "placebo",
    ]

    public init() {}

    /// Every output option a client or an operator set out of its range, in field order (the rendition's, then
    /// the guard's): the one statement of the ranges, which `validate()` and the server's configuration reader
    /// both use (the input limits state theirs: `TranscodeLimits.violations`).
    public var violations: [RangeViolation] {
        self.rendition.violations + self.sizeGuard.violations
    }

    /// Checks the output options a client or an operator can set (`violations`; a library caller may set the
    /// limits as large as it likes).
    /// - Throws: `TranscodeError` with code `invalid-options`, naming the first value out of range.
    public func validate() throws {
        if let first = self.violations.first {
            throw TranscodeError(.invalidOptions, "\(first.field) must be \(first.expectation), got \(first.value)")
        }
    }

    /// The options that change the output bytes, as a stable string: part of a cache key, so that the
    /// same GIF converted with other options is stored apart. Limits do not change the output; the thread
    /// count does (x264 is deterministic only for a fixed count), so it is part of the fingerprint. v3: neither
    /// the video nor the poster depends on the CPU any more (`H264Encoder.cpuIndependent`, the poster's DCT).
    public var outputFingerprint: String {
        "v3;bg=\(self.background);crf=\(self.crf);preset=\(self.preset);threads=\(self.threads);"
            + "box=\(self.maxOutputWidth)x\(self.maxOutputHeight);"
            + "guard=\(self.maxSizeRatio)/\(self.maxExtraAttempts)/\(self.minSSIM)"
            // Only when asked: the keys of objects without extra files stay what they were.
            + (self.rendition.extraFormats.isEmpty
                ? "" : ";extra=\(self.rendition.extraFormats.map(\.name).joined(separator: ","))")
            + (self.rendition.previewSeconds.map { ";preview=\($0)" } ?? "")
            // The AVIF's ladder (q40 up to q56, no alpha plane for an opaque source) makes other bytes than the q32
            // rungs did: objects with an AVIF get keys of their own; the others keep theirs.
            + (self.rendition.extraFormats.contains(where: \.isAVIF) ? ";avif=2" : "")
    }
}
