import Crypto
import Foundation

/// Signs and checks the paths of `GET /v1/{signature}/{options}/{source}.{ext}`, the way imgproxy does:
/// `signature = base64url(HMAC-SHA256(key, salt + path))`, no padding, where `path` is everything after
/// the signature, starting with `/`. Several key/salt pairs may be configured: the first signs, any one
/// is accepted (rotation: add the new pair first, remove the old one once clients have moved).
package struct URLSigner: Sendable {
    package struct KeyPair: Sendable {
        let key: SymmetricKey
        let salt: [UInt8]
        /// The client its URLs count against (`signing.clients`).
        package var client = ""
    }

    let pairs: [KeyPair]
    /// Accept any signature (`signing.disabled`): for development only.
    package let disabled: Bool

    package init(pairs: [KeyPair], disabled: Bool = false) {
        self.pairs = pairs
        self.disabled = disabled
    }

    /// Pairs from hex keys and salts (`signing.keys`, `signing.salts`, paired by position), and the names of their
    /// clients (`signing.clients`; `key-<n>` where not named).
    /// - Returns: nil when a value is not hex or the lists differ in length.
    package init?(hexKeys: [String], hexSalts: [String], clients: [String] = [], disabled: Bool = false) {
        guard hexKeys.count == hexSalts.count else { return nil }
        var pairs: [KeyPair] = []
        let clients = RequestClient.names(clients, count: hexKeys.count, prefix: "key")
        for ((key, salt), client) in zip(zip(hexKeys, hexSalts), clients) {
            guard let key = Self.bytes(hex: key), !key.isEmpty, let salt = Self.bytes(hex: salt) else { return nil }
            pairs.append(KeyPair(key: SymmetricKey(data: key), salt: salt, client: client))
        }
        self.init(pairs: pairs, disabled: disabled)
    }

    /// Whether signed URLs can be made (a key is configured).
    package var canSign: Bool { !self.pairs.isEmpty }

    /// The signature of `path` with the first pair. - Precondition: `canSign`.
    func signature(of path: String) -> String {
        Self.signature(of: path, with: self.pairs[0])
    }

    /// `/v1/<signature><path>`, or `/v1/_<path>` when there is no key (signing disabled).
    package func signedPath(_ path: String) -> String {
        "/v1/" + (self.canSign ? self.signature(of: path) : "_") + path
    }

    /// Whether `signature` signs `path` under any configured pair; always true when signing is disabled.
    func isValid(signature: some StringProtocol, path: String) -> Bool {
        self.disabled || self.signingPair(signature: signature, path: path) != nil
    }

    /// The pair whose key made `signature` for `path`, nil when none did (whether or not signing is disabled).
    /// Every pair is tried, each comparison constant-time (`HMAC.isValidAuthenticationCode`).
    package func signingPair(signature: some StringProtocol, path: String) -> KeyPair? {
        // The one spelling only: padding, or other values of the last character's unused bits, decode to the same
        // bytes and would give every URL several names (split CDN cache keys and a balancer's hash).
        guard let mac = Self.decodeBase64URL(signature), mac.count == SHA256.byteCount,
            Self.base64URL(mac) == signature
        else { return nil }
        var matched: KeyPair?
        for pair in self.pairs {
            // No early exit: the time taken does not tell which pair matched.
            let valid = HMAC<SHA256>.isValidAuthenticationCode(
                mac, authenticating: pair.salt + Array(path.utf8), using: pair.key)
            if valid { matched = pair }
        }
        return matched
    }

    private static func signature(of path: String, with pair: KeyPair) -> String {
        let mac = HMAC<SHA256>.authenticationCode(for: pair.salt + Array(path.utf8), using: pair.key)
        return Self.base64URL(Array(mac))
    }

    // MARK: Encodings

    /// Base64url (RFC 4648 §5) without padding.
    package static func base64URL(_ bytes: some Collection<UInt8>) -> String {
        // Byte by byte: NSString's replacingOccurrences was a tenth of a cache hit's time.
        let encoded = Data(bytes).base64EncodedData()
        var text: [UInt8] = []
        text.reserveCapacity(encoded.count)
        for byte in encoded {
            switch byte {
            case UInt8(ascii: "+"): text.append(UInt8(ascii: "-"))
            case UInt8(ascii: "/"): text.append(UInt8(ascii: "_"))
            case UInt8(ascii: "="): break
            default: text.append(byte)
            }
        }
        return String(decoding: text, as: UTF8.self)
    }

    /// Decodes base64url with or without padding; nil for anything else (standard base64's `+` and `/`
    /// included: one spelling per URL).
    static func decodeBase64URL(_ text: some StringProtocol) -> [UInt8]? {
        var standard: [UInt8] = []
        standard.reserveCapacity(text.utf8.count + 3)
        var padding = 0
        for byte in text.utf8 {
            // Padding only at the end.
            if padding > 0, byte != UInt8(ascii: "=") { return nil }
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"):
                standard.append(byte)
            case UInt8(ascii: "-"): standard.append(UInt8(ascii: "+"))
            case UInt8(ascii: "_"): standard.append(UInt8(ascii: "/"))
            case UInt8(ascii: "="): padding += 1
            default: return nil
            }
        }
        standard += Array(repeating: UInt8(ascii: "="), count: (4 - standard.count % 4) % 4)
        return Data(base64Encoded: Data(standard)).map { [UInt8]($0) }
    }

    /// Bytes from hex digits (either case); nil for an odd length or a non-hex character.
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
        bytes.reserveCapacity(digits.count / 2)
        for index in stride(from: 0, to: digits.count, by: 2) {
            guard let high = value(digits[index]), let low = value(digits[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
        }
        return bytes
    }
}
