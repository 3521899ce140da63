import Crypto
import Foundation

/// Signs the paths of `GET /v1/{signature}/{options}/{source}.{ext}` exactly as `transcode-server sign` does:
/// `signature = base64url(HMAC-SHA256(key, salt + path))` without padding, where `path` is everything after the
/// signature, from its `/`: the options in their canonical order, then the GIF's URL in base64url and the file's
/// extension.
///
/// The key and the salt are secrets: an app that signs holds them, so any user of the app can sign any URL. Sign
/// on a server you own (a CMS backend) when that matters, and hand the app the paths.
public struct TranscodeURLSigner: Sendable {
    private let key: SymmetricKey
    private let salt: [UInt8]

    /// - Parameters:
    ///   - hexKey: the first of the server's `signing.keys` (hex, either case, not empty).
    ///   - hexSalt: the first of its `signing.salts` (hex).
    /// - Throws: `TranscodeClientError.badRequest` when either is not hex.
    public init(hexKey: String, hexSalt: String) throws {
        guard let key = Self.bytes(hex: hexKey), !key.isEmpty else {
            throw TranscodeClientError.badRequest("the signing key is not hex")
        }
        guard let salt = Self.bytes(hex: hexSalt) else {
            throw TranscodeClientError.badRequest("the signing salt is not hex")
        }
        self.key = SymmetricKey(data: key)
        self.salt = salt
    }

    /// The signed path of a GIF's `file`: `/v1/<signature>/<options>/<source>.<ext>`; prefix the service's base URL.
    /// - Throws: `TranscodeClientError.badRequest` for a URL the server would not fetch (not absolute http or
    ///   https, no host, over 8,192 bytes) or a combination it refuses (a preview of `.auto`, `also` naming the
    ///   file's own format or given for `.auto`).
    public func path(of sourceURL: String, options: RenditionOptions = .none, file: MediaFile = .mp4) throws -> String {
        try Self.checkSource(sourceURL)
        if options.preview != nil, file == .auto {
            throw TranscodeClientError.badRequest("preview names a file of the preview's own object, not .auto")
        }
        if !options.also.isEmpty, file == .auto || options.also.contains(file) {
            throw TranscodeClientError.badRequest("also names the extras besides the file's own, and none for .auto")
        }
        let path =
            "/"
            + (options.segments + [Self.base64URL(Array(sourceURL.utf8)) + "." + file.fileExtension]).joined(
                separator: "/")
        return "/v1/" + self.signature(of: path) + path
    }

    /// `path(of:options:file:)` with the options and the extension as `transcode-server sign` takes them
    /// (`--option bg:000000 --extension jpg`).
    /// - Throws: `TranscodeClientError.badRequest` for an unknown option or extension, with the server's words.
    public func path(of sourceURL: String, options: [String], fileExtension: String) throws -> String {
        guard let file = MediaFile(rawValue: fileExtension) else {
            let names = MediaFile.allCases.map { "." + $0.rawValue }
            throw TranscodeClientError.badRequest(
                "unknown file .\(fileExtension); use \(names.dropLast().joined(separator: ", ")) or \(names.last ?? "")"
            )
        }
        return try self.path(of: sourceURL, options: RenditionOptions(parsing: options), file: file)
    }

    /// The signature of a path (from its `/`, without `/v1/<signature>`).
    public func signature(of path: String) -> String {
        let mac = HMAC<SHA256>.authenticationCode(for: self.salt + Array(path.utf8), using: self.key)
        return Self.base64URL(Array(mac))
    }

    /// The checks `transcode-server sign` makes of a GIF's URL before signing it.
    static func checkSource(_ text: String) throws {
        guard text.utf8.count <= 8192, let url = URL(string: text), let scheme = url.scheme?.lowercased() else {
            throw TranscodeClientError.badRequest("not an absolute URL")
        }
        guard scheme == "http" || scheme == "https" else {
            throw TranscodeClientError.badRequest("only http and https URLs can be fetched, not \(scheme)")
        }
        guard let host = url.host, !host.isEmpty else { throw TranscodeClientError.badRequest("the URL has no host") }
    }

    /// Base64url (RFC 4648 §5) without padding.
    static func base64URL(_ bytes: [UInt8]) -> String {
        var text = Data(bytes).base64EncodedString()
        text = text.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
        while text.hasSuffix("=") { text.removeLast() }
        return text
    }

    /// Bytes from hex digits (either case); nil for an odd length or another character.
    static func bytes(hex: String) -> [UInt8]? {
        let digits = Array(hex.utf8)
        guard digits.count % 2 == 0 else { return nil }
        func value(_ digit: UInt8) -> UInt8? {
            switch digit {
            case 0x30...0x39: digit - 0x30
            case 0x41...0x46: digit - 0x41 + 10
            case 0x61...0x66: digit - 0x61 + 10
            default: nil
            }
        }
        var bytes: [UInt8] = []
        for index in stride(from: 0, to: digits.count, by: 2) {
            guard let high = value(digits[index]), let low = value(digits[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
        }
        return bytes
    }
}
