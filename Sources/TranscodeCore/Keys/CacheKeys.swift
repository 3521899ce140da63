import Crypto
import Foundation
import Transcoder

// The names the cache and the shared store give things. Each is a SHA-256 in lower-case hex (64 digits),
// parsed once: a value of one of these types is valid, so a path or an object name built from it is safe.
// Their shape is checked in `HexDigest.isValid` and nowhere else.

/// Lower-case hex of SHA-256 digests, and the one check of that shape.
package enum HexDigest {
    /// Whether `text` has the shape of a digest: 64 lowercase hex digits. Checked before any path is built.
    static func isValid(_ text: some StringProtocol) -> Bool {
        func isLowercaseHex(_ byte: UInt8) -> Bool { (0x30...0x39).contains(byte) || (0x61...0x66).contains(byte) }
        guard text.utf8.count == 64 else { return false }
        // Over the bytes in place when they are (a hit checks two or three keys; the view's iterator was slower).
        return text.utf8.withContiguousStorageIfAvailable { $0.allSatisfy(isLowercaseHex) }
            ?? text.utf8.allSatisfy(isLowercaseHex)
    }

    /// Lower-case hex of `bytes`. (Every cache hit hashes a URL twice: `String(format:)` per byte cost more
    /// than the rest of the lookup.)
    package static func encode(_ bytes: some Sequence<UInt8>) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        text.reserveCapacity(64)
        for byte in bytes {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: text, as: UTF8.self)
    }
}

/// Hex that passed `HexDigest.isValid` or was encoded from a digest: made only in this file, so a key can be
/// made of nothing else.
package struct CheckedDigest: Sendable {
    let text: String
    fileprivate init(_ text: String) { self.text = text }
}

/// A key type: a SHA-256 in hex with a meaning of its own. Encoded (JSON, file names) as the bare hex.
package protocol DigestKey: RawRepresentable, Hashable, Comparable, Sendable, Codable, CustomStringConvertible
where RawValue == String {
    init(_ digest: CheckedDigest)
}

extension DigestKey {
    package init?(rawValue: String) {
        guard HexDigest.isValid(rawValue) else { return nil }
        self.init(CheckedDigest(rawValue))
    }

    /// The key spelled by `text` (a path component, a file name without its extension), nil if it is not one.
    package init?(_ text: some StringProtocol) {
        guard HexDigest.isValid(text) else { return nil }
        self.init(CheckedDigest(String(text)))
    }

    /// The key of a SHA-256 digest.
    init(digest: SHA256.Digest) { self.init(CheckedDigest(HexDigest.encode(digest))) }

    package var description: String { self.rawValue }

    package static func < (a: Self, b: Self) -> Bool { a.rawValue < b.rawValue }

    /// The first two digits: the shard directory (`objects/ab/`, `sources/ab/`).
    var shard: Substring { self.rawValue.prefix(2) }
}

/// A result object: the SHA-256 of the source's bytes and of the output options (`objects/ab/<key>.*`).
package struct ObjectKey: DigestKey {
    package let rawValue: String
    package init(_ digest: CheckedDigest) { self.rawValue = digest.text }

    /// The key of `source` converted with `options`, and the SHA-256 of the source alone (what takedowns of
    /// its bytes are recorded under), in one pass over the bytes.
    static func derive(source: [UInt8], options: TranscodeOptions) -> (key: ObjectKey, source: ContentDigest) {
        var hash = SHA256()
        hash.update(data: source)
        let sourceOnly = hash  // a copy: the state after the source's bytes
        hash.update(data: Array(("\u{0}" + options.outputFingerprint).utf8))
        return (ObjectKey(digest: hash.finalize()), ContentDigest(digest: sourceOnly.finalize()))
    }
}

extension ObjectKey {
    /// The name of the object's `format` file in a store: `<key>.<extension>`.
    func fileName(_ format: OutputFormat) -> String { "\(self.rawValue).\(format.fileExtension)" }

    /// The `/media` path of the object's `format` file.
    package func mediaPath(_ format: OutputFormat) -> String { "/media/" + self.fileName(format) }

    /// The strong entity tag of the object's `.fileExtension` file: the key, the extension and the file's own
    /// SHA-256 (its first 128 bits), so that two encodings of one key (two nodes, two moments) can never share a
    /// tag and a client resuming with `If-Range` never splices them. The manifest carries the video's digest (it
    /// records the files' digests and sizes, so it differs exactly when they do; its own is not recorded).
    /// Objects recorded before digests were have `"<key>.<extension>"`.
    func entityTag(fileExtension: String, metadata: TranscodeMetadata) -> String {
        guard let format = OutputFormat.withExtension(fileExtension),
            let digest = ObjectFiles.recordedSha256(
                of: format == ObjectFiles.manifest ? ObjectFiles.video : format, in: metadata)
        else { return "\"\(self.rawValue).\(fileExtension)\"" }
        return "\"\(self.rawValue).\(fileExtension).\(digest.prefix(32))\""
    }
}

/// A URL converted with some options: the name of its link (`urls/<key>`).
package struct URLKey: DigestKey {
    package let rawValue: String
    package init(_ digest: CheckedDigest) { self.rawValue = digest.text }

    package init(_ url: NormalizedURL, options: TranscodeOptions) {
        self.init(digest: SHA256.hash(data: Array("url\u{0}\(url.text)\u{0}\(options.outputFingerprint)".utf8)))
    }
}

/// A URL whatever the options: what the purge index and URL takedowns are recorded under.
package struct SourceHash: DigestKey {
    package let rawValue: String
    package init(_ digest: CheckedDigest) { self.rawValue = digest.text }

    init(_ url: NormalizedURL) {
        self.init(digest: SHA256.hash(data: Array("source\u{0}\(url.text)".utf8)))
    }
}

/// The SHA-256 of a source's bytes (a GIF, APNG or WebP), whatever URL or upload brought them: what a
/// takedown of those bytes is recorded under (the metadata's `sourceSha256`).
package struct ContentDigest: DigestKey {
    package let rawValue: String
    package init(_ digest: CheckedDigest) { self.rawValue = digest.text }
}

/// A URL in the one spelling its keys are made from: lower-cased scheme and host, no default port, no
/// fragment, at least `/` as its path. Two spellings of one resource share their keys.
package struct NormalizedURL: Hashable, Sendable {
    let text: String

    package init(_ url: URL) {
        guard var components = URLComponents(url: url, resolvingAgainstBaseURL: false) else {
            self.text = url.absoluteString
            return
        }
        components.scheme = components.scheme?.lowercased()
        components.host = components.host?.lowercased()
        if (components.scheme == "http" && components.port == 80)
            || (components.scheme == "https" && components.port == 443)
        {
            components.port = nil
        }
        components.fragment = nil
        if components.path.isEmpty { components.path = "/" }
        self.text = components.string ?? url.absoluteString
    }

    /// A URL already in normal form (a stored source record's).
    init(normalized text: String) { self.text = text }
}
