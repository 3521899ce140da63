/// Why a transcode failed: a stable, bounded `code` (usable as an API error code and a metric label),
/// a message for humans, and the underlying library error when there is one.
public struct TranscodeError: Error, CustomStringConvertible, Sendable {
    /// The bounded set of failure kinds.
    public struct Code: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public var description: String { self.rawValue }

        /// The data is none of the formats read (GIF, APNG, animated WebP), told by its signature, never by
        /// a file name or a Content-Type.
        public static let unsupportedFormat = Code(rawValue: "unsupported-format")
        /// The data is a still PNG or WebP: there is nothing to animate (a still GIF converts).
        public static let notAnimated = Code(rawValue: "not-animated")
        /// Before APNG and WebP were read, anything that was not a GIF.
        @available(*, deprecated, renamed: "unsupportedFormat")
        public static let notAGIF = unsupportedFormat
        /// The data starts like a supported format but has no frame that can be decoded.
        public static let corrupt = Code(rawValue: "corrupt")
        /// The input is larger than `TranscodeLimits.maxInputBytes`.
        public static let tooLarge = Code(rawValue: "too-large")
        /// More frames than `TranscodeLimits.maxFrames`.
        public static let tooManyFrames = Code(rawValue: "too-many-frames")
        /// Canvas or frame larger than `TranscodeLimits.maxWidth` x `maxHeight`.
        public static let dimensionsTooLarge = Code(rawValue: "dimensions-too-large")
        /// Decoding would produce more than `TranscodeLimits.maxTotalPixels` pixels.
        public static let tooManyPixels = Code(rawValue: "too-many-pixels")
        /// The options are invalid (unknown preset, CRF out of range, bad colour).
        public static let invalidOptions = Code(rawValue: "invalid-options")
        /// libavcodec or libavformat failed while encoding or muxing.
        public static let encodeFailed = Code(rawValue: "encode-failed")
        /// Reading or writing a file failed.
        public static let io = Code(rawValue: "io")
        /// The disk (or the quota) is full: ENOSPC or EDQUOT while writing the outputs.
        public static let insufficientStorage = Code(rawValue: "insufficient-storage")

        /// Every code this module produces.
        public static let allCases: [Code] = [
            .unsupportedFormat, .notAnimated, .corrupt, .tooLarge, .tooManyFrames, .dimensionsTooLarge, .tooManyPixels,
            .invalidOptions, .encodeFailed, .io, .insufficientStorage,
        ]
    }

    public let code: Code
    public let message: String
    public let underlying: (any Error)?

    public init(_ code: Code, _ message: String, underlying: (any Error)? = nil) {
        self.code = code
        self.message = message
        self.underlying = underlying
    }

    public var description: String {
        if let underlying = self.underlying {
            return "\(self.code): \(self.message) (\(underlying))"
        }
        return "\(self.code): \(self.message)"
    }
}
